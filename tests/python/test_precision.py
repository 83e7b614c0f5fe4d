"""Model.precision: the CLI's --precision from Python (docs/precision.md): set before the
first pass, its bf16 outputs within bf16's rounding of fp32's and of torch.autocast's, and
bad values refused with the CLI's words."""
import numpy
import pytest
import torch

import tandem
from conftest import config


def test_precision_defaults_to_the_model_file_and_is_set_before_the_first_pass():
    model = tandem.Model.load(config("mlp_4x1024.yaml"))
    assert model.precision == "fp32"
    model.precision = "bf16"
    assert model.precision == "bf16"
    model(numpy.zeros((2, 1024), numpy.float32))
    with pytest.raises(tandem.ModelError, match="set before its first pass"):
        model.precision = "fp32"
    with pytest.raises(tandem.ModelError, match="precision 'half' is not a precision; use fp32, bf16 or fp16"):
        tandem.Model.load(config("mlp_4x1024.yaml")).precision = "half"


def test_bf16_is_fp32_and_autocast_to_bf16s_rounding():
    x = torch.randn(32, 1024, generator=torch.Generator().manual_seed(0))
    fp32 = tandem.Model.load(config("mlp_4x1024.yaml"))
    bf16 = tandem.Model.load(config("mlp_4x1024.yaml"))
    bf16.precision = "bf16"
    want, got = fp32(x)["head"], bf16(x)["head"]
    scale = want.abs().max()
    assert (got - want).abs().max() <= 1e-2 * scale
    # the same weights in torch under autocast
    layers = []
    for i, name in enumerate(["hidden.0.fc", "hidden.1.fc", "hidden.2.fc", "head"]):
        fc = torch.nn.Linear(1024, 1024)
        fc.load_state_dict({"weight": torch.as_tensor(numpy.array(fp32.state_dict()[name + ".weight"])),
                            "bias": torch.as_tensor(numpy.array(fp32.state_dict()[name + ".bias"]))})
        layers += [fc] + ([torch.nn.ReLU()] if i < 3 else [])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = torch.nn.Sequential(*layers)(x).float()
    assert (got - autocast).abs().max() <= 1e-2 * scale


def test_fp16_training_scales_the_loss_and_counts_the_skipped_steps():
    # the digits MLP in fp16: a batch holding a NaN gives NaN gradients, so the step is
    # skipped (no update, no stop) and the scale halves; three clean steps double it again,
    # as torch's GradScaler with growth_interval=3 does
    model = tandem.Model.load(config("digits_mlp.yaml"))
    model.precision = "fp16"
    trainer = tandem.Trainer(model, loss_scaling={"growth_interval": 3})
    assert trainer.settings["loss_scaling"]["growth_interval"] == 3
    assert trainer.loss_scale == 65536.0
    rng = numpy.random.default_rng()
    x = rng.normal(size=(32, 64)).astype(numpy.float32)
    y = rng.integers(0, 10, 32)
    bad = x.copy()
    bad[5, 7] = numpy.nan
    before = {k: numpy.array(v) for k, v in model.state_dict().items()}
    trainer.step(x=bad, label=y)
    assert trainer.skipped_steps == 1 and trainer.loss_scale == 32768.0
    assert all((numpy.array(v) == before[k]).all() for k, v in model.state_dict().items())
    for step in range(3):
        trainer.step(x=x, label=y)
        assert trainer.loss_scale == (65536.0 if step == 2 else 32768.0)
    assert trainer.skipped_steps == 1 and trainer.steps_done == 4
    # fp32 has no scaler: the same NaN stops it
    plain = tandem.Trainer(tandem.Model.load(config("digits_mlp.yaml")))
    assert plain.loss_scale is None and plain.skipped_steps == 0
    with pytest.raises(tandem.ModelError, match="step 1 \\(epoch 1\\): the training loss is NaN"):
        plain.step(x=bad, label=y)
    with pytest.raises(tandem.ModelError, match="growth_factor must be greater than 1"):
        tandem.Trainer(model, loss_scaling={"growth_factor": 1})
    with pytest.raises(tandem.ModelError, match="unknown key 'growth_intervall'"):
        tandem.Trainer(model, loss_scaling={"growth_intervall": 1})

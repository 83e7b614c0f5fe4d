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

"""tandem.Model: loading, forward against PyTorch (the oracle's twin, tandem.to_torch),
backward, state dicts, placement, plans and reports."""
import os
import random

import numpy
import pytest
import torch

import tandem
from tandem._oracle import tandem_torch as oracle
from conftest import ROOT, assert_close, config

# every bundled config the oracle builds (dlrm's 2 GiB of tables: its small twin is in
# test_zoo_twins.py), and the oracle's per-op cases
CONFIGS = [c for c in sorted(os.listdir(os.path.join(ROOT, "configs"))) if c != "dlrm.yaml"]
CASES = sorted(os.listdir(os.path.join(ROOT, "tests", "oracle", "cases")))


def bindings_of(model):
    symbols = {d for i in model.inputs for d in i["shape"] if isinstance(d, str)} - {"batch"}
    return {s: 5 for s in symbols}


@pytest.mark.parametrize("path", [os.path.join("configs", c) for c in CONFIGS] +
                         [os.path.join("tests", "oracle", "cases", c) for c in CASES])
def test_forward_matches_pytorch(path, seed):
    model = tandem.Model.load(os.path.join(ROOT, path))
    model.precision = "fp32"  # a bf16 case's twin in fp32; bf16 against torch.autocast is the oracle's
    model.init_parameters(seed)
    model.to("cpu")  # the models that name GPUs: their layers on the cpu here (placed ones below)
    twin = tandem.to_torch(model)
    assert list(twin.state_dict()) == list(model.state_dict())  # the same names, in the same order
    # the oracle's inputs: torch's embedding_bag wants its last offset to be the index count
    bindings = oracle.draw_bindings(twin.spec, random.Random(seed), 3)
    inputs = oracle.draw_inputs(twin.spec, bindings, torch.Generator().manual_seed(seed))
    got = model(**inputs)
    with torch.no_grad():
        want = twin(**inputs)
    assert list(got) == model.outputs == list(want)
    for name in got:
        assert_close(numpy.asarray(got[name]), want[name].numpy(), 1e-5, "%s output %s" % (path, name))


def test_positional_and_keyword_inputs(rng):
    model = tandem.Model.load(config("recommender.yaml"))
    inputs = model.random_inputs(batch=4, seed=1, **bindings_of(model))
    by_name = model(**inputs)
    by_position = model(*[inputs[i["name"]] for i in model.inputs])
    for k in by_name:
        numpy.testing.assert_array_equal(by_name[k], by_position[k])


def test_backward_matches_pytorch(seed):
    model = tandem.Model.load(config("digits_cnn.yaml"))
    model.init_parameters(seed)
    twin = tandem.to_torch(model)
    x = torch.randn(4, 64)
    grad = torch.randn(4, 10)
    twin.eval()
    xg = x.clone().requires_grad_(True)
    twin(x=xg)["fc"].backward(grad)
    model.zero_grad()
    input_grads = model.backward({"x": x}, {"fc": grad}, training=False)
    assert isinstance(input_grads["x"], torch.Tensor)  # torch in, torch out
    assert_close(input_grads["x"].numpy(), xg.grad.numpy(), 1e-4, "x's gradient")
    grads = model.gradients()
    for name, p in twin.named_parameters():
        assert_close(grads[name], p.grad.numpy(), 1e-4, name)


def test_state_dict_round_trip_and_module_prefix(rng):
    model = tandem.Model.load(config("digits_mlp.yaml"))
    state = {k: rng.standard_normal(v.shape).astype(numpy.float32) for k, v in model.state_dict().items()}
    assert model.load_state_dict(state) == ([], [])
    for k, v in model.state_dict().items():
        numpy.testing.assert_array_equal(v, state[k])
    # nn.DataParallel's state_dict: every name under module.
    wrapped = {"module." + k: torch.from_numpy(v * 2) for k, v in state.items()}
    model.load_state_dict(wrapped)
    numpy.testing.assert_array_equal(model.state_dict()["fc1.weight"], state["fc1.weight"] * 2)
    # and the other way: a model converted from a wrapped module has the prefix, a plain state_dict not
    dp = tandem.from_torch(torch.nn.DataParallel(torch.nn.Linear(3, 2)), torch.randn(4, 3),
                           data_parallel={"devices": ["cuda:0", "cuda:1"]})
    assert list(dp.state_dict()) == ["module.weight", "module.bias"]
    plain = torch.nn.Linear(3, 2)
    dp.load_state_dict(plain.state_dict())
    numpy.testing.assert_array_equal(dp.state_dict()["module.weight"], plain.weight.detach().numpy())


def test_load_state_dict_not_strict(rng):
    model = tandem.Model.load(config("digits_mlp.yaml"))
    before = {k: v.copy() for k, v in model.state_dict().items()}
    w = rng.standard_normal((128, 64)).astype(numpy.float32)
    missing, unexpected = model.load_state_dict({"fc1.weight": w, "extra.weight": w}, strict=False)
    assert unexpected == ["extra.weight"] and "fc1.bias" in missing and "fc1.weight" not in missing
    numpy.testing.assert_array_equal(model.state_dict()["fc1.weight"], w)
    numpy.testing.assert_array_equal(model.state_dict()["fc2.weight"], before["fc2.weight"])


def test_from_yaml_with_weights_following(rng):
    """weights_follow=True skips the draw (from_torch's models, whose weights load next):
    the loaded model computes what a drawn-then-loaded one does."""
    text = open(config("digits_mlp.yaml")).read()
    drawn = tandem.Model.from_yaml(text, "digits_mlp.yaml")
    state = {k: rng.standard_normal(v.shape).astype(numpy.float32) for k, v in drawn.state_dict().items()}
    drawn.load_state_dict(state)
    undrawn = tandem.Model.from_yaml(text, "digits_mlp.yaml", weights_follow=True)
    assert undrawn.load_state_dict(state) == ([], [])
    x = rng.standard_normal((5, 64)).astype(numpy.float32)
    got, want = undrawn(x), drawn(x)
    assert list(got) == list(want)
    for name in got:
        assert numpy.abs(want[name]).max() > 0
        numpy.testing.assert_array_equal(got[name], want[name])


def test_weights_files(tmp_path, seed):
    model = tandem.Model.load(config("digits_mlp.yaml"))
    model.init_parameters(seed)
    model.save_weights(tmp_path / "w.safetensors")
    other = tandem.Model.load(config("digits_mlp.yaml"))
    other.load_weights(str(tmp_path / "w.safetensors"))
    for k, v in model.state_dict().items():
        numpy.testing.assert_array_equal(other.state_dict()[k], v)


def test_placed_forward_equals_cpu_and_reports(rng):
    model = tandem.Model.load(config("digits_mlp.yaml"))
    x = rng.standard_normal((16, 64)).astype(numpy.float32)
    on_cpu = model(x)["fc3"]
    # the cpu alone runs through the same executor, and says what it did
    report = model.report()
    assert [r.device for r in report] == ["cpu"] and report[0].bytes_in == 0 and report[0].busy_ms > 0
    assert model.place(sim_gpus=2, place={"fc1": "cuda:0", "fc3": "cuda:1"}) is model
    placed = model(x)["fc3"]
    assert_close(placed, on_cpu, 1e-6, "placed output")
    plan = model.last_plan()
    assert plan.device_of("fc1") == "cuda:0" and plan.device_of("fc3") == "cuda:1" and plan.device_of("fc2") == "cpu"
    assert any(c.from_ == "cpu" and c.to == "cuda:0" for c in plan.copies)
    report = model.report()
    assert {r.device for r in report} == {"cpu", "cuda:0", "cuda:1"}
    assert report["cuda:1"].bytes_out == 16 * 10 * 4  # the output went back to the host
    assert "<table>" in report._repr_html_() and "cuda:1" in repr(report)
    model.to("cpu")
    assert_close(model(x)["fc3"], on_cpu, 0, "back on the cpu")


def test_plan_before_running(rng):
    model = tandem.Model.load(config("seed_mixed.yaml"))
    model.place(sim_gpus=1)
    plan = model.plan(batch=8, training=True)
    assert plan.training and plan.batch == 8
    assert plan.device_of("rnn") == "cuda:0"
    assert any(c.direction == "backward" for c in plan.copies)
    assert [d.device for d in plan.devices] == ["cpu", "cuda:0"]
    html = plan._repr_html_()
    assert html.count("<table>") == 3 and "rnn" in html
    text = repr(plan)
    assert "cuda:0" in text and "memory per device" in text
    cpu_only = tandem.Model.load(config("digits_mlp.yaml")).plan(batch=32)
    # each of the 8 parameter tensors as the pool rounds it: up to 64 bytes more
    exact = 4 * tandem.Model.load(config("digits_mlp.yaml")).parameter_count
    assert exact <= cpu_only.devices[0].parameter_bytes < exact + 8 * 64


def test_model_file_with_gpus_placed_on_simulated_ones(monkeypatch, rng):
    monkeypatch.setenv("TANDEM_SIM_GPUS", "1")
    model = tandem.Model.load(config("seed_mixed.yaml"))
    inputs = model.random_inputs(batch=2, seed=3)
    out = model(**inputs)
    assert model.placed and model.last_plan().device_of("rnn") == "cuda:0"
    reference = tandem.Model.load(config("seed_mixed.yaml")).to("cpu")
    for k in out:
        assert_close(out[k], reference(**inputs)[k], 1e-6, k)


def test_devices():
    listed = tandem.devices(sim_gpus=3)
    assert [d["device"] for d in listed] == ["cpu", "cuda:0", "cuda:1", "cuda:2"]
    assert all(d["simulated"] for d in listed[1:])


def test_model_properties():
    model = tandem.Model.load(config("recommender.yaml"))
    assert model.name == "recommender" and model.source.endswith("recommender.yaml")
    assert model.yaml == open(config("recommender.yaml")).read()
    assert [i["name"] for i in model.inputs][0] == "dense"
    assert model.inputs[0]["shape"][0] == "batch"
    assert "recommender" in repr(model)
    mlp = tandem.Model.load(config("digits_mlp.yaml"))
    assert mlp.has_loss and mlp.targets == [{"name": "label", "shape": ["batch"], "dtype": "int64"}]

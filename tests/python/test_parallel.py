"""tandem.parallel: torch.nn.parallel's replicate, scatter, parallel_apply and gather over
Tandem's (here simulated) GPUs, with torch's semantics; composed by hand they compute what a
declared data_parallel: block computes, forward and backward."""
import os

os.environ["TANDEM_SIM_GPUS"] = "3"  # before any device is opened: cuda:0..2 for this file

import numpy  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import tandem  # noqa: E402
from tandem import parallel  # noqa: E402
from conftest import assert_close  # noqa: E402

LAYERS = """
  - {name: fc1, op: linear, in_features: 6, out_features: 16}
  - {name: act, op: tanh}
  - {name: fc2, op: linear, in_features: 16, out_features: 4}
"""
INNER = "name: mlp\ninputs:\n  x: {shape: [batch, 6]}\nlayers:\n" + LAYERS
# the same layers as one data_parallel block named so that its parameters are the same
DECLARED = """name: mlp_dp
inputs:
  x: {shape: [batch, 6]}
layers:
  - name: net
    data_parallel: {devices: [cuda:0, cuda:1, cuda:2], output_device: cuda:0}
    layers:
""" + "\n".join("    " + line for line in LAYERS.strip("\n").split("\n")) + "\n"

SEQUENCE_INNER = """name: rnn
inputs:
  x: {shape: [5, batch, 3]}
layers:
  - {name: gru, op: gru, input_size: 3, hidden_size: 4}
"""
SEQUENCE_DECLARED = """name: rnn_dp
inputs:
  x: {shape: [5, batch, 3]}
layers:
  - name: net
    data_parallel: {devices: [cuda:0, cuda:1, cuda:2], output_device: cuda:1, dim: 1}
    layers:
      - {name: gru, op: gru, input_size: 3, hidden_size: 4}
"""
DEVICES = ["cuda:0", "cuda:1", "cuda:2"]


def address(a):
    return a.__array_interface__["data"][0]


def twins(inner_text, declared_text, seed):
    inner = tandem.Model.from_yaml(inner_text)
    inner.init_parameters(seed)
    declared = tandem.Model.from_yaml(declared_text)
    declared.load_state_dict({"net." + k: v for k, v in inner.state_dict().items()})
    return inner, declared


@pytest.mark.parametrize("batch, sizes", [(6, [2, 2, 2]), (7, [3, 3, 1]), (2, [1, 1]), (4, [2, 2])])
def test_scatter_chunks_as_torch_chunk(rng, batch, sizes):
    x = rng.standard_normal((batch, 5)).astype(numpy.float32)
    chunks = parallel.scatter(x, DEVICES)
    assert [c.shape[0] for c in chunks] == sizes == [c.shape[0] for c in torch.from_numpy(x).chunk(3)]
    offset = 0
    for c in chunks:  # views of the input: no copy
        assert address(c) == address(x) + offset * 5 * 4
        offset += c.shape[0]
    t = torch.from_numpy(x)
    assert [c.data_ptr() for c in parallel.scatter(t, DEVICES)] == [c.data_ptr() for c in t.chunk(3)]


def test_scatter_structures_and_dim(rng):
    x = rng.standard_normal((4, 7, 2)).astype(numpy.float32)
    y = torch.randn(4, 7)
    out = parallel.scatter(({"a": x, "n": 3}, [y]), ["cuda:0", 1], dim=1)
    assert len(out) == 2
    (first, [y0]), (second, [y1]) = out
    assert first["n"] == second["n"] == 3  # not a tensor: each replica gets it
    numpy.testing.assert_array_equal(numpy.concatenate([first["a"], second["a"]], axis=1), x)
    assert first["a"].shape == (4, 4, 2) and second["a"].shape == (4, 3, 2)
    assert torch.equal(torch.cat([y0, y1], 1), y)


def test_gather_concatenates(rng):
    parts = [{"y": rng.standard_normal((2, 3)).astype(numpy.float32)} for _ in range(3)]
    gathered = parallel.gather(parts, "cuda:0")
    numpy.testing.assert_array_equal(gathered["y"], numpy.concatenate([p["y"] for p in parts]))
    t = parallel.gather([torch.ones(2, 1), torch.zeros(2, 2)], 0, dim=1)
    assert t.shape == (2, 3)


def test_replicas_run_on_their_devices(rng, seed):
    inner = tandem.Model.from_yaml(INNER)
    replicas = parallel.replicate(inner, DEVICES)
    chunks = parallel.scatter({"x": rng.standard_normal((6, 6)).astype(numpy.float32)}, DEVICES)
    parallel.parallel_apply(replicas, chunks)
    for device, replica in zip(DEVICES, replicas):
        assert {layer.device for layer in replica.last_plan().layers} == {device}
        assert replica.report()[device].busy_ms > 0


def test_composed_forward_is_the_declared_block(rng, seed):
    inner, declared = twins(INNER, DECLARED, seed)
    for batch in (7, 2, 12):
        x = rng.standard_normal((batch, 6)).astype(numpy.float32)
        replicas = parallel.replicate(inner, DEVICES)
        chunks = parallel.scatter({"x": x}, DEVICES)
        outputs = parallel.parallel_apply(replicas[:len(chunks)], chunks)
        composed = parallel.gather(outputs, "cuda:0")["fc2"]
        numpy.testing.assert_array_equal(composed, declared(x)[declared.outputs[0]])  # the same kernels on the same rows
        numpy.testing.assert_array_equal(parallel.data_parallel(inner, x, DEVICES)["fc2"], composed)
    plan = declared.last_plan()
    assert {l.device for l in plan.layers if l.path.startswith("net.fc1@")} == set(DEVICES)


def test_composed_backward_is_the_declared_block(rng, seed):
    inner, declared = twins(INNER, DECLARED, seed)
    x = rng.standard_normal((7, 6)).astype(numpy.float32)
    grad = rng.standard_normal((7, 4)).astype(numpy.float32)
    replicas = parallel.replicate(inner, DEVICES)
    chunks = parallel.scatter({"x": x}, DEVICES)
    grad_chunks = parallel.scatter({"fc2": grad}, DEVICES)
    input_grads = [r.backward(c, g) for r, c, g in zip(replicas, chunks, grad_chunks)]
    declared.zero_grad()
    want_input = declared.backward({"x": x}, {declared.outputs[0]: grad})["x"]
    assert_close(parallel.gather(input_grads, "cpu")["x"], want_input, 1e-6, "input gradient")
    summed = {k: sum(r.gradients()[k] for r in replicas) for k in inner.gradients()}  # the gradient all-reduce
    for name, value in declared.gradients().items():
        assert_close(summed[name[len("net."):]], value, 1e-5, name)


def test_composed_along_dim_1_is_the_declared_block(rng, seed):
    inner, declared = twins(SEQUENCE_INNER, SEQUENCE_DECLARED, seed)
    x = rng.standard_normal((5, 8, 3)).astype(numpy.float32)
    out = parallel.data_parallel(inner, module_kwargs={"x": x}, device_ids=DEVICES, output_device="cuda:1", dim=1)
    assert_close(out["gru"], declared(x)[declared.outputs[0]], 1e-6, "gru output")


def test_parallel_apply_raises_the_first_error(rng):
    inner = tandem.Model.from_yaml(INNER)
    replicas = parallel.replicate(inner, DEVICES[:2])
    good = {"x": rng.standard_normal((2, 6)).astype(numpy.float32)}
    with pytest.raises(tandem.ModelError, match="input 'x'"):
        parallel.parallel_apply(replicas, [good, {"x": numpy.zeros((2, 5), numpy.float32)}])
    with pytest.raises(ValueError, match="2 modules but 1 inputs"):
        parallel.parallel_apply(replicas, [good])

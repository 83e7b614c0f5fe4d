"""Tensors cross between Python and Tandem without copies (asserted by address), and what
is not Tandem's layout is converted or refused with a message, never misread."""
import gc
import sys
import threading
import time

import numpy
import pytest
import torch

import tandem
from conftest import config

# A model whose output is a view of its input: the output's memory is the input's own.
VIEW = """
name: view
inputs:
  x: {shape: [batch, 4, 3]}
layers:
  - {name: flat, op: flatten}
"""

INDICES = """
name: lookup
inputs:
  ids: {shape: [batch, 3], dtype: int64}
layers:
  - {name: emb, op: embedding, num_embeddings: 10, embedding_dim: 2}
  - {name: flat, op: flatten, inputs: ids}
outputs: [emb, flat]
"""


def address(array):
    if isinstance(array, torch.Tensor):
        return array.data_ptr()
    return array.__array_interface__["data"][0]


def test_numpy_in_and_out_share_memory(rng):
    model = tandem.Model.from_yaml(VIEW)
    x = rng.standard_normal((5, 4, 3)).astype(numpy.float32)
    y = model(x)["flat"]
    assert address(y) == address(x)  # in: Tandem read x's memory; out: y is that memory
    assert y.shape == (5, 12)
    numpy.testing.assert_array_equal(y, x.reshape(5, 12))
    x[0, 0, 0] = 42.0  # one memory: the change shows through
    assert y[0, 0] == 42.0


def test_torch_in_and_out_share_memory(rng):
    model = tandem.Model.from_yaml(VIEW)
    x = torch.randn(5, 4, 3)
    y = model(x)["flat"]
    assert isinstance(y, torch.Tensor)
    assert y.data_ptr() == x.data_ptr()
    assert torch.equal(y, x.reshape(5, 12))
    w = torch.randn(5, 4, 3, requires_grad=True)  # exported detached: Tandem only reads it
    assert model(w)["flat"].data_ptr() == w.data_ptr()


def test_int64_indices_shared(rng):
    model = tandem.Model.from_yaml(INDICES)
    ids = rng.integers(0, 10, (4, 3))
    out = model(ids=ids)
    assert address(out["flat"]) == address(ids)
    numpy.testing.assert_array_equal(out["flat"], ids.reshape(4, 3))
    table = model.state_dict()["emb.weight"]
    numpy.testing.assert_array_equal(out["emb"], table[ids])


def test_output_keeps_memory_alive_after_input_goes(rng):
    model = tandem.Model.from_yaml(VIEW)
    x = rng.standard_normal((2, 4, 3)).astype(numpy.float32)
    expected = x.reshape(2, 12).copy()
    before = sys.getrefcount(x)
    y = model(x)["flat"]
    assert sys.getrefcount(x) == before + 1  # held by the tensor y views, and only by it
    del x
    gc.collect()
    numpy.testing.assert_array_equal(y, expected)


def test_inputs_released_after_forward(rng):
    model = tandem.Model.load(config("digits_mlp.yaml"))
    x = rng.standard_normal((8, 64)).astype(numpy.float32)
    before = sys.getrefcount(x)
    for _ in range(3):
        model(x)
    assert sys.getrefcount(x) == before  # nothing of Tandem's still holds it


def test_placed_inputs_released_and_outputs_not_copied(rng):
    model = tandem.Model.load(config("digits_mlp.yaml")).place(sim_gpus=2, place={"fc1": "cuda:0", "fc3": "cuda:1"})
    x = rng.standard_normal((8, 64)).astype(numpy.float32)
    before = sys.getrefcount(x)
    y = model(x)["fc3"]
    # the output is Tandem's own buffer, handed over: numpy does not own it, a capsule does
    assert not y.flags.owndata and type(y.base).__name__ == "PyCapsule"
    deadline = time.time() + 5
    while sys.getrefcount(x) != before and time.time() < deadline:  # a device queue may let go just after
        time.sleep(0.01)
    assert sys.getrefcount(x) == before


def test_state_dict_views_the_parameters(rng):
    model = tandem.Model.load(config("digits_mlp.yaml"))
    w1 = model.state_dict()["fc1.weight"]
    assert address(w1) == address(model.state_dict()["fc1.weight"])
    assert not w1.flags.writeable  # changes go through load_state_dict, which devices' copies follow
    new = {k: rng.standard_normal(v.shape).astype(numpy.float32) for k, v in model.state_dict().items()}
    model.load_state_dict(new)
    numpy.testing.assert_array_equal(w1, new["fc1.weight"])  # the same memory, now the new values


def test_strided_arrays_are_copied_correctly(rng):
    model = tandem.Model.from_yaml(VIEW)
    base = rng.standard_normal((3, 4, 5)).astype(numpy.float32)
    x = base.transpose(2, 1, 0)  # [5, 4, 3], not row-major
    y = model(x)["flat"]
    assert address(y) != address(x)
    numpy.testing.assert_array_equal(y, numpy.ascontiguousarray(x).reshape(5, 12))
    sliced = rng.standard_normal((10, 4, 6)).astype(numpy.float32)[::2, :, ::2]
    numpy.testing.assert_array_equal(model(sliced)["flat"], numpy.ascontiguousarray(sliced).reshape(5, 12))
    t = torch.randn(3, 4, 5).permute(2, 1, 0)
    assert torch.equal(model(t)["flat"], t.contiguous().reshape(5, 12))


def test_big_endian_and_misaligned_arrays(rng):
    model = tandem.Model.from_yaml(VIEW)
    x = rng.standard_normal((2, 4, 3)).astype(numpy.float32)
    numpy.testing.assert_array_equal(model(x.astype(">f4"))["flat"], x.reshape(2, 12))
    raw = numpy.zeros(x.nbytes + 1, dtype=numpy.uint8)
    misaligned = raw[1:].view(numpy.float32).reshape(2, 4, 3)
    misaligned[...] = x
    assert address(misaligned) % 4 != 0
    numpy.testing.assert_array_equal(model(misaligned)["flat"], x.reshape(2, 12))


def test_lists_are_converted():
    model = tandem.Model.from_yaml(VIEW)
    x = [[[float(i * 12 + j * 3 + k) for k in range(3)] for j in range(4)] for i in range(2)]
    y = model(x)["flat"]
    assert y.dtype == numpy.float32
    numpy.testing.assert_array_equal(y, numpy.arange(24, dtype=numpy.float32).reshape(2, 12))
    out = tandem.Model.from_yaml(INDICES)(ids=[[1, 2, 3], [4, 5, 6]])
    numpy.testing.assert_array_equal(out["flat"], [[1, 2, 3], [4, 5, 6]])


@pytest.mark.parametrize("value, message", [
    (numpy.zeros((2, 4, 3)), "input 'x' of model 'view' is a float64 array, but the model takes float32 there; convert it "
                             "first (numpy: a.astype(numpy.float32); torch: t.float())"),
    (numpy.zeros((2, 4, 3), dtype=numpy.float16), "input 'x' of model 'view' is a float16 array, but the model takes "
                                                  "float32 there"),
    (torch.zeros(2, 4, 3, dtype=torch.float64), "input 'x' of model 'view' is a float64 tensor, but the model takes "
                                                "float32 there"),
    (numpy.zeros((2, 4, 3), dtype=numpy.int64), "input 'x' of model 'view' is int64, but the model takes float32 there"),
    ("text", "input 'x' of model 'view' is a str, not an array; give a numpy array, a torch tensor or a list of numbers"),
    (numpy.zeros((2, 4, 4), dtype=numpy.float32), "input 'x': expected float32 [batch, 4, 3], got float32 [2, 4, 4] "
                                                  "(dimension 2)"),
])
def test_bad_arrays_refused_with_their_message(value, message):
    model = tandem.Model.from_yaml(VIEW)
    with pytest.raises(tandem.ModelError) as error:
        model(value)
    assert message in str(error.value)


def test_bad_index_arrays_refused():
    model = tandem.Model.from_yaml(INDICES)
    with pytest.raises(tandem.ModelError, match=r"input 'ids' of model 'lookup' is a int32 array, but the model takes "
                                                r"int64 there; convert it first \(numpy: a.astype\(numpy.int64\); "
                                                r"torch: t.long\(\)\)"):
        model(ids=numpy.zeros((2, 3), dtype=numpy.int32))
    with pytest.raises(tandem.ModelError, match="is a bool tensor, but the model takes int64 there"):
        model(ids=torch.zeros(2, 3, dtype=torch.bool))
    with pytest.raises(tandem.ModelError, match="is a float64 array, but the model takes int64 there"):
        model(ids=[[0.5, 1.0, 2.0]])


def test_gil_released_while_tandem_computes(rng):
    """While one thread runs a long forward, another keeps running Python: the longest
    pause it sees is a small part of the forward (a held GIL would stop it throughout)."""
    model = tandem.Model.load(config("mlp_4x1024.yaml"))
    x = rng.standard_normal((2048, 1024)).astype(numpy.float32)
    model(x)  # kernels made: the timed call computes only
    span = {}

    def work():
        start = time.perf_counter()
        model(x)
        span["forward"] = time.perf_counter() - start

    worker = threading.Thread(target=work)
    stamps = [time.perf_counter()]
    worker.start()
    while worker.is_alive():
        stamps.append(time.perf_counter())
    stamps.append(time.perf_counter())  # a pause up to the worker's end counts too
    worker.join()
    longest_pause = max(b - a for a, b in zip(stamps, stamps[1:]))
    assert span["forward"] > 0.05, "the forward is too short to tell (%.3f s)" % span["forward"]
    assert longest_pause < span["forward"] / 2, "Python stood still %.3f s of a %.3f s forward" % (
        longest_pause, span["forward"])

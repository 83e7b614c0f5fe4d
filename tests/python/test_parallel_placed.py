"""tandem.parallel follows the model's placement (issue 30, item 4): after
model.place(sim_gpus=2), replicate() puts the replicas on those simulated GPUs, with no
TANDEM_SIM_GPUS in the environment; an error names Python's arguments, not CLI flags."""
import os

os.environ.pop("TANDEM_SIM_GPUS", None)  # this file's GPUs come from place() alone

import numpy  # noqa: E402
import pytest  # noqa: E402

import tandem  # noqa: E402
from tandem import parallel  # noqa: E402
from conftest import assert_close, SEED  # noqa: E402

MLP = """name: mlp
inputs:
  x: {shape: [batch, 6]}
layers:
  - {name: fc1, op: linear, in_features: 6, out_features: 8}
  - {name: act, op: tanh}
  - {name: fc2, op: linear, in_features: 8, out_features: 3}
"""


def test_replicas_use_the_simulated_gpus_the_model_was_placed_on():
    model = tandem.Model.from_yaml(MLP)
    model.init_parameters(SEED % 1000)
    model.place(sim_gpus=2)
    x = numpy.random.default_rng(SEED).standard_normal((7, 6)).astype(numpy.float32)
    expected = tandem.Model.from_yaml(MLP)
    expected.load_state_dict(model.state_dict())
    want = expected.to("cpu")(x)["fc2"]
    replicas = parallel.replicate(model, ["cuda:0", "cuda:1"])
    for k, replica in enumerate(replicas):
        assert {layer.device for layer in replica.plan(batch=4).layers} == {"cuda:%d" % k}
    chunks = parallel.scatter({"x": x}, ["cuda:0", "cuda:1"])
    outputs = parallel.parallel_apply(replicas[:len(chunks)], chunks)
    got = parallel.gather(outputs, "cuda:0")["fc2"]
    assert_close(got, want, 1e-6)
    # and model.to() keeps the model on the GPUs place() gave it
    assert {layer.device for layer in model.to("cuda:1").plan(batch=2).layers} == {"cuda:1"}


def test_a_device_that_is_not_there_is_refused_in_python_terms():
    model = tandem.Model.from_yaml(MLP)
    with pytest.raises(tandem.ModelError) as error:
        parallel.replicate(model, ["cuda:0", "cuda:1"])
    message = str(error.value)
    assert "to('cuda:0'): cuda:0 does not exist here" in message
    assert "model.place(sim_gpus=N)" in message
    assert "--sim-gpus" not in message


def test_predict_a_batch_at_a_time_gives_forwards_bits_batch_by_batch():
    """model.predict(x, batch_size=N): on a model placed over the cpu and a simulated GPU, the
    next batch is submitted while the GPU works on this one; each batch's outputs are the
    bits forward() gives it, and a bad batch_size is refused in Python's terms."""
    model = tandem.Model.from_yaml(MLP)
    model.init_parameters(SEED % 1000)
    model.place(sim_gpus=1, place={"fc2": "cuda:0"})
    x = numpy.random.default_rng(SEED).standard_normal((23, 6)).astype(numpy.float32)
    got = model.predict(x, batch_size=5)["fc2"]
    assert got.shape == (23, 3)
    for start in range(0, 23, 5):
        want = model(x[start:start + 5])["fc2"]
        assert numpy.array_equal(got[start:start + 5], want), start
    assert numpy.array_equal(model.predict(x=x, batch_size=23)["fc2"], model(x)["fc2"])
    for bad, message in [(0, "at least 1, got 0"), (2.5, "must be an int"), (None, "must be an int")]:
        with pytest.raises(tandem.ModelError, match=message):
            model.predict(x, batch_size=bad)
    with pytest.raises(tandem.ModelError, match="needs batch_size"):
        model.predict(x)

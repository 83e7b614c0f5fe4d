"""model.register_forward_hook (issue 30): torch's forward hooks, called once per replica of
a data_parallel block with the replica's chunk and output, so that the data-parallel
tutorial's "In Model: input size ... output size" printout is written in Python. Each
replica's chunk is torch.chunk's, its output torch's linear of that chunk; the replicas'
outputs concatenated are the model's output."""
import os

os.environ.pop("TANDEM_SIM_GPUS", None)  # this file's GPUs come from place() alone

import numpy  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import tandem  # noqa: E402
from tandem import parallel  # noqa: E402
from conftest import assert_close  # noqa: E402

TUTORIAL = """name: dp_tutorial
inputs:
  input: {shape: [batch, 5]}
layers:
  - name: model
    data_parallel: {devices: all, dim: 0}
    layers:
      - {name: fc, op: linear, in_features: 5, out_features: 2}
outputs: [model.fc]
"""

MLP = """name: mlp
inputs:
  x: {shape: [batch, 6]}
layers:
  - {name: fc1, op: linear, in_features: 6, out_features: 8}
  - {name: act, op: tanh}
  - {name: fc2, op: linear, in_features: 8, out_features: 3}
"""


def tutorial_model(gpus, seed):
    model = tandem.Model.from_yaml(TUTORIAL)
    model.init_parameters(seed % 1000)
    model.place(sim_gpus=gpus)
    return model


@pytest.mark.parametrize("gpus", [2, 3])
def test_the_tutorials_printout_shows_each_replicas_chunk(gpus, seed, rng, capsys):
    model = tutorial_model(gpus, seed)
    state = model.state_dict()
    weight, bias = torch.from_numpy(state["model.fc.weight"].copy()), torch.from_numpy(state["model.fc.bias"].copy())
    calls = []

    def hook(layer, inputs, output):  # the tutorial's print, moved from forward into a hook
        print("\tIn Model: input size", tuple(inputs[0].shape), "output size", tuple(output.shape))
        calls.append((layer, inputs[0].copy(), output.copy()))

    model.register_forward_hook(hook)
    data = rng.standard_normal((100, 5)).astype(numpy.float32)
    for start in range(0, 100, 30):  # batches of 30, 30, 30 and 10, as the tutorial's loader
        x = data[start:start + 30]
        calls.clear()
        y = model(x)["model.fc"]
        print("Outside: input size", x.shape, "output_size", y.shape)
        chunks = torch.chunk(torch.from_numpy(x), gpus)  # what nn.DataParallel gives each replica
        calls.sort(key=lambda c: c[0].replica)
        assert [c[0].replica for c in calls] == list(range(len(chunks)))
        for (layer, got_in, got_out), chunk in zip(calls, chunks):
            assert layer.path == "model.fc" and layer.op == "linear"
            assert layer.device == "cuda:%d" % layer.replica
            assert layer.replicas == len(chunks)
            assert got_in.shape == tuple(chunk.shape)
            assert_close(got_in, chunk.numpy(), 0, "replica %d's input" % layer.replica)
            assert_close(got_out, torch.nn.functional.linear(chunk, weight, bias).numpy(), 1e-6,
                         "replica %d's output" % layer.replica)
        assert_close(numpy.concatenate([c[2] for c in calls]), y, 0, "the gathered output")
    printed = capsys.readouterr().out
    if gpus == 2:  # 30 = 15 + 15, the last batch 10 = 5 + 5
        assert printed.count("\tIn Model: input size (15, 5) output size (15, 2)") == 6
        assert printed.count("\tIn Model: input size (5, 5) output size (5, 2)") == 2
    else:  # 30 = 10 + 10 + 10, the last 10 = 4 + 4 + 2, as torch.chunk
        assert printed.count("\tIn Model: input size (10, 5) output size (10, 2)") == 9
        assert printed.count("\tIn Model: input size (4, 5) output size (4, 2)") == 2
        assert printed.count("\tIn Model: input size (2, 5) output size (2, 2)") == 1
    assert printed.count("Outside: input size (30, 5) output_size (30, 2)") == 3


def test_torch_inputs_give_the_hook_torch_tensors(seed):
    model = tutorial_model(2, seed)
    sizes = []
    model.register_forward_hook(lambda layer, inputs, output: sizes.append((inputs[0].size(), output.size())))
    model(torch.randn(30, 5))
    assert sorted(sizes) == [(torch.Size([15, 5]), torch.Size([15, 2]))] * 2


def test_a_hook_on_a_layer_sees_it_alone_and_remove_takes_it_off(seed, rng):
    model = tandem.Model.from_yaml(MLP)
    model.init_parameters(seed % 1000)
    x = rng.standard_normal((4, 6)).astype(numpy.float32)
    every, fc2 = [], []
    handle = model.register_forward_hook(lambda layer, inputs, output: every.append((layer.path, output.copy())))
    with model.register_forward_hook(lambda layer, inputs, output: fc2.append((layer, inputs[0].copy())), layer="fc2"):
        y = model(x)["fc2"]
    assert [path for path, _ in every] == ["fc1", "act", "fc2"]
    assert_close(every[-1][1], y, 0, "fc2's output")
    state = {k: torch.from_numpy(v.copy()) for k, v in model.state_dict().items()}
    hidden = torch.tanh(torch.nn.functional.linear(torch.from_numpy(x), state["fc1.weight"], state["fc1.bias"]))
    assert_close(every[1][1], hidden.numpy(), 1e-6, "act's output")
    assert len(fc2) == 1 and fc2[0][0].path == "fc2" and fc2[0][0].device == "cpu" and fc2[0][0].replica is None
    assert_close(fc2[0][1], hidden.numpy(), 1e-6, "fc2's input")
    model(x)  # the second hook left with its `with`
    assert len(fc2) == 1 and len(every) == 6
    handle.remove()
    handle.remove()  # a second remove does nothing, as torch's
    model(x)
    assert len(every) == 6


def test_a_hooks_exception_comes_out_of_the_forward_and_a_bad_layer_is_refused(seed, rng):
    model = tutorial_model(2, seed)

    def failing(layer, inputs, output):
        raise KeyError("from the hook on " + layer.path)

    handle = model.register_forward_hook(failing)
    with pytest.raises(KeyError, match="from the hook on model.fc"):
        model(rng.standard_normal((6, 5)).astype(numpy.float32))
    handle.remove()
    assert model(rng.standard_normal((6, 5)).astype(numpy.float32))["model.fc"].shape == (6, 2)
    with pytest.raises(tandem.ModelError, match="has no layer or block of that path"):
        model.register_forward_hook(failing, layer="model.fc2")


def test_replicating_a_model_that_holds_a_data_parallel_block_is_refused(seed):
    model = tutorial_model(2, seed)
    assert model.data_parallel_blocks == [{"path": "model", "devices": "all"}]
    for call in (lambda: parallel.replicate(model, ["cuda:0", "cuda:1"]),
                 lambda: parallel.data_parallel(model, numpy.zeros((4, 5), numpy.float32), device_ids=[0, 1])):
        with pytest.raises(tandem.ModelError) as error:
            call()
        message = str(error.value)
        assert "holds data_parallel block 'model'" in message
        assert "Call the model itself" in message
    # the model itself splits the batch over its block's devices
    assert model(numpy.ones((4, 5), numpy.float32))["model.fc"].shape == (4, 2)


def test_replicas_made_by_hand_call_the_models_hooks(seed, rng):
    model = tandem.Model.from_yaml(MLP)
    model.init_parameters(seed % 1000)
    model.place(sim_gpus=2)
    seen = []
    model.register_forward_hook(lambda layer, inputs, output: seen.append((layer.device, output.shape)), layer="fc2")
    x = rng.standard_normal((7, 6)).astype(numpy.float32)
    y = parallel.data_parallel(model, x, device_ids=[0, 1])["fc2"]
    assert sorted(seen) == [("cuda:0", (4, 3)), ("cuda:1", (3, 3))]  # torch.chunk's 4 and 3 rows
    assert_close(y, model.to("cpu")(x)["fc2"], 1e-6)

"""Errors a user can cause arrive as tandem.ModelError carrying the message the CLI prints
after "error: " (the same words, compared in full where the CLI can make the same mistake),
and the mistakes only Python can make name what is wrong and where."""
import os
import subprocess

import numpy
import pytest

import tandem
from conftest import CLI, config

BAD_MODELS = {
    "unknown_op": """
name: bad
inputs:
  x: {shape: [batch, 4]}
layers:
  - {name: fc, op: linaer, in_features: 4, out_features: 2}
""",
    "shape_mismatch": """
name: bad
inputs:
  x: {shape: [batch, 4]}
layers:
  - {name: fc1, op: linear, in_features: 4, out_features: 8}
  - {name: fc2, op: linear, in_features: 9, out_features: 2}
""",
    "bad_reference": """
name: bad
inputs:
  x: {shape: [batch, 4]}
layers:
  - {name: fc, op: linear, in_features: 4, out_features: 2, inputs: y}
""",
    "not_yaml": "name: [unclosed\n",
}


def cli_error(*args, env=None):
    """The message `tandem ARGS` prints after "error: ", which must exit with code 2."""
    run = subprocess.run([CLI, *args], capture_output=True, text=True, env=env)
    assert run.returncode == 2, "tandem %s: exit %d\n%s" % (" ".join(args), run.returncode, run.stderr)
    assert run.stderr.startswith("error: "), run.stderr
    return run.stderr[len("error: "):].strip()


def env_without_gpus():
    env = dict(os.environ)
    env.pop("TANDEM_SIM_GPUS", None)
    return env


@pytest.mark.parametrize("case", sorted(BAD_MODELS))
def test_bad_model_file_same_message_as_cli(case, tmp_path):
    path = tmp_path / ("%s.yaml" % case)
    path.write_text(BAD_MODELS[case])
    expected = cli_error("check", str(path))
    with pytest.raises(tandem.ModelError) as error:
        tandem.Model.load(path)
    assert str(error.value) == expected
    assert str(path) in expected  # the file, line and column, as the CLI says them
    with pytest.raises(tandem.ModelError) as error:
        tandem.Model.from_yaml(BAD_MODELS[case], name=str(path))
    assert str(error.value) == expected


def test_missing_file_same_message_as_cli(tmp_path):
    missing = str(tmp_path / "missing.yaml")
    with pytest.raises(tandem.ModelError) as error:
        tandem.Model.load(missing)
    assert str(error.value) == cli_error("check", missing)


def test_bad_weights_same_message_as_cli(tmp_path):
    other = tandem.Model.load(config("seed_mlp.yaml"))
    weights = str(tmp_path / "other.safetensors")
    other.save_weights(weights)
    model = tandem.Model.load(config("digits_mlp.yaml"))
    with pytest.raises(tandem.ModelError) as error:
        model.load_weights(weights)
    assert str(error.value) == cli_error("run", config("digits_mlp.yaml"), "--weights", weights)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x07\x00\x00\x00\x00\x00\x00\x00{oops}")
    with pytest.raises(tandem.ModelError) as error:
        model.load_weights(garbage)
    assert str(error.value) == cli_error("run", config("digits_mlp.yaml"), "--weights", str(garbage))


def test_model_naming_gpus_without_gpus_same_message_as_cli(monkeypatch):
    monkeypatch.delenv("TANDEM_SIM_GPUS", raising=False)
    expected = cli_error("run", config("seed_mixed.yaml"), env=env_without_gpus())
    model = tandem.Model.load(config("seed_mixed.yaml"))
    inputs = model.random_inputs(batch=2)
    with pytest.raises(tandem.ModelError) as error:
        model(**inputs)
    assert str(error.value) == expected
    assert "--sim-gpus 1" in expected and "--place '*=cpu'" in expected  # both ways out
    model.to("cpu")  # the second way out, from Python
    model(**inputs)


def test_device_the_machine_lacks_same_message_as_cli(rng):
    expected = cli_error("run", config("digits_mlp.yaml"), "--sim-gpus", "2", "--place", "fc1=cuda:5",
                         env=env_without_gpus())
    model = tandem.Model.load(config("digits_mlp.yaml")).place(sim_gpus=2, place={"fc1": "cuda:5"})
    with pytest.raises(tandem.ModelError) as error:
        model(rng.standard_normal((1, 64)).astype(numpy.float32))
    assert str(error.value) == expected
    with pytest.raises(tandem.ModelError) as error:
        model.plan(batch=4)
    assert str(error.value) == expected


def test_training_errors_same_message_as_cli(tmp_path):
    with pytest.raises(tandem.ModelError) as error:
        tandem.Trainer(tandem.Model.load(config("seed_mlp.yaml")))
    assert str(error.value) == cli_error("train", config("seed_mlp.yaml"), "--data", "x.csv")
    missing = str(tmp_path / "missing.csv")
    trainer = tandem.Trainer(tandem.Model.load(config("digits_mlp.yaml")), epochs=1)
    with pytest.raises(tandem.ModelError) as error:
        trainer.fit(missing)
    assert str(error.value) == cli_error("train", config("digits_mlp.yaml"), "--epochs", "1", "--data", missing)
    short = tmp_path / "short.csv"
    short.write_text("1,2,3\n")
    with pytest.raises(tandem.ModelError) as error:
        trainer.fit(str(short))
    assert str(error.value) == cli_error("train", config("digits_mlp.yaml"), "--epochs", "1", "--data", str(short))
    weights = str(tmp_path / "w.safetensors")
    trainer.model.save_weights(weights)
    with pytest.raises(tandem.ModelError) as error:
        trainer.resume(weights)
    assert str(error.value) == cli_error("train", config("digits_mlp.yaml"), "--epochs", "1", "--resume", weights)


def test_forward_input_errors():
    model = tandem.Model.load(config("digits_mlp.yaml"))
    x = numpy.zeros((2, 64), dtype=numpy.float32)
    for call, message in [
        (lambda: model(), "input 'x' of model 'digits_mlp' is missing"),
        (lambda: model(z=x), "model 'digits_mlp' has no input 'z' (did you mean 'x'?)"),
        (lambda: model(x, x), "model 'digits_mlp' takes 1 input(s), got 2 positional argument(s)"),
        (lambda: model(x, x=x), "input 'x' of model 'digits_mlp' is given twice"),
        (lambda: model(numpy.zeros((2, 63), dtype=numpy.float32)),
         "input 'x': expected float32 [batch, 64], got float32 [2, 63] (dimension 1)"),
        (lambda: model(numpy.zeros(64, dtype=numpy.float32)), "input 'x': expected float32 [batch, 64], got float32 [64]"),
    ]:
        with pytest.raises(tandem.ModelError) as error:
            call()
        assert str(error.value) == message


def test_state_dict_errors():
    model = tandem.Model.load(config("digits_mlp.yaml"))
    state = {k: numpy.array(v) for k, v in model.state_dict().items()}
    for change, message in [
        (lambda s: s.pop("fc1.bias"), "state_dict does not fit model 'digits_mlp': 1 parameter(s) missing: 'fc1.bias'"),
        (lambda s: s.update({"fc9.weight": s["fc1.weight"]}),
         "state_dict does not fit model 'digits_mlp': 1 tensor(s) the model does not have: 'fc9.weight'"),
        (lambda s: s.update({"fc1.bias": numpy.zeros(3, numpy.float32)}),
         "state_dict does not fit model 'digits_mlp': 1 of the wrong shape: 'fc1.bias' is [3], the model's [128]"),
        (lambda s: s.update({"fc1.bias": numpy.zeros(128)}),
         "state_dict['fc1.bias'] is a float64 array, but the model takes float32 there"),
    ]:
        broken = dict(state)
        change(broken)
        with pytest.raises(tandem.ModelError) as error:
            model.load_state_dict(broken)
        assert message in str(error.value)


def test_place_errors():
    model = tandem.Model.load(config("digits_mlp.yaml"))
    for arguments, message in [
        (dict(policy="greedy"), "place(policy='greedy'): not a policy; write annotations, embeddings-on-cpu or balanced"),
        (dict(place={"fc1": "gpu0"}), "place(place={'fc1': ...}): 'gpu0' is not a device; write cpu, cuda or cuda:N"),
        (dict(place=["fc1"]), "place(place=['fc1']): write PATTERN=DEVICE"),
        (dict(sim_gpus=2, sim_gpu_memory="lots"), "place(sim_gpu_memory=lots): "),
        (dict(sim_gpus=-1), "place(sim_gpus=-1): give 0 to 1024 simulated GPUs"),
    ]:
        with pytest.raises(tandem.ModelError) as error:
            model.place(**arguments)
        assert message in str(error.value)
    with pytest.raises(tandem.ModelError, match="to\\(\\): 'tpu' is not a device"):
        model.to("tpu")


def test_trainer_setting_and_data_errors():
    model = tandem.Model.load(config("digits_mlp.yaml"))
    for settings, message in [
        (dict(optimizer="adm"), "Trainer(optimizer='adm'): unknown optimizer (did you mean 'adam'?)"),
        (dict(epoch=3), "Trainer(): no setting 'epoch' (did you mean 'epochs'?)"),
        (dict(batch=0), "Trainer(): epochs and batch must be at least 1"),
        (dict(micro_batches=0), "Trainer(): accumulate and micro_batches must be at least 1"),
        (dict(validation_split=1.5), "Trainer(validation_split=1.500000): must be within [0, 1)"),
        (dict(schedule="linear"), "Trainer(schedule='linear'): unknown schedule"),
    ]:
        with pytest.raises(tandem.ModelError) as error:
            tandem.Trainer(model, **settings)
        assert message in str(error.value)
    trainer = tandem.Trainer(model, epochs=1)
    x = numpy.zeros((10, 64), numpy.float32)
    label = numpy.zeros(10, numpy.int64)
    for data, message in [
        ({"x": x}, "data: no 'label' (model 'digits_mlp' reads every input and target from the data)"),
        ({"x": x, "label": label, "y": x}, "data: 'y' is neither an input nor a target of model 'digits_mlp'"),
        ({"x": x, "y": label}, "data: 'y' is neither an input nor a target of model 'digits_mlp' (did you mean "
                               "'label'?); its inputs: x; its targets: label"),
        ({"x": x[:, :10], "label": label}, "data['x'] has shape [10, 10], expected [N, 64] (samples first"),
        ({"x": x, "label": label.astype(numpy.float32)}, "data['label'] is float32, but the model takes int64"),
        ({"x": x, "label": label + 10}, "data['label']: sample 0: label 10 is outside [0, 10)"),
        (42, "data: give a dict of arrays by input and target name, a path (CSV or safetensors), or None"),
    ]:
        with pytest.raises(tandem.ModelError) as error:
            trainer.fit(data)
        assert message in str(error.value)
    with pytest.raises(tandem.ModelError, match="batch\\['x'\\] is float32, but the model takes int64|"
                                                "batch\\['label'\\] is float32, but the model takes int64"):
        trainer.step({"x": x, "label": label.astype(numpy.float32)})


def test_internal_error_is_not_a_model_error():
    assert issubclass(tandem.ModelError, ValueError)
    assert issubclass(tandem.InternalError, RuntimeError) and not issubclass(tandem.InternalError, tandem.ModelError)

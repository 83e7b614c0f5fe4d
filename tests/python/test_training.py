"""tandem.Trainer: a run from Python is the CLI's run, bit for bit (losses, validation,
weights; placed too; from arrays or the file; resumed or not), callbacks see every step
and epoch, and a PyTorch model brought over trains as PyTorch trains it."""
import gzip
import json
import subprocess

import numpy
import pytest
import torch
import torch.nn as nn

import tandem
from conftest import CLI, assert_close, config

DIGITS = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"


def summary_of(stdout):
    """`tandem train --json`'s summary: the last of its JSON lines."""
    return json.loads(stdout.strip().splitlines()[-1])


def cli_train(*args, weights=None):
    command = [CLI, "train", config("digits_mlp.yaml"), "--json", *args]
    if weights:
        command += ["--save-weights", str(weights)]
    run = subprocess.run(command, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return summary_of(run.stdout)


def weights_of(path):
    model = tandem.Model.load(config("digits_mlp.yaml"))
    model.load_weights(path)
    return model.state_dict()


def assert_same_run(history, cli, model, weights_path):
    assert len(history) == len(cli["epochs"])
    for mine, theirs in zip(history, cli["epochs"]):
        assert mine["step_losses"] == theirs["step_losses"]  # every step's loss, to the bit
        assert mine["train_loss"] == theirs["train_loss"]
        assert mine["validation_loss"] == theirs["validation_loss"]
        assert mine["validation_accuracy"] == theirs["validation_accuracy"]
    reference = weights_of(weights_path)
    for name, value in model.state_dict().items():
        numpy.testing.assert_array_equal(value, reference[name], err_msg=name)


@pytest.mark.parametrize("shuffle", [True, False])
def test_fit_is_the_cli_run(tmp_path, seed, shuffle):
    s = seed % 1000
    cli = cli_train("--epochs", "2", "--seed", str(s), "--shuffle" if shuffle else "--no-shuffle",
                    weights=tmp_path / "cli.safetensors")
    model = tandem.Model.load(config("digits_mlp.yaml"))
    model.init_parameters(s)  # as `tandem train` draws them
    history = tandem.Trainer(model, epochs=2, seed=s, shuffle=shuffle).fit()
    assert_same_run(history, cli, model, tmp_path / "cli.safetensors")


def test_fit_prints_a_line_per_epoch_unless_told_not_to(capsys, seed):
    model = tandem.Model.load(config("digits_mlp.yaml"))
    model.init_parameters(seed % 1000)
    trainer = tandem.Trainer(model, epochs=3, seed=seed % 1000)
    history = trainer.fit(epochs=2)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2, lines
    for line, epoch in zip(lines, history):
        assert line.startswith("epoch %3d/2  loss %.4f  val loss %.4f  val acc %.2f%%  " % (
            epoch["epoch"], epoch["train_loss"], epoch["validation_loss"], 100 * epoch["validation_accuracy"]))
    trainer.fit(epochs=3, verbose=False)
    assert capsys.readouterr().out == ""


def test_placed_fit_is_the_placed_cli_run(tmp_path):
    cli = cli_train("--epochs", "1", "--shuffle", "--sim-gpus", "2", "--place", "fc1=cuda:0", "--place", "fc3=cuda:1",
                    "--optimizer", "sgd", "--lr", "0.05", weights=tmp_path / "cli.safetensors")
    model = tandem.Model.load(config("digits_mlp.yaml")).place(sim_gpus=2, place={"fc1": "cuda:0", "fc3": "cuda:1"})
    history = tandem.Trainer(model, optimizer="sgd", lr=0.05, epochs=1).fit()
    assert_same_run(history, cli, model, tmp_path / "cli.safetensors")
    totals = model.report(totals=True)
    assert totals["cuda:1"].copies_in > 0 and totals["cuda:0"].busy_ms > 0
    assert [d["device"] for d in cli["devices"]] == [r.device for r in totals]


def test_pipelined_micro_batches_from_python_are_the_cli_run(tmp_path):
    # Trainer(micro_batches=M) is --micro-batches M, bit for bit; and it trains as whole batches
    flags = ["--epochs", "1", "--sim-gpus", "2", "--place", "fc1=cuda:0", "--place", "fc3=cuda:1", "--optimizer", "sgd",
             "--lr", "0.05"]
    cli = cli_train(*flags, "--micro-batches", "3", weights=tmp_path / "cli.safetensors")
    whole = cli_train(*flags, weights=tmp_path / "whole.safetensors")
    assert cli["micro_batches"] == 3 and cli["steps"] == whole["steps"]
    model = tandem.Model.load(config("digits_mlp.yaml")).place(sim_gpus=2, place={"fc1": "cuda:0", "fc3": "cuda:1"})
    history = tandem.Trainer(model, optimizer="sgd", lr=0.05, epochs=1, micro_batches=3).fit(verbose=False)
    assert_same_run(history, cli, model, tmp_path / "cli.safetensors")
    reference = weights_of(tmp_path / "whole.safetensors")
    for name, value in model.state_dict().items():
        assert_close(value, reference[name], 1e-5)


def test_fit_on_arrays_is_the_run_on_the_file(tmp_path):
    with gzip.open(DIGITS, "rt") as f:
        table = numpy.loadtxt(f, delimiter=",")
    x = numpy.ascontiguousarray(table[:, :64], dtype=numpy.float32)
    label = table[:, 64].astype(numpy.int64)
    cli = cli_train("--epochs", "1", "--shuffle", weights=tmp_path / "cli.safetensors")
    model = tandem.Model.load(config("digits_mlp.yaml"))
    history = tandem.Trainer(model, epochs=1).fit({"x": x, "label": torch.from_numpy(label)})
    assert_same_run(history, cli, model, tmp_path / "cli.safetensors")


def test_resumed_run_is_the_uninterrupted_one(tmp_path):
    cli = cli_train("--epochs", "2", "--shuffle", weights=tmp_path / "cli.safetensors")
    first = tandem.Model.load(config("digits_mlp.yaml"))

    def crash(metrics):  # the run stops after its first epoch's checkpoint
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        tandem.Trainer(first, epochs=2).fit(checkpoint=tmp_path / "ckpt.safetensors", on_epoch=crash)
    model = tandem.Model.load(config("digits_mlp.yaml"))
    trainer = tandem.Trainer(model, epochs=2)
    trainer.resume(tmp_path / "ckpt.safetensors")
    assert trainer.epochs_done == 1 and trainer.steps_done == 45
    second = trainer.fit()
    assert second[0]["epoch"] == 2
    assert second[0]["step_losses"] == cli["epochs"][1]["step_losses"]
    reference = weights_of(tmp_path / "cli.safetensors")
    for name, value in model.state_dict().items():
        numpy.testing.assert_array_equal(value, reference[name], err_msg=name)
    # the CLI resumes the Python checkpoint to the same weights
    cli_resumed = subprocess.run([CLI, "train", config("digits_mlp.yaml"), "--epochs", "2", "--shuffle", "--json",
                                  "--resume", str(tmp_path / "ckpt.safetensors"), "--save-weights",
                                  str(tmp_path / "resumed.safetensors")], capture_output=True, text=True)
    assert cli_resumed.returncode == 0, cli_resumed.stderr
    resumed = weights_of(tmp_path / "resumed.safetensors")
    for name, value in model.state_dict().items():
        numpy.testing.assert_array_equal(value, resumed[name], err_msg=name)


def test_fit_again_with_more_epochs_continues(tmp_path):
    # a constant learning rate: the run's length then changes nothing but its end
    text = open(config("digits_mlp.yaml")).read().replace("  schedule: {name: cosine, warmup_steps: 50}\n", "")
    path = tmp_path / "constant_lr.yaml"
    path.write_text(text)
    run = subprocess.run([CLI, "train", str(path), "--json", "--epochs", "2", "--shuffle"], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    cli = summary_of(run.stdout)
    trainer = tandem.Trainer(tandem.Model.load(path))
    first = trainer.fit(epochs=1)
    second = trainer.fit(epochs=2)
    assert [e["epoch"] for e in first + second] == [1, 2] and trainer.steps_done == 90
    assert first[0]["step_losses"] + second[0]["step_losses"] == \
        cli["epochs"][0]["step_losses"] + cli["epochs"][1]["step_losses"]


def test_callbacks_see_every_step_and_epoch():
    model = tandem.Model.load(config("digits_mlp.yaml"))
    trainer = tandem.Trainer(model, epochs=2, batch=64)
    steps, epochs = [], []

    class Recorder(tandem.Callback):
        def on_step(self, metrics):
            steps.append(metrics)

        def on_epoch(self, metrics):
            epochs.append(metrics)

    also = []
    history = trainer.fit(callbacks=[Recorder()], on_epoch=also.append)
    per_epoch = -(-1438 // 64)
    assert len(steps) == 2 * per_epoch and epochs == history == also
    assert [s["step"] for s in steps] == list(range(1, 2 * per_epoch + 1))
    assert [s["loss"] for s in steps] == history[0]["step_losses"] + history[1]["step_losses"]
    assert steps[-1]["epoch"] == 2 and steps[-1]["batch"] == steps[-1]["batches"] == per_epoch
    assert steps[0]["lr"] == pytest.approx(0.005 / 50) and steps[1]["lr"] == pytest.approx(0.005 * 2 / 50)
    assert {"validation_loss", "validation_accuracy", "seconds", "train_loss"} <= set(history[0])
    assert trainer.evaluate()["samples"] == 1797


def test_callback_error_stops_training():
    trainer = tandem.Trainer(tandem.Model.load(config("digits_mlp.yaml")), epochs=3)

    def stop(metrics):
        if metrics["step"] == 5:
            raise KeyError("enough")

    with pytest.raises(KeyError, match="enough"):
        trainer.fit(on_step=stop)
    assert trainer.steps_done == 5


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(17, 4)
        self.net = nn.Sequential(nn.Linear(16 * 4, 32), nn.Tanh(), nn.Linear(32, 10))

    def forward(self, pixels):
        return self.net(self.emb(pixels).flatten(1))


def test_converted_model_trains_as_torch_trains_it(seed):
    torch_model = Classifier()
    pixels = torch.randint(0, 17, (12, 16))
    label = torch.randint(0, 10, (12,))
    model = tandem.from_torch(torch_model, (pixels,), loss=nn.CrossEntropyLoss(), example_targets={"label": label})
    trainer = tandem.Trainer(model, optimizer="sgd", lr=0.1, momentum=0.9)
    optimizer = torch.optim.SGD(torch_model.parameters(), lr=0.1, momentum=0.9)
    for step in range(5):
        batch = (torch.randint(0, 17, (12, 16)), torch.randint(0, 10, (12,)))
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(torch_model(batch[0]), batch[1])
        loss.backward()
        optimizer.step()
        assert trainer.step(pixels=batch[0], label=batch[1]) == pytest.approx(loss.item(), rel=1e-5, abs=1e-6)
    for name, value in torch_model.state_dict().items():
        assert_close(model.state_dict()[name], value.numpy(), 1e-5, name)


def test_keep_best_and_early_stop_as_the_cli(tmp_path, capsys):
    model = tandem.Model.load(config("digits_mlp.yaml"))
    model.init_parameters(0)
    trainer = tandem.Trainer(model, lr=0.05, epochs=12)
    history = trainer.fit(checkpoint=tmp_path / "ck.safetensors", keep_best="val_loss", early_stop=2)
    losses = [e["validation_loss"] for e in history]
    best_epoch = 1 + losses.index(min(losses))
    assert len(history) == 12 or len(history) - best_epoch == 2
    assert trainer.best == {"metric": "val_loss", "value": min(losses), "epoch": best_epoch,
                            "checkpoint": str(tmp_path / "ck.best.safetensors")}
    assert (tmp_path / "ck.best.safetensors").exists() and trainer.epochs_done == len(history)
    out = capsys.readouterr().out
    assert out.count("\nepoch ") + out.startswith("epoch ") == len(history)
    if len(history) < 12:
        assert "early stop: val_loss has not improved for 2 epochs" in out
    # the same run from the CLI: the same epochs, the same best
    cli = subprocess.run([CLI, "train", config("digits_mlp.yaml"), "--lr", "0.05", "--epochs", "12", "--json",
                          "--save", str(tmp_path / "cli.safetensors"), "--keep-best", "val_loss", "--early-stop", "2"],
                         capture_output=True, text=True)
    summary = json.loads(cli.stdout.splitlines()[-1])
    assert [e["validation_loss"] for e in summary["epochs"]] == losses
    with pytest.raises(tandem.ModelError, match="give checkpoint=CKPT"):
        trainer.fit(keep_best="val_loss")


def test_fit_takes_keep_best_and_early_stop_from_the_model_file(tmp_path):
    text = open(config("digits_mlp.yaml")).read()
    path = tmp_path / "digits.yaml"
    path.write_text(text.replace("\ntrain:\n", "\ntrain:\n  keep_best: val_loss\n  early_stop: 2\n"))
    runs = []
    for yaml_path, arguments in [(path, {}), (config("digits_mlp.yaml"), {"keep_best": "val_loss", "early_stop": 2})]:
        model = tandem.Model.load(str(yaml_path))
        model.init_parameters(0)
        trainer = tandem.Trainer(model, lr=0.05, epochs=12)
        history = trainer.fit(checkpoint=tmp_path / ("%d.safetensors" % len(runs)), verbose=False, **arguments)
        runs.append(([e["validation_loss"] for e in history], trainer.best["value"], trainer.best["epoch"]))
    assert runs[0] == runs[1]
    model = tandem.Model.load(str(path))
    with pytest.raises(tandem.ModelError, match="give checkpoint=CKPT"):
        tandem.Trainer(model, epochs=1).fit(verbose=False)

"""`tandem evaluate` (a labelled set's loss and metrics, no training) and `tandem predict` (the
outputs for a file of inputs as CSV, .npy or safetensors), against numpy computing the same
from the same weights; and training data from NumPy's .npz, which trains as its CSV does."""
import json
import subprocess

import numpy
import pytest
from sklearn.metrics import roc_auc_score

from conftest import CLI, config
from test_cli_training_data import CLICKS, checkpoint_epochs, clicks_data, write_csv
from test_cli_user_files import read_safetensors

ORDER = ["dense_1", "click", "user", "dense_0", "dense_2"]  # by the header's names


def tandem(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=600)


@pytest.fixture
def trained(tmp_path, rng):
    """The clicks model trained for an epoch; its weights, and a fresh labelled test set."""
    users = int(rng.integers(20, 50))
    (tmp_path / "m.yaml").write_text(CLICKS % (users, "true"))
    write_csv(tmp_path / "clicks.csv", clicks_data(rng, 64, users), ORDER)
    weights = tmp_path / "w.safetensors"
    run = tandem("train", tmp_path / "m.yaml", "--save-weights", weights)
    assert run.returncode == 0, run.stderr
    test = clicks_data(rng, int(rng.integers(20, 40)), users)
    write_csv(tmp_path / "test.csv", test, ORDER)
    return tmp_path / "m.yaml", weights, test, tmp_path / "test.csv"


def logits(weights, data):
    w = read_safetensors(weights)
    features = numpy.concatenate([w["user_emb.weight"][data["user"]], data["dense"]], axis=1).astype(numpy.float64)
    return features @ w["fc.weight"].T.astype(numpy.float64) + w["fc.bias"]


def test_evaluate_gives_the_loss_and_auc_numpy_gives(trained):
    model, weights, test, path = trained
    run = tandem("evaluate", model, "--weights", weights, "--data", path, "--json")
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    z, y = logits(weights, test)[:, 0], test["click"]
    loss = numpy.mean(numpy.maximum(z, 0) - z * y + numpy.log1p(numpy.exp(-numpy.abs(z))))
    assert got["samples"] == len(y)
    assert abs(got["loss"] - loss) <= 1e-5 * max(1, abs(loss))
    if 0 < y.sum() < len(y):
        assert abs(got["auc"] - roc_auc_score(y, z)) <= 1e-6
    text = tandem("evaluate", model, "--weights", weights, "--data", path, "--sim-gpus", "1", "--place", "*=cuda:0")
    assert text.returncode == 0, text.stderr
    assert "evaluated 'clicks' on %d samples of %s: loss %.6g" % (len(y), path, got["loss"]) in text.stdout


def test_predict_writes_csv_npy_and_safetensors(trained, tmp_path):
    model, weights, test, path = trained
    want = logits(weights, test)
    for name in ["p.csv", "p.npy", "p.safetensors"]:
        out = tmp_path / name
        run = tandem("predict", model, "--weights", weights, "--inputs", path, "--outputs", out)
        assert run.returncode == 0, run.stderr
        if name.endswith(".csv"):
            lines = out.read_text().splitlines()
            assert lines[0] == "fc"
            got = numpy.array([[float(v)] for v in lines[1:]])
        elif name.endswith(".npy"):
            got = numpy.load(out)
        else:
            got = read_safetensors(out)["fc"]
        assert got.shape == want.shape, name
        assert numpy.abs(got - want).max() <= 1e-5 * max(1, numpy.abs(want).max()), name


def test_predict_a_batch_at_a_time_placed_gives_the_same_outputs(trained, tmp_path):
    """--batch N: the file in batches of N, the next submitted while the simulated GPU works on
    this one; against numpy, and within float32's rounding of the one-batch prediction."""
    model, weights, test, path = trained
    want = logits(weights, test)
    out = tmp_path / "p.npy"
    placed = ["--sim-gpus", "1", "--place", "fc=cuda:0", "--report"]
    run = tandem("predict", model, "--weights", weights, "--inputs", path, "--outputs", out, "--batch", 7, *placed)
    assert run.returncode == 0, run.stderr
    got = numpy.load(out)
    assert got.shape == want.shape
    assert numpy.abs(got - want).max() <= 1e-5 * max(1, numpy.abs(want).max())
    assert "cuda:0" in run.stdout, run.stdout  # the report covers the batches
    for bad in ["0", "-3", "x"]:
        run = tandem("predict", model, "--weights", weights, "--inputs", path, "--outputs", out, "--batch", bad)
        assert run.returncode == 2 and "--batch" in run.stderr, run.stderr


def test_mistakes_are_refused_with_what_to_do(trained, tmp_path):
    model, weights, test, path = trained
    run = tandem("predict", model, "--weights", weights, "--inputs", path, "--outputs", tmp_path / "p.txt")
    assert run.returncode == 2 and "end it in .safetensors" in run.stderr, run.stderr
    assert not (tmp_path / "p.txt").exists()
    (tmp_path / "noloss.yaml").write_text(model.read_text().split("loss:")[0])
    run = tandem("evaluate", tmp_path / "noloss.yaml", "--weights", weights, "--data", path)
    assert run.returncode == 2 and "has no loss: section" in run.stderr, run.stderr
    run = tandem("evaluate", model, "--weights", weights, "--data", path, "--sim-gpus", "0", "--place", "*=cuda:0")
    assert run.returncode == 2, run.stderr


def test_npz_training_data_trains_as_its_csv(tmp_path, rng):
    users = int(rng.integers(20, 50))
    (tmp_path / "m.yaml").write_text(CLICKS % (users, "true"))
    data = clicks_data(rng, 40, users)
    write_csv(tmp_path / "clicks.csv", data, ORDER)
    numpy.savez(tmp_path / "clicks.npz", user=data["user"].astype(numpy.int32), dense=data["dense"],
                click=data["click"].reshape(-1, 1))
    saved = {}
    for name in ["clicks.csv", "clicks.npz"]:
        out = tmp_path / (name + ".safetensors")
        run = tandem("train", tmp_path / "m.yaml", "--data", tmp_path / name, "--save-weights", out)
        assert run.returncode == 0, run.stderr
        saved[name] = out.read_bytes()
    assert saved["clicks.csv"] == saved["clicks.npz"]
    numpy.savez(tmp_path / "short.npz", user=data["user"], dense=data["dense"])
    run = tandem("train", tmp_path / "m.yaml", "--data", tmp_path / "short.npz")
    assert run.returncode == 2 and "no array 'click' (the file holds: dense, user)" in run.stderr, run.stderr


def test_keep_best_and_early_stop(tmp_path):
    ckpt = tmp_path / "ckpt.safetensors"
    patience = 2
    # a large learning rate: the validation loss goes up and down, as an overfitting run's
    run = tandem("train", config("digits_mlp.yaml"), "--epochs", 12, "--lr", 0.05, "--save", ckpt, "--json",
                 "--keep-best", "val_loss", "--early-stop", patience)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.splitlines()[-1])
    losses = [e["validation_loss"] for e in summary["epochs"]]
    # what Keras's EarlyStopping(patience) and ModelCheckpoint(save_best_only) do with them
    best, best_epoch, stop = None, None, None
    for epoch, loss in enumerate(losses, 1):
        if best is None or loss < best:
            best, best_epoch = loss, epoch
        if epoch - best_epoch >= patience and epoch < 12:
            stop = epoch
            break
    assert len(losses) == (stop or 12)
    assert summary.get("stopped_early_at_epoch") == stop
    assert summary["best"] == {"metric": "val_loss", "value": best, "epoch": best_epoch,
                               "checkpoint": str(tmp_path / "ckpt.best.safetensors")}
    assert checkpoint_epochs(tmp_path / "ckpt.best.safetensors") == best_epoch
    assert checkpoint_epochs(ckpt) == len(losses)


def test_keep_best_and_early_stop_mistakes(tmp_path):
    model = config("digits_mlp.yaml")
    for args, message in [
        (["--keep-best", "val_auc", "--save", tmp_path / "c.safetensors"],
         "--keep-best val_auc: the model's loss cross_entropy gives no AUC"),
        (["--keep-best", "val_acc", "--save", tmp_path / "c.safetensors"], "the metrics are val_loss"),
        (["--keep-best", "val_loss"], "give --save CKPT"),
        (["--early-stop", 2, "--validation-split", 0], "--early-stop watches the validation loss, and the run has no "
                                                      "validation set: give --validation-split F"),
    ]:
        run = tandem("train", model, "--epochs", 1, *args)
        assert run.returncode == 2 and message in run.stderr, (args, run.stderr)
        assert "epoch   1/" not in run.stdout


def test_keep_best_and_early_stop_from_the_model_file(tmp_path):
    """train: keep_best and early_stop do what the flags do; the flags override them."""
    text = open(config("digits_mlp.yaml")).read()
    assert "\ntrain:\n" in text
    model = tmp_path / "digits.yaml"
    model.write_text(text.replace("\ntrain:\n", "\ntrain:\n  keep_best: val_loss\n  early_stop: 2\n"))
    runs = {}
    for name, path, flags in [("flags", config("digits_mlp.yaml"), ["--keep-best", "val_loss", "--early-stop", 2]),
                              ("file", model, [])]:
        ckpt = tmp_path / ("%s.safetensors" % name)
        run = tandem("train", path, "--epochs", 12, "--lr", 0.05, "--save", ckpt, "--json", *flags)
        assert run.returncode == 0, run.stderr
        summary = json.loads(run.stdout.splitlines()[-1])
        runs[name] = summary
        assert summary["best"]["checkpoint"] == str(tmp_path / ("%s.best.safetensors" % name))
        assert checkpoint_epochs(tmp_path / ("%s.best.safetensors" % name)) == summary["best"]["epoch"]
    assert [e["validation_loss"] for e in runs["file"]["epochs"]] == [e["validation_loss"] for e in runs["flags"]["epochs"]]
    assert runs["file"].get("stopped_early_at_epoch") == runs["flags"].get("stopped_early_at_epoch")
    assert runs["file"]["best"]["value"] == runs["flags"]["best"]["value"]
    # the flag overrides the file: a patience no 3-epoch run reaches
    run = tandem("train", model, "--epochs", 3, "--lr", 0.05, "--save", tmp_path / "c.safetensors", "--json",
                 "--early-stop", 10)
    assert run.returncode == 0 and "stopped_early_at_epoch" not in json.loads(run.stdout.splitlines()[-1]), run.stderr
    # the file's mistakes: at load with the place, and keep_best without --save
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("\ntrain:\n", "\ntrain:\n  keep_best: val_acc\n"))
    run = tandem("train", bad, "--epochs", 1)
    assert run.returncode == 2 and "bad.yaml:" in run.stderr and "keep_best 'val_acc' is not a validation metric" in \
        run.stderr and "val_accuracy" in run.stderr, run.stderr
    run = tandem("train", model, "--epochs", 1)
    assert run.returncode == 2 and "the model's train: keep_best keeps the best epoch's checkpoint" in run.stderr, \
        run.stderr

"""`tandem train` on a user's own files, as a user gets them wrong and right: CSV columns read
by the header's names in any order, ids checked against their table when the data loads, a
log that keeps up with the run in a file, and Ctrl-C that says where the run stopped and how
to resume it, leaving no temporary file (docs/training.md)."""
import os
import re
import signal
import subprocess
import time

import numpy
import pytest

from conftest import CLI, config

CLICKS = """name: clicks
inputs:
  user: {shape: [batch], dtype: int64}
  dense: {shape: [batch, 3]}
targets:
  click: {shape: [batch, 1]}
layers:
  - {name: user_emb, op: embedding, inputs: user, num_embeddings: %d, embedding_dim: 4}
  - {name: features, op: cat, inputs: [user_emb, dense], dim: 1}
  - {name: fc, op: linear, in_features: 7, out_features: 1}
outputs: [fc]
loss: {op: binary_cross_entropy_with_logits, input: fc, target: click}
train:
  epochs: 1
  batch: 8
  shuffle: false
  optimizer: {name: sgd, lr: 0.1}
  data: {path: clicks.csv, header: %s}
"""


def clicks_data(rng, samples, users):
    return {"user": rng.integers(0, users, samples), "dense": rng.standard_normal((samples, 3)).astype(numpy.float32),
            "click": rng.integers(0, 2, samples).astype(numpy.float32)}


def write_csv(path, data, order, header=True, names=None):
    """Columns in `order` (names: user, dense_0.., click), with or without a header line
    (giving them `names`, by default their own)."""
    cells = {"user": data["user"], "click": data["click"]}
    for j in range(3):
        cells["dense_%d" % j] = data["dense"][:, j]
    with open(path, "w") as f:
        if header:
            f.write(",".join(names or order) + "\n")
        for i in range(len(data["user"])):
            f.write(",".join("%.9g" % cells[name][i] for name in order) + "\n")


def train(*args, cwd=None):
    return subprocess.run([CLI, "train", *map(str, args)], capture_output=True, text=True, timeout=600, cwd=cwd)


def test_csv_columns_by_header_name_train_as_in_order(tmp_path, rng):
    users = int(rng.integers(20, 50))
    data = clicks_data(rng, int(rng.integers(30, 60)), users)
    weights = {}
    for header, order in [("false", ["user", "dense_0", "dense_1", "dense_2", "click"]),
                          ("true", ["click", "dense_2", "user", "dense_0", "dense_1"])]:
        folder = tmp_path / header
        folder.mkdir()
        (folder / "m.yaml").write_text(CLICKS % (users, header))
        write_csv(folder / "clicks.csv", data, order, header=header == "true")
        run = train(folder / "m.yaml", "--save-weights", folder / "w.safetensors", "--seed", 3)
        assert run.returncode == 0, run.stderr
        weights[header] = (folder / "w.safetensors").read_bytes()
    assert weights["true"] == weights["false"]  # the same samples, bit for bit


def test_a_header_that_does_not_name_the_inputs(tmp_path, rng):
    users = 30
    (tmp_path / "m.yaml").write_text(CLICKS % (users, "true"))
    order = ["user", "dense_0", "dense_1", "dense_2", "click"]
    write_csv(tmp_path / "clicks.csv", clicks_data(rng, 10, users), order, names=order[:4] + ["clicked"])
    run = train(tmp_path / "m.yaml")
    assert run.returncode == 2
    assert "clicks.csv:1: the header does not name 'click'; it has 'clicked', which no input or target is named" \
        in run.stderr, run.stderr


def test_a_short_row_and_a_header_without_header_true(tmp_path, rng):
    users = 30
    (tmp_path / "m.yaml").write_text(CLICKS % (users, "false"))
    write_csv(tmp_path / "clicks.csv", clicks_data(rng, 10, users), ["user", "dense_0", "dense_1", "dense_2"],
              header=False)
    run = train(tmp_path / "m.yaml")
    assert run.returncode == 2
    assert "clicks.csv:1: expected 5 columns, found 4; no value for 'click' (column 4). Without a header" in run.stderr
    assert "header: true" in run.stderr and "columns:" in run.stderr
    write_csv(tmp_path / "clicks.csv", clicks_data(rng, 10, users), ["user", "dense_0", "dense_1", "dense_2", "click"])
    run = train(tmp_path / "m.yaml")
    assert run.returncode == 2
    assert "clicks.csv:1: 'user,dense_0,dense_1,dense_2,click' is not numbers but looks like a header line: give " \
           "header: true" in run.stderr, run.stderr


def test_ids_outside_their_table_are_refused_when_the_data_loads(tmp_path, rng):
    users = int(rng.integers(20, 50))
    (tmp_path / "m.yaml").write_text(CLICKS % (users, "true"))
    data = clicks_data(rng, 40, users)
    bad = int(rng.integers(1, 40))
    data["user"][bad] = users + int(rng.integers(0, 5))
    write_csv(tmp_path / "clicks.csv", data, ["dense_0", "dense_1", "dense_2", "user", "click"])
    run = train(tmp_path / "m.yaml")
    assert run.returncode == 2
    want = "clicks.csv:%d: column 3: input 'user' id %d is outside [0, %d), the rows of the table of layer " \
           "'user_emb' (embedding, num_embeddings %d)" % (bad + 2, data["user"][bad], users, users)
    assert want in run.stderr, run.stderr
    assert "training '" not in run.stdout  # found before training started


def checkpoint_epochs(path):
    """The epochs a checkpoint holds, from its metadata, or 0 while there is none."""
    if not os.path.exists(path):
        return 0
    import json
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return int(json.loads(f.read(n))["__metadata__"]["epoch"])


def test_ctrl_c_says_where_it_stopped_and_how_to_resume(tmp_path):
    ckpt = tmp_path / "ckpt.safetensors"
    log = tmp_path / "train.log"
    stale = tmp_path / "ckpt.safetensors.tmp-4194000"  # a killed writer's, whose pid is gone
    stale.write_bytes(b"half a checkpoint")
    with open(log, "w") as out:
        proc = subprocess.Popen([CLI, "train", config("digits_mlp.yaml"), "--epochs", "100000", "--save", str(ckpt)],
                                stdout=out, stderr=subprocess.PIPE, text=True)
        try:
            # the log in a file keeps up: each epoch's line is there as the epoch ends, not when a
            # buffer fills (each is printed once its checkpoint is written)
            deadline = time.time() + 120
            while not re.search(r"^epoch +2/100000 ", log.read_text(), re.M) and time.time() < deadline:
                time.sleep(0.05)
            assert checkpoint_epochs(ckpt) >= 2, log.read_text()
            assert not stale.exists()  # removed when the run started
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == -signal.SIGINT  # ended by the signal: a shell's status 130
    m = re.search(r"interrupted \(SIGINT\) at step (\d+), in epoch (\d+) of 100000; the last checkpoint is epoch (\d+) "
                  r"at (\S+); resume with:\n  (.*)\n", err)
    assert m, err
    epochs = int(m.group(3))
    assert m.group(4) == str(ckpt) and epochs >= 2
    assert epochs == checkpoint_epochs(ckpt) or epochs + 1 == checkpoint_epochs(ckpt)  # one written as it stopped
    assert int(m.group(1)) >= 45 * epochs and int(m.group(2)) in (epochs, epochs + 1)
    command = m.group(5)
    assert command.endswith("--resume " + str(ckpt)) and " --save " not in command
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]
    # the printed command resumes the run (here for one epoch more) from what the file holds:
    # the message's epoch, or one more when a checkpoint was written as the signal came (the
    # message is updated after each write; in that window it still names the one before)
    saved = checkpoint_epochs(ckpt)
    resumed = subprocess.run(["sh", "-c", command.replace("--epochs 100000", "--epochs %d" % (saved + 1))],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed at epoch %d" % saved in resumed.stdout and checkpoint_epochs(ckpt) == saved + 1
    # resumed again with nothing left: said, with --epochs
    again = train(config("digits_mlp.yaml"), "--epochs", saved + 1, "--resume", ckpt)
    assert again.returncode == 0, again.stderr
    assert ("note: nothing left to train: the checkpoint %s has trained %d epochs" % (ckpt, saved + 1)) in again.stdout
    assert "give --epochs N with N above %d to train further" % (saved + 1) in again.stdout

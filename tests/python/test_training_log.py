"""`tandem train` where no terminal watches (docs/training.md, "Following a run"): a line per
epoch on a pipe, JSON lines as the run goes with --json (the summary last), and with
--log-dir a metrics.csv and a TensorBoard event file holding the same values, read here by
an independent reader (record framing, masked CRC-32C, the Event protobuf decoded by hand:
the tensorboard package is not installed)."""
import csv
import json
import struct
import subprocess

import pytest

from conftest import CLI, config

EPOCHS = 3
STEPS_PER_EPOCH = 45  # digits_mlp: 1438 training samples at batch 32


def train(*args, epochs=EPOCHS):
    return subprocess.run([CLI, "train", config("digits_mlp.yaml"), "--epochs", str(epochs), "--no-shuffle", *args],
                          capture_output=True, text=True, timeout=600)


def json_lines(stdout):
    return [json.loads(line) for line in stdout.splitlines()]


# ---- an independent reader of TensorBoard's event files ----------------------------------

def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def varint(data, i):
    value, shift = 0, 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def fields(data):
    """(field number, value) of a protobuf message: ints, doubles, floats and bytes."""
    i, out = 0, []
    while i < len(data):
        key, i = varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(data, i)
        elif wire == 1:
            value, i = struct.unpack_from("<d", data, i)[0], i + 8
        elif wire == 5:
            value, i = struct.unpack_from("<f", data, i)[0], i + 4
        elif wire == 2:
            n, i = varint(data, i)
            value, i = data[i:i + n], i + n
        else:
            raise AssertionError("wire type %d" % wire)
        out.append((number, value))
    return out


def read_events(path):
    """Every event of a TFRecord file as a dict: wall_time, step, file_version or scalars."""
    data, i, events = path.read_bytes(), 0, []
    while i < len(data):
        header = data[i:i + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack_from("<I", data, i + 8)
        assert length_crc == masked(crc32c(header)), "the length's CRC of the record at byte %d" % i
        body = data[i + 12:i + 12 + length]
        (body_crc,) = struct.unpack_from("<I", data, i + 12 + length)
        assert body_crc == masked(crc32c(body)), "the data's CRC of the record at byte %d" % i
        i += 12 + length + 4
        event = {"scalars": {}}
        for number, value in fields(body):
            if number == 1:
                event["wall_time"] = value
            elif number == 2:
                event["step"] = value
            elif number == 3:
                event["file_version"] = value.decode()
            elif number == 5:
                for _, summary_value in fields(value):
                    v = dict(fields(summary_value))
                    event["scalars"][v[1].decode()] = v[2]
        events.append(event)
    return events


def test_crc32c_of_the_reader_is_castagnolis():
    assert crc32c(b"123456789") == 0xE3069283


# ---- the tests ---------------------------------------------------------------------------

def test_a_piped_run_prints_a_line_per_epoch_and_no_progress_bar():
    run = train("--no-save")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "\r" not in run.stdout
    lines = run.stdout.splitlines()
    assert [line.split()[1] for line in lines if line.startswith("epoch")] == ["%d/%d" % (e, EPOCHS)
                                                                              for e in range(1, EPOCHS + 1)]
    assert lines[-1].startswith("done: %d steps" % (EPOCHS * STEPS_PER_EPOCH))


def test_a_piped_run_with_log_every_prints_step_lines_too():
    run = train("--no-save", "--log-every", "20")
    assert run.returncode == 0, run.stdout + run.stderr
    steps = [line for line in run.stdout.splitlines() if " step " in line]
    # steps 20 and 40 of the first epoch; 60, 80 (15 and 35 of the second); 100, 120
    assert [line.split()[3] for line in steps] == ["20/45", "40/45", "15/45", "35/45", "10/45", "30/45"], steps
    assert all("loss " in line and " lr " in line and "samples/s" in line for line in steps)


def test_json_lines_come_as_the_run_goes_and_end_with_the_summary():
    run = train("--no-save", "--json", "--log-every", "7")
    assert run.returncode == 0, run.stdout + run.stderr
    records = json_lines(run.stdout)
    summary = records[-1]
    assert summary["event"] == "summary" and summary["steps"] == EPOCHS * STEPS_PER_EPOCH
    steps = [r for r in records if r["event"] == "step"]
    epochs = [r for r in records if r["event"] == "epoch"]
    assert [r["step"] for r in steps] == list(range(7, EPOCHS * STEPS_PER_EPOCH + 1, 7))
    # each step record's loss is that step's, as the summary lists them
    step_losses = [loss for e in summary["epochs"] for loss in e["step_losses"]]
    for r in steps:
        assert r["loss"] == step_losses[r["step"] - 1]
        assert r["epoch"] == (r["step"] - 1) // STEPS_PER_EPOCH + 1
        assert r["lr"] > 0 and r["samples_per_second"] > 0
    assert [r["epoch"] for r in epochs] == list(range(1, EPOCHS + 1))
    assert [r["step"] for r in epochs] == [STEPS_PER_EPOCH * e for e in range(1, EPOCHS + 1)]
    for r, e in zip(epochs, summary["epochs"]):
        assert "step_losses" not in r
        for key in ("train_loss", "validation_loss", "validation_accuracy"):
            assert r[key] == e[key]
    # in the order they happened: every epoch record after its steps
    order = [r["step"] for r in records[:-1]]
    assert order == sorted(order)


def test_log_dir_writes_csv_and_tensorboard_events_with_the_json_lines_values(tmp_path):
    log_dir = tmp_path / "logs" / "run1"  # created, with its parent
    run = train("--no-save", "--json", "--log-every", "10", "--log-dir", str(log_dir))
    assert run.returncode == 0, run.stdout + run.stderr
    records = json_lines(run.stdout)[:-1]
    with open(log_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(records)
    for row, r in zip(rows, records):
        assert row["event"] == r["event"] and int(row["step"]) == r["step"] and int(row["epoch"]) == r["epoch"]
        for key in ("loss", "lr", "samples_per_second", "train_loss", "validation_loss", "validation_accuracy"):
            if key in r:
                assert float(row[key]) == r[key], key
            else:
                assert row[key] == "", key

    [events_file] = list(log_dir.glob("events.out.tfevents.*"))
    events = read_events(events_file)
    assert events[0]["file_version"] == "brain.Event:2"
    assert len(events) == 1 + len(records)
    for event, r in zip(events[1:], records):
        assert event["step"] == r["step"] and event["wall_time"] > 1.6e9
        if r["event"] == "step":
            want = {"train/loss": r["loss"], "train/lr": r["lr"], "train/samples_per_second": r["samples_per_second"]}
        else:
            want = {"epoch/" + key: r[key]
                    for key in ("train_loss", "validation_loss", "validation_accuracy", "samples_per_second")}
        assert set(event["scalars"]) == set(want)
        for tag, value in want.items():  # float32 in the file
            assert event["scalars"][tag] == struct.unpack("<f", struct.pack("<f", value))[0], tag


def test_a_resumed_run_goes_on_with_its_metrics_csv(tmp_path):
    ckpt = str(tmp_path / "ckpt.safetensors")
    first = train("--save", ckpt, "--log-every", "20", "--log-dir", str(tmp_path), epochs=1)
    assert first.returncode == 0, first.stdout + first.stderr
    second = train("--resume", ckpt, "--log-every", "20", "--log-dir", str(tmp_path), epochs=2)
    assert second.returncode == 0, second.stdout + second.stderr
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["event"], int(r["step"])) for r in rows] == [("step", 20), ("step", 40), ("epoch", 45),
                                                            ("step", 60), ("step", 80), ("epoch", 90)]
    # a new run into the same directory starts the file afresh
    third = train("--no-save", "--log-every", "20", "--log-dir", str(tmp_path), epochs=1)
    assert third.returncode == 0, third.stdout + third.stderr
    with open(tmp_path / "metrics.csv", newline="") as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == [20, 40, 45]


@pytest.mark.parametrize("where, why", [("file", "is a file, not a directory"), ("file/sub", "is not a directory")])
def test_a_log_dir_that_cannot_be_one_is_refused_before_any_work(tmp_path, where, why):
    (tmp_path / "file").write_text("not a directory")
    path = str(tmp_path / where)
    run = train("--no-save", "--log-dir", path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "--log-dir '%s'" % path in run.stderr and why in run.stderr
    assert "training" not in run.stdout  # nothing started


def test_log_every_below_one_is_refused():
    run = train("--no-save", "--log-every", "0")
    assert run.returncode == 2 and "--log-every" in run.stderr


@pytest.mark.parametrize("flag, value", [("--log-dir", "logs"), ("--log-every", "5")])
def test_a_log_flag_with_bench_steps_is_refused(tmp_path, flag, value):
    run = train("--bench-steps", "2", flag, str(tmp_path / value) if flag == "--log-dir" else value)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "%s follows a training run; --bench-steps times steps and logs none" % flag in run.stderr
    assert not (tmp_path / "logs").exists()


BIG_MODEL = """name: big
inputs:
  x: {shape: [batch, 4096]}
layers:
  - {name: a, op: linear, in_features: 4096, out_features: 4096}
  - {name: b, op: linear, in_features: 4096, out_features: 4096}
"""


def test_a_slow_step_before_the_work_says_so_and_a_fast_one_says_nothing(tmp_path):
    model = tmp_path / "big.yaml"
    model.write_text(BIG_MODEL)
    weights = tmp_path / "big.safetensors"
    # 33.6 M parameters: initialising them and loading their 128 MiB take tens of milliseconds
    env = {"TANDEM_NOTE_AFTER": "0.002", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    made = subprocess.run([CLI, "run", str(model), "--batch", "1", "--save-weights", str(weights)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert made.returncode == 0, made.stderr
    assert "note: initialising the weights of 'big' takes a while" in made.stderr
    assert "note: initialising the weights of 'big': done in " in made.stderr
    loaded = subprocess.run([CLI, "run", str(model), "--batch", "1", "--weights", str(weights)], capture_output=True,
                            text=True, timeout=300, env=env)
    assert loaded.returncode == 0, loaded.stderr
    assert "note: loading weights '%s' (128.0 MiB) takes a while" % weights in loaded.stderr
    # by default (2 seconds) the digits run is too quick for any note
    quick = train("--no-save", epochs=1)
    assert quick.returncode == 0 and "note:" not in quick.stderr, quick.stderr

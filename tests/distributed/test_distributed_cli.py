"""`mpirun -np N tandem train` end to end, run by ctest under /usr/bin/python3 -m pytest.

The oracle is one process of the same CLI at the global batch: N ranks at batch B with
--drop-last must end with its weights (rank 0 writes them), its step losses and its
validation metrics. Then the ways a job ends: a rank with another model, a killed rank and
a stopped rank, each within its deadline, each named.
"""
import json
import os
import signal
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

TANDEM = os.environ["TANDEM_CLI"]
MPIRUN = [os.environ.get("TANDEM_MPIRUN", "mpirun"), "--oversubscribe", "--allow-run-as-root", "--bind-to", "none"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1")

MODEL = """name: cli_ddp
inputs:
  x: {{shape: [batch, 12]}}
targets:
  label: {{shape: [batch], dtype: int64}}
layers:
  - {{name: fc1, op: linear, in_features: 12, out_features: {hidden}}}
  - {{name: act, op: relu}}
  - {{name: fc2, op: linear, in_features: {hidden}, out_features: 4}}
loss: {{op: cross_entropy, input: fc2, target: label}}
train:
  batch: 4
  seed: 3
  validation_split: 0.2
  optimizer: {{name: {optimizer}, lr: {lr}}}
"""


def read_safetensors(path):
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + start:8 + n + end], dtype=np.float32).reshape(info["shape"])
    return out


def max_relative_error(got, want):
    assert got.keys() == want.keys()
    return max(float(np.max(np.abs(got[k] - want[k])) / max(1e-6, float(np.max(np.abs(want[k]))))) for k in want)


def relative_distance(got, want):
    """||got - want|| / ||want|| over all the tensors together: how far a rounding moved the
    weights as a whole (a one-element bias near zero can move by more than 1% of itself)."""
    assert got.keys() == want.keys()
    diff = sum(float(np.sum((got[k].astype(np.float64) - want[k]) ** 2)) for k in want)
    norm = sum(float(np.sum(want[k].astype(np.float64) ** 2)) for k in want)
    return (diff / norm) ** 0.5


@pytest.fixture
def scratch(tmp_path):
    rng = np.random.default_rng()
    seed = int(rng.integers(1 << 30))
    print("data seed", seed)
    rng = np.random.default_rng(seed)
    data = tmp_path / "data.csv"
    # 300 samples: 240 to train (20 steps of global batch 12 for 3 ranks of 4), 60 to validate
    x = rng.normal(size=(300, 12))
    label = (x[:, 0] > 0).astype(int) + 2 * (x[:, 1] > 0).astype(int)
    np.savetxt(data, np.column_stack([x, label]), delimiter=",", fmt=["%.6f"] * 12 + ["%d"])
    return tmp_path, data


def write_model(directory, name="model", hidden=16, optimizer="sgd", lr=0.05):
    path = directory / f"{name}.yaml"
    path.write_text(MODEL.format(hidden=hidden, optimizer=optimizer, lr=lr))
    return path


def train(ranks, model, data, *flags, timeout=120, json_output=True):
    command = ([*MPIRUN, "-np", str(ranks)] if ranks > 1 else []) + [TANDEM, "train", str(model), "--data", str(data),
                                                                       *(["--json"] if json_output else []), *flags]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=ENV)
    return done


def result(done):
    assert done.returncode == 0, done.stdout + done.stderr
    # JSON lines as the run goes, the summary last (what mpirun adds comes before)
    return json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("optimizer,lr", [("sgd", 0.05), ("adam", 0.003)])
@pytest.mark.parametrize("shuffle", ["--shuffle", "--no-shuffle"])
def test_ranks_at_batch_b_train_as_one_process_at_n_times_b(scratch, ranks, optimizer, lr, shuffle):
    directory, data = scratch
    model = write_model(directory, optimizer=optimizer, lr=lr)
    flags = [shuffle, "--drop-last", "--epochs", "2"]
    alone = result(train(1, model, data, "--batch", str(4 * ranks), "--save-weights", str(directory / "one.st"), *flags))
    together = result(train(ranks, model, data, "--batch", "4", "--save-weights", str(directory / "n.st"), *flags))
    assert together["ranks"] == ranks and together["global_batch"] == 4 * ranks
    assert together["steps"] == alone["steps"] > 0
    error = max_relative_error(read_safetensors(directory / "n.st"), read_safetensors(directory / "one.st"))
    assert error <= 1e-5
    for a, b in zip(alone["epochs"], together["epochs"]):
        assert np.allclose(a["step_losses"], b["step_losses"], rtol=1e-5, atol=0)
        # the whole validation set, each sample once, on whichever rank
        assert b["validation_loss"] == pytest.approx(a["validation_loss"], rel=1e-5)
        assert b["validation_accuracy"] == pytest.approx(a["validation_accuracy"], abs=1 / 60 + 1e-9)


def test_ranks_seeded_differently_train_as_ranks_seeded_alike(scratch):
    # DDP users seed each rank: rank 0's broadcast gives the start, rank 0's seed the data's
    # order and split, so the run is the one with every rank at rank 0's seed, bit for bit
    directory, data = scratch
    model = write_model(directory)
    rng = np.random.default_rng()
    first = int(rng.integers(0, 1 << 20))
    seeds = [first, first + 1 + int(rng.integers(0, 1000))]
    flags = ["--shuffle", "--epochs", "2", "--json"]
    alike = result(train(2, model, data, "--seed", str(seeds[0]), "--save-weights", str(directory / "alike.st"), *flags))
    command = [*MPIRUN]
    for rank, seed in enumerate(seeds):
        command += ([":"] if rank else []) + ["-np", "1", TANDEM, "train", str(model), "--data", str(data), "--seed",
                                              str(seed), "--save-weights", str(directory / "apart.st"), *flags]
    apart = subprocess.run(command, capture_output=True, text=True, timeout=120, env=ENV)
    summary = result(apart)
    assert [e["step_losses"] for e in summary["epochs"]] == [e["step_losses"] for e in alike["epochs"]]
    assert read_safetensors(directory / "apart.st").keys() == read_safetensors(directory / "alike.st").keys()
    assert max_relative_error(read_safetensors(directory / "apart.st"), read_safetensors(directory / "alike.st")) == 0
    assert ("the ranks were given different seeds (rank 0: %d, rank 1: %d): rank 0's initial weights are broadcast"
            % tuple(seeds)) in " ".join(summary.get("notes", [])), summary.get("notes")


def test_accumulation_trains_as_the_larger_batch_and_the_log_says_the_global_batch(scratch):
    directory, data = scratch
    model = write_model(directory, optimizer="adam", lr=0.003)
    flags = ["--no-shuffle", "--drop-last", "--epochs", "1"]
    alone = result(train(1, model, data, "--batch", "24", "--save-weights", str(directory / "one.st"), *flags))
    accumulated = result(train(2, model, data, "--batch", "4", "--accumulate", "3", "--save-weights",
                               str(directory / "acc.st"), *flags))
    assert accumulated["global_batch"] == 24 and accumulated["steps"] == alone["steps"]
    assert max_relative_error(read_safetensors(directory / "acc.st"), read_safetensors(directory / "one.st")) <= 1e-5
    text = train(2, model, data, "--batch", "4", "--accumulate", "3", "--epochs", "1", json_output=False)
    assert text.returncode == 0, text.stderr
    assert "batch 4 x accumulate 3 per rank x 2 ranks = global batch 24" in text.stdout
    # rank 0 alone speaks
    assert text.stdout.count("training 'cli_ddp'") == 1


def test_pipelined_micro_batches_under_mpirun_train_as_one_process(scratch):
    # each rank's batch of 12 pipelined in 3 micro-batches over the cpu and a simulated GPU:
    # the one process at 24 with whole batches on the cpu alone
    directory, data = scratch
    model = write_model(directory, optimizer="sgd", lr=0.05)
    flags = ["--no-shuffle", "--drop-last", "--epochs", "1"]
    alone = result(train(1, model, data, "--batch", "24", "--save-weights", str(directory / "one.st"), *flags))
    split = ["--sim-gpus", "1", "--place", "fc1=cpu", "--place", "fc2=cuda:0"]
    done = train(2, model, data, "--batch", "12", "--micro-batches", "3", *split, "--save-weights",
                 str(directory / "pipelined.st"), *flags)
    pipelined = result(done)
    assert pipelined["micro_batches"] == 3 and pipelined["steps"] == alone["steps"]
    assert max_relative_error(read_safetensors(directory / "pipelined.st"), read_safetensors(directory / "one.st")) <= 1e-5
    text = train(2, model, data, "--batch", "12", "--micro-batches", "3", *split, *flags, json_output=False)
    assert text.returncode == 0, text.stderr
    assert "batch 12 in 3 pipelined micro-batches per rank x 2 ranks = global batch 24" in text.stdout


def test_rank_0_alone_writes_the_json_lines_and_the_log_dir(scratch):
    directory, data = scratch
    model = write_model(directory)
    logs = directory / "logs"
    done = train(2, model, data, "--no-shuffle", "--drop-last", "--batch", "4", "--epochs", "2", "--log-every", "1",
                 "--log-dir", str(logs))
    summary = result(done)
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")][:-1]
    steps = [r["step"] for r in records if r["event"] == "step"]
    assert steps == list(range(1, summary["steps"] + 1))  # each step once: rank 1 writes none
    assert [r["epoch"] for r in records if r["event"] == "epoch"] == [1, 2]
    # the epoch records are the whole job's, as the summary's
    assert [r["train_loss"] for r in records if r["event"] == "epoch"] == [e["train_loss"] for e in summary["epochs"]]
    assert len((logs / "metrics.csv").read_text().splitlines()) == 1 + len(records)
    assert len(list(logs.glob("events.out.tfevents.*"))) == 1


def test_resume_restores_every_rank_from_rank_0s_checkpoint(scratch):
    directory, data = scratch
    model = write_model(directory, optimizer="adam", lr=0.003)
    flags = ["--no-shuffle", "--drop-last", "--batch", "4"]
    result(train(2, model, data, "--epochs", "2", "--save-weights", str(directory / "whole.st"), *flags))
    result(train(2, model, data, "--epochs", "1", "--save", str(directory / "ck.st"), *flags))
    resumed = result(train(2, model, data, "--epochs", "2", "--resume", str(directory / "ck.st"), "--save-weights",
                           str(directory / "resumed.st"), *flags))
    assert len(resumed["epochs"]) == 1
    assert max_relative_error(read_safetensors(directory / "resumed.st"), read_safetensors(directory / "whole.st")) == 0
    # another rank count would shard the data otherwise: refused, once, exit 2
    other = train(3, model, data, "--epochs", "2", "--resume", str(directory / "ck.st"), *flags)
    assert other.returncode == 2
    assert (other.stdout + other.stderr).count("trained with accumulate 1 on 2 rank(s), this run has accumulate 1 on 3") == 1
    assert "or start a new run from its weights with --weights %s" % (directory / "ck.st") in other.stderr


def test_a_rank_with_another_model_is_refused_at_the_start_naming_it(scratch):
    directory, data = scratch
    mine, theirs = write_model(directory, "mine"), write_model(directory, "theirs", hidden=17)
    command = [*MPIRUN, "-np", "2", TANDEM, "train", str(mine), "--data", str(data), ":",
               "-np", "1", TANDEM, "train", str(theirs), "--data", str(data)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=ENV)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert output.count("error: rank 2 loaded another model or other training settings than rank 0") == 1
    assert "parameter 'fc1.bias' float32 [16], rank 2 has parameter 'fc1.bias' float32 [17]" in output


def ranks_of(mpirun_pid):
    """{rank: pid} of the processes mpirun started (its environment names each one's rank)."""
    ranks = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if int((entry / "stat").read_text().split(") ")[1].split()[1]) != mpirun_pid:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        for item in environ:
            if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                ranks[int(item.split(b"=")[1])] = int(entry.name)
    return ranks


def start_long_job(directory, data, *flags, batch=4):
    model = write_model(directory)
    job = subprocess.Popen([*MPIRUN, "-np", "3", TANDEM, "train", str(model), "--data", str(data), "--epochs",
                            "100000", "--batch", str(batch), *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=ENV)
    deadline = time.monotonic() + 30
    while len(ranks_of(job.pid)) < 3:
        assert time.monotonic() < deadline and job.poll() is None, "the job did not start"
        time.sleep(0.1)
    time.sleep(1.5)  # into training
    return job


def stop_a_rank_and_wait(job, rank):
    """Stops (SIGSTOP) rank `rank` of `job` and waits for the job to end; its output, and the
    seconds that took. The stopped rank is killed afterwards, as mpirun leaves it."""
    stopped = ranks_of(job.pid)[rank]
    os.kill(stopped, signal.SIGSTOP)
    started = time.monotonic()
    try:
        output, _ = job.communicate(timeout=60)
    finally:
        try:
            os.kill(stopped, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return output, time.monotonic() - started


def test_a_killed_rank_ends_the_job_naming_it(scratch):
    directory, data = scratch
    job = start_long_job(directory, data, "--collective-timeout", "20")
    os.kill(ranks_of(job.pid)[1], signal.SIGKILL)
    started = time.monotonic()
    output, _ = job.communicate(timeout=60)
    assert time.monotonic() - started < 25  # within the deadline and a few seconds
    assert job.returncode != 0
    # mpirun names the rank that died; the others say what they were in the middle of
    assert "rank 1" in output and "signal 9" in output, output
    assert "ended by mpirun (another rank failed: mpirun names it) while waiting in" in output, output
    assert "(in step " in output, output


def test_a_stopped_rank_ends_the_job_within_the_deadline_naming_it(scratch):
    directory, data = scratch
    job = start_long_job(directory, data, "--collective-timeout", "3")
    output, seconds = stop_a_rank_and_wait(job, 2)
    assert seconds < 15, output  # 3 s and a few more
    assert job.returncode == 2, output
    lines = [line for line in output.splitlines() if line.startswith("error: rank ")]
    assert lines, output
    assert "rank 2" in lines[0] and "step" in lines[0] and "3 s" in lines[0], output


def test_a_sharded_optimizer_state_trains_alike_with_a_third_of_adams_state_on_each_of_3_ranks(scratch):
    directory, data = scratch
    model = write_model(directory, optimizer="adam", lr=0.003, hidden=64)
    flags = ["--drop-last", "--epochs", "1", "--batch", "4"]
    plain = result(train(3, model, data, "--save-weights", str(directory / "plain.st"), *flags))
    sharded = result(train(3, model, data, "--shard-optimizer-state", "--save-weights", str(directory / "zero.st"),
                           *flags))
    assert max_relative_error(read_safetensors(directory / "zero.st"), read_safetensors(directory / "plain.st")) == 0
    # rank 0's share: fc1.weight (12 x 64), the largest, alone; Adam keeps two moments of it
    assert plain["optimizer_state_bytes"] == 2 * 4 * (12 * 64 + 64 + 64 * 4 + 4)
    assert sharded["optimizer_state_bytes"] == 2 * 4 * (12 * 64)


def test_bf16_compressed_gradients_train_within_rounding_of_float32_and_bad_values_are_refused(scratch):
    directory, data = scratch
    model = write_model(directory, optimizer="adam", lr=0.003)
    flags = ["--no-shuffle", "--drop-last", "--epochs", "1", "--batch", "4"]
    plain = result(train(2, model, data, "--save-weights", str(directory / "plain.st"), *flags))
    compressed = result(train(2, model, data, "--compress-gradients", "bf16", "--save-weights",
                              str(directory / "bf16.st"), *flags))
    assert compressed["steps"] == plain["steps"] > 0
    # bf16's rounding, not the float32 path's bits: the weights as a whole, as the C++ test
    # measures them (held element by element, 1 run in 20 failed on a small bias)
    error = relative_distance(read_safetensors(directory / "bf16.st"), read_safetensors(directory / "plain.st"))
    assert 0 < error <= 1e-2
    assert np.allclose(compressed["epochs"][0]["step_losses"], plain["epochs"][0]["step_losses"], rtol=1e-2)
    refused = train(2, model, data, "--compress-gradients", "fp8", *flags)
    assert refused.returncode == 2
    assert "--compress-gradients" in refused.stderr and "fp8" in refused.stderr


def test_each_rank_traces_its_own_file_with_the_collectives(scratch):
    directory, data = scratch
    model = write_model(directory)
    trace = directory / "trace.json"
    result(train(2, model, data, "--epochs", "1", "--trace", str(trace)))
    for path in (trace, directory / "trace.rank1.json"):
        events = json.loads(path.read_text())["traceEvents"]
        tracks = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
        reduces = [e for e in events
                   if e["ph"] == "X" and tracks[e["tid"]] == "collectives (MPI)" and "gradient bucket" in e["name"]]
        assert reduces, path
        # the MLP's four gradients, 16 x 12 + 16 + 4 x 16 + 4 floats, in the buckets of a step
        assert sum(e["args"]["bytes"] for e in reduces if e["name"].endswith("of backward 1")) == (192 + 16 + 64 + 4) * 4
        assert any(e["ph"] == "X" and tracks[e["tid"]] == "cpu" and e["name"] == "layer 'fc1' (linear) forward"
                   for e in events)


ON_A_SIMULATED_GPU = ["--sim-gpus", "1", "--place", "*=cuda:0"]


def bucket_spans(trace_path, track_prefix):
    """The gradient buckets' spans on the tracks whose name starts with `track_prefix`."""
    events = json.loads(Path(trace_path).read_text())["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    return [e for e in events
            if e["ph"] == "X" and tracks[e["tid"]].startswith(track_prefix) and "gradient bucket" in e["name"]]


@pytest.mark.parametrize("optimizer,lr", [("sgd", 0.05), ("adam", 0.003)])
def test_gradients_on_simulated_gpus_go_between_the_ranks_gpus_and_train_as_one_process(scratch, optimizer, lr):
    directory, data = scratch
    model = write_model(directory, optimizer=optimizer, lr=lr)
    flags = ["--no-shuffle", "--drop-last", "--epochs", "1", *ON_A_SIMULATED_GPU]
    alone = result(train(1, model, data, "--batch", "8", "--save-weights", str(directory / "one.st"), *flags))
    trace = directory / "trace.json"
    together = result(train(2, model, data, "--batch", "4", "--save-weights", str(directory / "n.st"), "--trace",
                            str(trace), *flags))
    assert together["steps"] == alone["steps"] > 0
    assert max_relative_error(read_safetensors(directory / "n.st"), read_safetensors(directory / "one.st")) <= 1e-5
    assert np.allclose(together["epochs"][0]["step_losses"], alone["epochs"][0]["step_losses"], rtol=1e-5, atol=0)
    for path in (trace, directory / "trace.rank1.json"):
        # the GPU's communicator summed the MLP's four gradients each step; MPI carried none
        on_device = bucket_spans(path, "collectives (cuda:0 between processes)")
        assert sum(e["args"]["bytes"] for e in on_device if "of backward 1 " in e["name"]) == (192 + 16 + 64 + 4) * 4
        assert len({e["name"] for e in on_device}) >= together["steps"]
        assert all(e["name"].startswith("the device all-reduce of gradient bucket") for e in on_device)
        assert bucket_spans(path, "collectives (MPI)") == []
    # --device-collectives off: the host path, over MPI, to the same weights within rounding
    host_trace = directory / "host.json"
    host = result(train(2, model, data, "--batch", "4", "--save-weights", str(directory / "host.st"), "--trace",
                        str(host_trace), "--device-collectives", "off", *flags))
    assert host["steps"] == together["steps"]
    assert max_relative_error(read_safetensors(directory / "host.st"), read_safetensors(directory / "n.st")) <= 1e-5
    assert bucket_spans(host_trace, "collectives (cuda:0") == []
    assert sum(e["args"]["bytes"] for e in bucket_spans(host_trace, "collectives (MPI)")
               if e["name"].endswith("of backward 1")) == (192 + 16 + 64 + 4) * 4
    refused = train(2, model, data, "--device-collectives", "maybe", *flags)
    assert refused.returncode == 2
    assert "--device-collectives" in refused.stderr and "maybe" in refused.stderr


def test_a_stopped_rank_in_a_device_collective_ends_the_job_within_the_deadline_naming_it(scratch):
    directory, _ = scratch
    # only the GPU holds parameters: the device all-reduce is the one collective of a step,
    # and an epoch of 16,000 steps of one sample (well over ten seconds, even on an idle
    # machine) keeps the epoch's own sums out of the way of the stop
    rng = np.random.default_rng()
    seed = int(rng.integers(1 << 30))
    print("long data seed", seed)
    x = np.random.default_rng(seed).normal(size=(60000, 12))
    data = directory / "long.csv"
    np.savetxt(data, np.column_stack([x, (x[:, 0] > 0).astype(int)]), delimiter=",", fmt=["%.3f"] * 12 + ["%d"])
    job = start_long_job(directory, data, "--collective-timeout", "3", *ON_A_SIMULATED_GPU, batch=1)
    output, seconds = stop_a_rank_and_wait(job, 2)
    assert seconds < 15, output  # 3 s and a few more
    assert job.returncode == 2, output
    lines = [line for line in output.splitlines() if line.startswith("error: rank ")]
    assert lines, output
    assert "the device all-reduce of gradient bucket" in lines[0] and "on cuda:0" in lines[0], output
    assert "rank 2 did not reach it" in lines[0] and "(in step " in lines[0] and "3 s" in lines[0], output


def test_a_killed_rank_ends_a_job_reducing_on_the_gpus_naming_it(scratch):
    directory, data = scratch
    # no validation: an epoch's end sums the validation metrics over MPI, and a kill landing
    # there names that collective instead (seen once in a CI run). The epoch's end also sums
    # the step losses over MPI: one step in 25 here ends an epoch, so a kill lands there too
    # now and then (seen once in CI), and the ranks name that collective
    job = start_long_job(directory, data, "--collective-timeout", "20", "--validation-split", "0", *ON_A_SIMULATED_GPU)
    os.kill(ranks_of(job.pid)[1], signal.SIGKILL)
    started = time.monotonic()
    output, _ = job.communicate(timeout=60)
    assert time.monotonic() - started < 25, output
    assert job.returncode != 0
    assert "rank 1" in output and "signal 9" in output, output
    # the others wait for the GPU's collective, or compute with it queued: they name it
    assert "ended by mpirun (another rank failed: mpirun names it) while" in output, output
    named = ("the device all-reduce of gradient bucket", "while waiting in the epoch's step losses")
    assert any(what in output for what in named) and "(in step " in output, output


def test_resume_on_simulated_gpus_reducing_on_them_restores_every_rank(scratch):
    directory, data = scratch
    model = write_model(directory, optimizer="adam", lr=0.003)
    flags = ["--no-shuffle", "--drop-last", "--batch", "4", *ON_A_SIMULATED_GPU]
    result(train(2, model, data, "--epochs", "2", "--save-weights", str(directory / "whole.st"), *flags))
    result(train(2, model, data, "--epochs", "1", "--save", str(directory / "ck.st"), *flags))
    resumed = result(train(2, model, data, "--epochs", "2", "--resume", str(directory / "ck.st"), "--save-weights",
                           str(directory / "resumed.st"), "--trace", str(directory / "resumed.json"), *flags))
    assert len(resumed["epochs"]) == 1
    assert max_relative_error(read_safetensors(directory / "resumed.st"), read_safetensors(directory / "whole.st")) == 0
    assert bucket_spans(directory / "resumed.json", "collectives (cuda:0 between processes)")

"""bench/trace_breakdown.py on the traces the CLI writes: the README's command as it stands,
a trace of the cpu alone, and a trace whose run was stopped before it closed the file."""
import os
import subprocess

from conftest import CLI, ROOT, config

BREAKDOWN = os.path.join(ROOT, "bench", "trace_breakdown.py")
KEYS = ["step", "kernels", "uploads", "copies", "reduction", "other", "idle", "copy_engines"]


def trace(tmp_path, *args):
    path = str(tmp_path / "trace.json")
    run = subprocess.run([CLI, "train", *args, "--trace", path], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    return path


def breakdown(path):
    run = subprocess.run(["/usr/bin/python3", BREAKDOWN, path], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    row = [line for line in run.stdout.splitlines() if line.startswith("| " + path)]
    assert len(row) == 1, run.stdout
    values = dict(zip(KEYS, (float(cell) for cell in row[0].strip("| ").split(" | ")[1:])))
    assert set(values) == set(KEYS), run.stdout
    return values


def test_the_readmes_command(tmp_path):
    # README: tandem train configs/dp_classifier.yaml --sim-gpus 4 --bench-steps 5 --trace trace.json
    b = breakdown(trace(tmp_path, config("dp_classifier.yaml"), "--sim-gpus", "4", "--bench-steps", "5"))
    assert b["step"] > 0
    assert b["kernels"] > 0  # four replicas' linear layers ran on the lanes
    assert b["copies"] > 0  # the batch was scattered to the replicas and their outputs gathered
    # the lane's categories and its idle time split the step (overlaps counted once)
    lane = sum(b[k] for k in ["kernels", "uploads", "copies", "reduction", "other"])
    assert b["idle"] >= 0 and lane <= b["step"] * 1.01 + 0.01


def test_a_trace_of_the_cpu_alone_and_one_cut_short(tmp_path):
    path = trace(tmp_path, config("digits_mlp.yaml"), "--bench-steps", "5")
    b = breakdown(path)
    assert b["step"] > 0 and b["copy_engines"] == 0
    # a run stopped mid-way leaves the file without its closing brackets
    text = open(path).read().rstrip()
    assert text.endswith("]}")
    cut = str(tmp_path / "cut.json")
    with open(cut, "w") as f:
        f.write(text[:-2].rstrip().rstrip(",") + ",\n")
    assert breakdown(cut)["step"] > 0


def test_a_file_that_is_no_trace(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a trace"}')
    run = subprocess.run(["/usr/bin/python3", BREAKDOWN, str(bad)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "no traceEvents list" in run.stderr

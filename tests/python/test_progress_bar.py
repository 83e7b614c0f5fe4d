"""The progress bar of `tandem train` and Trainer.fit() (docs/training.md, "Output";
docs/python.md): on a terminal one line redrawn in place with \\r, ten times a second at
most, erased for each epoch's line, which stays whole; none on a pipe, with --json or
--no-progress (progress=False). The terminal is a pseudo-terminal from Python's pty module,
read raw (no \\n -> \\r\\n), so the bytes are those the program wrote."""
import fcntl
import io
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import textwrap
import time
import tty
import types

import pytest

import tandem
from tandem import progress
from conftest import CLI, config

EPOCHS = 3
STEPS_PER_EPOCH = 360  # digits_mlp: 1438 training samples at batch 4
BAR = re.compile(r"^epoch +(\d+)/(\d+) \[([#.]+)\] +(\d+)/(\d+)  \d+ samples/s  loss \d+\.\d{4}  "
                 r"(\d+s|\d+m\d\ds|\d+h\d\dm) left *$")
EPOCH_LINE = re.compile(r"^epoch +(\d+)/(\d+)  loss \d+\.\d{4}  val loss \d+\.\d{4}  val acc \d+\.\d\d%  ")


def in_terminal(command, columns=120, timeout=300):
    """Runs `command` with stdout a pseudo-terminal `columns` wide: (stdout as written,
    stderr, exit status, seconds it ran)."""
    master, slave = pty.openpty()
    tty.setraw(slave)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    start = time.monotonic()
    run = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE,
                           env=dict(os.environ, COLUMNS=str(columns)))
    os.close(slave)
    out = b""
    while time.monotonic() - start < timeout:
        ready, _, _ = select.select([master], [], [], 1.0)
        if not ready:
            if run.poll() is not None:
                break
            continue
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # EIO: the last writer of the terminal is gone
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    stderr = run.stderr.read().decode()
    status = run.wait(timeout=60)
    return out.decode(), stderr, status, time.monotonic() - start


def screen_lines(out):
    """What a terminal shows: each line as its last \\r left it (the bar is erased by spaces
    before a line is printed over it)."""
    return [line.split("\r")[-1].rstrip() for line in out.split("\n")]


def bar_draws(out):
    """Every drawing of the bar: the text after each \\r that is a bar."""
    return [m for m in (BAR.match(part.rstrip()) for line in out.split("\n") for part in line.split("\r")) if m]


def check_terminal_run(out, seconds, epochs, steps_per_epoch):
    draws = bar_draws(out)
    # each epoch ends drawn full; in between at most one drawing each 100 ms
    for epoch in range(1, epochs + 1):
        full = [m for m in draws if int(m.group(1)) == epoch and m.group(4) == m.group(5)]
        assert full and int(full[0].group(5)) == steps_per_epoch, "epoch %d never drawn full" % epoch
        assert "." not in full[0].group(3)
    assert all(int(m.group(2)) == epochs for m in draws)
    assert len(draws) <= 10 * seconds + 2 * epochs + 2, "%d drawings in %.1f s" % (len(draws), seconds)
    assert len(draws) < epochs * steps_per_epoch  # not one a step
    # the epochs' lines are whole, each on its own line, the bar gone from the screen
    shown = screen_lines(out)
    epoch_lines = [line for line in shown if EPOCH_LINE.match(line)]
    assert [int(EPOCH_LINE.match(line).group(1)) for line in epoch_lines] == list(range(1, epochs + 1)), shown
    assert not any(BAR.match(line) for line in shown), shown


def cli_train(*args, epochs=EPOCHS):
    return [CLI, "train", config("digits_mlp.yaml"), "--epochs", str(epochs), "--batch", "4", "--no-shuffle",
            "--no-save", *args]


def test_cli_draws_a_bar_on_a_terminal_and_ends_each_epoch_with_its_line():
    out, err, status, seconds = in_terminal(cli_train())
    assert status == 0, out + err
    assert "\r" in out
    check_terminal_run(out, seconds, EPOCHS, STEPS_PER_EPOCH)
    shown = [line for line in screen_lines(out) if line]
    assert shown[0].startswith("training 'digits_mlp' on 1438 samples") and shown[-1].startswith("done: 1080 steps")
    # no text step lines: the bar says where the run is
    assert not any(" step " in line for line in shown)


def test_the_bar_fits_a_narrow_terminal():
    out, err, status, _ = in_terminal(cli_train(epochs=1), columns=60)
    assert status == 0, out + err
    parts = [part.rstrip() for line in out.split("\n") for part in line.split("\r")]
    drawn = [part for part in parts if part.startswith("epoch ") and "samples/s" in part and " val " not in part]
    # one column short of the width: a full line would wrap on some terminals, and \r go back
    # to its second half
    assert drawn and all(len(part) <= 59 for part in drawn), drawn


@pytest.mark.parametrize("flag", ["--no-progress", "--json"])
def test_cli_draws_no_bar_when_told_not_to(flag):
    out, err, status, _ = in_terminal(cli_train(flag))
    assert status == 0, out + err
    assert "\r" not in out
    if flag == "--json":
        assert all(line.startswith("{") for line in out.splitlines())
        assert json.loads(out.splitlines()[-1])["event"] == "summary"
    else:
        assert [int(EPOCH_LINE.match(line).group(1)) for line in out.splitlines() if EPOCH_LINE.match(line)] == [1, 2, 3]


FIT = textwrap.dedent("""
    import sys, tandem
    model = tandem.Model.load(sys.argv[1])
    model.init_parameters(0)
    progress = {"default": None, "off": False}[sys.argv[2]]
    tandem.Trainer(model, epochs=%d, batch=4, shuffle=False).fit(progress=progress)
    print("fit done")
""" % EPOCHS)


def test_fit_draws_the_bar_on_a_terminal():
    out, err, status, seconds = in_terminal([sys.executable, "-c", FIT, config("digits_mlp.yaml"), "default"])
    assert status == 0, out + err
    check_terminal_run(out, seconds, EPOCHS, STEPS_PER_EPOCH)
    assert screen_lines(out)[-2] == "fit done"


def test_fit_draws_no_bar_with_progress_false_or_on_a_pipe():
    out, err, status, _ = in_terminal([sys.executable, "-c", FIT, config("digits_mlp.yaml"), "off"])
    assert status == 0, out + err
    assert "\r" not in out and len([line for line in out.splitlines() if EPOCH_LINE.match(line)]) == EPOCHS
    piped = subprocess.run([sys.executable, "-c", FIT, config("digits_mlp.yaml"), "default"], capture_output=True,
                           text=True, timeout=300)
    assert piped.returncode == 0, piped.stderr
    assert "\r" not in piped.stdout and len([line for line in piped.stdout.splitlines()
                                             if EPOCH_LINE.match(line)]) == EPOCHS


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_bar_redraws_ten_times_a_second_at_most():
    clock, stream = FakeClock(), io.StringIO()
    bar = progress.ProgressBar(1, stream=stream, clock=clock)
    for step in range(1, 1001):  # 1000 steps of 3 ms: 3 s
        clock.now += 0.003
        bar.step({"epoch": 1, "batch": step, "batches": 1000, "samples": 8, "running_loss": 0.5})
    # the first step, one every 34th step of 3 ms after it (the first at or past 100 ms), the last
    assert bar.draws == 1 + 999 // 34 + 1
    last = stream.getvalue().split("\r")[-1]
    assert BAR.match(last) and "1000/1000" in last and "2667 samples/s" in last and "0s left" in last


def test_the_line_says_the_pace_and_the_time_left():
    line = progress.progress_line(2, 10, 15, 45, 480, 0.30304, 1.5, 120)
    # 0.1 s a step: 30 steps left in this epoch and 8 x 45 in the later ones
    assert line == "epoch   2/10 [##########....................] 15/45  320 samples/s  loss 0.3030  39s left"
    assert progress.duration_text(59.4) == "59s" and progress.duration_text(185) == "3m05s"
    assert progress.duration_text(3725) == "1h02m"
    assert len(progress.progress_line(2, 10, 15, 45, 480, 0.3, 1.5, 40)) == 39


def test_a_notebook_gets_a_bar_a_file_does_not(monkeypatch):
    class NotATerminal(io.StringIO):
        pass
    assert not progress.wanted(None, True, NotATerminal())
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    assert progress.wanted(None, True, NotATerminal())
    assert not progress.wanted(None, False, NotATerminal()) and not progress.wanted(False, True, NotATerminal())
    assert progress.wanted(True, False, NotATerminal())


def test_on_step_metrics_count_the_samples():
    model = tandem.Model.load(config("digits_mlp.yaml"))
    steps = []
    tandem.Trainer(model, epochs=1, batch=100).fit(on_step=steps.append, verbose=False)
    assert sum(s["samples"] for s in steps) == 1438 and steps[-1]["samples"] == 38

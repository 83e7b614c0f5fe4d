"""The progress bar Trainer.fit() draws in a terminal or a notebook: the line `tandem train`
draws on a terminal (runtime/cli/progress_bar.cpp), redrawn in place with \\r, which a
terminal and Jupyter's output area both honour (tqdm is not a dependency: Debian does not
install it with PyTorch):

    epoch   2/10 [#########...............]   15/45  12038 samples/s  loss 0.3030  12s left

Redrawn at most ten times a second (REDRAW_INTERVAL), and always at an epoch's last step;
erased before the epoch's line is printed, so that line is whole."""
import shutil
import sys
import time

__all__ = ["ProgressBar", "progress_line", "duration_text", "wanted"]

REDRAW_INTERVAL = 0.1  # seconds: a fast model would otherwise spend its time drawing


def duration_text(seconds):
    """'12s', '3m05s', '1h02m': a time left, as short as it reads well."""
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return "%ds" % s
    if s < 3600:
        return "%dm%02ds" % (s // 60, s % 60)
    return "%dh%02dm" % (s // 3600, s % 3600 // 60)


def progress_line(epoch, epochs, done, total, samples, loss, epoch_seconds, columns):
    """The bar's line, at most columns - 1 characters (the bar narrows first, then goes),
    exactly as the CLI's progress_line() writes it."""
    per_step = epoch_seconds / done if done else 0.0
    left = per_step * ((total - done) + total * (epochs - epoch))  # later epochs at this one's pace
    head = "epoch %3d/%d" % (epoch, epochs)
    tail = "%*d/%d  %.0f samples/s  loss %.4f  %s left" % (
        len(str(total)), done, total, samples / max(epoch_seconds, 1e-9), loss, duration_text(left))
    room = columns - 1 - len(head) - len(tail) - 4
    if room < 10:
        return (head + "  " + tail)[:max(columns - 1, 0)]
    width = min(room, 30)
    filled = width * done // max(total, 1)
    return head + " [" + "#" * filled + "." * (width - filled) + "] " + tail


def in_notebook():
    """Whether this Python is a Jupyter kernel (whose stdout is no terminal but shows \\r as
    one does)."""
    return "ipykernel" in sys.modules


def wanted(progress, verbose, stream):
    """fit(progress=): True draws, False does not; None (the default) draws when verbose and
    the output is a terminal or a notebook, not a file or a pipe."""
    if progress is not None:
        return bool(progress)
    if not verbose:
        return False
    isatty = getattr(stream, "isatty", None)
    return in_notebook() or bool(isatty and isatty())


class ProgressBar:
    """Draws on `stream` (sys.stdout by default) for a run of `epochs` epochs."""

    def __init__(self, epochs, stream=None, clock=time.monotonic):
        self.epochs, self.stream, self.clock = epochs, stream or sys.stdout, clock
        self.epoch_start = clock()
        self.last_draw = None
        self.samples = 0
        self.drawn = 0  # characters on the line now
        self.draws = 0

    def step(self, metrics):
        """on_step's metrics (epoch, batch, batches, samples, running_loss)."""
        self.samples += metrics["samples"]
        now = self.clock()
        done, total = metrics["batch"], metrics["batches"]
        if done < total and self.last_draw is not None and now - self.last_draw < REDRAW_INTERVAL:
            return
        self.last_draw = now
        columns = shutil.get_terminal_size((80, 24)).columns
        line = progress_line(metrics["epoch"], self.epochs, done, total, self.samples, metrics["running_loss"],
                             now - self.epoch_start, columns)
        self.stream.write("\r" + line.ljust(self.drawn))  # spaces over what a longer line left
        self.stream.flush()
        self.drawn = len(line)
        self.draws += 1

    def start_epoch(self):
        """The next epoch's clock starts now (after validation and the checkpoint)."""
        self.epoch_start = self.clock()
        self.samples = 0

    def clear(self):
        """Erases the line drawn, leaving the cursor at its start."""
        if self.drawn:
            self.stream.write("\r" + " " * self.drawn + "\r")
            self.stream.flush()
            self.drawn = 0

    def close(self):
        """Ends a line still drawn (fit() stopped by an exception) so that what follows
        starts on its own line, the bar's last state left to read."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = 0

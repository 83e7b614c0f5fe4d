"""tandem.Trainer: `tandem train` from Python. The settings are the CLI's flags, applied
over the model's train: section as the CLI applies them, so a run from Python repeats the
CLI's run bit for bit; callbacks see every step and every epoch."""
import os
import sys
import tempfile

from . import _tandem
from .progress import ProgressBar, wanted as _progress_wanted

__all__ = ["Trainer", "Callback"]


class Callback:
    """Override either method; fit() calls them on the thread that called it.

    on_step(metrics): after each optimizer step; metrics: step (steps done in all), epoch
    (from 1), batch and batches (within the epoch), loss (this step's, before its update),
    running_loss (the epoch's mean so far), lr (this step's learning rate), samples (this
    step's).
    on_epoch(metrics): after each epoch, the CLI's --json epoch: epoch (from 1), train_loss,
    step_losses, seconds, samples_per_second and, with validation data, validation_loss and
    validation_accuracy (classification) or validation_auc."""

    def on_step(self, metrics):
        pass

    def on_epoch(self, metrics):
        pass


def epoch_line(metrics, epochs):
    """The CLI's line for an epoch's metrics (runtime/cli/train_command.cpp)."""
    line = "epoch %3d/%d  loss %.4f" % (metrics["epoch"], epochs, metrics["train_loss"])
    if "validation_loss" in metrics:
        line += "  val loss %.4f" % metrics["validation_loss"]
    if "validation_accuracy" in metrics:
        line += "  val acc %.2f%%" % (100 * metrics["validation_accuracy"])
    if "validation_auc" in metrics:
        auc = metrics["validation_auc"]
        line += "  val auc %.4f" % auc if auc is not None else "  val auc undefined (%s)" % metrics.get(
            "validation_auc_undefined", "")
    return line + "  %.2fs" % metrics["seconds"]


class _EarlyStop(Exception):
    """Raised from the epoch callback to end fit() after that epoch (early_stop=)."""


class _BestEpoch:
    """keep_best= and early_stop= of fit(): the CLI's --keep-best and --early-stop."""

    KEYS = {"val_loss": "validation_loss", "val_accuracy": "validation_accuracy", "val_auc": "validation_auc"}

    def __init__(self, trainer, keep_best, early_stop, checkpoint, validation):
        self.trainer, self.metric, self.patience = trainer, keep_best or "val_loss", early_stop
        if self.metric not in self.KEYS:
            raise _tandem.ModelError("fit(keep_best=%r): the metrics are val_loss (lower is better), val_accuracy and "
                                     "val_auc" % (keep_best,))
        if early_stop is not None and (not isinstance(early_stop, int) or early_stop < 1):
            raise _tandem.ModelError("fit(early_stop=%r): give the epochs without improvement to stop after, a whole "
                                     "number of at least 1" % (early_stop,))
        if keep_best is not None and not checkpoint:
            raise _tandem.ModelError("fit(keep_best=%r) keeps the best epoch's checkpoint beside the run's "
                                     "(CKPT.best.safetensors): give checkpoint=CKPT" % keep_best)
        if validation is None and not trainer._impl.spec["validation_split"]:
            raise _tandem.ModelError("fit(%s) watches the validation %s, and the run has no validation set: give "
                                     "validation= or validation_split=" % (
                                         "keep_best" if keep_best else "early_stop", self.metric[4:]))
        path = os.fspath(checkpoint) if checkpoint else None
        if path is not None:
            path = path[:-len(".safetensors")] + ".best.safetensors" if path.endswith(".safetensors") else path + ".best"
        self.path = path if keep_best is not None else None
        self.best_value, self.best_epoch = None, None
        trainer.best = None

    def on_epoch(self, metrics, epochs, verbose):
        key = self.KEYS[self.metric]
        if key not in metrics:
            raise _tandem.ModelError("fit(keep_best/early_stop=%s): the model's loss gives no %s; use val_loss"
                                     % (self.metric, self.metric[4:]))
        value, epoch = metrics[key], metrics["epoch"]
        lower = self.metric == "val_loss"
        if value is not None and (self.best_value is None or (value < self.best_value if lower else value > self.best_value)):
            self.best_value, self.best_epoch = value, epoch
            if self.path is not None:
                self.trainer.save(self.path)
            self.trainer.best = {"metric": self.metric, "value": value, "epoch": epoch, "checkpoint": self.path}
        since = epoch - self.best_epoch if self.best_epoch is not None else epoch
        if self.patience is not None and since >= self.patience and epoch < epochs:
            if verbose:
                print("early stop: %s has not improved for %d epoch%s%s" % (
                    self.metric, self.patience, "" if self.patience == 1 else "s",
                    " (best %.6g at epoch %d)" % (self.best_value, self.best_epoch) if self.best_epoch else ""),
                    flush=True)
            raise _EarlyStop()


class Trainer:
    """Trains a tandem.Model that has a loss: (and targets:).

        trainer = tandem.Trainer(model, optimizer="adam", lr=1e-3, batch=32)
        history = trainer.fit(epochs=3)              # the model's train: data:, or
        history = trainer.fit({"x": x, "label": y}, epochs=3, callbacks=[...])
        trainer.save("ckpt.safetensors"); trainer.resume("ckpt.safetensors")

    Settings (each unset one is the model file's train: value, else the CLI's default):
    epochs, batch, seed, optimizer ('sgd', 'adam', 'adamw'; another optimizer than the
    file's starts from its own defaults, as --optimizer does), lr, momentum, dampening,
    nesterov, weight_decay, betas, eps, shuffle, drop_last, validation_split,
    clip_grad_norm, schedule ('constant', or {'name': 'cosine', 'warmup_steps': 50, ...}),
    loss_scaling (fp16's GradScaler settings over the file's: {'init_scale': 65536,
    'growth_factor': 2, 'backoff_factor': 0.5, 'growth_interval': 2000, 'enabled': True}).
    The model's weights are used as they are (`tandem train` first draws them from the
    seed: call model.init_parameters(seed) to do the same).
    """

    def __init__(self, model, optimizer=None, lr=None, **settings):
        self.model = model
        self._settings = dict(settings, optimizer=optimizer, lr=lr)
        self._impl = _tandem._Trainer(model, self._settings)

    # ---- training -------------------------------------------------------------------
    def step(self, batch=None, **tensors):
        """One optimizer step on a batch (inputs and targets by name, laid out as the
        model declares them); returns its loss, before the update."""
        batch = dict(batch or {}, **tensors)
        return self._impl.step(batch)

    def fit(self, data=None, epochs=None, callbacks=(), on_step=None, on_epoch=None, validation=None,
            checkpoint=None, verbose=True, keep_best=None, early_stop=None, progress=None):
        """Trains until `epochs` epochs are done in all (as `tandem train --epochs`, which a
        resumed run continues to); returns the epochs' metrics (Callback.on_epoch's).
        Another `epochs` than the trainer's makes the run that long: training goes on from
        where it is, the schedule laid over the new total.

        data: a dict of arrays by input and target name, samples first as in a data file
        (numpy or torch, shared without copies), a CSV or safetensors path, or None for the
        model's train: data:. Unless `validation` is given (the same kinds), the
        validation_split of the data is held out, chosen by the seed, as the CLI does.
        callbacks: Callback objects; on_step, on_epoch: functions of the metrics dict.
        checkpoint: a path written after every epoch (weights and optimizer state).
        verbose: True (the default) prints a line per epoch, as the CLI's log does
        (`epoch   2/10  loss 0.3030  val loss 0.2871  val acc 91.64%  0.12s`); False is silent.
        progress: a bar redrawn in place as the epoch goes (the CLI's: steps, samples/s,
        loss, time left), ten times a second at most. None (the default): drawn when
        verbose and stdout is a terminal or a Jupyter notebook, not a file or a pipe;
        True: always; False: never (as `tandem train --no-progress`).
        keep_best (default: the model's train: keep_best): 'val_loss', 'val_accuracy' or 'val_auc': also keep the checkpoint of the epoch
        with the best validation value, beside `checkpoint` (CKPT.best.safetensors), as the
        CLI's --keep-best; `trainer.best` then names it. early_stop (default: train: early_stop):
        stop once that value
        (keep_best's metric, else val_loss) has gone this many epochs without improving, as
        --early-stop."""
        # the model's train: keep_best and early_stop, unless given here
        if keep_best is None:
            keep_best = self._impl.spec.get("keep_best")
        if early_stop is None:
            early_stop = self._impl.spec.get("early_stop")
        watch = None
        if keep_best is not None or early_stop is not None:
            watch = _BestEpoch(self, keep_best, early_stop, checkpoint, validation)
        if epochs is not None and int(epochs) != self._impl.spec["epochs"]:
            self._change_epochs(int(epochs))
        steps = [c.on_step for c in callbacks] + ([on_step] if on_step else [])
        ends = [c.on_epoch for c in callbacks] + ([on_epoch] if on_epoch else [])
        total = int(epochs) if epochs is not None else self._impl.spec["epochs"]
        if verbose:
            ends.append(lambda metrics: print(epoch_line(metrics, total), flush=True))
        history = []
        if watch is not None:
            # last: the epoch that stops the run has been reported to the others
            ends = [history.append] + ends + [lambda metrics: watch.on_epoch(metrics, total, verbose)]
        bar = ProgressBar(total) if _progress_wanted(progress, verbose, sys.stdout) else None
        if bar is not None:
            steps.append(bar.step)
            # erased before anything prints the epoch; the next epoch's clock after it all
            ends = [lambda metrics: bar.clear()] + ends + [lambda metrics: bar.start_epoch()]

        def each(functions):
            if not functions:
                return None

            def call_all(metrics):
                for function in functions:
                    function(metrics)
            return call_all

        try:
            return self._impl.fit(data, validation, os.fspath(checkpoint) if checkpoint else "", each(steps),
                                  each(ends))
        except _EarlyStop:
            return history  # the epoch that stopped it ran to its end, its checkpoint written
        finally:
            if bar is not None:
                bar.close()  # a bar left by an exception (Ctrl-C): the traceback on a line of its own

    def evaluate(self, data=None):
        """Mean loss (and accuracy or ROC AUC) over `data` in inference mode: a dict with
        loss, samples and accuracy or auc. Data as fit()'s, without a split."""
        return self._impl.evaluate(data)

    # ---- checkpoints ---------------------------------------------------------------------
    def save(self, path):
        """Writes weights, optimizer state, step and epoch (the CLI's --save format)."""
        self._impl.save(os.fspath(path))

    def resume(self, path):
        """Continues the run saved at `path` (the CLI's --resume): the next fit() goes on
        from its epoch, bit for bit as if never interrupted."""
        self._impl.resume(os.fspath(path))

    # ---- state ---------------------------------------------------------------------------
    @property
    def steps_done(self):
        return self._impl.steps_done

    @property
    def epochs_done(self):
        return self._impl.epochs_done

    @property
    def lr(self):
        """The learning rate of the next step."""
        return self._impl.current_lr

    @property
    def skipped_steps(self):
        """Steps that fp16 loss scaling skipped because their gradients overflowed (0 when
        no layer runs in fp16)."""
        return self._impl.skipped_steps

    @property
    def loss_scale(self):
        """The scale the next step multiplies the loss by (torch's GradScaler.get_scale()),
        or None when the model has no fp16 layer (docs/precision.md)."""
        return self._impl.loss_scale

    @property
    def settings(self):
        """The training settings in effect: the model's train: section with this
        trainer's settings over it."""
        return self._impl.spec

    def _change_epochs(self, epochs):
        """A trainer's epoch count is fixed when it is made; another one is a new trainer
        that continues this one's state exactly (through a checkpoint), its schedule laid
        over the new length (a resumed CLI run keeps its checkpoint's instead, which would
        leave a cosine schedule at its end for the epochs added)."""
        self._settings["epochs"] = epochs
        fresh = _tandem._Trainer(self.model, self._settings)
        if self._impl.steps_done or self._impl.epochs_done:
            with tempfile.TemporaryDirectory(prefix="tandem-") as d:
                path = os.path.join(d, "state.safetensors")
                self._impl.save(path)
                fresh.resume(path)
            fresh.set_total_steps(0)  # fit() counts the run's steps again
        self._impl = fresh

    def __repr__(self):
        s = self._impl.spec
        return "tandem.Trainer(model '%s', %s lr %g, batch %d, %d/%d epochs done)" % (
            self.model.name, s["optimizer"]["name"], s["optimizer"]["lr"], s["batch"], self.epochs_done, s["epochs"])

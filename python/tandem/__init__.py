"""Tandem from Python: run and train a model declared as a YAML layer graph across the CPU
and GPUs, with numpy arrays and torch tensors shared without copies (docs/python.md).

    import tandem
    model = tandem.Model.load("configs/digits_mlp.yaml")
    model.place(sim_gpus=2, place={"fc1": "cuda:0", "fc2": "cuda:1"})
    outputs = model(x)                      # {"fc2": array}, x a numpy array or torch tensor
    tandem.Trainer(model, optimizer="adam", lr=1e-3).fit(epochs=3)

    twin = tandem.from_torch(torch_module, (example_x,))   # a PyTorch model, traced
    torch_module = tandem.to_torch(model)                   # and back

Errors a user can cause raise tandem.ModelError with the message the CLI prints.
"""
import os as _os

# Note [waiting threads] (runtime/threads.h): OpenMP's threads spin 1,000 rounds, then
# sleep, unless the environment chooses otherwise, as the CLI's do; libgomp reads this when
# it loads, which is now unless something imported before (torch, say) loaded it already.
if "OMP_WAIT_POLICY" not in _os.environ and "GOMP_SPINCOUNT" not in _os.environ:
    _os.environ["GOMP_SPINCOUNT"] = "1000"

from ._tandem import InternalError, Model, ModelError, devices, set_threads, threads
from .display import DeviceReport, Plan
from .training import Callback, Trainer
from . import parallel

__all__ = ["Model", "ModelError", "InternalError", "Trainer", "Callback", "Plan", "DeviceReport",
           "from_torch", "to_torch", "parallel", "devices", "set_threads", "threads"]

for _cls in (Model, ModelError, InternalError):
    _cls.__module__ = "tandem"  # as users name them


def from_torch(module, example_inputs, **options):
    """A tandem.Model equivalent to the torch.nn.Module `module`, traced with torch.fx on
    `example_inputs` (a tensor or a tuple of them), with the module's weights. Options:
    see tandem.torch_import.from_torch."""
    from .torch_import import from_torch as convert  # torch is imported only when used
    return convert(module, example_inputs, **options)


def to_torch(model):
    """A torch.nn.Module computing what `model` computes, with its weights: see
    tandem.torch_twin.to_torch."""
    from .torch_twin import to_torch as convert
    return convert(model)


def _plan(self, batch=1, training=False, **bindings):
    """Where each layer runs for a pass of `batch` samples (training or inference), and why;
    the copies between devices and the memory each device needs: `tandem plan`."""
    return Plan(self._plan(int(batch), bool(training), bindings))


def _last_plan(self):
    """The plan the last placed forward or training step ran."""
    return Plan(self._last_plan())


def _report(self, totals=False):
    """Per device, what the last pass did (totals=True: every pass since the model was
    placed, or since it first ran, as `tandem train --report`): peak memory, busy time, bytes
    copied. A model on the cpu alone reports the cpu."""
    return DeviceReport(self._report(bool(totals)))


Model.plan = _plan
Model.last_plan = _last_plan
Model.report = _report

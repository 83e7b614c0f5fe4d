"""tandem.to_torch: a PyTorch module computing what a Tandem model computes, with its
weights. It is built by the PyTorch implementation of the model format that Tandem's
tests use as their oracle (tests/oracle/tandem_torch.py, shipped in the package as
tandem._oracle): each block an nn.Module holding its layers under their names, so the
state_dict's names are the Tandem model's (those of the torch module a converted model
came from, where from_torch had to change them). `device:` and `data_parallel:` are ignored:
the module runs where torch puts it."""
import numpy
import torch
import yaml

from ._oracle import tandem_torch
from .torch_names import restore_torch_names

__all__ = ["TorchTwin", "to_torch"]


class TorchTwin(tandem_torch.Model):
    """The module to_torch returns: forward(*inputs, **named_inputs) takes the model's
    inputs in declared order or by name. It returns what the PyTorch module a model was
    converted from (tandem.from_torch) returned: a tensor, a tuple or list of them in the
    outputs' order, or a dict; for another model, a dict of outputs by name, as
    tandem.Model does."""

    returns = "dict"

    def forward(self, *args, **kwargs):
        names = list(self.spec.inputs)
        if len(args) > len(names):
            raise TypeError("model '%s' takes %d inputs, got %d" % (self.spec.name, len(names), len(args)))
        inputs = dict(zip(names, args))
        inputs.update(kwargs)
        outputs = dict(super().forward(inputs))
        if self.returns == "tensor" and len(outputs) == 1:
            return next(iter(outputs.values()))
        if self.returns in ("tuple", "list"):
            return (tuple if self.returns == "tuple" else list)(outputs.values())
        return outputs


def _returns(model):
    """What the module `model` was converted from returned: from_torch's note on the model,
    or the header line of a converted model's file; "dict" for any other model."""
    form = getattr(model, "_torch_returns", None)
    if form is None:
        mark = "# forward returns: "
        lines = [line for line in model.yaml.splitlines() if line.startswith(mark)]
        form = lines[0][len(mark):].strip() if lines else "dict"
    return form if form in ("tensor", "tuple", "list", "dict") else "dict"


def to_torch(model):
    """A TorchTwin with `model`'s layers and a copy of its weights, in eval mode (call
    .train() to train it)."""
    doc = yaml.safe_load(model.yaml)
    net, _spec = tandem_torch.build_model(model.source, doc=doc)
    net.__class__ = TorchTwin  # the same module, with the calling convention of tandem.Model
    net.returns = _returns(model)
    state = {name: torch.from_numpy(numpy.array(value)) for name, value in model.state_dict().items()}
    net.load_state_dict(state)
    return restore_torch_names(net, model.yaml)  # a converted model's names as torch had them

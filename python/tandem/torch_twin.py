"""tandem.to_torch: a PyTorch module computing what a Tandem model computes, with its
weights. It is built by the PyTorch implementation of the model format that Tandem's
tests use as their oracle (tests/oracle/tandem_torch.py, shipped in the package as
tandem._oracle): each block an nn.Module holding its layers under their names, so the
state_dict's names are the Tandem model's. `device:` and `data_parallel:` are ignored:
the module runs where torch puts it."""
import numpy
import torch
import yaml

from ._oracle import tandem_torch

__all__ = ["TorchTwin", "to_torch"]


class TorchTwin(tandem_torch.Model):
    """The module to_torch returns: forward(*inputs, **named_inputs) takes the model's
    inputs in declared order or by name and returns a dict of outputs by name, as
    tandem.Model does."""

    def forward(self, *args, **kwargs):
        names = list(self.spec.inputs)
        if len(args) > len(names):
            raise TypeError("model '%s' takes %d inputs, got %d" % (self.spec.name, len(names), len(args)))
        inputs = dict(zip(names, args))
        inputs.update(kwargs)
        return dict(super().forward(inputs))


def to_torch(model):
    """A TorchTwin with `model`'s layers and a copy of its weights, in eval mode (call
    .train() to train it)."""
    doc = yaml.safe_load(model.yaml)
    net, _spec = tandem_torch.build_model(model.source, doc=doc)
    net.__class__ = TorchTwin  # the same module, with the calling convention of tandem.Model
    state = {name: torch.from_numpy(numpy.array(value)) for name, value in model.state_dict().items()}
    net.load_state_dict(state)
    return net

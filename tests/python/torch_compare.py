"""Comparing a converted model with its PyTorch module: outputs and, through
tandem.Model.backward and torch's autograd, the gradients of every parameter and float
input (both in eval mode: dropout off, batch norm on its running statistics)."""
import numpy
import torch

import tandem
from conftest import assert_close


def compare_with_torch(module, example_inputs, inputs=None, output_tolerance=1e-5, gradient_tolerance=1e-4,
                       **options):
    """Converts `module` on `example_inputs` (a tuple), then runs both on `inputs` (default
    the examples): returns the converted model."""
    model = tandem.from_torch(module, example_inputs, **options)
    inputs = example_inputs if inputs is None else inputs
    names = [i["name"] for i in model.inputs]
    module.eval()
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    for p in module.parameters():
        p.grad = None
    want = module(*leaves)
    want = list(want.values()) if isinstance(want, dict) else list(want) if isinstance(want, tuple) else [want]
    feed = {n: (t.long() if t.dtype == torch.bool else t) for n, t in zip(names, inputs)}
    got = model(**feed)
    assert len(got) == len(want)
    for (name, value), expected in zip(got.items(), want):
        assert_close(value.numpy(), expected.detach().numpy(), output_tolerance, "output %s" % name)
    grads = {name: torch.randn(v.shape) for name, v in got.items()}
    torch.autograd.backward(want, [grads[n] for n in got])
    model.zero_grad()
    input_grads = model.backward(feed, grads, training=False)
    for name, leaf in zip(names, leaves):
        if leaf.grad is not None:
            assert_close(input_grads[name].numpy(), leaf.grad.numpy(), gradient_tolerance, "gradient of input " + name)
    ours = model.gradients()
    for name, p in module.named_parameters():
        if p.grad is not None:
            grad = p.grad.to_dense() if p.grad.is_sparse else p.grad
            assert_close(ours[name], grad.numpy(), gradient_tolerance, "gradient of " + name)
    return model


def assert_relative(got, want, tolerance, what):
    """max |got - want| within `tolerance` of torch's largest |want| (which must not be 0)."""
    got, want = numpy.asarray(got, dtype=numpy.float64), numpy.asarray(want, dtype=numpy.float64)
    assert got.shape == want.shape, "%s: shape %s, torch's %s" % (what, got.shape, want.shape)
    scale = float(numpy.abs(want).max())
    error = float(numpy.abs(got - want).max())
    assert scale > 0, "%s: torch's is all zeros, which judges nothing" % what
    assert error <= tolerance * scale, "%s: differs by %.3g, %.2g of its largest %.3g" % (
        what, error, error / scale, scale)

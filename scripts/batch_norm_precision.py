#!/usr/bin/python3
"""How far batch_norm2d's training backward and running statistics are from exact (torch
in float64), for Tandem's cpu kernel (oneDNN) and for torch in float32, from 2 values per
channel (a 1x1 feature map at batch 2: resnet18's layer4 on 32x32 images) to 2048, and
with the mean large against the spread (where float32 sums cancel).

    PYTHONPATH=build/python /usr/bin/python3 scripts/batch_norm_precision.py

Each column: the largest error relative to the largest exact value, torch32 / Tandem.
With 2 values per channel, x_hat is +-1 up to eps / var, so the exact dx is a difference
of nearly equal terms, (w / sigma) (eps / (var + eps)) (dy1 - dy2) / 2: float32 keeps few
of its digits, in torch as in Tandem (conditioning, not a fault of either). With the mean
large against the spread, Tandem's errors are up to 9x torch's: oneDNN sums the statistics and
backward's reductions in float32 where torch's cpu kernel accumulates in double (the
formulas are torch's: two-pass variance, biased in the normalisation and unbiased in
running_var, eps inside the square root)."""
import numpy
import torch

import tandem

MODEL = """name: bn
inputs:
  x: {{shape: [{n}, {c}, {h}, {w}]}}
layers:
  - {{name: bn, op: batch_norm2d, num_features: {c}, inputs: x}}
outputs: [bn]
"""


def torch_run(x, dy, weight, bias, dtype):
    bn = torch.nn.BatchNorm2d(x.shape[1]).to(dtype).train()
    with torch.no_grad():
        bn.weight.copy_(weight)
        bn.bias.copy_(bias)
    leaf = x.to(dtype).requires_grad_(True)
    bn(leaf).backward(dy.to(dtype))
    return {"dx": leaf.grad, "dweight": bn.weight.grad, "dbias": bn.bias.grad, "running_var": bn.running_var,
            "running_mean": bn.running_mean}


def tandem_run(x, dy, weight, bias):
    n, c, h, w = x.shape
    model = tandem.Model.from_yaml(MODEL.format(n=n, c=c, h=h, w=w))
    model.load_state_dict({"bn.weight": weight, "bn.bias": bias, "bn.running_mean": torch.zeros(c),
                           "bn.running_var": torch.ones(c), "bn.num_batches_tracked": torch.tensor(0)})
    model.zero_grad()
    dx = model.backward({"x": x}, {"bn": dy}, training=True)["x"]
    grads, state = model.gradients(), model.state_dict()
    return {"dx": dx, "dweight": torch.from_numpy(numpy.array(grads["bn.weight"])),
            "dbias": torch.from_numpy(numpy.array(grads["bn.bias"])),
            "running_var": torch.from_numpy(numpy.array(state["bn.running_var"])),
            "running_mean": torch.from_numpy(numpy.array(state["bn.running_mean"]))}


def main():
    torch.manual_seed(0)
    channels = 4
    print("%-26s" % "values/channel, mean, std" + "".join("%22s" % k for k in
                                                          ("dx", "dweight", "dbias", "running_var", "running_mean")))
    for n, h, w in ((2, 1, 1), (2, 2, 2), (8, 4, 4), (32, 8, 8)):
        for mean, std in ((0, 1), (10, 1), (100, 0.1), (1000, 0.01)):
            x = (mean + std * torch.randn(n, channels, h, w)).float()
            dy = torch.randn(n, channels, h, w)
            weight, bias = torch.rand(channels) + 0.5, torch.randn(channels)
            exact = torch_run(x, dy, weight, bias, torch.float64)
            single = torch_run(x, dy, weight, bias, torch.float32)
            ours = tandem_run(x, dy, weight, bias)
            row = "%-26s" % ("%d, %g, %g" % (n * h * w, mean, std))
            for k in exact:
                scale = exact[k].abs().max()
                error = lambda got: float((got.double() - exact[k]).abs().max() / scale)  # noqa: E731
                row += "%22s" % ("%.1e / %.1e" % (error(single[k]), error(ours[k])))
            print(row)


if __name__ == "__main__":
    main()

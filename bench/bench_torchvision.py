#!/usr/bin/python3
"""torchvision's models in Tandem (through tandem.from_torch) against PyTorch, in one run,
on the same machine and threads.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_torchvision.py [--models resnet50 vgg11 resnet18]
        [--rounds 5] [--image 224] [--json OUT]

Per model (random weights, eval mode), inference at batch 1 and 8:
  - Tandem fp32 (inference regions on: a convolution with its batch norm, activations and
    residual add as one oneDNN primitive, channels in oneDNN's blocks) and bf16 (precision:
    bf16: AMX or avx512_bf16 convolutions, channels-last);
  - PyTorch eager, channels_last, torch.jit.optimize_for_inference (freeze + oneDNN
    fusion) and bf16 autocast (channels_last), each as a speed-minded user would run them;
and a training step at batch 8 (forward in train mode, backward to every parameter and the
input; no optimizer: both sides' optimizers cost the same elementwise pass): Tandem's
Model.backward(training=True) against torch's forward + backward.

Times are medians over --rounds calls after a warm-up, the two sides alternated; ratios are
Tandem / PyTorch's fastest setting of the same precision (lower is better). GFLOP/s: the
multiply-adds of the convolutions and linear layers (counted from torch's shapes) times 2
over the whole forward's time, against the peaks bench/fma_peak and bench/bf16_peak
measure (when built: build/bench/).
"""
import os

THREADS = 2
os.environ["OMP_NUM_THREADS"] = str(THREADS)  # before torch is imported
os.environ.setdefault("MKL_NUM_THREADS", str(THREADS))

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torchvision.models as tv  # noqa: E402

import tandem  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def multiply_adds(module, x):
    """Multiply-adds of every Conv2d and Linear in one forward of `x`."""
    total = [0]

    def conv(m, args, out):
        total[0] += out.numel() * (m.in_channels // m.groups) * m.kernel_size[0] * m.kernel_size[1]

    def linear(m, args, out):
        total[0] += out.numel() * m.in_features

    hooks = [m.register_forward_hook(conv) for m in module.modules() if isinstance(m, torch.nn.Conv2d)]
    hooks += [m.register_forward_hook(linear) for m in module.modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        module(x)
    for h in hooks:
        h.remove()
    return total[0]


def median_ms(call, rounds):
    call()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def peak(name):
    path = os.path.join(ROOT, "build", "bench", name)
    if not os.path.exists(path):
        return None
    try:
        return json.loads(subprocess.run([path], capture_output=True, text=True, timeout=120).stdout)["gflops"]
    except (subprocess.SubprocessError, ValueError, KeyError):
        return None


def inference(name, module, batch, image, rounds):
    x = torch.randn(batch, 3, image, image)
    row = {"model": name, "batch": batch}
    ours = tandem.from_torch(module, (x,), check=False)
    ours_bf16 = tandem.from_torch(module, (x,), check=False)
    ours_bf16.precision = "bf16"
    with torch.no_grad():
        cl = module.to(memory_format=torch.channels_last)
        xc = x.to(memory_format=torch.channels_last)
        frozen = torch.jit.optimize_for_inference(torch.jit.trace(module, x))
        sides = {
            "tandem_fp32": lambda: ours(x),
            "tandem_bf16": lambda: ours_bf16(x),
            "torch_eager": lambda: module(x),
            "torch_channels_last": lambda: cl(xc),
            "torch_optimize_for_inference": lambda: frozen(x),
        }

        def autocast():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                cl(xc)

        sides["torch_bf16_autocast"] = autocast
        for key, call in sides.items():
            row[key + "_ms"] = median_ms(call, rounds)
    module.to(memory_format=torch.contiguous_format)
    fp32_torch = min(row["torch_eager_ms"], row["torch_channels_last_ms"], row["torch_optimize_for_inference_ms"])
    row["fp32_ratio"] = row["tandem_fp32_ms"] / fp32_torch
    row["bf16_ratio"] = row["tandem_bf16_ms"] / row["torch_bf16_autocast_ms"]
    flops = 2 * multiply_adds(module, x)
    row["gflop"] = flops / 1e9
    row["tandem_fp32_gflops"] = flops / row["tandem_fp32_ms"] / 1e6
    row["tandem_bf16_gflops"] = flops / row["tandem_bf16_ms"] / 1e6
    return row


def training(name, module, batch, image, rounds):
    x = torch.randn(batch, 3, image, image)
    ours = tandem.from_torch(module, (x,), check=False)
    module.train()
    grad = torch.randn(module(x).shape)

    def torch_step():
        module.zero_grad()
        leaf = x.clone().requires_grad_()
        module(leaf).backward(grad)

    def tandem_step():
        ours.zero_grad()
        ours.backward({"x": x}, {"output": grad}, training=True)

    row = {"model": name, "batch": batch, "tandem_ms": median_ms(tandem_step, rounds),
           "torch_ms": median_ms(torch_step, rounds)}
    module.eval()
    row["ratio"] = row["tandem_ms"] / row["torch_ms"]
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="*", default=["resnet50", "vgg11", "resnet18"])
    parser.add_argument("--train-models", nargs="+", default=["resnet18"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    tandem.set_threads(THREADS)
    torch.manual_seed(0)
    report = {"threads": THREADS, "fma_peak_gflops": peak("fma_peak"), "bf16_peak_gflops": peak("bf16_peak"),
              "inference": [], "training": []}
    print("peaks (GFLOP/s, %d threads): fp32 %s, bf16 %s" % (THREADS, report["fma_peak_gflops"],
                                                            report["bf16_peak_gflops"]))
    print("%-10s %5s %9s %9s %9s %9s %9s %9s %7s %7s %8s" % (
        "model", "batch", "tandem32", "tandem16", "eager", "ch_last", "optinf", "autocast", "x fp32", "x bf16",
        "GFLOP/s"))
    for name in args.models:
        module = getattr(tv, name)(weights=None).eval()
        for batch in args.batches:
            r = inference(name, module, batch, args.image, args.rounds)
            report["inference"].append(r)
            print("%-10s %5d %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %7.2f %7.2f %8.0f" % (
                name, batch, r["tandem_fp32_ms"], r["tandem_bf16_ms"], r["torch_eager_ms"],
                r["torch_channels_last_ms"], r["torch_optimize_for_inference_ms"], r["torch_bf16_autocast_ms"],
                r["fp32_ratio"], r["bf16_ratio"], r["tandem_fp32_gflops"]), flush=True)
    for name in args.train_models:
        module = getattr(tv, name)(weights=None)
        r = training(name, module, 8, args.image, args.rounds)
        report["training"].append(r)
        print("training step %s batch 8: tandem %.1f ms, torch %.1f ms, x %.2f" % (
            name, r["tandem_ms"], r["torch_ms"], r["ratio"]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Mixed precision on the CPU: fp32 against bf16, Tandem and PyTorch, in one run.

    /usr/bin/python3 bench/bench_precision.py [--tandem build/tandem] [--rounds 5] [--json OUT]

For each config, batch and mode (inference; a training step), four contestants are timed
in alternating order for --rounds rounds:
  torch fp32      the model built by tests/oracle/tandem_torch.py, 2 threads
  torch bf16      the same under torch.autocast("cpu", dtype=torch.bfloat16)
  tandem fp32     `tandem run CONFIG --batch B --repeat R --json` (inference), or
                  `tandem train COPY --bench-steps R --batch B --json` (training)
  tandem bf16     the same with --precision bf16
Inference runs PyTorch in eval mode under torch.inference_mode; a training step is
bench_training.py's (zero_grad, forward, its mse_loss, backward, Adam), the forward and
the loss's input under autocast for torch bf16 (the loss itself in fp32, as Tandem's).
Each measurement is the median per-call time of R calls; the table gives the medians over
the rounds. GFLOP/s counts 2*M*K*N per linear layer (three times that for a training step:
forward, backward data, backward weights); bench/bf16_peak and bench/fma_peak give this
machine's peaks on the spot.
Targets: tandem bf16 / torch bf16 <= 0.95 at batch 256 and <= 0.5 at batch 1.
"""
import os

THREADS = 2
os.environ["OMP_NUM_THREADS"] = str(THREADS)  # before torch is imported
os.environ.setdefault("MKL_NUM_THREADS", str(THREADS))

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import torch  # noqa: E402

import tandem_torch as tt  # noqa: E402
from bench_common import BenchError, find_tandem, fmt, run_tandem_json, tandem_timing  # noqa: E402
from bench_training import LOSSES, TorchStep, training_copy  # noqa: E402

DEFAULT_CONFIGS = ["configs/mlp_4x1024.yaml"]
DEFAULT_BATCHES = [1, 32, 256]
TARGETS = {1: 0.5, 256: 0.95}  # batch -> max tandem bf16 / torch bf16 time ratio
CONTESTANTS = ("torch fp32", "torch bf16", "tandem fp32", "tandem bf16")


def autocast(on):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=on)


class FloatValues(dict):
    """Model.values() whose entries read as float32: the loss runs in fp32, as Tandem's."""

    def __getitem__(self, key):
        v = dict.__getitem__(self, key)
        return v.float() if v.is_floating_point() else v


class AutocastStep(TorchStep):
    """bench_training's step with the forward under autocast (bf16 matrix work)."""

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        with autocast(True):
            vals = FloatValues(self.model.values(self.inputs, self.bindings))
        loss = tt.loss_fn(self.spec, vals, self.targets)
        del vals
        loss.backward()
        self.opt.step()
        return loss


def timed(fn, repeat):
    """Median per-call milliseconds of `repeat` calls of fn()."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def torch_inference(cfg_path, batch, bf16):
    """A function running one forward (under autocast with bf16), and its linear FLOPs."""
    torch.manual_seed(0)
    model, spec = tt.build_model(cfg_path)
    model.eval()
    inputs = tt.draw_inputs(spec, {"batch": batch}, torch.Generator().manual_seed(batch), pad_prob=0.0)

    def run():
        with torch.inference_mode(), autocast(bf16):
            model(inputs)
    return run, tt.linear_flops(model, inputs)


def tandem_ms(tandem, mode, config, batch, precision, repeat, timeout):
    if mode == "inference":
        cmd = [tandem, "run", config, "--batch", str(batch), "--repeat", str(repeat)]
    else:
        cmd = [tandem, "train", config, "--batch", str(batch), "--bench-steps", str(repeat)]
    cmd += ["--precision", precision, "--json"]
    return tandem_timing(run_tandem_json(cmd, timeout, THREADS))[0]


def peak(tandem, program):
    """GFLOP/s from bench/<program> built beside the tandem binary, or None."""
    exe = os.path.join(os.path.dirname(tandem), "bench", program)
    if not os.path.exists(exe):
        print("warning: %s not built; no peak fraction" % exe, file=sys.stderr)
        return None
    r = subprocess.run([exe], capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(THREADS)))
    return json.loads(r.stdout)["gflops"] if r.returncode == 0 else None


def measure(args, tandem, cfg, mode, batch, tmpdir):
    cfg_path = cfg if os.path.isabs(cfg) else os.path.join(ROOT, cfg)
    if mode == "inference":
        torch_fns = {bf16: torch_inference(cfg_path, batch, bf16)[0] for bf16 in (False, True)}
        flops = torch_inference(cfg_path, batch, False)[1]
        tandem_cfg = cfg_path
    else:
        tandem_cfg = training_copy(cfg, cfg_path, batch, tmpdir)
        steps = {False: TorchStep(tandem_cfg, {"batch": batch}, batch),
                 True: AutocastStep(tandem_cfg, {"batch": batch}, batch)}
        torch_fns = {bf16: steps[bf16].step for bf16 in (False, True)}
        flops = 3 * tt.linear_flops(steps[False].model, steps[False].inputs)
    # R from PyTorch's fp32 time: about target_s worth of calls
    for _ in range(3):
        torch_fns[False]()
    per_call = timed(torch_fns[False], 3) * 1e-3
    repeat = args.repeat or max(5, min(2000, int(round(args.target_s / max(per_call, 1e-7)))))
    for fn in torch_fns.values():
        fn()  # warm-up
    rounds = {c: [] for c in CONTESTANTS}
    for rnd in range(args.rounds):
        order = CONTESTANTS if rnd % 2 == 0 else tuple(reversed(CONTESTANTS))
        for who in order:
            if who.startswith("torch"):
                rounds[who].append(timed(torch_fns[who.endswith("bf16")], repeat))
            else:
                rounds[who].append(tandem_ms(tandem, mode, tandem_cfg, batch, who.split()[1], repeat, args.timeout))
    ms = {c: statistics.median(v) for c, v in rounds.items()}
    ratio = ms["tandem bf16"] / ms["torch bf16"]
    target = TARGETS.get(batch)
    return {
        "config": cfg, "mode": mode, "batch": batch, "repeat": repeat, "flops": flops,
        "ms": ms, "ms_rounds": rounds, "gflops": {c: flops / (v * 1e-3) / 1e9 for c, v in ms.items()},
        "tandem_bf16_over_torch_bf16": ratio,
        "tandem_bf16_over_tandem_fp32": ms["tandem bf16"] / ms["tandem fp32"],
        "torch_bf16_over_torch_fp32": ms["torch bf16"] / ms["torch fp32"],
        "target_ratio": target, "pass": None if target is None else ratio <= target,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tandem", default=os.environ.get("TANDEM", "build/tandem"),
                    help="the tandem CLI (default: $TANDEM or build/tandem)")
    ap.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS, help="configs with a loss in bench_training.py")
    ap.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)), help="comma-separated")
    ap.add_argument("--modes", default="inference,training", help="comma-separated: inference, training")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    ap.add_argument("--repeat", type=int, default=None, help="calls per measurement (default: ~target-s worth)")
    ap.add_argument("--target-s", type=float, default=0.25, help="seconds of PyTorch fp32 per measurement")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per Tandem call")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--json", dest="json_out", default=None, help="write the results here")
    args = ap.parse_args(argv)

    torch.set_num_threads(THREADS)
    try:
        tandem = find_tandem(args.tandem)
    except BenchError as e:
        print("bench_precision: %s" % e, file=sys.stderr)
        return 2
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    modes = [m for m in args.modes.split(",") if m.strip()]
    for cfg in args.configs:
        if "training" in modes and cfg not in LOSSES:
            print("bench_precision: %s has no loss in bench_training.py's LOSSES" % cfg, file=sys.stderr)
            return 2
    load1 = os.getloadavg()[0]
    print("bench_precision: torch %s, %d threads, %s; tandem: %s; rounds %d; load average %.2f"
          % (torch.__version__, THREADS, platform.processor() or platform.machine(), tandem, args.rounds, load1),
          flush=True)
    if load1 > 0.5:
        print("warning: load average %.2f: other work is running; timings will be noisy" % load1, file=sys.stderr)
    peaks = {"bf16": peak(tandem, "bf16_peak"), "fp32": peak(tandem, "fma_peak")}
    results = []
    with tempfile.TemporaryDirectory() as tmpdir:
        for cfg in args.configs:
            for mode in modes:
                for batch in batches:
                    try:
                        r = measure(args, tandem, cfg, mode, batch, tmpdir)
                    except BenchError as e:
                        print("bench_precision: %s" % e, file=sys.stderr)
                        return 2
                    results.append(r)
                    print("  %-24s %-9s b=%-4d R=%-5d %s" % (cfg, mode, batch, r["repeat"], "  ".join(
                        "%s %.4f ms" % (c, r["ms"][c]) for c in CONTESTANTS)), flush=True)
    load_end = os.getloadavg()[0]

    print()
    head = "%-24s %-9s %5s %10s %10s %10s %10s %9s %9s %9s %11s %8s %5s" % (
        "config", "mode", "batch", "torch fp32", "torch bf16", "tand fp32", "tand bf16", "tb/pb", "tb/tf",
        "pb/pf", "tand bf16 GF", "target", "")
    print(head)
    print("-" * len(head))
    failed = False
    for r in results:
        failed |= r["pass"] is False
        ms = r["ms"]
        print("%-24s %-9s %5d %10.4f %10.4f %10.4f %10.4f %9.3f %9.3f %9.3f %11.1f %8s %5s" % (
            r["config"], r["mode"], r["batch"], ms["torch fp32"], ms["torch bf16"], ms["tandem fp32"],
            ms["tandem bf16"], r["tandem_bf16_over_torch_bf16"], r["tandem_bf16_over_tandem_fp32"],
            r["torch_bf16_over_torch_fp32"], r["gflops"]["tandem bf16"],
            "<= %.2fx" % r["target_ratio"] if r["target_ratio"] else "-",
            {True: "PASS", False: "FAIL", None: "-"}[r["pass"]]))
    print("\ntb/pb: Tandem bf16 / PyTorch autocast bf16; tb/tf: Tandem bf16 / Tandem fp32; pb/pf: PyTorch's "
          "autocast / its fp32 (time ratios; lower is better). Targets: tb/pb <= 0.5x at batch 1, <= 0.95x at 256.")
    print("load average %.2f at the start, %.2f at the end" % (load1, load_end))
    for kind, value in peaks.items():
        if value:
            print("%s peak of this machine, %d threads (bench/%s): %.1f GFLOP/s" % (
                kind, THREADS, "bf16_peak" if kind == "bf16" else "fma_peak", value))
    if peaks["bf16"]:
        for r in results:
            if r["batch"] >= 256:
                r["tandem_bf16_peak_fraction"] = r["gflops"]["tandem bf16"] / peaks["bf16"]
                print("  %-24s %-9s b=%-4d tandem bf16 %.1f GFLOP/s = %.0f%% of the bf16 peak (torch autocast %.0f%%)"
                      % (r["config"], r["mode"], r["batch"], r["gflops"]["tandem bf16"],
                         100 * r["tandem_bf16_peak_fraction"], 100 * r["gflops"]["torch bf16"] / peaks["bf16"]))
    print("some targets missed" if failed else "all targets met")
    if args.json_out:
        doc = {"threads": THREADS, "load_average_at_start": load1, "load_average_at_end": load_end,
               "torch_version": torch.__version__, "rounds": args.rounds, "tandem": tandem,
               "machine": platform.platform(), "cpu_count": os.cpu_count(), "peaks_gflops": peaks,
               "targets": {str(k): v for k, v in TARGETS.items()}, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
               "results": results}
        with open(args.json_out, "w") as f:
            json.dump(doc, f, indent=1)
        print("wrote %s" % args.json_out)
    return 1 if (failed and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())

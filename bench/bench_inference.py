#!/usr/bin/python3
"""Inference benchmark: Tandem vs PyTorch, in one run, on the same machine and threads.

    /usr/bin/python3 bench/bench_inference.py [--tandem build/tandem] [--rounds 5] [--json OUT]

For each config and batch, PyTorch (the model built by tests/oracle/tandem_torch.py,
eval, inference_mode, 2 threads) and Tandem (`tandem run CONFIG --batch B --bind
tags=8*B --repeat R --json`, OMP_NUM_THREADS=2) are measured alternately for --rounds
rounds; each measurement is the median per-call time over R calls; the table shows the
medians over the rounds. GFLOP/s counts 2*M*K*N per linear layer.
Targets: tandem/torch <= 0.5 at batch 1 and <= 0.9 at batch 256.
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
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))

import torch  # noqa: E402

import tandem_torch as tt  # noqa: E402
from bench_common import (BenchError, bindings_for, find_tandem, fmt, parse_binds,  # noqa: E402
                          run_tandem_json, tandem_timing)

DEFAULT_CONFIGS = ["configs/seed_mlp.yaml", "configs/mlp_4x1024.yaml", "configs/recommender.yaml",
                   "bench/configs/linear_1024.yaml"]
GEMM_BOUND = {"bench/configs/linear_1024.yaml", "configs/mlp_4x1024.yaml"}  # judged against the fp32 peak
PEAK_FRACTION_TARGET = 0.8
DEFAULT_BATCHES = [1, 32, 256]
TARGETS = {1: 0.5, 256: 0.9}  # batch -> max tandem/torch time ratio


# ----------------------------------------------------------------------------- torch

def torch_time(model, inputs, repeat):
    """Median (and min) per-call milliseconds over `repeat` calls."""
    times = []
    with torch.inference_mode():
        for _ in range(repeat):
            t0 = time.perf_counter()
            model(inputs)
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, min(times) * 1e3


def torch_warmup(model, inputs, min_calls=3, min_s=0.2):
    """Warms up; returns the median per-call seconds of the warm-up calls (for choosing R)."""
    times = []
    with torch.inference_mode():
        t_start = time.perf_counter()
        while len(times) < min_calls or time.perf_counter() - t_start < min_s:
            t0 = time.perf_counter()
            model(inputs)
            times.append(time.perf_counter() - t0)
            if len(times) >= 20000:
                break
    return statistics.median(times[1:] or times)


# ----------------------------------------------------------------------------- tandem

def tandem_time(tandem, config, batch, bindings, repeat, timeout):
    cmd = [tandem, "run", config, "--batch", str(batch)]
    for k, v in bindings.items():
        if k != "batch":
            cmd += ["--bind", "%s=%d" % (k, v)]
    cmd += ["--repeat", str(repeat), "--json"]
    doc = run_tandem_json(cmd, timeout, THREADS)
    median, fastest = tandem_timing(doc)
    timing = doc["timing"]
    if int(timing.get("repeat", repeat)) != repeat:
        print("warning: tandem reports repeat %s, asked %d" % (timing.get("repeat"), repeat), file=sys.stderr)
    return median, fastest, doc


# ----------------------------------------------------------------------------- main

def fma_peak(tandem):
    """The machine's fp32 FMA peak in GFLOP/s with THREADS threads, from bench/fma_peak
    built beside the tandem binary; None when it is not there."""
    if tandem is None:
        return None
    exe = os.path.join(os.path.dirname(tandem), "bench", "fma_peak")
    if not os.path.exists(exe):
        print("warning: %s not built; no peak fraction" % exe, file=sys.stderr)
        return None
    r = subprocess.run([exe], capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(THREADS)))
    return json.loads(r.stdout)["gflops"] if r.returncode == 0 else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tandem", default=os.environ.get("TANDEM", "build/tandem"),
                    help="the tandem CLI (default: $TANDEM or build/tandem)")
    ap.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS)
    ap.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)), help="comma-separated")
    ap.add_argument("--rounds", type=int, default=5, help="alternating Tandem/PyTorch rounds (default 5)")
    ap.add_argument("--repeat", type=int, default=None, help="calls per measurement (default: ~0.25 s worth)")
    ap.add_argument("--target-s", type=float, default=0.25, help="seconds per measurement when choosing R")
    ap.add_argument("--bind", action="append", default=[], help="NAME=EXPR in B (default tags=8*B)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per Tandem call")
    ap.add_argument("--torch-only", action="store_true", help="measure PyTorch only")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--json", dest="json_out", default=None, help="write the results here")
    args = ap.parse_args(argv)

    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    bind_exprs = parse_binds(args.bind)
    torch.set_num_threads(THREADS)
    tandem = None
    if not args.torch_only:
        try:
            tandem = find_tandem(args.tandem)
        except BenchError as e:
            print("bench_inference: %s" % e, file=sys.stderr)
            return 2

    print("bench_inference: torch %s, %d threads, %s; tandem: %s; rounds %d"
          % (torch.__version__, torch.get_num_threads(), platform.processor() or platform.machine(),
             tandem or "(skipped)", args.rounds), flush=True)
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        load1 = None
    if load1 is not None and load1 > 0.5:
        print("warning: load average %.2f: other work is running; timings with %d threads will be noisy"
              % (load1, THREADS), file=sys.stderr)
    results = []
    failed = False
    for cfg in args.configs:
        cfg_path = cfg if os.path.isabs(cfg) else os.path.join(ROOT, cfg)
        torch.manual_seed(0)
        model, spec = tt.build_model(cfg_path)
        model.eval()
        for batch in batches:
            try:
                bindings = bindings_for(spec, batch, bind_exprs)
            except BenchError as e:
                print("bench_inference: %s" % e, file=sys.stderr)
                return 2
            inputs = tt.draw_inputs(spec, bindings, torch.Generator().manual_seed(batch), pad_prob=0.0)
            flops = tt.linear_flops(model, inputs)
            per_call = torch_warmup(model, inputs)
            repeat = args.repeat or max(5, min(5000, int(round(args.target_s / max(per_call, 1e-7)))))
            t_rounds, t_mins, n_rounds, n_mins, tandem_doc = [], [], [], [], None
            for rnd in range(args.rounds):
                order = ("tandem", "torch") if rnd % 2 == 0 else ("torch", "tandem")
                for who in order:
                    if who == "torch":
                        med, mn = torch_time(model, inputs, repeat)
                        t_rounds.append(med)
                        t_mins.append(mn)
                    elif tandem:
                        try:
                            med, mn, tandem_doc = tandem_time(tandem, cfg_path, batch, bindings, repeat, args.timeout)
                        except BenchError as e:
                            print("bench_inference: tandem failed on %s batch %d: %s" % (cfg, batch, e),
                                  file=sys.stderr)
                            return 2
                        n_rounds.append(med)
                        n_mins.append(mn)
            torch_ms = statistics.median(t_rounds)
            tandem_ms = statistics.median(n_rounds) if n_rounds else None
            ratio = tandem_ms / torch_ms if tandem_ms is not None else None
            target = TARGETS.get(batch)
            ok = None if (target is None or ratio is None) else ratio <= target
            failed |= ok is False
            gf = lambda ms: None if ms is None else flops / (ms * 1e-3) / 1e9  # noqa: E731
            results.append({
                "config": cfg, "model": spec.name, "batch": batch, "bindings": bindings, "repeat": repeat,
                "torch_ms": torch_ms, "torch_ms_rounds": t_rounds, "torch_min_ms": min(t_mins),
                "tandem_ms": tandem_ms, "tandem_ms_rounds": n_rounds,
                "tandem_min_ms": min(n_mins) if n_mins else None,
                "ratio": ratio, "linear_flops": flops,
                "torch_gflops": gf(torch_ms), "tandem_gflops": gf(tandem_ms),
                "target_ratio": target, "pass": ok,
            })
            print("  %-28s b=%-4d R=%-5d torch %9.4f ms  tandem %s ms" % (cfg, batch, repeat, torch_ms, fmt(tandem_ms, "%9.4f")),
                  flush=True)

    peak = fma_peak(tandem)
    print()
    head = "%-28s %6s %11s %11s %8s %11s %11s %8s %6s" % (
        "config", "batch", "torch ms", "tandem ms", "ratio", "torch GF/s", "tandem GF/s", "target", "")
    print(head)
    print("-" * len(head))
    for r in results:
        print("%-28s %6d %11.4f %11s %8s %11s %11s %8s %6s" % (
            r["config"], r["batch"], r["torch_ms"], fmt(r["tandem_ms"], "%.4f"), fmt(r["ratio"], "%.3f"),
            fmt(r["torch_gflops"], "%.2f"), fmt(r["tandem_gflops"], "%.2f"),
            "<= %.1fx" % r["target_ratio"] if r["target_ratio"] else "-",
            {True: "PASS", False: "FAIL", None: "-"}[r["pass"]]))
    print("\ntargets: tandem/torch <= 0.5x at batch 1, <= 0.9x at batch 256 (time ratio; lower is better)")
    if peak:
        print("\nfp32 FMA peak of this machine, %d threads (bench/fma_peak): %.1f GFLOP/s" % (THREADS, peak))
        for r in results:
            if r["config"] in GEMM_BOUND and r["batch"] >= 256 and r["tandem_gflops"]:
                r["tandem_peak_fraction"] = r["tandem_gflops"] / peak
                ok = r["tandem_peak_fraction"] >= PEAK_FRACTION_TARGET
                failed |= not ok
                print("  %-28s b=%-4d tandem %.1f GFLOP/s = %.0f%% of peak (torch %.0f%%)  target >= %.0f%%  %s" % (
                    r["config"], r["batch"], r["tandem_gflops"], 100 * r["tandem_peak_fraction"],
                    100 * r["torch_gflops"] / peak, 100 * PEAK_FRACTION_TARGET, "PASS" if ok else "FAIL"))
    if tandem is None:
        print("(tandem not measured: --torch-only)")
    elif failed:
        print("some targets missed")
    else:
        print("all targets met")

    if args.json_out:
        doc = {
            "threads": THREADS, "load_average_at_start": load1, "torch_version": torch.__version__, "rounds": args.rounds,
            "tandem": tandem, "machine": platform.platform(), "cpu_count": os.cpu_count(),
            "targets": {str(k): v for k, v in TARGETS.items()}, "fma_peak_gflops": peak,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "results": results,
        }
        with open(args.json_out, "w") as f:
            json.dump(doc, f, indent=1)
        print("wrote %s" % args.json_out)
    return 1 if (failed and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())

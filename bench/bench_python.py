#!/usr/bin/python3
"""What calling Tandem from Python costs: the per-call time of model.forward from Python
(numpy arrays in and out, and torch tensors in and out) against the same forward timed
inside the CLI (`tandem run --repeat R --json`, Model::forward alone) and timed the same way
in C++ inside this Python process (the binding's _time_forward), and against PyTorch eager
on the same model and weights (tandem.to_torch, eval, inference_mode), at batch 1 and 256,
on the same threads.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_python.py [--rounds 5] [--json OUT]

Each measurement is the median per-call time over R calls (about --target-s seconds'
worth); they are measured in turn for --rounds rounds and the table shows the medians over
the rounds. "+us" is what the binding adds: Python's time less the C++ call's in the same
process; "spread" is how far that C++ call's rounds lie apart (a difference smaller than it
says nothing). The CLI's time is there too; where the forward itself is long, the same C++ call
runs a few per cent slower in the Python process than in the CLI's (memory-bound kernels
in another process's memory layout), which is not the binding's.
Targets: Python adds <= 5 us per call; Tandem from Python takes <= 0.5x PyTorch's time at
batch 1.
"""
import os

THREADS = 2
os.environ["OMP_NUM_THREADS"] = str(THREADS)  # before torch and tandem start their OpenMP teams
os.environ.setdefault("MKL_NUM_THREADS", str(THREADS))

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))

import torch  # noqa: E402

import tandem  # noqa: E402
from bench_common import IDLE_BEFORE_TANDEM_S, BenchError, find_tandem, run_tandem_json, tandem_timing  # noqa: E402

DEFAULT_CONFIGS = ["configs/seed_mlp.yaml", "configs/digits_mlp.yaml", "configs/mlp_4x1024.yaml"]
DEFAULT_BATCHES = [1, 256]
ADDED_TARGET_US = 5.0
RATIO_TARGET_BATCH_1 = 0.5


def per_call_us(call, repeat):
    """Median microseconds per call of `call()` over `repeat` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1e3


def calls_for(call, target_s):
    """How many calls take about `target_s` seconds (after warming up)."""
    start = time.perf_counter()
    n = 0
    while n < 5 or time.perf_counter() - start < 0.1:
        call()
        n += 1
    each = (time.perf_counter() - start) / n
    return max(20, min(200000, int(target_s / each)))


def cli_us(tandem_cli, config, batch, repeat, timeout):
    doc = run_tandem_json([tandem_cli, "run", config, "--batch", str(batch), "--repeat", str(repeat), "--json"],
                          timeout, THREADS)
    return tandem_timing(doc)[0] * 1e3


def measure(tandem_cli, config, batch, rounds, target_s, timeout):
    model = tandem.Model.load(config)
    x = model.random_inputs(batch=batch, seed=0)
    name = model.inputs[0]["name"]
    xt = {k: torch.from_numpy(v) for k, v in x.items()}
    twin = tandem.to_torch(model)
    twin.eval()

    def python_numpy():
        return model(**x)

    def python_torch():
        return model(**xt)

    def pytorch():
        with torch.inference_mode():
            return twin(**xt)

    repeat = calls_for(python_numpy, target_s)
    torch_repeat = calls_for(pytorch, target_s)
    series = {"cli": [], "cpp_here": [], "python_numpy": [], "python_torch": [], "pytorch": []}
    for _ in range(rounds):
        time.sleep(IDLE_BEFORE_TANDEM_S)  # torch's OpenMP workers spin a while after its last call
        series["cli"].append(cli_us(tandem_cli, config, batch, repeat, timeout))
        series["cpp_here"].append(model._time_forward(x, repeat))
        series["python_numpy"].append(per_call_us(python_numpy, repeat))
        series["python_torch"].append(per_call_us(python_torch, repeat))
        series["pytorch"].append(per_call_us(pytorch, torch_repeat))
    result = {k: statistics.median(v) for k, v in series.items()}
    result.update(config=os.path.relpath(config, ROOT), batch=batch, repeat=repeat, input=name,
                  spread_us=max(series["cpp_here"]) - min(series["cpp_here"]),
                  added_numpy_us=result["python_numpy"] - result["cpp_here"],
                  added_torch_us=result["python_torch"] - result["cpp_here"],
                  over_cli_numpy_us=result["python_numpy"] - result["cli"],
                  ratio_to_pytorch=result["python_numpy"] / result["pytorch"], rounds=series)
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tandem", default=os.environ.get("TANDEM", "build/tandem"), help="the tandem CLI")
    ap.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS)
    ap.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)), help="comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--target-s", type=float, default=0.25, help="seconds per measurement")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--json", dest="json_out", default=None, help="write the results here")
    args = ap.parse_args(argv)
    try:
        tandem_cli = find_tandem(args.tandem)
    except BenchError as e:
        print("bench_python: %s" % e, file=sys.stderr)
        return 2
    torch.set_num_threads(THREADS)
    load_before = os.getloadavg()
    print("bench_python: torch %s, %d threads, %s, %d cores; load average %.2f %.2f %.2f" % (
        torch.__version__, THREADS, platform.processor() or platform.machine(), os.cpu_count(), *load_before),
        flush=True)
    print("%-26s %5s %9s %9s %7s %9s %7s %9s %7s %9s %8s" % (
        "model", "batch", "CLI us", "C++ here", "spread", "numpy us", "+us", "torch us", "+us", "PyTorch", "/PyTorch"))
    results = []
    for config in args.configs:
        for batch in [int(b) for b in args.batches.split(",")]:
            r = measure(tandem_cli, os.path.join(ROOT, config), batch, args.rounds, args.target_s, args.timeout)
            results.append(r)
            print("%-26s %5d %9.2f %9.2f %7.2f %9.2f %7.2f %9.2f %7.2f %9.2f %8.2f" % (
                r["config"], batch, r["cli"], r["cpp_here"], r["spread_us"], r["python_numpy"], r["added_numpy_us"],
                r["python_torch"], r["added_torch_us"], r["pytorch"], r["ratio_to_pytorch"]), flush=True)
    load_after = os.getloadavg()
    # Where the C++ call's own rounds spread by more than a microsecond, a few microseconds
    # more or less from Python cannot be told from that spread.
    telling = [r for r in results if r["spread_us"] < 1.0]
    ratios_1 = [r["ratio_to_pytorch"] for r in results if r["batch"] == 1]
    if telling:
        print("Python adds at most %.2f us per call with numpy, %.2f us with torch, where the C++ call is steady "
              "enough to tell (spread < 1 us: %s) (target <= %.0f)" % (
                  max(r["added_numpy_us"] for r in telling), max(r["added_torch_us"] for r in telling),
                  ", ".join("%s at %d" % (os.path.basename(r["config"]), r["batch"]) for r in telling),
                  ADDED_TARGET_US))
    print("Tandem from Python at batch 1: %s x PyTorch's time (target <= %.1f); load average after %.2f %.2f %.2f"
          % (", ".join("%.2f" % v for v in ratios_1), RATIO_TARGET_BATCH_1, *load_after))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"threads": THREADS, "torch": torch.__version__, "load_before": load_before,
                       "load_after": load_after, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

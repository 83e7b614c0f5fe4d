#!/usr/bin/python3
"""Data-parallel benchmark: what replication costs (issue 5).

    /usr/bin/python3 bench/bench_data_parallel.py [--tandem build/tandem] [--rounds 5] [--json OUT]

The same model three ways, each a `tandem train ... --bench-steps K --json` (one training
step: forward, loss, backward, SGD) and a `tandem run ... --repeat R --json` (inference):

  one     every layer on one simulated GPU (cuda:0): the unwrapped model;
  dp N    the model in a data_parallel block over N simulated GPUs, output on cuda:0.

Simulated GPUs compute with the host's cores, one kernel at a time on one compute thread
(backends/host_lanes.h), so N replicas do the one device's arithmetic in N chunks and
the difference between the two is what data parallelism adds: scattering the batch,
uploading each replica's weights, gathering the outputs, reducing the gradients into the
master, and the smaller GEMMs' lower efficiency. The table gives that difference as a
fraction of the data-parallel step, 1 - one / dp (target <= 5% at N = 2, batch 256).

Two models: bench/configs/dp_mlp.yaml, four 1024-wide linear layers and a cross-entropy
loss (~3 GFLOP a step for 12 MiB of parameters), and bench/configs/dp_sequence.yaml, a
feed-forward block over a sequence-first [16, batch, 256] tensor scattered along dim 1
(16x the arithmetic per parameter byte). Each step, every replica's device gets the
weights that changed and sends its gradients to the master on the host: on simulated
GPUs those copies are memcpys on the same two cores and memory bus as the kernels (a real
GPU's copy engines do them without the SMs), so their cost against the arithmetic is what
separates the two models.

After the timed rounds, one more training run of each under TANDEM_SIM_TRACE splits a
step by what the compute lane did (bench/trace_breakdown.py): "data-parallel work" is what
the data-parallel step spends beyond the one device on uploads (replicate), copies
(scatter, gather), gradient additions and the lane's idle waits (reduce), as a fraction
of its step (the issue's measure); "kernels' loss" is what the same arithmetic costs more
as N smaller kernels side by side, one core each, than as one kernel on both cores.
OMP_NUM_THREADS=2, alternating rounds, medians; a 0.5 s pause before every process.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

import bench_common as bc
import trace_breakdown

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
THREADS = 2
MODELS = ["dp_mlp", "dp_sequence"]


def config_for(model, devices):
    """The bench model wrapped in data_parallel over `devices` GPUs (0: unwrapped)."""
    with open(os.path.join(HERE, "configs", model + ".yaml")) as f:
        text = f.read()
    if devices == 0:
        text = "".join(line for line in text.splitlines(True) if not line.startswith("    data_parallel:"))
    else:
        listed = ", ".join("cuda:%d" % i for i in range(devices))
        text = text.replace("[cuda:0, cuda:1]", "[%s]" % listed)
    fd, path = tempfile.mkstemp(suffix=".yaml", prefix="dp_bench_")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def measure(tandem, path, gpus, batch, steps, repeat, place_all, timeout):
    place = ["--place", "*=cuda:0"] if place_all else []
    train = bc.run_tandem_json([tandem, "train", path, "--sim-gpus", str(gpus), "--batch", str(batch),
                                "--bench-steps", str(steps), "--json"] + place, timeout, THREADS)
    run = bc.run_tandem_json([tandem, "run", path, "--sim-gpus", str(gpus), "--batch", str(batch),
                              "--repeat", str(repeat), "--json"] + place, timeout, THREADS)
    return bc.tandem_timing(train)[0], bc.tandem_timing(run)[0]


def traced_breakdown(tandem, path, gpus, batch, steps, place_all, timeout):
    """One more training run under TANDEM_SIM_TRACE: where its steps' time went."""
    place = ["--place", "*=cuda:0"] if place_all else []
    fd, trace = tempfile.mkstemp(suffix=".json", prefix="dp_bench_trace_")
    os.close(fd)
    os.environ["TANDEM_SIM_TRACE"] = trace
    try:
        bc.run_tandem_json([tandem, "train", path, "--sim-gpus", str(gpus), "--batch", str(batch),
                            "--bench-steps", str(steps), "--json"] + place, timeout, THREADS)
        return trace_breakdown.breakdown(trace)
    finally:
        del os.environ["TANDEM_SIM_TRACE"]
        os.unlink(trace)


def print_breakdowns(breakdowns, counts):
    """What data parallelism added to a step, by kind, from the traced runs."""
    keys = ["step"] + trace_breakdown.CATEGORIES[:-1] + ["idle", "copy_engines"]
    print("\nWhere a training step went (ms, medians over a traced run; bench/trace_breakdown.py):")
    print("| model | devices | " + " | ".join(keys) + " | data-parallel work | kernels' loss |")
    print("| --- | --- |" + " ---: |" * (len(keys) + 2))
    for m in MODELS:
        one = breakdowns[(m, 0)]
        for n in [0] + counts:
            b = breakdowns[(m, n)]
            cells = " | ".join("%.2f" % (b[k] / 1000) for k in keys)
            if n == 0:
                print("| %s | one | %s | | |" % (m, cells))
                continue
            # replicate (uploads), scatter and gather (copies), reduce (reduction, and the
            # lane idle while gradients travel), beyond what one device spends on the same
            dp_work = sum(b[k] - one[k] for k in ["uploads", "copies", "reduction", "idle"])
            b["data_parallel_fraction"] = dp_work / b["step"]
            b["kernel_loss_fraction"] = (b["kernels"] - one["kernels"]) / b["step"]
            print("| %s | %d | %s | %.1f%% | %.1f%% |" % (m, n, cells, 100 * b["data_parallel_fraction"],
                                                         100 * b["kernel_loss_fraction"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tandem", default=os.environ.get("TANDEM", "build/tandem"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--devices", default="2,4", help="comma-separated replica counts")
    ap.add_argument("--steps", type=int, default=20, help="training steps per measurement")
    ap.add_argument("--repeat", type=int, default=40, help="forward calls per measurement")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--timeout", type=int, default=600)
    args = ap.parse_args(argv)
    tandem = bc.find_tandem(args.tandem)
    counts = [int(x) for x in args.devices.split(",")]
    paths = {(m, n): config_for(m, n) for m in MODELS for n in [0] + counts}
    samples = {key: [] for key in paths}
    breakdowns = {}
    try:
        for r in range(args.rounds):
            for (m, n), path in paths.items():
                samples[(m, n)].append(measure(tandem, path, max(n, 1), args.batch, args.steps, args.repeat, n == 0,
                                               args.timeout))
            print("round %d/%d done" % (r + 1, args.rounds), file=sys.stderr)
        for (m, n), path in paths.items():
            breakdowns[(m, n)] = traced_breakdown(tandem, path, max(n, 1), args.batch, args.steps, n == 0, args.timeout)
    finally:
        for p in paths.values():
            os.unlink(p)

    def med(key, i):
        return statistics.median(s[i] for s in samples[key])

    rows = []
    print("batch %d, %d threads, %d rounds (medians); one = unwrapped on one simulated GPU" %
          (args.batch, THREADS, args.rounds))
    print("| model | replicas | train step ms (one / dp) | overhead | <= 5% | forward ms (one / dp) | overhead |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: |")
    for m in MODELS:
        one_train, one_run = med((m, 0), 0), med((m, 0), 1)
        for n in counts:
            t, f = med((m, n), 0), med((m, n), 1)
            row = {"model": m, "replicas": n, "batch": args.batch, "one_train_ms": one_train, "dp_train_ms": t,
                   "train_overhead": 1 - one_train / t, "one_forward_ms": one_run, "dp_forward_ms": f,
                   "forward_overhead": 1 - one_run / f}
            rows.append(row)
            print("| %s | %d | %.2f / %.2f | %.1f%% | %s | %.2f / %.2f | %.1f%% |" % (
                m, n, one_train, t, 100 * row["train_overhead"], "yes" if row["train_overhead"] <= 0.05 else "NO",
                one_run, f, 100 * row["forward_overhead"]))
    print_breakdowns(breakdowns, counts)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "samples": {"%s/%d" % k: v for k, v in samples.items()},
                       "breakdowns_us": {"%s/%d" % k: v for k, v in breakdowns.items()}}, f, indent=2)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except bc.BenchError as e:
        print("bench_data_parallel: %s" % e, file=sys.stderr)
        sys.exit(2)

#!/usr/bin/python3
"""Table work: what an embedding table costs a training step (its layers' backward, the
gradient zeroing and the optimizer step), dense against `sparse: true` row gradients, and the
split (tables on the cpu, the rest on a GPU) against the cpu alone.

    /usr/bin/python3 bench/bench_table_work.py [--rounds 3] [--steps 40] [--json OUT]

Each run is `tandem train CONFIG --bench-steps N --trace T` on the bench recommender at batch
2048 (16,384 tag ids), the configs differing only in the tables' optimizer:
bench/configs/gpu_recommender_train_dense_sgd.yaml (dense tables, SGD),
..._sparse_sgd.yaml (`sparse: true`, SGD), gpu_recommender_train.yaml (dense, Adam) and
..._sparse_rowwise_adagrad.yaml (`sparse: true`, rowwise_adagrad); the MLPs take Adam in all
four; the two sparse ones run again with `--no-update-tables-in-backward` (their tables
updated in the optimizer step, not in their backward). From each trace, per step after the
warm-up: the table layers' backward spans (with the update when it runs in them), the
"gradients zeroed" span and the "optimizer step" span (the MLPs' Adam is in it: 10,000
parameters, some microseconds). The configs run alternated, `--rounds` times; medians.
Then the step time of the split (`--sim-gpus 1 --placement embeddings-on-cpu`) against the
cpu alone for the recommender and bench/configs/dlrm_split_train.yaml (8 tables,
rowwise_adagrad), the split also without starting on the next batch during a step's
backward (`--no-overlap-next-batch`; the split's default starts on it, docs/training.md) and
with its batches pipelined in micro-batches (`--micro-batches M` for each M of
`--micro-batches`, default 2,4). On a machine without a
GPU the GPU is simulated, computing on the same cores. Take it with nothing else running.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {
    "dense sgd": "bench/configs/gpu_recommender_train_dense_sgd.yaml",
    "sparse sgd": "bench/configs/gpu_recommender_train_sparse_sgd.yaml",
    "dense adam": "bench/configs/gpu_recommender_train.yaml",
    "sparse rowwise_adagrad": "bench/configs/gpu_recommender_train_sparse_rowwise_adagrad.yaml",
}
# the sparse configs again, their tables updated in the step after backward, not in it
AFTER_BACKWARD = ["--no-update-tables-in-backward"]
RUNS = {**{name: (config, []) for name, config in CONFIGS.items()},
        "sparse sgd, after backward": (CONFIGS["sparse sgd"], AFTER_BACKWARD),
        "sparse rowwise_adagrad, after backward": (CONFIGS["sparse rowwise_adagrad"], AFTER_BACKWARD)}
TABLES = ("'items'", "'tags'")
SPLIT = ["--sim-gpus", "1", "--placement", "embeddings-on-cpu"]


def run(tandem, config, steps, extra, trace=None):
    cmd = [tandem, "train", os.path.join(ROOT, config), "--bench-steps", str(steps), "--json", *extra]
    if trace:
        cmd += ["--trace", trace]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("bench_table_work: %s failed:\n%s" % (" ".join(cmd), done.stdout + done.stderr))
    return json.loads(done.stdout.splitlines()[-1])["timing"]["median_ms"]


def table_work_ms(trace, skip=3):
    """Median over steps of the tables' backward, the zeroing and the optimizer step, in ms."""
    with open(trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted(e["ts"] for e in events if e["name"] == "optimizer step")
    parts = {"backward": [], "zeroing": [], "update": []}
    for lo, hi in zip(steps[skip:], steps[skip + 1:]):
        inside = [e for e in events if lo < e["ts"] <= hi]
        # a sparse table's update runs in its backward's span (docs/training.md)
        parts["backward"].append(sum(e["dur"] for e in inside
                                     if e["name"].endswith((" backward", " backward and table update"))
                                     and any(t in e["name"] for t in TABLES)))
        parts["zeroing"].append(sum(e["dur"] for e in inside if e["name"] == "gradients zeroed"))
        parts["update"].append(sum(e["dur"] for e in inside if e["name"] == "optimizer step"))
    out = {k: statistics.median(v) / 1000 for k, v in parts.items()}
    out["total"] = sum(out.values())
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tandem", default=os.path.join(ROOT, "build/tandem"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--json", help="write the figures here too")
    p.add_argument("--micro-batches", default="2,4", help="the split's pipelined runs: micro-batches a step, comma-separated")
    p.add_argument("--split-only", action="store_true", help="only the split against the cpu alone")
    a = p.parse_args()
    micro = [int(m) for m in a.micro_batches.split(",") if m]
    common = ["--batch", "2048", "--bind", "tags=16384"]
    work = {name: [] for name in RUNS}
    split = {"recommender, rowwise_adagrad": ([], []), "dlrm_split (8 tables)": ([], [])}
    pipelined = {(name, m): [] for name in split for m in micro}
    serial = {name: [] for name in split}  # the split without the next batch ahead
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.rounds):
            for name, (config, extra) in ({} if a.split_only else RUNS).items():
                trace = os.path.join(tmp, "trace.json")
                run(a.tandem, config, a.steps, common + extra, trace)
                work[name].append(table_work_ms(trace))
            for name, (config, extra) in {
                    "recommender, rowwise_adagrad": (CONFIGS["sparse rowwise_adagrad"], common),
                    "dlrm_split (8 tables)": ("bench/configs/dlrm_split_train.yaml", ["--batch", "2048"])}.items():
                split[name][0].append(run(a.tandem, config, a.steps, extra + SPLIT))
                split[name][1].append(run(a.tandem, config, a.steps, extra))
                serial[name].append(run(a.tandem, config, a.steps, extra + SPLIT + ["--no-overlap-next-batch"]))
                for m in micro:
                    pipelined[(name, m)].append(run(a.tandem, config, a.steps, extra + SPLIT + ["--micro-batches", str(m)]))
    result = {"table_work_ms": {}, "split": {}}
    if not a.split_only:
        print_table_work(work, a.rounds, result)
    print("training step, ms: split (tables on the cpu, the rest on a GPU) / the cpu alone")
    for name, (placed, alone) in split.items():
        s, c = statistics.median(placed), statistics.median(alone)
        result["split"][name] = {"split_ms": s, "cpu_alone_ms": c, "ratio": s / c}
        print("  %-30s %7.2f / %7.2f = %.2fx" % (name, s, c, s / c))
        n_ms = statistics.median(serial[name])
        result["split"][name]["no_overlap_next_batch_ms"] = n_ms
        print("  %-30s %7.2f / %7.2f = %.2fx   (--no-overlap-next-batch)" % ("", n_ms, c, n_ms / c))
        for m in micro:
            p_ms = statistics.median(pipelined[(name, m)])
            result["split"][name]["micro_batches_%d_ms" % m] = p_ms
            print("  %-30s %7.2f / %7.2f = %.2fx   (%d pipelined micro-batches)" % ("", p_ms, c, p_ms / c, m))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


def print_table_work(work, rounds, result):
    print("table work a step, ms (medians of %d rounds): backward (+ update in it) + zeroing + update = total"
          % rounds)
    for name, runs in work.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        result["table_work_ms"][name] = med
        print("  %-40s %6.2f + %5.2f + %5.2f = %6.2f" % (name, med["backward"], med["zeroing"], med["update"],
                                                        med["total"]))
    t = result["table_work_ms"]
    ratios = {"sparse sgd / dense sgd": t["sparse sgd"]["total"] / t["dense sgd"]["total"],
              "sparse rowwise_adagrad / dense adam": t["sparse rowwise_adagrad"]["total"] / t["dense adam"]["total"]}
    result["ratios"] = ratios
    for name, r in ratios.items():
        print("  %s: %.2fx" % (name, r))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Two builds of Tandem timed on the same training steps, alternately: what a change to the
runtime costs or saves, measured on one machine in one run (docs/benchmarks.md).

    /usr/bin/python3 bench/compare_builds.py BEFORE/tandem AFTER/tandem [--rounds 3] [--steps 40]

Each case is `tandem train COPY --bench-steps STEPS --batch B [...] --json` on the training
copy bench_training.py writes (loss and Adam added), run by the two binaries one after the
other, ROUNDS times; the table gives each side's median over the rounds of the per-run
median step time, and after / before. Cases: the 4x1024 MLP at batch 1 and 256 and the
recommender at batch 256 on the cpu alone, and the bench recommender at batch 2048 with its
tables on the cpu and the rest on a simulated GPU (--sim-gpus 1 --placement
embeddings-on-cpu). OMP_NUM_THREADS is the machine's cores unless set.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_training import training_copy  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cases(tmp):
    mlp1 = training_copy("configs/mlp_4x1024.yaml", os.path.join(ROOT, "configs/mlp_4x1024.yaml"), 1, tmp)
    mlp256 = training_copy("configs/mlp_4x1024.yaml", os.path.join(ROOT, "configs/mlp_4x1024.yaml"), 256, tmp)
    rec = training_copy("configs/recommender.yaml", os.path.join(ROOT, "configs/recommender.yaml"), 256, tmp)
    split = os.path.join(ROOT, "bench/configs/gpu_recommender_train.yaml")
    return [
        ("mlp_4x1024, cpu, batch 1", [mlp1, "--batch", "1"]),
        ("mlp_4x1024, cpu, batch 256", [mlp256, "--batch", "256"]),
        ("recommender, cpu, batch 256", [rec, "--batch", "256", "--bind", "tags=2048"]),
        ("recommender, tables on cpu + 1 sim GPU, batch 2048",
         [split, "--batch", "2048", "--bind", "tags=16384", "--sim-gpus", "1", "--placement", "embeddings-on-cpu"]),
    ]


def step_ms(binary, args, steps):
    out = subprocess.run([binary, "train", *args, "--bench-steps", str(steps), "--json"], check=True,
                         capture_output=True, text=True, timeout=600).stdout
    for line in reversed(out.strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if "timing" in doc:
            return doc["timing"]["median_ms"]
    raise RuntimeError("no timing in the output of %s %s:\n%s" % (binary, " ".join(args), out))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--json", help="write the results here")
    a = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count()))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in cases(tmp):
            times = {"before": [], "after": []}
            for _ in range(a.rounds):
                for side in ("before", "after"):
                    times[side].append(step_ms(getattr(a, side), args, a.steps))
            b, c = statistics.median(times["before"]), statistics.median(times["after"])
            rows.append({"case": name, "before_ms": b, "after_ms": c, "ratio": c / b, "runs": times})
            print("%-52s before %8.3f ms  after %8.3f ms  after/before %.3f" % (name, b, c, c / b), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

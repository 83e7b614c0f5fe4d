#!/usr/bin/python3
"""The split Tandem exists for, against PyTorch doing the same: the bench recommender
(bench/configs/gpu_recommender_train.yaml: two embedding tables, a bottom and a top MLP)
with its tables on the CPU and its MLPs on a GPU, and the same model on one device; one
training step each (forward, loss, backward, optimizer), medians over rounds; ratios.

    /usr/bin/python3 bench/bench_split.py [--batch 2048] [--rounds 5] [--steps 40] [--json OUT]

PyTorch is written as a speed-minded user writes the seeds' split: nn.EmbeddingBag(sparse=True)
tables on the CPU updated by torch.optim.SparseAdam, the MLPs on cuda:0 with Adam, the batch
in pinned memory copied with non_blocking=True, the pooled embeddings sent up the same way.
Tandem: `--placement embeddings-on-cpu` on the same YAML, the tables `sparse: true` with
`sparse_adam` (train: optimizer_groups) or dense with Adam. On a machine without a GPU,
Tandem's GPU is a simulated one (`--sim-gpus 1`, computing with the same cores) and PyTorch
runs its "GPU" half on the CPU: the split's own cost (copies, waits, updates) against the
same work on one device, not a GPU's speed. With `--trace`, Tandem's split is also traced
and the busy time of the cpu's lane and the GPU's, their overlap and the GPU's idle share of
a step are reported (what issue 27 reads).
"""
import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "bench/configs/gpu_recommender_train.yaml")
LR = 0.001


# ----------------------------------------------------------------------------- PyTorch

def torch_step_ms(batch, tags, rounds, steps, split):
    import torch
    from torch import nn

    torch.manual_seed(0)
    gpu = torch.device("cuda:0") if torch.cuda.is_available() else torch.device("cpu")
    table_device = torch.device("cpu") if split else gpu

    class Recommender(nn.Module):
        def __init__(self):
            super().__init__()
            self.bottom = nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU()).to(gpu)
            self.items = nn.EmbeddingBag(100000, 32, mode="sum", sparse=split).to(table_device)
            self.tags = nn.EmbeddingBag(5000, 32, mode="mean", sparse=split).to(table_device)
            self.top = nn.Sequential(nn.Linear(96, 64), nn.ReLU(), nn.LayerNorm(64), nn.Linear(64, 1)).to(gpu)

        def forward(self, dense, item_ids, tag_ids, tag_offsets):
            pooled = torch.cat([self.items(item_ids), self.tags(tag_ids, tag_offsets)], dim=1)
            pooled = pooled.to(gpu, non_blocking=True)
            return self.top(torch.cat([self.bottom(dense), pooled[:, :32], pooled[:, 32:]], dim=1))

    model = Recommender()
    tables = list(model.items.parameters()) + list(model.tags.parameters())
    rest = list(model.bottom.parameters()) + list(model.top.parameters())
    if split:
        optimizers = [torch.optim.SparseAdam(tables, lr=LR), torch.optim.Adam(rest, lr=LR)]
    else:
        optimizers = [torch.optim.Adam(tables + rest, lr=LR)]
    gen = torch.Generator().manual_seed(batch)
    pin = gpu.type == "cuda"
    dense = torch.randn(batch, 13, generator=gen)
    item_ids = torch.randint(0, 100000, (batch, 8), generator=gen)
    tag_ids = torch.randint(0, 5000, (tags,), generator=gen)
    tag_offsets = torch.sort(torch.randint(0, tags, (batch,), generator=gen)).values
    tag_offsets[0] = 0
    y = torch.rand(batch, 1, generator=gen).round()
    if pin:
        dense, y = dense.pin_memory(), y.pin_memory()
    loss_fn = nn.BCEWithLogitsLoss()

    def step():
        for o in optimizers:
            o.zero_grad(set_to_none=True)
        ids = (item_ids.to(table_device, non_blocking=True), tag_ids.to(table_device, non_blocking=True),
               tag_offsets.to(table_device, non_blocking=True))
        logit = model(dense.to(gpu, non_blocking=True), *ids)
        loss = loss_fn(logit, y.to(gpu, non_blocking=True))
        loss.backward()
        for o in optimizers:
            o.step()
        if pin:
            torch.cuda.synchronize()

    for _ in range(5):
        step()
    medians = []
    for _ in range(rounds):
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        medians.append(statistics.median(times) * 1e3)
    return statistics.median(medians), gpu.type


# ----------------------------------------------------------------------------- Tandem

def sparse_copy(tmp):
    """The bench YAML with its tables sparse: true and updated by sparse_adam."""
    with open(CONFIG) as f:
        doc = yaml.safe_load(f)
    doc = copy.deepcopy(doc)
    for layer in doc["layers"]:
        if layer.get("op") == "embedding_bag":
            layer["sparse"] = True
    doc["train"]["optimizer_groups"] = [{"params": ["items", "tags"], "name": "sparse_adam", "lr": LR}]
    path = os.path.join(tmp, "recommender_sparse_adam.yaml")
    with open(path, "w") as f:
        f.write("# written by bench/bench_split.py from bench/configs/gpu_recommender_train.yaml\n")
        yaml.safe_dump(doc, f, sort_keys=False)
    return path


def gpu_args(real_gpu):
    return [] if real_gpu else ["--sim-gpus", "1"]


def tandem_step_ms(tandem, config, batch, tags, rounds, steps, extra, trace=None):
    medians = []
    for r in range(rounds):
        cmd = [tandem, "train", config, "--batch", str(batch), "--bind", "tags=%d" % tags, "--bench-steps", str(steps),
               "--json", *extra]
        if trace and r == rounds - 1:
            cmd += ["--trace", trace]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=900,
                             env=dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", str(os.cpu_count())))).stdout
        doc = next(json.loads(line) for line in reversed(out.strip().splitlines()) if line.startswith("{") and "timing" in line)
        medians.append(doc["timing"]["median_ms"])
        time.sleep(0.3)  # PyTorch's and the last run's workers spin for a while
    return statistics.median(medians)


def lane_overlap(trace_path, gpu_track="cuda:0", cpu_track="cpu", skip=3):
    """Per step (between the host's optimizer steps), medians in ms: the cpu lane's and the
    GPU's busy time, the time both were busy at once, and the GPU's idle share of the step."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    slices = [(e["ts"], e["ts"] + e["dur"], names.get(e["tid"]), e["name"]) for e in events if e.get("ph") == "X"]
    steps = sorted(b for a, b, track, name in slices if track == "host" and name == "optimizer step")

    def spans(track, lo, hi):
        out = sorted((max(a, lo), min(b, hi)) for a, b, t, _ in slices if t == track and b > lo and a < hi)
        merged = []
        for a, b in out:
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        return merged

    def length(merged):
        return sum(b - a for a, b in merged)

    def both(x, y):
        total, i, j = 0.0, 0, 0
        while i < len(x) and j < len(y):
            total += max(0.0, min(x[i][1], y[j][1]) - max(x[i][0], y[j][0]))
            if x[i][1] < y[j][1]:
                i += 1
            else:
                j += 1
        return total

    rows = []
    for lo, hi in zip(steps[skip:], steps[skip + 1:]):
        cpu, gpu = spans(cpu_track, lo, hi), spans(gpu_track, lo, hi)
        rows.append({"step": hi - lo, "cpu_busy": length(cpu), "gpu_busy": length(gpu), "both_busy": both(cpu, gpu)})
    if not rows:
        return {}
    out = {k: statistics.median(r[k] for r in rows) / 1e3 for k in rows[0]}
    out["gpu_idle_share"] = 1 - out["gpu_busy"] / out["step"] if out["step"] else 0.0
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tandem", default=os.path.join(ROOT, "build/tandem"))
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--trace", action="store_true", help="trace Tandem's split and report the lanes' overlap")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args()
    tags = 8 * a.batch
    import torch
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    real_gpu = torch.cuda.is_available()
    with tempfile.TemporaryDirectory() as tmp:
        sparse = sparse_copy(tmp)
        trace = os.path.join(tmp, "split.json") if a.trace else None
        rows = {}
        rows["torch split (SparseAdam tables on the cpu)"], device = torch_step_ms(a.batch, tags, a.rounds, a.steps, True)
        rows["torch one device (dense Adam)"], _ = torch_step_ms(a.batch, tags, a.rounds, a.steps, False)
        split = ["--placement", "embeddings-on-cpu", *gpu_args(real_gpu)]
        one = ["--place", "*=cuda:0"] if real_gpu else []
        rows["tandem split (sparse_adam tables on the cpu)"] = tandem_step_ms(a.tandem, sparse, a.batch, tags, a.rounds,
                                                                             a.steps, split, trace)
        rows["tandem split (dense Adam tables on the cpu)"] = tandem_step_ms(a.tandem, CONFIG, a.batch, tags, a.rounds,
                                                                            a.steps, split)
        rows["tandem one device (dense Adam)"] = tandem_step_ms(a.tandem, CONFIG, a.batch, tags, a.rounds, a.steps, one)
        lanes = lane_overlap(trace) if trace else {}
    print("batch %d, tags %d; the GPU: %s; %s threads" % (a.batch, tags, "cuda:0" if real_gpu else
                                                          "simulated (Tandem), the cpu (PyTorch)",
                                                          os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    for name, ms in rows.items():
        print("  %-48s %8.3f ms  %9.0f samples/s" % (name, ms, a.batch / ms * 1e3))
    ratios = {
        "tandem split / torch split": rows["tandem split (sparse_adam tables on the cpu)"] /
        rows["torch split (SparseAdam tables on the cpu)"],
        "tandem split / tandem one device": rows["tandem split (sparse_adam tables on the cpu)"] /
        rows["tandem one device (dense Adam)"],
    }
    for name, r in ratios.items():
        print("  %-48s %8.3f" % (name, r))
    if lanes:
        print("  lanes per step (ms): cpu busy %.3f, GPU busy %.3f, both at once %.3f, step %.3f; GPU idle %.0f%%" %
              (lanes["cpu_busy"], lanes["gpu_busy"], lanes["both_busy"], lanes["step"], 100 * lanes["gpu_idle_share"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"batch": a.batch, "tags": tags, "torch_device": device, "real_gpu": real_gpu, "ms": rows,
                       "ratios": ratios, "lanes": lanes}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())

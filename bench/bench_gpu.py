#!/usr/bin/env python3
"""GPU benchmark: a training step on a real GPU, Tandem against PyTorch CUDA in one run,
and the recommender's throughput with its embedding tables on the cpu against all of it on
the GPU. Run by scripts/gpu_check.sh on a machine with a GPU:

    python3 bench/bench_gpu.py --tandem gpu-bundle/run.sh tandem [--rounds 5] [--json OUT]

Models (written out in bench/configs/gpu_*_train.yaml, so that no YAML library is needed
where the GPU is): the 4 x 1024 MLP with mse_loss and the recommender with
binary_cross_entropy_with_logits on its logit, both trained with Adam (lr 1e-3), as
bench/bench_training.py does on the cpu. PyTorch: the same modules built here by hand, on
cuda:0, fp32 (TF32 off, as Tandem's GEMMs), step = zero_grad(set_to_none) + forward + loss
+ backward + optimizer.step(), timed with torch.cuda.synchronize() around each step.
Tandem: `tandem train CONFIG --bench-steps R --batch B --place '*=cuda:0' --json`.
Medians over R steps, alternating rounds, medians over the rounds; ratios are tandem /
torch (lower is better). Target: <= 0.7 at batch 32.

Placement: the recommender with `--placement embeddings-on-cpu` (tables on the cpu, the
MLPs on the GPU) against `--place '*=cuda:0'`, in samples per second.

Precision: the MLP's training step in fp32, bf16 and fp16 (`--precision`; fp16 with dynamic
loss scaling), at batches 256 and 4096, against PyTorch fp32 and under
`torch.autocast("cuda", dtype=torch.bfloat16)`, the setting a speed-minded user picks.
Target (bf16 against fp32, Tandem's own): >= 2x.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MLP = os.path.join(ROOT, "bench/configs/gpu_mlp_train.yaml")
RECOMMENDER = os.path.join(ROOT, "bench/configs/gpu_recommender_train.yaml")
BATCHES = [32, 256]
TARGET_AT_32 = 0.7


def tags_for(batch):
    return 8 * batch  # eight tags a bag, as bench_training's default binding


# ----------------------------------------------------------------------------- PyTorch peers

def torch_mlp(torch):
    nn = torch.nn
    layers = []
    for _ in range(3):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    layers.append(nn.Linear(1024, 1024))
    return nn.Sequential(*layers)


def torch_recommender(torch):
    nn = torch.nn

    class Recommender(nn.Module):
        def __init__(self):
            super().__init__()
            self.bottom = nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
            self.items = nn.EmbeddingBag(100000, 32, mode="sum")
            self.tags = nn.EmbeddingBag(5000, 32, mode="mean")
            self.top = nn.Sequential(nn.Linear(96, 64), nn.ReLU(), nn.LayerNorm(64), nn.Linear(64, 1))

        def forward(self, dense, item_ids, tag_ids, tag_offsets):
            x = torch.cat([self.bottom(dense), self.items(item_ids), self.tags(tag_ids, tag_offsets)], dim=1)
            return self.top(x)  # the logit: the loss takes it, as the config's loss takes top.fc2

    return Recommender()


def torch_step_time(torch, name, batch, steps, autocast_bf16=False):
    """Median ms of a training step on cuda:0 (the forward and loss under bf16 autocast when asked)."""
    dev = torch.device("cuda:0")
    g = torch.Generator(device="cpu").manual_seed(batch)
    if name == "mlp":
        model = torch_mlp(torch).to(dev)
        x = torch.randn(batch, 1024, generator=g).to(dev)
        y = torch.randn(batch, 1024, generator=g).to(dev)
        loss_fn = torch.nn.functional.mse_loss
        run = lambda: loss_fn(model(x), y)  # noqa: E731
    else:
        model = torch_recommender(torch).to(dev)
        dense = torch.randn(batch, 13, generator=g).to(dev)
        items = torch.randint(0, 100000, (batch, 8), generator=g).to(dev)
        tags = torch.randint(0, 5000, (tags_for(batch),), generator=g).to(dev)
        offsets = torch.arange(0, tags_for(batch), 8).to(dev)
        y = torch.randint(0, 2, (batch, 1), generator=g).float().to(dev)
        loss_fn = torch.nn.functional.binary_cross_entropy_with_logits
        run = lambda: loss_fn(model(dense, items, tags, offsets), y)  # noqa: E731
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast_bf16):
            loss = run()
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


# ----------------------------------------------------------------------------- Tandem

def tandem_step_time(tandem, config, batch, steps, placement, timeout):
    cmd = list(tandem) + ["train", config, "--bench-steps", str(steps), "--batch", str(batch), "--json"] + placement
    if config == RECOMMENDER:
        cmd += ["--bind", "tags=%d" % tags_for(batch)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (" ".join(cmd), r.returncode, (r.stdout + r.stderr)[-2000:]))
    doc = json.loads(r.stdout[r.stdout.index("{"):])
    return doc["timing"]["median_ms"], doc


PRECISION_BATCHES = [256, 4096]
BF16_TARGET = 2.0


def precision_rows(args, torch):
    """The MLP's step in each precision, Tandem and PyTorch, alternating rounds."""
    rows = []
    on_gpu = ["--place", "*=cuda:0"]
    for batch in PRECISION_BATCHES:
        times = {}
        for rnd in range(args.rounds):
            for who in ("fp32", "bf16", "fp16", "torch_fp32", "torch_autocast_bf16"):
                try:
                    if who.startswith("torch"):
                        if torch is None:
                            continue
                        ms = torch_step_time(torch, "mlp", batch, args.steps, autocast_bf16=who.endswith("bf16"))
                    else:
                        ms = tandem_step_time(args.tandem, MLP, batch, args.steps, on_gpu + ["--precision", who],
                                              args.timeout)[0]
                    times.setdefault(who, []).append(ms)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    times.setdefault(who + "_error", [str(e)[-300:]])
        row = {"model": "mlp", "batch": batch}
        for who, values in times.items():
            row[who if who.endswith("_error") else who + "_ms"] = (
                values[0] if who.endswith("_error") else statistics.median(values))
        if "fp32_ms" in row and "bf16_ms" in row:
            row["bf16_speedup"] = row["fp32_ms"] / row["bf16_ms"]
        if "bf16_ms" in row and "torch_autocast_bf16_ms" in row:
            row["bf16_vs_torch_autocast"] = row["bf16_ms"] / row["torch_autocast_bf16_ms"]
        rows.append(row)
        print("  precision mlp b=%-5d %s" % (batch, "  ".join(
            "%s %.3f" % (k, v) for k, v in row.items() if isinstance(v, float))))
        for k, v in row.items():
            if k.endswith("_error"):
                print("    %s: %s" % (k, v))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tandem", nargs="+", default=[os.path.join(ROOT, "build/tandem")],
                    help="the command that runs the tandem CLI (default: build/tandem)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--sections", default="training,placement,precision",
                    help="which parts to run, comma-separated (default: all three)")
    args = ap.parse_args(argv)
    sections = set(args.sections.split(","))

    results = {"training": [], "placement": [], "target_at_32": TARGET_AT_32}
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("torch.cuda.is_available() is False")
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 GEMMs, as Tandem's
        torch.backends.cudnn.allow_tf32 = False
        results["torch"] = "%s, %s" % (torch.__version__, torch.cuda.get_device_name(0))
    except ImportError as e:
        torch = None
        results["torch"] = "unavailable: %s" % e
    print("bench_gpu: torch %s" % results["torch"])

    on_gpu = ["--place", "*=cuda:0"]
    for name, config in (("mlp", MLP), ("recommender", RECOMMENDER)):
        for batch in BATCHES if "training" in sections else []:
            t_rounds, p_rounds = [], []
            for rnd in range(args.rounds):
                for who in (["tandem", "torch"] if rnd % 2 == 0 else ["torch", "tandem"]):
                    if who == "tandem":
                        t_rounds.append(tandem_step_time(args.tandem, config, batch, args.steps, on_gpu, args.timeout)[0])
                    elif torch is not None:
                        p_rounds.append(torch_step_time(torch, name, batch, args.steps))
            row = {"model": name, "batch": batch, "tandem_ms": statistics.median(t_rounds),
                   "torch_ms": statistics.median(p_rounds) if p_rounds else None}
            row["ratio"] = row["tandem_ms"] / row["torch_ms"] if row["torch_ms"] else None
            results["training"].append(row)
            print("  train %-12s b=%-4d tandem %8.3f ms  torch %s  ratio %s%s" % (
                name, batch, row["tandem_ms"], "%8.3f ms" % row["torch_ms"] if row["torch_ms"] else "   -",
                "%.3f" % row["ratio"] if row["ratio"] else "-",
                ("  (target <= %.1f)" % TARGET_AT_32) if batch == 32 else ""))

    for batch in (256, 2048) if "placement" in sections else []:
        row = {"batch": batch}
        for label, placement in (("embeddings_on_cpu", ["--placement", "embeddings-on-cpu"]), ("all_on_gpu", on_gpu)):
            ms = statistics.median(tandem_step_time(args.tandem, RECOMMENDER, batch, args.steps, placement, args.timeout)[0]
                                   for _ in range(args.rounds))
            row[label + "_ms"] = ms
            row[label + "_samples_per_s"] = batch / ms * 1e3
        results["placement"].append(row)
        print("  recommender b=%-5d embeddings on the cpu %10.0f samples/s   all on the GPU %10.0f samples/s" % (
            batch, row["embeddings_on_cpu_samples_per_s"], row["all_on_gpu_samples_per_s"]))

    results["precision"] = precision_rows(args, torch) if "precision" in sections else []

    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Zoo benchmark: one training step of each zoo model in Tandem vs PyTorch, in one run, on
the same machine and threads.

    /usr/bin/python3 bench/bench_zoo.py [--tandem build/tandem] [--rounds 5] [--json OUT]

Models: configs/digits_cnn.yaml, configs/char_gru.yaml and configs/bert_mini.yaml at their
own training batch and a larger one; configs/transformer_encoder.yaml is skipped while it
has no `loss:` (it is a module to build models from, not a model to train). Each side trains a copy of the config
(in a temporary directory) whose `train:` is the recipe's optimizer and clip_grad_norm at
the measured batch, without schedule or data: a step is zero_grad + forward (train mode:
batch_norm2d on the batch's statistics) + loss + backward + clipping + optimizer update, on
random batches of the declared shapes (class targets uniform over the classes; Tandem's
`--bench-steps` takes two in turn, each step given the other as its next).
PyTorch: the model built by tests/oracle/tandem_torch.py from the same YAML, 2 threads.
Tandem: `tandem train COPY --bench-steps R --batch B --json` with OMP_NUM_THREADS=2.
Time: the median per-step time over R steps, alternating rounds, median over the rounds.
Memory: Tandem's reported peak_bytes (its host allocator's peak over the process); PyTorch's
MEASURED peak of CPU tensor bytes during one step (bench_training.measure_step_peak: the
profiler's allocation trace plus the storages alive before the step). Both count requested
bytes only, not malloc overhead or oneDNN/BLAS scratch. Ratios are tandem / torch (lower is
better for Tandem); there are no targets yet: the table is the baseline.

Simulated GPUs: a config that places layers on GPUs (char_gru's GRU and bert_mini's encoder
are data_parallel over cuda:0 and cuda:1) runs on the cpu above; it is also timed with
`--sim-gpus 2`, its own placement on two simulated GPUs (sim_ms, sim x = sim / torch, and
the largest per-device peak). Simulated GPUs compute on the same two cores, so this is
the cost of the placement's copies and replication on this machine, not a GPU's speed.
"""
import os

THREADS = 2
os.environ["OMP_NUM_THREADS"] = str(THREADS)  # before torch is imported
os.environ.setdefault("MKL_NUM_THREADS", str(THREADS))

import argparse  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import torch  # noqa: E402
import yaml  # noqa: E402

import tandem_torch as tt  # noqa: E402
from bench_common import BenchError, bindings_for, find_tandem, fmt  # noqa: E402
from bench_training import (TorchStep, check_tandem_train, memory_selftest, mib, peak_bytes_of,  # noqa: E402
                            tandem_time, torch_time, torch_warmup)

# config -> batches measured: the recipe's own, then a larger one
MODELS = {
    "configs/digits_cnn.yaml": [32, 256],
    "configs/char_gru.yaml": [16, 64],
    "configs/bert_mini.yaml": [32, 128],
    "configs/dlrm.yaml": [512, 2048],
    "configs/transformer_encoder.yaml": [32],
}
SIM_GPUS = 2


def places_on_gpus(cfg_path):
    """Whether the config names a GPU (a device: or a data_parallel block's devices)."""
    with open(cfg_path) as f:
        return "cuda:" in "".join(line.split("#", 1)[0] for line in f)


def largest_device_peak(doc):
    peaks = [d.get("peak_bytes") for d in doc.get("devices", []) if isinstance(d.get("peak_bytes"), (int, float))]
    return max(peaks) if peaks else None


def has_loss(cfg_path):
    with open(cfg_path) as f:
        doc = yaml.safe_load(f)
    return isinstance(doc, dict) and "loss" in doc


def bench_copy(cfg, cfg_path, batch, tmpdir):
    """The config with train: reduced to what one step does (optimizer, clipping) at `batch`."""
    with open(cfg_path) as f:
        doc = copy.deepcopy(yaml.safe_load(f))
    train = doc.get("train") or {}
    doc["train"] = {"batch": batch, "optimizer": train.get("optimizer", {"name": "sgd", "lr": 0.01})}
    if train.get("clip_grad_norm") is not None:
        doc["train"]["clip_grad_norm"] = train["clip_grad_norm"]
    out = os.path.join(tmpdir, "%s.bench.b%d.yaml" % (os.path.splitext(os.path.basename(cfg))[0], batch))
    with open(out, "w") as f:
        f.write("# written by bench/bench_zoo.py from %s\n" % cfg)
        yaml.safe_dump(doc, f, sort_keys=False)
    return out


class ZooStep(TorchStep):
    """TorchStep with the recipe's optimizer and clipping, and class targets for its loss."""

    def __init__(self, yaml_path, bindings, batch):  # noqa: super().__init__ draws float targets only
        torch.manual_seed(0)
        self.model, self.spec = tt.build_model(yaml_path)
        self.model.train()
        self.bindings = bindings
        gen = torch.Generator().manual_seed(batch)
        self.inputs = tt.draw_inputs(self.spec, bindings, gen, pad_prob=0.0)
        vals = self.model.values(self.inputs, bindings)
        n_classes = vals[self.spec.loss["input_key"]].shape[-1]
        self.targets = tt.draw_targets(self.spec, bindings, gen, n_classes=n_classes)
        self.clip = self.spec.train["clip_grad_norm"]
        self.opt, _ = tt.make_optimizer(self.model, self.spec.train, 1)

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        vals = self.model.values(self.inputs, self.bindings)
        loss = tt.loss_fn(self.spec, vals, self.targets)
        del vals  # as a plain training loop: only what autograd saved lives through backward
        loss.backward()
        if self.clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.opt.step()
        return loss


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tandem", default=os.environ.get("TANDEM", "build/tandem"),
                    help="the tandem CLI (default: $TANDEM or build/tandem)")
    ap.add_argument("--configs", nargs="+", default=list(MODELS))
    ap.add_argument("--rounds", type=int, default=5, help="alternating Tandem/PyTorch rounds (default 5)")
    ap.add_argument("--repeat", type=int, default=None, help="steps per measurement (default: ~0.25 s worth)")
    ap.add_argument("--target-s", type=float, default=0.25, help="seconds per measurement when choosing R")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per Tandem call")
    ap.add_argument("--json", dest="json_out", default=None, help="write the results here")
    args = ap.parse_args(argv)

    torch.set_num_threads(THREADS)
    try:
        tandem = find_tandem(args.tandem)
        check_tandem_train(tandem)
        selftest = memory_selftest()
    except BenchError as e:
        print("bench_zoo: %s" % e, file=sys.stderr)
        return 2
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        load1 = None
    print("bench_zoo: torch %s, %d threads, %s; tandem: %s; rounds %d"
          % (torch.__version__, torch.get_num_threads(), platform.processor() or platform.machine(), tandem,
             args.rounds), flush=True)
    if load1 is not None and load1 > 0.5:
        print("warning: load average %.2f: other work is running; timings with %d threads will be noisy"
              % (load1, THREADS), file=sys.stderr)
    tmpdir = tempfile.mkdtemp(prefix="bench_zoo.")
    results, skipped = [], []
    try:
        for cfg in args.configs:
            cfg_path = cfg if os.path.isabs(cfg) else os.path.join(ROOT, cfg)
            if not os.path.isfile(cfg_path):
                print("bench_zoo: no such config: %s" % cfg_path, file=sys.stderr)
                return 2
            if not has_loss(cfg_path):
                skipped.append({"config": cfg, "reason": "no loss: section (nothing to train)"})
                print("  %-34s skipped: no loss: section" % cfg, flush=True)
                continue
            for batch in MODELS.get(cfg, [32]):
                try:
                    copy_path = bench_copy(cfg, cfg_path, batch, tmpdir)
                    spec = tt.load_spec(copy_path)
                    bindings = bindings_for(spec, batch, {})
                except (BenchError, tt.SpecError) as e:
                    print("bench_zoo: %s" % e, file=sys.stderr)
                    return 2
                ts = ZooStep(copy_path, bindings, batch)
                peak = ts.measure_peak()
                if not peak["consistent"]:
                    print("warning: %s batch %d: the PyTorch memory measurement did not add up: %s"
                          % (cfg, batch, peak), file=sys.stderr)
                per_call = torch_warmup(ts)
                repeat = args.repeat or max(5, min(2000, int(round(args.target_s / max(per_call, 1e-7)))))
                sim = places_on_gpus(cfg_path)
                t_rounds, n_rounds, s_rounds, tandem_doc, sim_doc = [], [], [], None, None
                for rnd in range(args.rounds):
                    order = ["tandem", "torch"] + (["sim"] if sim else [])
                    order = order[rnd % len(order):] + order[:rnd % len(order)]
                    for who in order:
                        if who == "torch":
                            t_rounds.append(torch_time(ts, repeat)[0])
                            continue
                        # the tandem column runs every layer on the cpu, as torch does; sim, the config's own placement
                        extra = ["--sim-gpus", str(SIM_GPUS)] if who == "sim" else ["--place", "*=cpu"]
                        try:
                            med, _, doc = tandem_time(tandem, copy_path, batch, bindings, repeat, args.timeout, extra)
                        except BenchError as e:
                            print("bench_zoo: tandem failed on %s batch %d: %s" % (cfg, batch, e), file=sys.stderr)
                            return 2
                        if who == "sim":
                            s_rounds.append(med)
                            sim_doc = doc
                        else:
                            n_rounds.append(med)
                            tandem_doc = doc
                torch_ms, tandem_ms = statistics.median(t_rounds), statistics.median(n_rounds)
                sim_ms = statistics.median(s_rounds) if s_rounds else None
                tandem_peak = peak_bytes_of(tandem_doc)
                results.append({
                    "config": cfg, "model": spec.name, "batch": batch, "repeat": repeat,
                    "optimizer": spec.train["optimizer"]["name"], "clip_grad_norm": spec.train["clip_grad_norm"],
                    "torch_ms": torch_ms, "torch_ms_rounds": t_rounds, "tandem_ms": tandem_ms,
                    "tandem_ms_rounds": n_rounds, "time_ratio": tandem_ms / torch_ms,
                    "torch_peak_bytes": peak["peak"], "torch_peak_detail": peak, "tandem_peak_bytes": tandem_peak,
                    "memory_ratio": tandem_peak / peak["peak"] if tandem_peak and peak["peak"] else None,
                    "sim_gpus": SIM_GPUS if sim else None, "sim_ms": sim_ms, "sim_ms_rounds": s_rounds,
                    "sim_time_ratio": sim_ms / torch_ms if sim_ms else None,
                    "sim_largest_device_peak_bytes": largest_device_peak(sim_doc) if sim_doc else None,
                    "sim_devices": sim_doc.get("devices") if sim_doc else None,
                })
                print("  %-34s b=%-4d R=%-5d torch %9.4f ms  tandem %9.4f ms%s"
                      % (cfg, batch, repeat, torch_ms, tandem_ms,
                         "  sim %9.4f ms" % sim_ms if sim_ms else ""), flush=True)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)

    print()
    head = "%-32s %6s %11s %11s %8s %11s %11s %8s %11s %8s %14s" % (
        "config", "batch", "torch ms", "tandem ms", "time x", "torch MiB", "tandem MiB", "mem x", "sim ms", "sim x",
        "sim dev MiB")
    print(head)
    print("-" * len(head))
    for r in results:
        print("%-32s %6d %11.4f %11.4f %8.3f %11s %11s %8s %11s %8s %14s" % (
            r["config"], r["batch"], r["torch_ms"], r["tandem_ms"], r["time_ratio"], mib(r["torch_peak_bytes"]),
            mib(r["tandem_peak_bytes"]), fmt(r["memory_ratio"]), "%.4f" % r["sim_ms"] if r["sim_ms"] else "-",
            fmt(r["sim_time_ratio"]), mib(r["sim_largest_device_peak_bytes"])))
    for s in skipped:
        print("%-32s skipped: %s" % (s["config"], s["reason"]))
    print("\ntime x and mem x are tandem / torch (lower is better for Tandem). torch MiB is the measured peak of\n"
          "CPU tensor bytes in one step; tandem MiB is the peak_bytes Tandem reports for the process. sim: the\n"
          "config's own placement on %d simulated GPUs (same cores); sim dev MiB: the largest device's peak." % SIM_GPUS)
    if args.json_out:
        doc = {"threads": THREADS, "load_average_at_start": load1, "torch_version": torch.__version__,
               "rounds": args.rounds, "tandem": tandem, "machine": platform.platform(), "cpu_count": os.cpu_count(),
               "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "torch_memory_selftest": selftest,
               "results": results, "skipped": skipped}
        with open(args.json_out, "w") as f:
            json.dump(doc, f, indent=1)
        print("wrote %s" % args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

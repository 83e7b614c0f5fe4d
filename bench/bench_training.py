#!/usr/bin/python3
"""Training benchmark: one training step (forward, loss, backward, Adam update) in Tandem
vs PyTorch, in one run, on the same machine and threads.

    /usr/bin/python3 bench/bench_training.py [--tandem build/tandem] [--rounds 5] [--json OUT]

The configs have no loss of their own: the bench writes a copy of each (in a temporary
directory) with `targets:`, `loss:` and `train:` added, and both sides train that copy:
  seed_mlp     mse_loss(block3, y [batch, 20])
  mlp_4x1024   mse_loss(head, y [batch, 1024])
  recommender  binary_cross_entropy_with_logits(top.fc2, y [batch, 1])   (the logit before the sigmoid)
with train: {batch: B, optimizer: {name: adam, lr: 0.001}}. PyTorch: the model built by
tests/oracle/tandem_torch.py, train mode, 2 threads, step = zero_grad(set_to_none) +
forward + loss + backward + optimizer.step(). Tandem: `tandem train COPY --bench-steps R
--batch B [--bind tags=8*B] --json` with OMP_NUM_THREADS=2, expected to print
{"timing": {"median_ms": ...}, "peak_bytes": ...} (random data of the declared shapes).
Each measurement is the median per-step time over R steps; alternating rounds; the table
shows the medians over the rounds.

Memory: Tandem's "peak_bytes" (top level or under "memory") when it reports one. For
PyTorch it is MEASURED: the peak of CPU tensor bytes alive during one step (after 2
warm-up steps, so Adam's state exists), parameters, gradients, Adam state, batch,
activations and backward/optimizer temporaries all counted. torch.profiler
(profile_memory=True) records every c10 CPU allocation and free of the step with the
allocator's running total; peak = the distinct storages alive before the step
(parameters, buffers, Adam state, batch) + the highest rise of that total within the step
(at least the last step's gradients, which zero_grad frees first). Requested bytes, like
Tandem's count: malloc overhead and BLAS/oneDNN internal buffers are not in it. The bench
checks the method on a case with a known answer at start (memory_selftest) and, per
config, that nothing allocated before the window is freed in it and that alive-before +
net change == alive-after. "torch est" is the old ESTIMATE, for comparison only: params +
grads + Adam state (2x params) + the tensors autograd saves (saved_tensors_hooks).
Targets: tandem/torch time <= 0.5 at batch 1 and 32, <= 0.9 at batch 256.
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
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))

import torch  # noqa: E402
import yaml  # noqa: E402

import tandem_torch as tt  # noqa: E402
from bench_common import (BenchError, bindings_for, find_tandem, fmt, parse_binds,  # noqa: E402
                          run_tandem_json, tandem_timing)

# config -> (loss op, loss input reference, target shape after batch)
LOSSES = {
    "configs/seed_mlp.yaml": ("mse_loss", "block3", [20]),
    "configs/mlp_4x1024.yaml": ("mse_loss", "head", [1024]),
    "configs/recommender.yaml": ("binary_cross_entropy_with_logits", "top.fc2", [1]),
}
DEFAULT_CONFIGS = list(LOSSES)
DEFAULT_BATCHES = [1, 32, 256]
TARGETS = {1: 0.5, 32: 0.5, 256: 0.9}  # batch -> max tandem/torch time ratio
LR = 0.001


def training_copy(cfg, cfg_path, batch, tmpdir):
    """Writes the config with targets/loss/train added; returns its path."""
    if cfg not in LOSSES:
        raise BenchError("%s: no loss defined for it in bench_training.py (LOSSES)" % cfg)
    op, ref, tshape = LOSSES[cfg]
    with open(cfg_path) as f:
        doc = yaml.safe_load(f)
    doc = copy.deepcopy(doc)
    doc["targets"] = {"y": {"shape": ["batch"] + tshape}}
    doc["loss"] = {"op": op, "input": ref, "target": "y"}
    doc["train"] = {"batch": batch, "optimizer": {"name": "adam", "lr": LR}}
    out = os.path.join(tmpdir, "%s.train.b%d.yaml" % (os.path.splitext(os.path.basename(cfg))[0], batch))
    with open(out, "w") as f:
        f.write("# written by bench/bench_training.py from %s\n" % cfg)
        yaml.safe_dump(doc, f, sort_keys=False)
    return out


# ----------------------------------------------------------------------------- torch memory

_CPU_DEVICES = ("cpu", "mkldnn", "ideep")


def _storage(t):
    try:
        return t.untyped_storage()  # noqa: E1101
    except AttributeError:
        return t.storage()


def storage_bytes(tensors):
    """Bytes of the distinct storages under `tensors` (views and shared storages counted once)."""
    seen = {}
    tensors = list(tensors)
    while tensors:
        t = tensors.pop()
        if t is None or not torch.is_tensor(t) or t.device.type != "cpu":
            continue
        if t.is_sparse:  # a sparse table's gradient (sparse: true): its indices and values
            tensors += [t._indices(), t._values()]
            continue
        s = _storage(t)
        seen[s.data_ptr()] = max(seen.get(s.data_ptr(), 0), s.nbytes())
    return sum(seen.values())


def measure_step_peak(fn, resident, held_at_start=0):
    """Runs fn() once under torch.profiler(profile_memory=True) and measures its peak CPU
    tensor memory. The profiler records every c10 CPU allocation and free in the window with
    the allocator's running total of bytes out (total_allocated, kept under its lock, so in
    allocation order whatever the thread); a 1-element sentinel allocated first and one
    allocated last give that total at the window's start and end. Then

        peak  = bytes alive before + max(held_at_start, max(total_allocated) - start total)

    where "bytes alive before" sums the distinct storages of resident() (parameters,
    buffers, optimizer state, batch) and held_at_start is what the step frees before it
    allocates anything (the last step's gradients, freed by zero_grad). Checks: no free in
    the window of a block allocated before it (the profiler would not see its size), and
    alive before + net change == storage bytes of resident() after the step."""
    from torch.profiler import ProfilerActivity, profile

    before = storage_bytes(resident())
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        s0 = torch.empty(1, dtype=torch.float64)
        p0 = s0.data_ptr()
        del s0
        fn()
        s1 = torch.empty(1, dtype=torch.float64)
        p1 = s1.data_ptr()
        del s1
    allocs = []

    def walk(node):
        stack = [node]
        while stack:
            n = stack.pop()
            ef = n.extra_fields
            if type(ef).__name__ == "_ExtraFields_Allocation":
                allocs.append((n.start_time_ns, ef))
            stack.extend(n.children)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    allocs.sort(key=lambda a: a[0])
    evs = [ef for _, ef in allocs if str(ef.device).split(":")[0] in _CPU_DEVICES]
    first = next(i for i, ef in enumerate(evs) if ef.ptr == p0 and ef.alloc_size > 0)
    last = max(i for i, ef in enumerate(evs) if ef.ptr == p1 and ef.alloc_size > 0)
    start_total = evs[first].total_allocated - evs[first].alloc_size
    end_total = evs[last].total_allocated - evs[last].alloc_size
    window = evs[first + 2:last]  # the step: after the first sentinel's free, before the last sentinel
    live, foreign, n_alloc = set(), 0, 0
    for ef in window:
        if ef.alloc_size > 0:
            live.add(ef.ptr)
            n_alloc += 1
        elif ef.ptr in live:
            live.discard(ef.ptr)
        else:
            foreign += 1
    rise = max([ef.total_allocated for ef in window] + [start_total]) - start_total
    after = storage_bytes(resident())
    net = end_total - start_total
    return {"peak": before + max(held_at_start, rise), "alive_before": before, "held_at_start": held_at_start,
            "rise": rise, "net": net, "alive_after": after, "allocations": n_alloc,
            "consistent": foreign == 0 and before + net == after, "foreign_frees": foreign}


def memory_selftest():
    """The measurement on a case with a known answer; raises BenchError when it is off."""
    M = 2 ** 20
    keep = torch.zeros(3 * M, dtype=torch.uint8)  # alive before: 3 MiB
    box = {}

    def fn():
        a = torch.ones(4 * M, dtype=torch.uint8)   # 3+4
        b = torch.ones(5 * M, dtype=torch.uint8)   # 3+4+5 = 12 MiB <- peak
        del a                                      # 8
        c = torch.ones(2 * M, dtype=torch.uint8)   # 10
        del b, c                                   # 3
        box["out"] = torch.ones(1 * M, dtype=torch.uint8)  # 4 MiB stays

    r = measure_step_peak(fn, lambda: [keep] + list(box.values()))
    want = {"peak": 12 * M, "alive_before": 3 * M, "rise": 9 * M, "net": 1 * M, "alive_after": 4 * M}
    got = {k: r[k] for k in want}
    if got != want or not r["consistent"]:
        raise BenchError("memory self-test failed: want %s, got %s" % (want, r))
    return r


# ----------------------------------------------------------------------------- torch

class TorchStep:
    def __init__(self, yaml_path, bindings, batch):
        torch.manual_seed(0)
        self.model, self.spec = tt.build_model(yaml_path)
        self.model.train()
        self.bindings = bindings
        gen = torch.Generator().manual_seed(batch)
        self.inputs = tt.draw_inputs(self.spec, bindings, gen, pad_prob=0.0)
        self.targets = tt.draw_targets(self.spec, bindings, gen)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=LR)

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        vals = self.model.values(self.inputs, self.bindings)
        loss = tt.loss_fn(self.spec, vals, self.targets)
        # values() holds every layer's output; drop the dict as a plain training loop would, so
        # that only what autograd saved lives through backward and optimizer.step
        del vals
        loss.backward()
        self.opt.step()
        return loss

    def resident_tensors(self):
        """The tensors alive between steps: parameters, buffers, gradients, optimizer state, batch."""
        out = list(self.model.parameters()) + list(self.model.buffers())
        out += [p.grad for p in self.model.parameters() if p.grad is not None]
        for st in self.opt.state.values():
            out += [v for v in st.values() if torch.is_tensor(v)]
        out += list(self.inputs.values()) + list(self.targets.values())
        return out

    def measure_peak(self, warmup=2, steps=2):
        """Measured peak CPU tensor bytes of one step (see measure_step_peak); `warmup` steps
        first so Adam's state exists; the largest of `steps` profiled steps."""
        for _ in range(warmup):
            self.step()
        runs = []
        for _ in range(steps):
            grads = storage_bytes([p.grad for p in self.model.parameters() if p.grad is not None])
            # the step's zero_grad(set_to_none) frees the last step's gradients before the step
            # allocates anything; do it just before the window (the profiler cannot see frees of
            # blocks allocated before it started) and count those bytes at the step's start
            self.opt.zero_grad(set_to_none=True)
            runs.append(measure_step_peak(self.step, self.resident_tensors, held_at_start=grads))
        best = max(runs, key=lambda r: r["peak"])
        best["peaks_of_runs"] = [r["peak"] for r in runs]
        return best

    def memory_estimate(self):
        """Bytes: parameters, gradients, Adam's exp_avg/exp_avg_sq, and what autograd saves."""
        params = list(self.model.parameters())
        pbytes = sum(p.numel() * p.element_size() for p in params)
        pptrs = {p.data_ptr() for p in params}
        saved = {}

        def pack(t):
            try:
                ptr = t.untyped_storage().data_ptr()  # noqa: E1101
                nbytes = t.untyped_storage().nbytes()
            except AttributeError:
                ptr = t.storage().data_ptr()
                nbytes = t.storage().nbytes()
            if ptr not in pptrs and t.data_ptr() not in pptrs:
                saved[ptr] = max(saved.get(ptr, 0), nbytes)
            return t

        self.opt.zero_grad(set_to_none=True)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            vals = self.model.values(self.inputs, self.bindings)
            loss = tt.loss_fn(self.spec, vals, self.targets)
        del vals
        loss.backward()
        act = sum(saved.values())
        return {"params": pbytes, "grads": pbytes, "adam_state": 2 * pbytes, "saved_activations": act,
                "total": 4 * pbytes + act}


def torch_time(ts, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        ts.step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, min(times) * 1e3


def torch_warmup(ts, min_calls=3, min_s=0.2):
    times = []
    t_start = time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - t_start < min_s:
        t0 = time.perf_counter()
        ts.step()
        times.append(time.perf_counter() - t0)
        if len(times) >= 5000:
            break
    return statistics.median(times[1:] or times)


# ----------------------------------------------------------------------------- tandem

def check_tandem_train(tandem):
    """A clear error when this Tandem has no `train --bench-steps` yet."""
    try:
        r = subprocess.run([tandem, "train", "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchError("could not run %s train --help: %s" % (tandem, e))
    text = r.stdout + r.stderr
    if r.returncode != 0 and "bench-steps" not in text:
        raise BenchError("this Tandem has no working `train` subcommand (`%s train --help` exited %d):\n%s\n"
                         "  the bench needs `tandem train CONFIG --bench-steps R --batch B --json`; "
                         "run with --torch-only meanwhile" % (tandem, r.returncode, text.strip()[-1500:]))
    if "bench-steps" not in text:
        raise BenchError("`%s train` does not list --bench-steps in its help; the bench needs "
                         "`tandem train CONFIG --bench-steps R --batch B --json` (or run with --torch-only)" % tandem)


def peak_bytes_of(doc):
    for holder in (doc, doc.get("memory"), doc.get("timing")):
        if isinstance(holder, dict) and isinstance(holder.get("peak_bytes"), (int, float)):
            return int(holder["peak_bytes"])
    return None


def tandem_time(tandem, config, batch, bindings, repeat, timeout, extra=()):
    """(median ms, min ms, the JSON) of `tandem train --bench-steps`; `extra`: more CLI args."""
    cmd = [tandem, "train", config, "--bench-steps", str(repeat), "--batch", str(batch)] + list(extra)
    for k, v in bindings.items():
        if k != "batch":
            cmd += ["--bind", "%s=%d" % (k, v)]
    cmd += ["--json"]
    doc = run_tandem_json(cmd, timeout, THREADS)
    return tandem_timing(doc) + (doc,)


# ----------------------------------------------------------------------------- main

def mib(v):
    if v is None:
        return "-"
    return ("%.1f" if v >= 2 ** 20 else "%.3f") % (v / 2 ** 20)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tandem", default=os.environ.get("TANDEM", "build/tandem"),
                    help="the tandem CLI (default: $TANDEM or build/tandem)")
    ap.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS)
    ap.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)), help="comma-separated")
    ap.add_argument("--rounds", type=int, default=5, help="alternating Tandem/PyTorch rounds (default 5)")
    ap.add_argument("--repeat", type=int, default=None, help="steps per measurement (default: ~0.25 s worth)")
    ap.add_argument("--target-s", type=float, default=0.25, help="seconds per measurement when choosing R")
    ap.add_argument("--bind", action="append", default=[], help="NAME=EXPR in B (default tags=8*B)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per Tandem call")
    ap.add_argument("--torch-only", action="store_true", help="measure PyTorch only")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--json", dest="json_out", default=None, help="write the results here")
    ap.add_argument("--keep-configs", default=None, help="write the training copies of the configs here")
    args = ap.parse_args(argv)

    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    bind_exprs = parse_binds(args.bind)
    torch.set_num_threads(THREADS)
    tandem = None
    if not args.torch_only:
        try:
            tandem = find_tandem(args.tandem)
            check_tandem_train(tandem)
        except BenchError as e:
            print("bench_training: %s" % e, file=sys.stderr)
            return 2

    print("bench_training: torch %s, %d threads, %s; tandem: %s; rounds %d; adam lr %g"
          % (torch.__version__, torch.get_num_threads(), platform.processor() or platform.machine(),
             tandem or "(skipped)", args.rounds, LR), flush=True)
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        load1 = None
    if load1 is not None and load1 > 0.5:
        print("warning: load average %.2f: other work is running; timings with %d threads will be noisy"
              % (load1, THREADS), file=sys.stderr)
    try:
        selftest = memory_selftest()
    except BenchError as e:
        print("bench_training: %s" % e, file=sys.stderr)
        return 2
    tmpdir = args.keep_configs or tempfile.mkdtemp(prefix="bench_training.")
    os.makedirs(tmpdir, exist_ok=True)
    results, failed = [], False
    try:
        for cfg in args.configs:
            cfg_path = cfg if os.path.isabs(cfg) else os.path.join(ROOT, cfg)
            for batch in batches:
                try:
                    copy_path = training_copy(cfg, cfg_path, batch, tmpdir)
                    spec = tt.load_spec(copy_path)
                    bindings = bindings_for(spec, batch, bind_exprs)
                except (BenchError, tt.SpecError) as e:
                    print("bench_training: %s" % e, file=sys.stderr)
                    return 2
                ts = TorchStep(copy_path, bindings, batch)
                mem = ts.memory_estimate()
                peak = ts.measure_peak()
                if not peak["consistent"]:
                    print("warning: %s batch %d: the PyTorch memory measurement did not add up: %s"
                          % (cfg, batch, peak), file=sys.stderr)
                per_call = torch_warmup(ts)
                repeat = args.repeat or max(5, min(2000, int(round(args.target_s / max(per_call, 1e-7)))))
                t_rounds, t_mins, n_rounds, n_mins, tandem_doc = [], [], [], [], None
                for rnd in range(args.rounds):
                    order = ("tandem", "torch") if rnd % 2 == 0 else ("torch", "tandem")
                    for who in order:
                        if who == "torch":
                            med, mn = torch_time(ts, repeat)
                            t_rounds.append(med)
                            t_mins.append(mn)
                        elif tandem:
                            try:
                                med, mn, tandem_doc = tandem_time(tandem, copy_path, batch, bindings, repeat,
                                                                  args.timeout)
                            except BenchError as e:
                                print("bench_training: tandem failed on %s batch %d: %s" % (cfg, batch, e),
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
                tandem_peak = peak_bytes_of(tandem_doc) if isinstance(tandem_doc, dict) else None
                results.append({
                    "config": cfg, "model": spec.name, "loss": LOSSES[cfg][0], "batch": batch, "bindings": bindings,
                    "repeat": repeat, "torch_ms": torch_ms, "torch_ms_rounds": t_rounds, "torch_min_ms": min(t_mins),
                    "tandem_ms": tandem_ms, "tandem_ms_rounds": n_rounds,
                    "tandem_min_ms": min(n_mins) if n_mins else None, "ratio": ratio,
                    "target_ratio": target, "pass": ok,
                    "torch_peak_bytes": peak["peak"], "torch_peak_detail": peak,
                    "torch_memory_estimate_bytes": mem, "tandem_peak_bytes": tandem_peak,
                })
                print("  %-28s b=%-4d R=%-5d torch %9.4f ms  tandem %s ms" % (
                    cfg, batch, repeat, torch_ms, fmt(tandem_ms, "%9.4f")), flush=True)
    finally:
        if not args.keep_configs:
            shutil.rmtree(tmpdir, ignore_errors=True)

    print()
    head = "%-26s %6s %11s %11s %8s %8s %6s %11s %11s %10s" % (
        "config", "batch", "torch ms", "tandem ms", "ratio", "target", "", "torch MiB", "tandem MiB", "torch est")
    print(head)
    print("-" * len(head))
    for r in results:
        print("%-26s %6d %11.4f %11s %8s %8s %6s %11s %11s %10s" % (
            r["config"], r["batch"], r["torch_ms"], fmt(r["tandem_ms"], "%.4f"), fmt(r["ratio"], "%.3f"),
            "<= %.1fx" % r["target_ratio"] if r["target_ratio"] else "-",
            {True: "PASS", False: "FAIL", None: "-"}[r["pass"]],
            mib(r["torch_peak_bytes"]), mib(r["tandem_peak_bytes"]),
            mib(r["torch_memory_estimate_bytes"]["total"])))
    print("\ntargets: tandem/torch step time <= 0.5x at batch 1 and 32, <= 0.9x at batch 256 (lower is better)")
    print("torch MiB is MEASURED: peak CPU tensor bytes alive during one training step (torch.profiler\n"
          "profile_memory allocation trace + the storages alive before the step: params, grads, Adam state,\n"
          "batch, activations, temporaries). tandem MiB is the peak_bytes Tandem reports ('-' when none).\n"
          "torch est is the old ESTIMATE (params + grads + 2x params Adam state + autograd-saved tensors),\n"
          "not a measurement; shown for comparison.")
    if tandem is None:
        print("(tandem not measured: --torch-only)")
    elif failed:
        print("some targets missed")
    else:
        print("all targets met")

    if args.json_out:
        doc = {
            "threads": THREADS, "load_average_at_start": load1, "torch_version": torch.__version__,
            "rounds": args.rounds, "tandem": tandem, "machine": platform.platform(), "cpu_count": os.cpu_count(),
            "optimizer": {"name": "adam", "lr": LR}, "losses": {k: v[0] for k, v in LOSSES.items()},
            "targets": {str(k): v for k, v in TARGETS.items()}, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "torch_memory_note": "torch_peak_bytes: measured peak CPU tensor bytes of one step (torch.profiler "
                                 "profile_memory trace + storages alive before); torch_memory_estimate_bytes: "
                                 "estimate (params + grads + adam state + autograd-saved tensors)",
            "torch_memory_selftest": selftest,
            "results": results,
        }
        with open(args.json_out, "w") as f:
            json.dump(doc, f, indent=1)
        print("wrote %s" % args.json_out)
    return 1 if (failed and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Placement benchmark: the cost of crossing devices (issue 4).

    /usr/bin/python3 bench/bench_placement.py [--tandem build/tandem] [--rounds 5] [--json OUT]

Each case runs one config split over the cpu and simulated GPUs (`tandem run CONFIG
--batch B --repeat R --json --sim-gpus N --place ...`; the simulated GPUs run CPU
kernels, each on its own queue thread) against its peer, the same config run by Tandem
on one device (`tandem run CONFIG --batch B --repeat R --json`, every layer on the cpu,
no placement). Both with OMP_NUM_THREADS=2, measured alternately for --rounds rounds,
each measurement the median per-call time of R calls, the table the median over the
rounds; a 0.5 s pause before every Tandem process. A third, diagnostic measurement per
round runs the placed runtime with every layer on the cpu (`--sim-gpus N`, no --place,
policy annotations): what the placed path costs before anything crosses a device.

Targets: split / single-device time <= 1.05; bytes copied == the minimum.

Bytes copied: the sum of `bytes_in` over every device (cpu and GPUs) in the split run's
JSON "devices". Tandem reports the copies of the LAST forward only (its busy time,
bytes and copies are reset per forward; the one-off copy of a GPU layer's weights is
not in them), so this is bytes per forward. The minimum is computed here, independently
of Tandem's planner: the layers' devices from the --place globs / the policy applied in
Python to the oracle's parse of the YAML (tests/oracle/tandem_torch.py), the tensors'
sizes from running the oracle's PyTorch model on the same shapes, and then the boundary
tensors only: each tensor counted once per device other than its home that reads it
(the home of a graph input is the cpu), plus every graph output whose home is a GPU,
gathered back to the cpu. It is cross-checked with `tandem plan ... --json` (its layer
devices and the sum of its forward copies).
"""
import os

THREADS = 2
os.environ["OMP_NUM_THREADS"] = str(THREADS)  # before torch is imported
os.environ.setdefault("MKL_NUM_THREADS", str(THREADS))

import argparse  # noqa: E402
import fnmatch  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))

import torch  # noqa: E402

import tandem_torch as tt  # noqa: E402
from bench_common import (BenchError, bindings_for, find_tandem, fmt, parse_binds,  # noqa: E402
                          run_tandem_json, tandem_timing)

TARGET_RATIO = 1.05
DEFAULT_BATCHES = [32, 256]
EMBEDDING_OPS = {"embedding", "embedding_bag"}

# name, config, --sim-gpus, --place list, --placement policy (None: the default), what it is
CASES = [
    ("mlp cpu|cuda:0", "configs/mlp_4x1024.yaml", 1,
     ["hidden.2*=cuda:0", "head=cuda:0"], None),
    ("mlp cpu|cuda:0|cuda:1", "configs/mlp_4x1024.yaml", 2,
     ["hidden.1*=cuda:0", "hidden.2*=cuda:1", "head=cuda:1"], None),
    ("recommender emb-on-cpu", "configs/recommender.yaml", 1,
     [], "embeddings-on-cpu"),
]


# ----------------------------------------------------------------------------- minimum bytes

def _place_matches(pattern, path):
    """Does --place PATTERN cover layer `path`: the glob matches the whole path or the
    path of an enclosing block (docs/placement.md; `*` matches dots too)."""
    parts = path.split(".")
    return any(fnmatch.fnmatchcase(".".join(parts[:i]), pattern) for i in range(1, len(parts) + 1))


def layer_devices(spec, sim_gpus, places, policy):
    """Device of every leaf layer, decided here from the rules in docs/placement.md:
    --place (last match wins), else the policy. Only what the cases need: `annotations`
    (cpu) and `embeddings-on-cpu` with every non-embedding layer fitting on cuda:0."""
    out = {}
    for step in spec.plan:
        dev = None
        for item in places:
            pat, d = item.rsplit("=", 1)
            if _place_matches(pat, step.path):
                dev = d
        if dev is None:
            if policy in (None, "annotations") or sim_gpus == 0:
                dev = "cpu"
            elif policy == "embeddings-on-cpu":
                dev = "cpu" if step.op in EMBEDDING_OPS else "cuda:0"
            else:
                raise BenchError("policy %r is not modelled by the bench" % policy)
        out[step.path] = dev
    return out


def minimum_copy_bytes(model, spec, bindings, devices, batch):
    """Bytes that must cross devices in one forward: [(value, from, to, bytes)]."""
    inputs = tt.draw_inputs(spec, bindings, torch.Generator().manual_seed(batch), pad_prob=0.0)
    with torch.inference_mode():
        vals = model.values(inputs, bindings)
    nbytes = {k: v.numel() * v.element_size() for k, v in vals.items()}
    home = {spec.input_key(n): "cpu" for n in spec.inputs}
    home.update({"layer:" + s.path: devices[s.path] for s in spec.plan})
    crossings = {}
    for step in spec.plan:
        for key in step.ins:
            if home[key] != devices[step.path]:
                crossings[(key, devices[step.path])] = (key, home[key], devices[step.path], nbytes[key])
    for key in spec.outputs.values():
        if home[key] != "cpu":
            crossings[(key, "cpu")] = (key, home[key], "cpu", nbytes[key])
    return list(crossings.values())


# ----------------------------------------------------------------------------- tandem

def _cmd(tandem, sub, config, batch, bindings, extra):
    cmd = [tandem, sub, config, "--batch", str(batch)]
    for k, v in bindings.items():
        if k != "batch":
            cmd += ["--bind", "%s=%d" % (k, v)]
    return cmd + extra


def _placement_args(sim_gpus, places, policy):
    a = ["--sim-gpus", str(sim_gpus)]
    for p in places:
        a += ["--place", p]
    if policy:
        a += ["--placement", policy]
    return a


def run_json(cmd, timeout, pause=True):
    return run_tandem_json(cmd, timeout, THREADS, pause)


def tandem_time(tandem, config, batch, bindings, repeat, extra, timeout):
    doc = run_json(_cmd(tandem, "run", config, batch, bindings, ["--repeat", str(repeat), "--json"] + extra), timeout)
    return tandem_timing(doc)[0], doc


# ----------------------------------------------------------------------------- main

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tandem", default=os.environ.get("TANDEM", "build/tandem"),
                    help="the tandem CLI (default: $TANDEM or build/tandem)")
    ap.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)), help="comma-separated")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    ap.add_argument("--repeat", type=int, default=None, help="calls per measurement (default: ~0.25 s worth)")
    ap.add_argument("--target-s", type=float, default=0.25, help="seconds per measurement when choosing R")
    ap.add_argument("--bind", action="append", default=[], help="NAME=EXPR in B (default tags=8*B)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per Tandem call")
    ap.add_argument("--no-placed-cpu", action="store_true", help="skip the diagnostic all-cpu placed run")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--json", dest="json_out", default=None, help="write the results here")
    args = ap.parse_args(argv)

    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    bind_exprs = parse_binds(args.bind)
    torch.set_num_threads(THREADS)
    try:
        tandem = find_tandem(args.tandem)
    except BenchError as e:
        print("bench_placement: %s" % e, file=sys.stderr)
        return 2
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        load1 = None
    print("bench_placement: tandem %s, %d threads, %s, rounds %d, load average %s"
          % (tandem, THREADS, platform.processor() or platform.machine(), args.rounds, fmt(load1, "%.2f")), flush=True)

    results, failed = [], False
    for name, cfg, sim_gpus, places, policy in CASES:
        cfg_path = os.path.join(ROOT, cfg)
        torch.manual_seed(0)
        model, spec = tt.build_model(cfg_path)
        model.eval()
        devices = layer_devices(spec, sim_gpus, places, policy)
        split_args = _placement_args(sim_gpus, places, policy)
        for batch in batches:
            try:
                bindings = bindings_for(spec, batch, bind_exprs)
                # the minimum, independently; then the planner's view of it
                crossings = minimum_copy_bytes(model, spec, bindings, devices, batch)
                min_bytes = sum(c[3] for c in crossings)
                plan = run_json(_cmd(tandem, "plan", cfg_path, batch, bindings, split_args + ["--json"]),
                                args.timeout, pause=False)
                plan_devices = {l["path"]: l["device"] for l in plan["layers"]}
                plan_bytes = sum(c["bytes"] for c in plan["copies"] if c.get("direction") == "forward")
                if plan_devices != devices:
                    raise BenchError("%s: the plan's devices differ from the bench's: %s vs %s"
                                     % (name, plan_devices, devices))
                # choose R from a short run of the single-device peer
                probe, _ = tandem_time(tandem, cfg_path, batch, bindings, 5, [], args.timeout)
                repeat = args.repeat or max(5, min(5000, int(round(args.target_s / max(probe * 1e-3, 1e-7)))))
                kinds = ["single", "split"] + ([] if args.no_placed_cpu else ["placed_cpu"])
                extra = {"single": [], "split": split_args,
                         "placed_cpu": ["--sim-gpus", str(sim_gpus)]}
                ms = {k: [] for k in kinds}
                split_doc = None
                for rnd in range(args.rounds):
                    order = kinds if rnd % 2 == 0 else list(reversed(kinds))
                    for k in order:
                        t, doc = tandem_time(tandem, cfg_path, batch, bindings, repeat, extra[k], args.timeout)
                        ms[k].append(t)
                        if k == "split":
                            split_doc = doc
            except BenchError as e:
                print("bench_placement: %s batch %d: %s" % (name, batch, e), file=sys.stderr)
                return 2
            devs = split_doc.get("devices") or []
            if not devs:
                print("bench_placement: no \"devices\" in the split run's JSON", file=sys.stderr)
                return 2
            copied = sum(int(d.get("bytes_in", 0)) for d in devs)
            copied_out = sum(int(d.get("bytes_out", 0)) for d in devs)
            copies = sum(int(d.get("copies_in", 0)) for d in devs)
            single = statistics.median(ms["single"])
            split = statistics.median(ms["split"])
            placed_cpu = statistics.median(ms["placed_cpu"]) if ms.get("placed_cpu") else None
            ratio = split / single
            time_ok = ratio <= TARGET_RATIO
            bytes_ok = copied == min_bytes
            failed |= not (time_ok and bytes_ok)
            results.append({
                "case": name, "config": cfg, "batch": batch, "bindings": bindings, "repeat": repeat,
                "sim_gpus": sim_gpus, "place": places, "placement": policy, "devices_by_layer": devices,
                "single_ms": single, "single_ms_rounds": ms["single"],
                "split_ms": split, "split_ms_rounds": ms["split"],
                "placed_cpu_ms": placed_cpu, "placed_cpu_ms_rounds": ms.get("placed_cpu"),
                "ratio": ratio, "target_ratio": TARGET_RATIO, "time_pass": time_ok,
                "bytes_copied": copied, "bytes_out_sum": copied_out, "copies": copies,
                "min_bytes": min_bytes, "plan_bytes": plan_bytes, "bytes_pass": bytes_ok,
                "crossings": [{"value": c[0], "from": c[1], "to": c[2], "bytes": c[3]} for c in crossings],
                "split_devices": devs,
            })
            print("  %-24s b=%-4d R=%-5d single %8.4f ms  split %8.4f ms  placed-cpu %s ms  bytes %d (min %d, plan %d)"
                  % (name, batch, repeat, single, split, fmt(placed_cpu, "%8.4f"), copied, min_bytes, plan_bytes),
                  flush=True)

    print()
    head = "%-24s %5s %10s %10s %7s %6s %12s %10s %10s %6s" % (
        "case", "batch", "single ms", "split ms", "ratio", "", "placed-cpu", "copied B", "minimum B", "")
    print(head)
    print("-" * len(head))
    for r in results:
        print("%-24s %5d %10.4f %10.4f %7.3f %6s %12s %10d %10d %6s" % (
            r["case"], r["batch"], r["single_ms"], r["split_ms"], r["ratio"], "PASS" if r["time_pass"] else "FAIL",
            fmt(r["placed_cpu_ms"], "%.4f"), r["bytes_copied"], r["min_bytes"], "PASS" if r["bytes_pass"] else "FAIL"))
    print("\ntargets: split / single-device <= %.2fx; bytes copied (sum of bytes_in, last forward) == minimum"
          % TARGET_RATIO)
    print("plan cross-check: " + ("the plan's forward copies equal the minimum in every case"
                                  if all(r["plan_bytes"] == r["min_bytes"] for r in results)
                                  else "the plan's forward copies DIFFER from the minimum somewhere"))
    print("some targets missed" if failed else "all targets met")

    if args.json_out:
        doc = {"threads": THREADS, "load_average_at_start": load1, "rounds": args.rounds, "tandem": tandem,
               "machine": platform.platform(), "cpu_count": os.cpu_count(), "target_ratio": TARGET_RATIO,
               "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "results": results}
        with open(args.json_out, "w") as f:
            json.dump(doc, f, indent=1)
        print("wrote %s" % args.json_out)
    return 1 if (failed and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())

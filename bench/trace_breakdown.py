#!/usr/bin/python3
"""Where a training step's time goes, from a trace (`--trace`, or TANDEM_TRACE in the environment).

    build/tandem train MODEL.yaml --sim-gpus 2 --bench-steps 20 --trace trace.json
    /usr/bin/python3 bench/trace_breakdown.py trace.json

Steps are cut at the host's "optimizer step" spans (the first `--skip` are warm-up). Each
step's wall time is split by what the simulated GPUs' compute lane was doing; every queue
but the copy engines ("... copies") and the host runs on that lane, with the host's cores:

  kernels    layers' forward and backward kernels and the loss
  uploads    weights going up to the GPUs (every replica's copy)
  copies     activations and their gradients crossing devices (scatter, gather)
  reduction  gradients added into the master's on the cpu queue, and accumulated on a device
  idle       nothing on the lane: waiting for the copy engines or for the host

Slices that ran side by side (a data-parallel layer's replicas) count once, as wall time;
a slice across a step's end counts in each step for its part inside it. The figures are
medians over the steps, each on its own: each category is at most the step, but the
medians need not add up to the median step (nor do a step's categories, where two lanes
did different things at once).
The copy engines' own busy time is given apart (it overlaps the lane).

Then each lane on its own (the "cpu" lane, each GPU's compute lane: a simulated GPU's
"cuda:N", a real one's "cuda:N compute", timed by CUDA events; the copy lanes): its busy
time in a step and the share of the step it was idle, and how long the cpu lane and the
GPUs' compute lanes worked at the same time (the overlap a split model is after).
"""
import argparse
import json
import statistics
import sys

CATEGORIES = ["kernels", "uploads", "copies", "reduction", "other"]


def category(name):
    if name.endswith(" forward") or name.endswith(" backward") or name.startswith("the loss") \
            or name.startswith("the parallel loss"):
        return "kernels"
    if name.endswith(" upload") or name == "a weight's upload":
        return "uploads"
    if name.endswith(" copy"):
        return "copies"
    if "added into the master" in name or name == "gradient accumulated" or "rescaled" in name:
        return "reduction"
    return "other"


def union_length(intervals):
    """The length the intervals cover together (overlaps once)."""
    total, covered_to = 0.0, float("-inf")
    for a, b in sorted(intervals):
        total += max(0.0, b - max(a, covered_to))
        covered_to = max(covered_to, b)
    return total


def intersection_length(a, b):
    """The length covered by both sets of intervals."""
    return max(0.0, union_length(a) + union_length(b) - union_length(a + b))


def is_copy_lane(track):
    """A copy engine's lane: a simulated GPU's "cuda:0 copies", a CUDA GPU's "cuda:0 copies in"."""
    return "copies" in track


def is_gpu_compute_lane(track):
    """A GPU's compute lane: "cuda:0" (simulated) or "cuda:0 compute" (CUDA events)."""
    return track.startswith("cuda:") and not is_copy_lane(track)


def read_events(path):
    """The trace's events. A trace is written as the run goes: one whose run was stopped
    lacks its closing brackets, which Perfetto forgives, and so does this."""
    with open(path) as f:
        text = f.read()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        try:
            doc = json.loads(text.rstrip().rstrip(",") + "]}")
        except json.JSONDecodeError as e:
            raise ValueError("%s: not a JSON trace (%s)" % (path, e))
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise ValueError("%s: no traceEvents list: not a trace written by --trace" % path)
    return events


def breakdown(path, skip=3):
    """Per-step medians (microseconds): {"step", "idle", "copy_engines", category...}."""
    slices, steps = read_steps(path, skip)
    rows = []
    for begin, end in steps:
        # the part of each slice inside the step: a slice that runs on past the step's end
        # counts there in the next step, so no part of a step counts more than its length
        inside = [(max(a, begin), min(b, end), track, name) for a, b, track, name in slices if a < end and b > begin]
        lane = [s for s in inside if s[2] != "host" and not is_copy_lane(s[2])]
        row = {"step": end - begin}
        for c in CATEGORIES:
            row[c] = union_length([(a, b) for a, b, _, name in lane if category(name) == c])
        row["idle"] = row["step"] - union_length([(a, b) for a, b, _, _ in lane])
        row["copy_engines"] = sum(b - a for a, b, track, _ in inside if is_copy_lane(track))
        rows.append(row)
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def read_steps(path, skip):
    """The trace's slices (start, stop, track, name) and its steps (begin, end) after `skip`."""
    events = read_events(path)
    # a track's name is its thread_name record; the process_name record has no tid
    tracks = {e.get("tid"): e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    slices = [(e["ts"], e["ts"] + e["dur"], tracks.get(e.get("tid"), "track %s" % e.get("tid")), e["name"])
              for e in events if e.get("ph") == "X"]
    ends = sorted(b for a, b, track, name in slices if track == "host" and name == "optimizer step")
    if len(ends) < skip + 2:
        raise ValueError("%s: %d optimizer steps, need at least %d (train with --bench-steps)" % (path, len(ends), skip + 2))
    return slices, list(zip(ends[skip:], ends[skip + 1:]))


def lanes(path, skip=3):
    """Per lane, medians over the steps: {"lanes": {track: {"busy": us, "idle_share": 0..1}},
    "step": us, "overlap": us the cpu lane and the GPUs' compute lanes worked at once,
    "overlap_share": that over the step}. A slice counts in a step for the part inside it."""
    slices, steps = read_steps(path, skip)
    tracks = sorted({track for _, _, track, _ in slices if track != "host"})
    per_lane = {t: {"busy": [], "idle_share": []} for t in tracks}
    step_lengths, overlaps = [], []
    for begin, end in steps:
        def clipped(keep):
            return [(max(a, begin), min(b, end)) for a, b, track, _ in slices if keep(track) and a < end and b > begin]
        length = end - begin
        step_lengths.append(length)
        for t in tracks:
            busy = union_length(clipped(lambda track: track == t))
            per_lane[t]["busy"].append(busy)
            per_lane[t]["idle_share"].append(1.0 - busy / length if length > 0 else 0.0)
        overlaps.append(intersection_length(clipped(lambda track: track == "cpu"), clipped(is_gpu_compute_lane)))
    step = statistics.median(step_lengths)
    return {"lanes": {t: {k: statistics.median(v) for k, v in m.items()} for t, m in per_lane.items()},
            "step": step, "overlap": statistics.median(overlaps),
            "overlap_share": statistics.median(o / s if s > 0 else 0.0 for o, s in zip(overlaps, step_lengths))}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--skip", type=int, default=3, help="warm-up steps left out")
    args = ap.parse_args(argv)
    keys = ["step"] + CATEGORIES + ["idle", "copy_engines"]
    print("| trace | " + " | ".join(keys) + " |")
    print("| --- |" + " ---: |" * len(keys))
    per_lane = []
    for path in args.traces:
        try:
            b = breakdown(path, args.skip)
            per_lane.append((path, lanes(path, args.skip)))
        except (OSError, ValueError, KeyError) as e:
            print("trace_breakdown: %s" % e, file=sys.stderr)
            return 2
        print("| %s | " % path + " | ".join("%.2f" % (b[k] / 1000) for k in keys) + " |")
    print("(ms per step, medians)")
    print()
    print("| lane | busy | idle share | trace |")
    print("| --- | ---: | ---: | --- |")
    for path, l in per_lane:
        for track, m in l["lanes"].items():
            print("| lane %s | %.2f | %.0f%% | %s |" % (track, m["busy"] / 1000, 100 * m["idle_share"], path))
    print("(busy: ms per step; idle share: of the step; medians)")
    for path, l in per_lane:
        print("cpu/GPU overlap: %.2f ms per step, %.0f%% of the step (%s)" % (l["overlap"] / 1000, 100 * l["overlap_share"], path))
    return 0


if __name__ == "__main__":
    sys.exit(main())

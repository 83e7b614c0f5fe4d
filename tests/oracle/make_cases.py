#!/usr/bin/python3
"""Writes oracle cases: PyTorch weights, inputs and expected outputs for Tandem models.

    make_cases.py --out DIR [--seed S] PATHS...

PATHS are YAML files or directories (their *.yaml, sorted). For each model, two cases:
`<stem>-b1` (batch = 1) and `<stem>-b<N>` (batch = N, random in 2..9); every other symbol
is random in 1..12 per case. Each case directory holds weights.safetensors (the
state_dict), inputs.safetensors and expected.safetensors (outputs by name), and
DIR/manifest.json lists the cases. A YAML the oracle cannot build fails the run (exit 1)
unless it has the top-level key `oracle: skip`, in which case it is reported and skipped.
"""
import argparse
import json
import os
import random
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import tandem_torch as tt  # noqa: E402


def collect(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".yaml"))
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise SystemExit("make_cases: no such file or directory: %s" % p)
    seen, out = set(), []
    for f in files:
        r = os.path.realpath(f)
        if r not in seen:
            seen.add(r)
            out.append(os.path.abspath(f))
    return out


def perturb_norms(model):
    """layer_norm starts at weight 1, bias 0; move them so that loading them is tested."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.LayerNorm, tt.LayerNormNoBias)):
                for p in m.parameters(recurse=False):
                    p.add_(0.1 * torch.randn_like(p))


def make_case(yaml_path, doc, stem, batch_kind, seed, out_dir):
    rng = random.Random("%d:%s:%s" % (seed, stem, batch_kind))
    batch = 1 if batch_kind == "b1" else rng.randint(2, 9)
    model_seed = rng.randrange(2 ** 31)
    torch.manual_seed(model_seed)
    model, spec = tt.build_model(yaml_path, doc=doc)
    perturb_norms(model)
    bindings = tt.draw_bindings(spec, rng, batch)
    gen = torch.Generator().manual_seed(rng.randrange(2 ** 31))
    inputs = tt.draw_inputs(spec, bindings, gen)
    with torch.no_grad():
        outputs = model(inputs, bindings)
    name = "%s-b%d" % (stem, batch)
    case_dir = os.path.join(out_dir, name)
    os.makedirs(case_dir, exist_ok=True)
    for o, t in outputs.items():
        if t.dtype != torch.float32:
            raise tt.SpecError("output %r is %s, expected float32" % (o, t.dtype))
    tt.write_safetensors(os.path.join(case_dir, "weights.safetensors"),
                         {k: v.detach().float() for k, v in model.state_dict().items()})
    tt.write_safetensors(os.path.join(case_dir, "inputs.safetensors"), inputs)
    tt.write_safetensors(os.path.join(case_dir, "expected.safetensors"), dict(outputs))
    return {
        "name": name,
        "model": os.path.abspath(yaml_path),
        "dir": os.path.abspath(case_dir),
        "bindings": bindings,
        "inputs": list(spec.inputs),
        "outputs": list(outputs),
        "shapes": {k: list(v.shape) for k, v in outputs.items()},
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=None, help="seed (default: fresh per run)")
    ap.add_argument("-q", "--quiet", action="store_true")
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args(argv)

    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
    print("make_cases: seed %d (rerun with --seed %d)" % (seed, seed), flush=True)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    cases, names, skipped = [], set(), []
    for path in collect(args.paths):
        stem = os.path.splitext(os.path.basename(path))[0]
        doc = None
        try:
            doc = tt.load_spec_doc(path)
            made = [make_case(path, doc, stem, kind, seed, args.out) for kind in ("b1", "bN")]
        except Exception as e:  # noqa: BLE001
            skip = isinstance(doc, dict) and doc.get("oracle") == "skip"
            msg = "%s: %s" % (type(e).__name__, e)
            if skip:
                print("make_cases: skipping %s (oracle: skip): %s" % (path, msg), file=sys.stderr)
                skipped.append(path)
                continue
            print("make_cases: FAILED on %s: %s" % (path, msg), file=sys.stderr)
            if not isinstance(e, tt.SpecError):
                traceback.print_exc()
            return 1
        for c in made:
            if c["name"] in names:
                print("make_cases: FAILED: two cases named %s (same YAML stem twice?)" % c["name"], file=sys.stderr)
                return 1
            names.add(c["name"])
            cases.append(c)
            if not args.quiet:
                print("  %-32s %s -> %s" % (c["name"], json.dumps(c["bindings"]),
                                           ", ".join("%s%s" % (k, v) for k, v in c["shapes"].items())))
    manifest = {"seed": seed, "cases": cases, "skipped": skipped}
    tmp = os.path.join(args.out, "manifest.json.tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(tmp, os.path.join(args.out, "manifest.json"))
    print("make_cases: %d cases from %d models in %.1f s (seed %d)"
          % (len(cases), len(cases) // 2, time.time() - t0, seed), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

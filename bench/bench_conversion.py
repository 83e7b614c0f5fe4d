#!/usr/bin/python3
"""How long tandem.from_torch takes to convert torchvision's classification models, with
its default check on, split into phases.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_conversion.py [--models resnet50 vit_b_16]
        [--no-check] [--json OUT] [--markdown]

Per model (random weights, batch 1 at the model's own resolution: 224, inception_v3 299,
efficientnet's and the v2's their own), the seconds of each phase of one from_torch call:
  trace       torch.fx tracing (fx_tracing.trace_module)
  torch_fwd   the module's forward on the example (real values: what the check compares with)
  meta        the shapes at the grown batch on torch's meta device
  convert     the traced nodes made layers
  emit        the YAML written (yaml_emit.emit_model)
  build       the C++ model built from the YAML (Model.from_yaml)
  weights     the state_dict handed to the C++ model (load_state_dict)
  tandem_fwd  the check's Tandem forward on the example, and its comparison
and the total (the whole call, other work included). Each model runs in its own process
(the largest need several GiB), under the threads the machine has.
"""
import argparse
import json
import os
import subprocess
import sys
import time

# torchvision 0.14's classification models
MODELS = [
    "alexnet", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn",
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
    "resnext50_32x4d", "resnext101_32x8d", "resnext101_64x4d", "wide_resnet50_2", "wide_resnet101_2",
    "squeezenet1_0", "squeezenet1_1", "densenet121", "densenet161", "densenet169", "densenet201",
    "inception_v3", "googlenet",
    "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0",
    "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small",
    "mnasnet0_5", "mnasnet0_75", "mnasnet1_0", "mnasnet1_3",
    "efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3", "efficientnet_b4",
    "efficientnet_b5", "efficientnet_b6", "efficientnet_b7",
    "efficientnet_v2_s", "efficientnet_v2_m", "efficientnet_v2_l",
    "regnet_x_400mf", "regnet_x_800mf", "regnet_x_1_6gf", "regnet_x_3_2gf", "regnet_x_8gf", "regnet_x_16gf",
    "regnet_x_32gf", "regnet_y_400mf", "regnet_y_800mf", "regnet_y_1_6gf", "regnet_y_3_2gf", "regnet_y_8gf",
    "regnet_y_16gf", "regnet_y_32gf", "regnet_y_128gf",
    "convnext_tiny", "convnext_small", "convnext_base", "convnext_large",
    "vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14",
    "swin_t", "swin_s", "swin_b", "maxvit_t",
]

# the resolution each model's weights were trained at (torchvision's transforms)
RESOLUTION = {"inception_v3": 299, "efficientnet_b1": 240, "efficientnet_b2": 288, "efficientnet_b3": 300,
              "efficientnet_b4": 380, "efficientnet_b5": 456, "efficientnet_b6": 528, "efficientnet_b7": 600,
              "efficientnet_v2_s": 384, "efficientnet_v2_m": 480, "efficientnet_v2_l": 480, "vit_h_14": 224}

PHASES = ["trace", "torch_fwd", "meta", "convert", "emit", "build", "weights", "tandem_fwd"]


def time_one(name, check):
    """{phase: seconds} of one from_torch of `name` (in this process)."""
    import torch
    import torchvision.models as tv

    import tandem
    from tandem import _tandem, fx_tracing, torch_import

    torch.manual_seed(0)
    kwargs = {"aux_logits": False, "init_weights": False} if name in ("inception_v3", "googlenet") else {}
    module = getattr(tv, name)(weights=None, **kwargs).eval()
    size = RESOLUTION.get(name, 224)
    x = torch.randn(1, 3, size, size)
    times = dict.fromkeys(PHASES, 0.0)
    on_meta = [False]

    def timed(phase, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                key = "meta" if phase == "torch_fwd" and on_meta[0] else phase
                times[key] += time.perf_counter() - start
        return wrapper

    def meta(fn):
        def wrapper(*args, **kwargs):
            on_meta[0] = True
            try:
                return fn(*args, **kwargs)
            finally:
                on_meta[0] = False
        return wrapper

    patches = [(torch_import, "_trace", timed("trace", torch_import._trace)),
               (torch_import, "propagate_shapes", timed("torch_fwd", fx_tracing.propagate_shapes)),
               (torch_import, "_shapes_on_meta", meta(torch_import._shapes_on_meta)),
               (torch_import._Converter, "convert", timed("convert", torch_import._Converter.convert)),
               (torch_import, "emit_model", timed("emit", torch_import.emit_model)),
               (torch_import, "_check", timed("tandem_fwd", torch_import._check))]
    from_yaml, load = _tandem.Model.from_yaml, _tandem.Model.load_state_dict
    patches += [(_tandem.Model, "from_yaml", staticmethod(timed("build", from_yaml))),
                (_tandem.Model, "load_state_dict", timed("weights", load))]
    for owner, attr, value in patches:
        setattr(owner, attr, value)
    start = time.perf_counter()
    tandem.from_torch(module, (x,), check=check)
    times["total"] = time.perf_counter() - start
    times.update(model=name, resolution=size, check=check, torch_threads=torch.get_num_threads(),
                 parameters=sum(p.numel() for p in module.parameters()))
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--no-check", action="store_true", help="from_torch(check=False)")
    parser.add_argument("--json", help="write the rows as JSON here")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table at the end")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process: one model, JSON on stdout
    args = parser.parse_args()
    if args.one:
        print("ROW " + json.dumps(time_one(args.one, not args.no_check)), flush=True)
        return 0
    rows = []
    print("%-22s %7s %s %7s" % ("model", "params", " ".join("%10s" % p for p in PHASES), "total"), flush=True)
    for name in args.models:
        command = [sys.executable, os.path.abspath(__file__), "--one", name] + (["--no-check"] if args.no_check else [])
        done = subprocess.run(command, capture_output=True, text=True)
        row = next((json.loads(line[4:]) for line in done.stdout.splitlines() if line.startswith("ROW ")), None)
        if row is None:
            row = {"model": name, "error": (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]}
            print("%-22s failed: %s" % (name, row["error"]), flush=True)
        else:
            print("%-22s %6.1fM %s %7.2f" % (name, row["parameters"] / 1e6, " ".join("%10.2f" % row[p] for p in PHASES),
                                            row["total"]), flush=True)
        rows.append(row)
    if args.markdown:
        print("\n| model | " + " | ".join(PHASES) + " | total (s) |")
        print("|---" * (len(PHASES) + 2) + "|")
        for r in rows:
            if "error" in r:
                print("| %s | failed: %s |" % (r["model"], r["error"]))
            else:
                print("| %s | %s | %.2f |" % (r["model"], " | ".join("%.2f" % r[p] for p in PHASES), r["total"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"check": not args.no_check, "cpus": os.cpu_count(), "load": os.getloadavg()[0], "rows": rows},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

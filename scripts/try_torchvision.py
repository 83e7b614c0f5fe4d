#!/usr/bin/python3
"""Tries tandem.from_torch on torchvision's classification models (random weights, batch
norm statistics perturbed) and prints, per model, whether it converts and matches torch
in eval mode at a batch the converter never saw, or the first line of what stops it. The
time is from_torch's with check=False (shapes on torch's meta device, no forward of either
model): the judging is this script's, at batch 3.

    PYTHONPATH=build/python /usr/bin/python3 scripts/try_torchvision.py [name ...] [--all]

Without names it tries one model of each family (the smallest); --all tries every one.
Needs Debian's python3-torchvision (scripts/setup.sh installs it)."""
import sys
import time

import torch
import torchvision.models as tv

import tandem

ONE_OF_EACH = ["alexnet", "vgg11", "resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2", "squeezenet1_0",
               "densenet121", "inception_v3", "googlenet", "shufflenet_v2_x1_0", "mobilenet_v2",
               "mobilenet_v3_small", "mobilenet_v3_large", "mnasnet1_0", "efficientnet_b0", "efficientnet_v2_s",
               "regnet_x_400mf", "regnet_y_400mf", "convnext_tiny", "vit_b_16", "swin_t", "maxvit_t"]

# The smallest input each model takes (vit and maxvit fix their image size; inception's
# stem needs 75 pixels; alexnet and vgg pool adaptively to 6x6 and 7x7, which Tandem's fixed
# windows do only from a multiple; the rest run at 64, which keeps this quick).
def image_size(name):
    if name.startswith(("vit_", "maxvit", "alexnet", "vgg")):
        return 224
    return 96 if name.startswith("inception") else 64


def perturb_batch_norm(module):
    """Running statistics drawn afresh, and a weight torch starts at zero (vit's head) drawn:
    an output of zeros would judge nothing."""
    for m in module.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
        if isinstance(m, torch.nn.Linear) and not m.weight.any():
            torch.nn.init.normal_(m.weight, std=0.1)


def all_names():
    return sorted(tv.list_models(module=tv))  # the classification models, not detection's or video's


def try_one(name):
    """('ok', detail) or ('fails', first line of the error)."""
    torch.manual_seed(0)
    module = getattr(tv, name)(weights=None)
    perturb_batch_norm(module)
    module.eval()
    size = image_size(name)
    start = time.time()
    try:
        model = tandem.from_torch(module, torch.randn(2, 3, size, size), check=False)  # judged below
    except tandem.ModelError as e:
        return "fails", str(e).splitlines()[0] + " | " + " | ".join(str(e).splitlines()[1:3])
    except Exception as e:  # noqa: BLE001 - what the converter must never do: say so
        return "CRASH", "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    took = time.time() - start
    x = torch.randn(3, 3, size, size)
    with torch.no_grad():
        want = module(x)
    got = model(x)["output"]
    error = float((got - want).abs().max() / want.abs().max())
    return ("ok" if error <= 1e-4 else "differs"), "converted in %.1f s, batch 3 within %.1e of torch" % (took, error)


def main(argv):
    names = [a for a in argv if not a.startswith("--")]
    if not names:
        names = all_names() if "--all" in argv else ONE_OF_EACH
    width = max(len(n) for n in names)
    converted = 0
    for name in names:
        verdict, detail = try_one(name)
        converted += verdict == "ok"
        print("%-*s  %-7s %s" % (width, name, verdict, detail), flush=True)
    print("%d of %d convert" % (converted, len(names)))


if __name__ == "__main__":
    main(sys.argv[1:])

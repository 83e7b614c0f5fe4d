"""tandem.from_torch on torchvision's segmentation models, the models users build on the
classification backbones: their heads upsample to the input's size read from x.shape
(`F.interpolate(x, size=input.shape[-2:])`), and their backbones dilate their convolutions
(FCN and DeepLabV3: 2 and 4; DeepLab's ASPP: 12, 24, 36). Converted on a batch of 2, judged
on a batch of 3 against torch: outputs within 1e-4 of torch's (relative to their largest).
And every convolution runs on one of oneDNN's fast kernels, never its reference one (a
hundred times slower: an inference region laid out for a kernel oneDNN lacks on this CPU's
ISA fell to it), asked of oneDNN's own log in a process of its own."""
import os
import subprocess
import sys
import textwrap

os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import tandem  # noqa: E402

seg = pytest.importorskip("torchvision.models.segmentation", reason="needs Debian's python3-torchvision")

torch.set_num_threads(1)
tandem.set_threads(1)

MODELS = ["fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"]


def fresh(module):
    """Running statistics drawn afresh (not the initial 0 and 1) and dropout off."""
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    return module


@pytest.mark.parametrize("name", MODELS)
def test_segmentation_models_match_torch_at_a_batch_the_converter_never_saw(name, seed):
    module = fresh(getattr(seg, name)(weights=None, weights_backbone=None, num_classes=5)).eval()
    model = tandem.from_torch(module, torch.randn(2, 3, 48, 64), check=False)
    x = torch.randn(3, 3, 48, 64)
    with torch.no_grad():
        want = module(x)["out"]
    got = model(x)["out"].numpy()
    assert got.shape == tuple(want.shape) == (3, 5, 48, 64)
    scale = float(want.abs().max())
    assert scale > 0
    error = float(numpy.abs(got - want.numpy()).max())
    assert error <= 1e-4 * scale, "%s: differs by %.3g, %.2g of its largest" % (name, error, error / scale)


# Convolutions of every kind a region meets: dilated (2, 4, 12), grouped by 4 channels (not
# whole blocks of 8 or 16), depthwise, a stem of 3 channels; run for inference and trained.
NET = textwrap.dedent("""
    import torch, torch.nn as nn, tandem
    torch.manual_seed(0)
    tandem.set_threads(1)
    net = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=2, dilation=2), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=4, dilation=4), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=12, dilation=12), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, groups=8), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.ReLU()).eval()
    x = torch.randn(2, 3, 32, 32)
    model = tandem.from_torch(net, x)  # its check runs the converted model
    model(x)
    print("ran", flush=True)
""")


def test_no_convolution_falls_to_onednns_reference_kernel():
    env = dict(os.environ, ONEDNN_VERBOSE="1", DNNL_VERBOSE="1", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", NET], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and "ran" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    runs = [line for line in done.stdout.splitlines() if ",exec," in line and ",convolution," in line]
    assert len(runs) >= 6, done.stdout[-3000:]
    slow = [line for line in runs if ",ref" in line]
    assert not slow, "oneDNN's reference convolution ran:\n" + "\n".join(slow)

"""Converted models placed (issue 28, item 1, "Placed"): torchvision's resnet18, converted
with from_torch, trains to the same weights (a) split over the cpu and two simulated GPUs,
stage by stage as `--place` puts them, and (b) with its classifier in a data_parallel block
over the two simulated GPUs, as the same converted model trained on the cpu alone.

Which block is data-parallel matters: a data_parallel block has nn.DataParallel's
semantics, each replica running its share of the batch, so a batch norm inside one would
normalise each replica's half by that half's statistics, a different function from the
whole batch's. The classifier (`fc`, a Linear after the pooling) has no batch norm, and
every batch norm of the trunk sees the whole batch on whichever device holds it: the
placed runs compute what the one-device run does.

The simulated GPUs come from place(sim_gpus=2), in this file's own process (ctest runs each
test file as one), with TANDEM_SIM_GPUS out of the environment."""
import os

os.environ.pop("TANDEM_SIM_GPUS", None)  # this file's GPUs come from place() alone
os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import tandem  # noqa: E402

tv = pytest.importorskip("torchvision.models", reason="needs Debian's python3-torchvision (scripts/setup.sh)")

torch.set_num_threads(1)
tandem.set_threads(1)

STEPS = 3
BATCH = 8
TRAIN = {"optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9}}


def resnet18(seed):
    torch.manual_seed(seed)
    module = tv.resnet18(weights=None, num_classes=10)
    for m in module.modules():  # running statistics away from 0 and 1, so that one read wrongly shows
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return module


def convert(module, data_parallel=None):
    return tandem.from_torch(module, torch.randn(2, 3, 32, 32), loss=nn.CrossEntropyLoss(),
                             example_targets=torch.tensor([0, 1]), train=TRAIN, data_parallel=data_parallel,
                             check=False)


def batches(seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(BATCH, 3, 32, 32, generator=g), torch.randint(0, 10, (BATCH,), generator=g))
            for _ in range(STEPS)]


def train(model, data):
    trainer = tandem.Trainer(model)
    losses = [trainer.step(x=x, target=y) for x, y in data]
    return losses, {name: numpy.array(value) for name, value in model.state_dict().items()}


def worst_relative(got, want):
    """max over tensors of max |got - want| / max |want| (names of `got` as `want`'s), and where."""
    assert sorted(got) == sorted(want)
    worst, where = 0.0, None
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape, name
        if not numpy.issubdtype(w.dtype, numpy.floating):
            assert numpy.array_equal(g, w), name  # num_batches_tracked
            continue
        scale = max(float(numpy.abs(w).max()), 1e-30)
        error = float(numpy.abs(g.astype(numpy.float64) - w).max()) / scale
        if error > worst:
            worst, where = error, name
    return worst, where


@pytest.fixture(scope="module")
def on_one_device():
    module = resnet18(11)
    model = convert(module)
    start = {name: numpy.array(value) for name, value in model.state_dict().items()}  # a copy: the steps update them
    losses, weights = train(model, batches(12))
    # the steps moved the weights: equal weights below are not weights left alone
    moved = max(float(numpy.abs(weights[k] - start[k]).max()) for k in weights
                if k.endswith(".weight"))
    assert moved > 1e-4
    return module, losses, weights


def test_split_over_the_cpu_and_simulated_gpus_trains_as_on_one_device(on_one_device):
    module, want_losses, want = on_one_device
    model = convert(module)
    model.place(sim_gpus=2, place={"conv1": "cpu", "bn1": "cpu", "relu": "cpu", "maxpool": "cpu", "layer1.*": "cpu",
                                   "layer2.*": "cuda:0", "layer3.*": "cuda:0",
                                   "layer4.*": "cuda:1", "avgpool": "cuda:1", "fc": "cuda:1"})
    devices = {layer.device for layer in model.plan(batch=BATCH, training=True).layers}
    assert devices == {"cpu", "cuda:0", "cuda:1"}  # three stages, copies between them
    losses, got = train(model, batches(12))
    # the same kernels (a simulated GPU computes with the cpu's) on the same tensors, moved
    # by copies: the same bits
    numpy.testing.assert_array_equal(losses, want_losses)
    worst, where = worst_relative(got, want)
    assert worst == 0, "%s differs by %.3g of its largest" % (where, worst)


def test_the_classifier_data_parallel_over_simulated_gpus_trains_as_on_one_device(on_one_device):
    module, _, _ = on_one_device
    # Two steps, not the fixture's three. Each replica's share of the classifier's weight
    # gradient is summed across the two GPUs, not in one GEMM over the batch: float32
    # rounding of another order, which SGD with momentum at losses of 3 to 6 grows step by
    # step, and which can tip a near tie (a max-pool window's largest, a ReLU input at 0) to
    # the other side, a discrete change no tolerance describes. On an AVX2 EPYC: 1.5e-6 of
    # the largest after one step, 1.3e-5 after two (layer3.1.bn2.bias), and after three a
    # flip put layer2.1.bn1.bias 2.6e-2 away (with AVX-512 the third step stayed at 3.8e-6).
    # 5e-5 is far below what a wrong gradient, a replica's share missed, or batch norm
    # statistics of half a batch give (1e-2 and more, from the first step).
    data = batches(12)[:2]
    want_losses, want = train(convert(module), data)
    wrapped = resnet18(11)
    wrapped.load_state_dict(module.state_dict())
    wrapped.fc = nn.DataParallel(wrapped.fc)
    model = convert(wrapped, data_parallel={"fc": {"devices": ["cuda:0", "cuda:1"], "dim": 0}})
    assert "data_parallel: {devices: [cuda:0, cuda:1]" in model.yaml
    model.place(sim_gpus=2)
    replicas = {layer.path: layer.device for layer in model.plan(batch=BATCH, training=True).layers
                if layer.path.startswith("fc.module@")}
    assert replicas == {"fc.module@0": "cuda:0", "fc.module@1": "cuda:1"}
    losses, got = train(model, data)
    got = {name.replace("fc.module.", "fc."): value for name, value in got.items()}
    assert want_losses[0] != want_losses[1]  # it trained
    numpy.testing.assert_allclose(losses, want_losses, rtol=1e-6)  # 3.5e-7 apart at the second
    worst, where = worst_relative(got, want)
    assert worst < 5e-5, "%s differs by %.3g of its largest %.3g" % (where, worst, float(numpy.abs(want[where]).max()))


def test_swin_split_over_the_cpu_and_simulated_gpus_trains_as_on_one_device():
    """A small SwinTransformer (swin_t's class: shifted windows, the attention mask and the
    int64 relative_position_index as buffer layers, index_select, scale) split by stage:
    the patch embedding on the cpu, the first stage on cuda:0, the rest on cuda:1. The
    buffers live and are read on their stage's device; the same bits as on the cpu alone."""
    from torchvision.models.swin_transformer import SwinTransformer

    def swin():
        torch.manual_seed(21)
        return SwinTransformer(patch_size=[4, 4], embed_dim=24, depths=[2, 2], num_heads=[2, 4],
                               window_size=[4, 4], stochastic_depth_prob=0.0, num_classes=10)

    results = []
    for place in (None, {"features.0.*": "cpu", "features.1.*": "cuda:0", "features.2.*": "cuda:1",
                         "features.3.*": "cuda:1", "norm": "cuda:1", "permute": "cuda:1", "avgpool": "cuda:1",
                         "flatten": "cuda:1", "head": "cuda:1"}):
        model = convert(swin())
        if place is not None:
            model.place(sim_gpus=2, place=place)
            devices = {layer.path: layer.device for layer in model.plan(batch=BATCH, training=True).layers}
            assert devices["features.1.1.attn.attn_mask"] == "cuda:0"
            assert devices["features.3.0.attn.relative_position_index"] == "cuda:1"
        results.append(train(model, batches(22)))
    (want_losses, want), (losses, got) = results
    assert len(set(want_losses)) == STEPS  # it trained
    numpy.testing.assert_array_equal(losses, want_losses)
    worst, where = worst_relative(got, want)
    assert worst == 0, "%s differs by %.3g of its largest" % (where, worst)

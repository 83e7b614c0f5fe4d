"""tandem.from_torch on 1-D networks, as a user writes them for audio or sequences:
Conv1d (bias, padding 'same' with dilation, groups, stride), BatchNorm1d on [N, C, L] and
after a linear on [N, C], MaxPool1d and AvgPool1d (padding, ceil_mode, count_include_pad),
AdaptiveAvgPool1d and AdaptiveMaxPool1d, and the functional forms. Random weights and
running statistics drawn afresh, converted on a batch of 2 and judged on a batch of 3 it
never saw: outputs within 1e-4 of torch's (relative to their largest); a training step's
gradients of every parameter and of the input within 1e-4, and the running statistics
after it torch's; to_torch gives back torch's modules, names and outputs."""
import copy
import inspect
import os

import numpy
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tandem
from tandem.torch_import import ConversionError
from torch_compare import assert_relative, compare_with_torch

HERE = os.path.basename(__file__)


class AudioNet(nn.Module):
    """A small keyword-spotting style network over [N, 2, 64] waveforms: one ReLU module
    called after each convolution (ResNet's way), batch norm after a ReLU (so no bias feeds
    one in training, whose gradient would be 0 by construction) and after a bias-free
    convolution, pools that pad and round up, a global average and a 2-window max pool."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(2, 8, 5, padding="same", dilation=2)
        self.relu = nn.ReLU()
        self.bn1 = nn.BatchNorm1d(8)
        self.conv2 = nn.Conv1d(8, 12, 3, stride=2, padding=1, groups=4, bias=False)
        self.bn2 = nn.BatchNorm1d(12, momentum=None)  # cumulative
        self.pool1 = nn.MaxPool1d(3, stride=2, padding=1, ceil_mode=True)
        self.conv3 = nn.Conv1d(12, 16, 3, padding="valid")
        self.pool2 = nn.AvgPool1d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
        self.gap = nn.AdaptiveAvgPool1d(1)
        self.gmp = nn.AdaptiveMaxPool1d(2)
        self.fc = nn.Linear(16 + 32, 10)

    def forward(self, x):
        h = self.bn1(self.relu(self.conv1(x)))  # [N, 8, 64]
        h = self.pool1(self.relu(self.bn2(self.conv2(h))))  # [N, 12, 32] -> [N, 12, 17]
        h = self.pool2(self.relu(self.conv3(h)))  # [N, 16, 15] -> [N, 16, 8]
        return self.fc(torch.cat([torch.flatten(self.gap(h), 1), self.gmp(h).flatten(1)], 1))


class TabularMLP(nn.Module):
    """An MLP with BatchNorm1d on [N, C]: after a bias-free linear, and after a ReLU with its
    own eps and momentum; the last without affine parameters."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 32, bias=False), nn.BatchNorm1d(32), nn.ReLU(),
                                 nn.Linear(32, 16), nn.ReLU(), nn.BatchNorm1d(16, eps=1e-3, momentum=0.3),
                                 nn.Linear(16, 8), nn.ReLU(), nn.BatchNorm1d(8, affine=False), nn.Linear(8, 3))

    def forward(self, x):
        return self.net(x)


class Functional(nn.Module):
    """The pools as functions: F.max_pool1d (padding, dilation, ceil_mode), F.avg_pool1d
    (keywords, count_include_pad False), torch.avg_pool1d, F.adaptive_avg_pool1d and
    F.adaptive_max_pool1d (a one-element tuple as the output size)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 6, 3, padding=1)

    def forward(self, x):
        h = F.max_pool1d(F.relu(self.conv(x)), 3, stride=2, padding=1, dilation=2, ceil_mode=True)  # [N, 6, 15]
        h = F.avg_pool1d(h, kernel_size=3, stride=2, padding=1, count_include_pad=False)  # [N, 6, 8]
        h = torch.avg_pool1d(h, 2) - h.narrow(2, 0, 4)  # [N, 6, 4]
        return torch.cat([F.adaptive_avg_pool1d(h, 1).flatten(1), F.adaptive_max_pool1d(h, (2,)).flatten(1)], 1)


def fresh(module):
    """`module` with running statistics drawn afresh (not the initial 0 and 1, which would
    hide a mean or variance read wrongly), and affine weights away from their initial 1, 0."""
    for m in module.modules():
        if isinstance(m, nn.BatchNorm1d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            if m.affine:
                with torch.no_grad():
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.5, 0.5)
    return module


MODELS = {"audio": (AudioNet, (2, 64)), "mlp": (TabularMLP, (10,))}


@pytest.mark.parametrize("case", sorted(MODELS))
def test_outputs_match_torch_at_a_batch_the_converter_never_saw(case, seed):
    make, shape = MODELS[case]
    module = fresh(make()).eval()
    model = tandem.from_torch(module, torch.randn(2, *shape), check=False)  # judged here, at another batch
    x = torch.randn(3, *shape)
    with torch.no_grad():
        want = module(x)
    assert_relative(model(x)["output"].numpy(), want.numpy(), 1e-4, "%s output" % case)
    assert set(model.state_dict()) == set(module.state_dict())  # num_batches_tracked too


def test_the_yaml_has_the_1d_ops(seed):
    model = tandem.from_torch(fresh(AudioNet()).eval(), torch.randn(2, 2, 64), check=False)
    for line in ["{name: conv1, op: conv1d, inputs: x, in_channels: 2, out_channels: 8, kernel_size: 5, "
                 "padding: same, dilation: 2}",
                 "{name: conv2, op: conv1d, in_channels: 8, out_channels: 12, kernel_size: 3, stride: 2, padding: 1, "
                 "groups: 4, bias: false}",
                 "{name: bn2, op: batch_norm1d, num_features: 12, momentum: null}",
                 "op: max_pool1d, kernel_size: 3, stride: 2, padding: 1, ceil_mode: true}",
                 "{name: conv3, op: conv1d, in_channels: 12, out_channels: 16, kernel_size: 3, padding: valid}",
                 "op: avg_pool1d, kernel_size: 3, stride: 2, padding: 1, ceil_mode: true, count_include_pad: false}",
                 "{name: gap, op: avg_pool1d, kernel_size: 8, stride: 8}",  # the whole length: one window
                 "{name: gmp, op: max_pool1d, inputs: pool2, kernel_size: 4, stride: 4}"]:
        assert line in model.yaml, "%r not in\n%s" % (line, model.yaml)


def near_a_kink(module, x):
    """The smallest distance of a ReLU's input to 0, relative to the largest input of that
    call, over torch's forward of `x` in train mode (on a copy: the statistics stay)."""
    module = copy.deepcopy(module).train()
    nearest = [float("inf")]

    def look(m, args):
        v = args[0].detach().abs()
        nearest[0] = min(nearest[0], float(v.min() / v.max().clamp(min=1e-30)))

    for m in module.modules():
        if isinstance(m, nn.ReLU):
            m.register_forward_pre_hook(look)
    with torch.no_grad():
        module(x)
    return nearest[0]


@pytest.mark.parametrize("case", sorted(MODELS))
def test_a_training_step_matches_torch(case, seed):
    """Gradients of every parameter and of the input, and the running statistics (and
    num_batches_tracked) after the step, in train mode: batch statistics, on a batch of 3
    (16 for the MLP, whose batch norms' statistics are over the batch alone). A ReLU input
    within rounding of 0 may fall the other way in Tandem, which changes that gradient for
    real: a draw with one within 1e-5 of its call's largest is drawn again."""
    make, shape = MODELS[case]
    module = fresh(make())
    model = tandem.from_torch(copy.deepcopy(module).eval(), torch.randn(2, *shape), check=False)
    name = model.inputs[0]["name"]
    batch = 16 if case == "mlp" else 3
    for _ in range(10):
        x = torch.randn(batch, *shape)
        if near_a_kink(module, x) > 1e-5:
            break
    else:
        raise AssertionError("ten draws near a ReLU's kink")
    theirs = copy.deepcopy(module).train()
    leaf = x.clone().requires_grad_()
    out = theirs(leaf)
    grad_output = torch.randn(out.shape)
    out.backward(grad_output)
    model.zero_grad()
    input_grad = model.backward({name: x}, {"output": grad_output}, training=True)[name]
    assert_relative(input_grad.numpy(), leaf.grad.numpy(), 1e-4, "gradient of the input")
    ours = model.gradients()
    assert set(ours) == {key for key, _ in theirs.named_parameters()}
    for key, p in theirs.named_parameters():
        assert_relative(ours[key], p.grad.numpy(), 1e-4, "gradient of " + key)
    state = model.state_dict()
    for key, buffer in theirs.named_buffers():
        if key.endswith("num_batches_tracked"):
            assert int(numpy.asarray(state[key]).reshape(-1)[0]) == int(buffer) == 1, key
        else:
            before = dict(module.named_buffers())[key]
            assert not torch.equal(buffer, before), "%s: torch's step left it as it was, which judges nothing" % key
            assert_relative(state[key], buffer.numpy(), 1e-4, key + " after the step")


def test_functional_pools_match_torch(seed):
    """Forward and backward (eval mode) against torch at a batch the converter never saw."""
    model = compare_with_torch(Functional(), (torch.randn(2, 3, 30),), inputs=(torch.randn(3, 3, 30),))
    assert "{name: max_pool1d, op: max_pool1d, kernel_size: 3, stride: 2, padding: 1, ceil_mode: true, " \
           "dilation: 2}" in model.yaml
    assert "{name: avg_pool1d, op: avg_pool1d, kernel_size: 3, stride: 2, padding: 1, " \
           "count_include_pad: false}" in model.yaml
    assert "{name: avg_pool1d_1, op: avg_pool1d, kernel_size: 2, stride: 2}" in model.yaml  # torch.avg_pool1d
    assert "{name: adaptive_avg_pool1d, op: avg_pool1d, kernel_size: 4, stride: 4}" in model.yaml  # to 1 of 4
    assert "{name: adaptive_max_pool1d, op: max_pool1d, inputs: sub, kernel_size: 2, stride: 2}" in model.yaml
    assert set(model.state_dict()) == {"conv.weight", "conv.bias"}


def test_an_unbatched_sequence_converts(seed):
    """Conv1d, MaxPool1d and AvgPool1d of one [C, L] sequence, without a batch dimension."""
    module = nn.Sequential(nn.Conv1d(3, 5, 3, padding=2, dilation=2), nn.ReLU(), nn.MaxPool1d(2),
                           nn.Conv1d(5, 4, 2, stride=2), nn.AvgPool1d(2, ceil_mode=True))
    model = compare_with_torch(module, (torch.randn(3, 22),), batch_dim=None)
    assert model.inputs[0]["shape"] == [3, 22]
    x = torch.randn(3, 22)
    with torch.no_grad():
        assert_relative(model(x)["output"].numpy(), module(x).numpy(), 1e-4, "another draw")


def test_to_torch_gives_back_torchs_modules_names_and_outputs(seed):
    module = fresh(AudioNet()).eval()
    back = tandem.to_torch(tandem.from_torch(module, torch.randn(2, 2, 64), check=False))
    assert list(back.state_dict()) == list(module.state_dict())
    layers = dict(back.named_modules())
    for key, m in module.named_modules():
        if isinstance(m, (nn.Conv1d, nn.BatchNorm1d, nn.MaxPool1d, nn.AvgPool1d)):
            assert type(layers[key]) is type(m), "%s: %s, torch's %s" % (key, type(layers[key]).__name__,
                                                                       type(m).__name__)
            assert layers[key].extra_repr() == m.extra_repr(), key
    x = torch.randn(3, 2, 64)
    with torch.no_grad():
        assert_relative(back(x).numpy(), module(x).numpy(), 1e-4, "to_torch(from_torch(AudioNet))")
    mlp = fresh(TabularMLP()).eval()
    back = tandem.to_torch(tandem.from_torch(mlp, torch.randn(2, 10), check=False))
    assert list(back.state_dict()) == list(mlp.state_dict())
    x = torch.randn(3, 10)
    with torch.no_grad():
        assert_relative(back(x).numpy(), mlp(x).numpy(), 1e-4, "to_torch(from_torch(TabularMLP))")


class Uneven(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool1d(3)

    def forward(self, x):
        return self.pool(x) + F.adaptive_max_pool1d(x, 3)


def line_of(cls, code):
    lines, first = inspect.getsourcelines(cls)
    for i, line in enumerate(lines):
        if code in line:
            return "%s:%d (%s)" % (HERE, first + i, line.strip())
    raise AssertionError(code)


def test_an_adaptive_pool_to_a_size_that_does_not_divide_is_refused():
    with pytest.raises(ConversionError) as error:
        tandem.from_torch(Uneven(), torch.randn(2, 4, 8))
    message = str(error.value)
    why = "output size 3 of a length-8 input: Tandem pools with fixed windows, which fit only an input that divides " \
          "into the output"
    at = line_of(Uneven, "return self.pool(x)")
    assert "'pool' (torch.nn.AdaptiveAvgPool1d), at %s: %s" % (at, why) in message, message
    assert "'adaptive_max_pool1d', at %s: %s" % (at, why) in message, message


def test_return_indices_is_refused():
    with pytest.raises(ConversionError, match="return_indices=True: Tandem's max_pool1d returns the values only"):
        tandem.from_torch(nn.Sequential(nn.AdaptiveMaxPool1d(2, return_indices=True)), torch.randn(2, 3, 8))

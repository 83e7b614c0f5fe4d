"""How from_torch treats what real models do (issue 28, item 3): a module without
parameters called twice (ResNet's self.relu) is a layer per call; torch names Tandem
cannot take are made legal and still load torch's weights and give torch's names back
through to_torch; and whatever stops the converter is a ConversionError with the module,
the op and the line, never another exception."""
import inspect
import os
import subprocess

import numpy
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tandem
from tandem.torch_import import ConversionError
from conftest import CLI, assert_close
from torch_compare import compare_with_torch

HERE = os.path.basename(__file__)


def line_of(cls, code):
    """HERE:N (code) for the line of `cls`'s source that holds `code`."""
    lines, first = inspect.getsourcelines(cls)
    for i, line in enumerate(lines):
        if code in line:
            return "%s:%d (%s)" % (HERE, first + i, line.strip())
    raise AssertionError(code)


class BasicBlock(nn.Module):
    """torchvision's ResNet block: one ReLU module, called after each convolution."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(4)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x
        return self.relu(out)


class TwoBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Sequential(BasicBlock(), BasicBlock())
        self.act = nn.Hardswish()
        self.head = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x):
        x = self.act(self.act(self.layer1(x)))  # a module called twice in a row, at the top
        return self.head(torch.flatten(x, 1))


def test_a_module_without_parameters_is_a_layer_per_call(seed):
    module = TwoBlocks()
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    model = compare_with_torch(module, (torch.randn(2, 4, 6, 6),), inputs=(torch.randn(3, 4, 6, 6),))
    for line in ["- {name: relu, op: relu}", "- {name: add, op: add, inputs: [bn2, x]}", "- {name: relu_1, op: relu}",
                 "- {name: add, op: add, inputs: [bn2, '0.relu_1']}", "- {name: act, op: hardswish}",
                 "- {name: act_1, op: hardswish}"]:
        assert line in model.yaml, "%r not in\n%s" % (line, model.yaml)
    assert model.yaml.count("op: relu}") + model.yaml.count("op: relu, ") == 4  # two calls in each of two blocks
    assert set(model.state_dict()) == set(module.state_dict())


class SharedLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(self.fc(x))


class SharedNorm(nn.Module):
    """A module with buffers but no parameters: its statistics would be a layer's own."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(2, affine=False)

    def forward(self, x):
        return self.bn(self.bn(x))


def test_a_module_with_parameters_or_buffers_called_twice_is_refused():
    with pytest.raises(tandem.ModelError) as error:
        tandem.from_torch(SharedLinear(), torch.randn(2, 3))
    assert "'fc' (torch.nn.Linear), at %s: called a second time (first as 'fc'): a Tandem layer owns its parameters, " \
        "so give each call its own module" % line_of(SharedLinear, "return self.fc(") in str(error.value)
    with pytest.raises(tandem.ModelError, match="'bn' \\(torch.nn.BatchNorm2d\\), at .*: called a second time"):
        tandem.from_torch(SharedNorm(), torch.randn(2, 2, 3, 3))


class Stage(nn.Module):
    """regnet's way: blocks named 'block1-0', which a Tandem layer name cannot be."""

    def __init__(self):
        super().__init__()
        self.add_module("block1-0", nn.Sequential(nn.Linear(4, 6), nn.ReLU()))
        self.add_module("block1-1", nn.Linear(6, 6))
        self.block1_1 = nn.Linear(6, 5)  # the legal spelling is taken: the renamed one gets another

    def forward(self, x):
        for block in self.children():
            x = block(x)
        return x


class Renamed(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = Stage()

    def forward(self, x):
        return self.trunk(x)


def test_names_tandem_cannot_take_are_made_legal_and_map_back(tmp_path, seed):
    module = Renamed()
    model = tandem.from_torch(module, torch.randn(2, 4), save_to=tmp_path / "renamed")
    assert "- name: block1_0" in model.yaml and "{name: block1_1_1, op: linear" in model.yaml
    assert "{name: block1_1, op: linear, in_features: 6, out_features: 5}" in model.yaml
    assert sorted(model.state_dict()) == ["trunk.block1_0.0.bias", "trunk.block1_0.0.weight", "trunk.block1_1.bias",
                                          "trunk.block1_1.weight", "trunk.block1_1_1.bias", "trunk.block1_1_1.weight"]
    x = torch.randn(5, 4)
    with torch.no_grad():
        want = module(x)
    assert_close(model(x)["output"].numpy(), want.numpy(), 1e-6, "output")  # torch's weights, loaded through the names
    torch_module = tandem.to_torch(model)
    assert list(torch_module.state_dict()) == list(module.state_dict())  # trunk.block1-0.0.weight, ...
    torch_module.load_state_dict(module.state_dict())
    assert_close(torch_module(x).detach().numpy(), want.numpy(), 1e-6, "to_torch's output")
    again = tandem.Model.load(tmp_path / "renamed.yaml")  # the file keeps the torch names for to_torch
    again.load_weights(tmp_path / "renamed.safetensors")
    assert list(tandem.to_torch(again).state_dict()) == list(module.state_dict())
    run = subprocess.run([CLI, "run", str(tmp_path / "renamed.yaml"), "--weights", str(tmp_path / "renamed.safetensors"),
                          "--batch", "3"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


class Flipped(nn.Module):
    """torch.flip, which Tandem lacks, read twice."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        r = self.fc(x).flip(1)
        return torch.cat([r.relu(), r], 1)


def test_what_reads_an_op_tandem_lacks_is_no_error_of_its_own():
    with pytest.raises(tandem.ModelError) as error:
        tandem.from_torch(Flipped(), torch.randn(2, 4))
    message = str(error.value)
    assert "'flip', at %s: tensor method .flip(): Tandem has no such op" % line_of(Flipped, ".flip(") in message
    assert message.count("\n  ") == 1  # the relu and cat read it: one error, the cause's


class Shuffle(nn.Module):
    """shufflenet's unit: the channels split by chunk, one half through a layer, the halves
    joined and shuffled (view, transpose, contiguous, view); then the other split functions
    and a permute to channels last and back."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)
        self.fc = nn.Linear(11, 3)

    def forward(self, x):
        x1, x2 = x.chunk(2, dim=1)
        out = torch.cat((x1, self.conv(x2)), dim=1)
        n, c, h, w = out.size()
        out = out.view(n, 2, c // 2, h, w).transpose(1, 2).contiguous().view(n, c, h, w)
        first, rest = torch.split(out, [3, 5], dim=1)
        pieces = out.tensor_split(3, dim=2)  # 2, 2 and 1 rows of 5
        middle = torch.chunk(out, 3, dim=-1)[1]  # chunks of 2, 2 and 1: the second
        nhwc = torch.permute(rest, (0, 2, 3, 1))
        return self.fc(torch.cat([first, first, rest], 1).permute(0, 2, 3, 1)).permute(0, 3, 1, 2), \
            nhwc.transpose(-1, 1), pieces[2], middle.swapaxes(2, 3)


def test_chunk_split_transpose_and_permute_convert(seed):
    model = compare_with_torch(Shuffle(), (torch.randn(2, 8, 5, 5),), inputs=(torch.randn(3, 8, 5, 5),))
    assert "{name: chunk_0, op: narrow, inputs: x, dim: 1, start: 0, length: 4}" in model.yaml
    assert "{name: chunk_1, op: narrow, inputs: x, dim: 1, start: 4, length: 4}" in model.yaml
    assert "{name: transpose, op: permute, dims: [0, 2, 1, 3, 4]}" in model.yaml
    assert "{name: split_1, op: narrow, inputs: view_1, dim: 1, start: 3, length: 5}" in model.yaml
    # the second chunk's pieces are named after it; tensor_split's last piece is 1 row of 5
    assert "{name: chunk_1_1, op: narrow, inputs: view_1, dim: -1, start: 2, length: 2}" in model.yaml
    assert "{name: tensor_split_2, op: narrow, inputs: view_1, dim: 2, start: 4, length: 1}" in model.yaml
    assert "{name: transpose_1, op: permute, inputs: permute, dims: [0, 3, 2, 1]}" in model.yaml
    assert model.yaml.count("op: narrow") == 6  # one per piece read: x1, x2, first, rest, pieces[2], middle


class SplitOfTheBatch(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2)
        return torch.cat([b, a])


class WholeTuple(nn.Module):
    def forward(self, x):
        return x.split(3, dim=1)


def test_splits_tandem_cannot_make_are_refused():
    with pytest.raises(ConversionError) as error:
        tandem.from_torch(SplitOfTheBatch(), torch.randn(4, 3))
    assert "chunk along dim 0, which grows with the batch: its pieces' sizes would change" in str(error.value)
    with pytest.raises(ConversionError) as error:
        tandem.from_torch(WholeTuple(), torch.randn(4, 6))
    assert "is the whole tuple that 'split' returns; take one element ([0])" in str(error.value)


class Attend(nn.Module):
    """vit's way: attention weights not asked for (None in the tuple), the tuple unpacked."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        x, _ = self.attn(x, x, x, need_weights=False)
        return x


def test_a_tuple_with_a_none_in_it_is_still_a_tuple(seed):
    compare_with_torch(Attend(), (torch.randn(2, 5, 8),), inputs=(torch.randn(3, 5, 8),))


class Concat(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return torch.cat([self.fc(x), x], 1)


def test_a_converter_that_fails_is_named_with_its_line(monkeypatch):
    from tandem import torch_ops

    def broken(node, ctx):
        return node.no_such_attribute

    monkeypatch.setitem(torch_ops.FUNCTIONS, torch.cat, broken)
    with pytest.raises(tandem.ModelError) as error:
        tandem.from_torch(Concat(), torch.randn(2, 3))
    assert "'cat', at %s: from_torch failed on it (AttributeError: 'Node' object has no attribute 'no_such_attribute'); " \
        "please report it" % line_of(Concat, "torch.cat(") in str(error.value)
    assert isinstance(error.value, ConversionError)


def test_a_module_that_fails_on_its_example_says_so():
    with pytest.raises(ConversionError, match="the module fails on the example inputs \\(RuntimeError: "):
        tandem.from_torch(nn.Sequential(nn.Linear(3, 3)), torch.randn(2, 4))


class PlusFixed(nn.Module):
    def forward(self, x):
        return x + torch.ones(2, 4)  # a batch of 2 only


def test_a_module_that_fails_at_one_more_sample_says_so():
    with pytest.raises(ConversionError, match="the module fails at batch 3 \\(RuntimeError: .*give batch_dim="):
        tandem.from_torch(PlusFixed(), torch.randn(2, 4))


class Flattening(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(self.conv(x).view(x.size(0), -1))


def test_shapes_at_one_more_sample_on_meta_tensors_are_the_real_ones(monkeypatch, seed):
    """The shapes at the grown batch come from torch's meta device (no data computed);
    where that fails the module runs for real: both give the same model."""
    import tandem.torch_import as torch_import
    module = Flattening()
    x = torch.randn(2, 3, 6, 6)
    on_meta = tandem.from_torch(module, x)
    monkeypatch.setattr(torch_import, "_shapes_on_meta", lambda traced, tensors: None)
    for_real = tandem.from_torch(module, x)
    assert on_meta.yaml == for_real.yaml and "batch" in on_meta.yaml
    bigger = torch.randn(5, 3, 6, 6)
    with torch.no_grad():
        want = module(bigger)
    assert_close(on_meta(bigger)["output"].numpy(), want.numpy(), 1e-5, "batch 5")


class Bags(nn.Module):
    """A recommender's lookups: flat ids of any count, offsets one per sample."""

    def __init__(self):
        super().__init__()
        self.tags = nn.EmbeddingBag(30, 4, mode="sum")
        self.fc = nn.Linear(4, 2)

    def forward(self, ids, offsets):
        return self.fc(self.tags(ids, offsets))


def bags_example(n_ids, batch):
    offsets = torch.sort(torch.randint(0, n_ids + 1, (batch,))).values
    offsets[0] = 0
    return torch.randint(0, 30, (n_ids,)), offsets


@pytest.mark.parametrize("how", ["dynamic", "two examples"])
def test_flat_ids_of_any_count(how, seed):
    module = Bags()
    if how == "dynamic":
        model = tandem.from_torch(module, bags_example(10, 4), dynamic={"ids": 0})
    else:
        model = tandem.from_torch(module, [bags_example(10, 4), bags_example(7, 4)])
    assert "ids: {shape: [ids_len], dtype: int64}" in model.yaml and "offsets: {shape: [batch], dtype: int64}" in \
        model.yaml
    for n_ids, batch in [(12, 4), (3, 5), (40, 2)]:  # more ids than the example's, and fewer
        ids, offsets = bags_example(n_ids, batch)
        with torch.no_grad():
            want = module(ids, offsets)
        assert_close(model(ids, offsets)["output"].numpy(), want.numpy(), 1e-5, "%d ids in %d bags" % (n_ids, batch))


def test_dynamic_names_what_it_cannot_take():
    with pytest.raises(ConversionError, match="dynamic= names 'tokens', which is no input \\(ids, offsets\\)"):
        tandem.from_torch(Bags(), bags_example(10, 4), dynamic={"tokens": 0})
    with pytest.raises(ConversionError, match="dynamic= gives input 'ids' \\(1 dimensions\\) the dimension\\(s\\) \\[1\\]"):
        tandem.from_torch(Bags(), bags_example(10, 4), dynamic={"ids": 1})
    with pytest.raises(ConversionError, match="the two examples have the same shapes"):
        tandem.from_torch(Bags(), [bags_example(10, 4), bags_example(10, 4)])


def test_stochastic_depth_traced_in_training_drops_whole_samples_in_training_and_not_in_inference(seed):
    ops = pytest.importorskip("torchvision.ops", reason="needs Debian's python3-torchvision (scripts/setup.sh)")

    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.stochastic_depth = ops.StochasticDepth(0.2, "row")

        def forward(self, x):
            return x + self.stochastic_depth(self.fc(x))

    module = Residual()
    served = compare_with_torch(module.eval(), (torch.randn(2, 4),), inputs=(torch.randn(5, 4),))
    assert "op: add, inputs: [x, fc]" in served.yaml  # traced in eval mode: the residual reads fc itself
    model = tandem.from_torch(module.train(), torch.randn(2, 4), check=False)  # traced in training mode
    assert "op: stochastic_depth, p: 0.2}" in model.yaml  # mode row, the default
    assert_close(model(x=torch.ones(3, 4))["output"].numpy(), module.eval()(torch.ones(3, 4)).detach().numpy(),
                 1e-6, "inference")  # the identity in inference
    # In training each sample's branch is kept (scaled by 1 / 0.8) or dropped whole: with a
    # gradient of ones, fc.bias's gradient is (kept samples) / 0.8 in each of its elements.
    x = torch.randn(200, 4)
    counts = set()
    for step in range(3):
        model.zero_grad()
        model.backward({"x": x}, {"output": torch.ones(200, 4)}, training=True, seed=step + 1)
        kept = model.gradients()["fc.bias"] * 0.8
        assert numpy.allclose(kept, kept[0], atol=1e-3) and abs(kept[0] - round(kept[0])) < 1e-3
        assert 200 * 0.8 - 6 * 200 ** 0.5 * 0.4 < kept[0] < 200 * 0.8 + 6 * 200 ** 0.5 * 0.4
        counts.add(round(float(kept[0])))
    assert len(counts) > 1  # each seed drops other samples


class ShiftedWindows(nn.Module):
    """swin's way into its windows (NHWC: pad H and W up to whole windows by sizes read from
    x.shape, roll by half a window, and back), then the heads built on a backbone: pads
    (ZeroPad2d, ConstantPad2d, a crop) and upsampling (Upsample, F.interpolate by size, by a
    scale factor, bilinear with and without align_corners)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.conv = nn.Conv2d(4, 3, 3)
        self.zero_pad = nn.ZeroPad2d((1, 0, 2, 1))
        self.const_pad = nn.ConstantPad2d(1, 0.5)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear")
        self.up_corners = nn.UpsamplingBilinear2d(size=(7, 9))

    def forward(self, x):
        window = 4
        nhwc = self.fc(x.permute(0, 2, 3, 1))
        pad_b = (window - nhwc.shape[1] % window) % window
        pad_r = (window - nhwc.shape[2] % window) % window
        padded = F.pad(nhwc, (0, 0, 0, pad_r, 0, pad_b))
        shifted = torch.roll(padded, shifts=(-2, -2), dims=(1, 2))
        back = shifted.roll((2, 2), (1, 2))[:, :nhwc.shape[1], :nhwc.shape[2], :].permute(0, 3, 1, 2)
        y = self.conv(self.zero_pad(back))
        return (F.interpolate(y, scale_factor=1.5) + F.interpolate(self.const_pad(y), size=(9, 9)),
                self.up(y), self.up_corners(y), F.pad(y, (-1, 1, 1, -1), value=-1.0),
                F.interpolate(y, size=(5, 4), mode="bilinear", align_corners=True),
                torch.roll(y, 3))


def test_pad_roll_and_interpolate_convert(seed):
    model = compare_with_torch(ShiftedWindows(), (torch.randn(2, 4, 5, 7),), inputs=(torch.randn(3, 4, 5, 7),))
    assert "{name: pad, op: pad, pad: [0, 0, 0, 1, 0, 3]}" in model.yaml
    assert "{name: roll, op: roll, shifts: [-2, -2], dims: [1, 2]}" in model.yaml
    # x[:, :H, :W, :] with bounds read from the shape: a narrow per dimension sliced
    assert "- {name: narrow, op: narrow, dim: 1, start: 0, length: 5}" in model.yaml
    assert "- {name: narrow_1, op: narrow, dim: 2, start: 0, length: 7}" in model.yaml
    assert "{name: zero_pad, op: pad, pad: [1, 0, 2, 1]}" in model.yaml
    assert "{name: const_pad, op: pad, inputs: conv, pad: [1, 1, 1, 1], value: 0.5}" in model.yaml
    assert "{name: up, op: interpolate, inputs: conv, mode: bilinear, scale_factor: 2.0}" in model.yaml
    assert "{name: up_corners, op: interpolate, inputs: conv, mode: bilinear, align_corners: true, size: [7, 9]}" \
        in model.yaml
    assert "{name: roll_2, op: roll, inputs: conv, shifts: [3]}" in model.yaml


class Reflected(nn.Module):
    def forward(self, x):
        reflected = F.pad(x, (1, 1, 1, 1), mode="reflect")
        bicubic = F.interpolate(x, scale_factor=2, mode="bicubic")
        return reflected, bicubic, F.interpolate(x, scale_factor=(2, 3))


def test_pads_and_resizes_tandem_lacks_are_refused():
    with pytest.raises(ConversionError) as error:
        tandem.from_torch(Reflected(), torch.randn(2, 3, 4, 4))
    message = str(error.value)
    for what in ["'pad', at %s: pad mode 'reflect': Tandem's pad is constant only" % line_of(Reflected, "reflect"),
                 "'interpolate', at %s: interpolate mode 'bicubic': Tandem has modes nearest and bilinear"
                 % line_of(Reflected, "bicubic"),
                 "'interpolate_1', at %s: interpolate with scale_factor [2, 3], one per dim"
                 % line_of(Reflected, "(2, 3)")]:
        assert what in message, "%r not in\n%s" % (what, message)


def test_without_check_the_module_runs_only_on_meta_tensors(seed):
    """check=False: the shapes come from torch's meta device, at the example's batch and
    one more, so a large model's own forward is not paid for; check=True runs it once, on
    the example, and compares."""
    module = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    real, meta = [], []
    module[0].register_forward_hook(lambda m, args, out: (meta if args[0].is_meta else real).append(args[0].shape))
    model = tandem.from_torch(module, torch.randn(2, 3, 8, 8), check=False)
    assert real == [] and [list(s) for s in meta] == [[2, 3, 8, 8], [3, 3, 8, 8]]
    x = torch.randn(5, 3, 8, 8)
    with torch.no_grad():
        assert_close(model(x)["output"].numpy(), module(x).numpy(), 1e-5, "batch 5")
    real.clear(), meta.clear()
    tandem.from_torch(module, torch.randn(2, 3, 8, 8))
    assert [list(s) for s in real] == [[2, 3, 8, 8]] and [list(s) for s in meta] == [[3, 3, 8, 8]]


class Reductions(nn.Module):
    """Every way a model reduces over dimensions: functions and methods, one dim, a negative
    one, several apart, every dim, keepdim; a 1-D global pool (x.mean(-1) of [N, C, L]), a
    channel attention's amax and mean over the channels (CBAM), and a sum over features."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 6, 3, padding=1)
        self.fc = nn.Linear(6 + 6 + 1 + 6, 4)

    def forward(self, x):
        y = self.conv(x)                                    # [N, 6, L]
        pooled = y.mean(-1)                                 # [N, 6]
        peak = torch.amax(y, dim=2)                         # [N, 6]
        spread = peak - y.amin(-1)                          # [N, 6]
        total = torch.sum(y, dim=(1, 2), keepdim=True).flatten(1)            # [N, 1]
        attention = torch.sigmoid(y.amax(1, keepdim=True) + torch.mean(y, 1, keepdim=True))  # [N, 1, L]
        weighted = (y * attention).sum(dim=-1)             # [N, 6]
        return self.fc(torch.cat([pooled, spread, total / 10, weighted], dim=1)) + x.sum() / 100


def test_reductions_over_dims_convert_and_match_torch_forward_and_backward(seed):
    model = compare_with_torch(Reductions(), (torch.randn(2, 3, 9),), inputs=(torch.randn(5, 3, 9),))
    for line in ("op: mean, dim: -1}", "op: amax, inputs: conv, dim: 2}", "op: amin, inputs: conv, dim: -1}",
                 "op: sum, inputs: conv, dim: [1, 2], keepdim: true}", "op: amax, inputs: conv, dim: 1, keepdim: true}",
                 "op: sum, inputs: x}"):
        assert line in model.yaml, line


class NumberArithmetic(nn.Module):
    """A tensor and a number: plus, minus either way, times, divided by, negated (a gate's
    1 - z, a sigmoid shifted to [-1, 1], a temperature)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 5)

    def forward(self, x):
        z = torch.sigmoid(self.fc(x))
        gate = 1 - z                        # rsub
        centered = 2 * z - 1                # mul then sub
        cooled = z / 0.7                    # truediv
        shifted = torch.add(x, 3.0, alpha=0.5) + torch.sub(x, 1.5)
        return gate * x + centered + cooled - shifted + (-z) + torch.div(z, 4)


def test_a_tensor_and_a_number_convert_to_scale(seed):
    model = compare_with_torch(NumberArithmetic(), (torch.randn(2, 5),), inputs=(torch.randn(7, 5),))
    for line in ("op: scale, factor: -1.0, shift: 1.0}", "op: scale, factor: 1.0, shift: -1.0}",
                 "op: scale, inputs: x, factor: 1.0, shift: 1.5}", "op: scale, inputs: x, factor: 1.0, shift: -1.5}",
                 "op: scale, inputs: sigmoid, factor: -1.0}", "op: scale, inputs: sigmoid, factor: 0.25}"):
        assert line in model.yaml, line

    class ByTensor(nn.Module):
        def forward(self, x):
            return x / x.sum()

    with pytest.raises(ConversionError, match="division by a tensor: Tandem divides a tensor by a number only"):
        tandem.from_torch(ByTensor(), torch.randn(2, 3))

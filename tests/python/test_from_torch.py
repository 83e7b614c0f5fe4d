"""tandem.from_torch on every op Tandem has, against PyTorch (outputs 1e-5, gradients 1e-4),
nn.DataParallel and devices, losses, and what it cannot convert named with its line."""
import inspect
import os
import subprocess

os.environ.setdefault("TANDEM_SIM_GPUS", "2")  # placed runs of the converted models, on simulated GPUs

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tandem  # noqa: E402
from conftest import CLI, assert_close  # noqa: E402
from torch_compare import compare_with_torch  # noqa: E402

HERE = os.path.basename(__file__)


class Dense(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 12)
        self.fc2 = nn.Linear(12, 12, bias=False)
        self.gelu = nn.GELU(approximate="tanh")
        self.drop = nn.Dropout(0.3)
        self.fc3 = nn.Linear(12, 6)
        self.head = nn.Sequential(nn.Tanh(), nn.Linear(4, 4), nn.LogSoftmax(dim=-1))

    def forward(self, x, y):
        h = self.gelu(self.fc1(x))
        h = self.drop(F.relu(self.fc2(h)) - torch.sigmoid(h)) * torch.tanh(h)
        z = torch.cat([self.fc3(h), y], dim=1).view(x.size(0), 2, 6)
        z = torch.matmul(z, z.reshape(-1, 6, 2)).flatten(1)
        picked = torch.add(torch.cat([z[:, 1:3], torch.narrow(z, 1, 0, 2)], 1), x.narrow(1, 0, 4), alpha=0.5)
        return self.head(picked), F.softmax(h, dim=1)


class Lookups(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 5, padding_idx=0)
        self.bag_sum = nn.EmbeddingBag(30, 5, mode="sum")
        self.bag_mean = nn.EmbeddingBag(30, 5, mode="mean", padding_idx=1)
        self.bag_max = nn.EmbeddingBag(30, 5, mode="max", include_last_offset=True)

    def forward(self, ids, bags, flat, offsets, flat2, offsets2):
        return torch.cat([self.emb(ids).flatten(1), self.bag_sum(bags), self.bag_mean(flat, offsets),
                          self.bag_max(flat2, offsets2)], 1)


class Images(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn0 = nn.BatchNorm2d(2)
        self.conv1 = nn.Conv2d(2, 8, 3, padding="same", bias=False)
        self.conv2 = nn.Conv2d(8, 8, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=4)
        self.bn = nn.BatchNorm2d(8, momentum=None)
        self.pool = nn.MaxPool2d(2, ceil_mode=True)
        self.avg = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
        self.norm = nn.LayerNorm([8, 2, 2])
        self.norm2 = nn.LayerNorm(32, elementwise_affine=False)

    def forward(self, x):
        h = F.relu(self.conv1(self.bn0(x)))
        h = self.avg(self.pool(self.bn(self.conv2(h))))
        return self.norm2(self.norm(h).flatten(1))


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 6, num_layers=2, bidirectional=True, batch_first=True)
        self.lstm = nn.LSTM(12, 5, num_layers=2)
        self.state = nn.LSTM(4, 3, batch_first=True)
        self.last = nn.GRU(4, 2, batch_first=True)

    def forward(self, x, h0, h1, c1):
        out, _ = self.gru(x, h0)
        seq, _ = self.lstm(out, (h1, c1))
        _, (_, cell) = self.state(x)
        _, h = self.last(x)
        return seq, cell, h


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.cross = nn.MultiheadAttention(8, 2)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=False, norm_first=True, activation="gelu"),
            2, norm=nn.LayerNorm(8))
        self.post = nn.TransformerEncoderLayer(8, 4, 16, dropout=0.0)

    def forward(self, q, memory, padding, mask):
        a = self.cross(q, memory, memory, key_padding_mask=padding, attn_mask=mask)[0]
        return self.post(self.encoder(a + q))


class MnistStyle(nn.Module):
    """Written as PyTorch's tutorials write it: functional pooling, in-place ReLU, a global
    average pool, (un)squeezes."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3)
        self.conv2 = nn.Conv2d(4, 8, 3, padding=1)
        self.gap = nn.AdaptiveAvgPool2d((1, 1))
        self.gmp = nn.AdaptiveMaxPool2d(2)
        self.fc = nn.Linear(8 + 32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x.unsqueeze(1))), 2)
        x = F.avg_pool2d(self.conv2(x), kernel_size=2, stride=1).relu_()
        pooled = torch.cat([self.gap(x).squeeze(3).squeeze(2), self.gmp(x).view(x.shape[0], -1)], 1)
        return F.log_softmax(self.fc(pooled), dim=1)


class TextLSTM(nn.Module):
    """A text classifier reading its LSTM's last and first steps by index."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(100, 16)
        self.lstm = nn.LSTM(16, 32, num_layers=2, batch_first=True)
        self.fc = nn.Linear(64, 4)

    def forward(self, text):
        out, (h, c) = self.lstm(self.embedding(text))
        return self.fc(torch.cat([out[:, -1, :], out[:, 0]], dim=1))


class Residual(nn.Module):
    """A ResNet basic block and its head."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        identity = x
        out = F.relu(self.bn2(self.conv2(x)) + identity)
        return self.fc(torch.flatten(self.pool(out), 1))


CASES = {
    "text_lstm": (TextLSTM, lambda: (torch.randint(0, 100, (3, 7)),), {}),
    "residual": (Residual, lambda: (torch.randn(2, 3, 8, 8),), {}),
    "mnist_style": (MnistStyle, lambda: (torch.randn(3, 16, 16),), {}),
    "dense": (Dense, lambda: (torch.randn(5, 6), torch.randn(5, 6)), {}),
    "lookups": (Lookups, lambda: (torch.randint(0, 20, (4, 3)), torch.randint(0, 30, (4, 5)), torch.randint(0, 30, (9,)),
                                  torch.tensor([0, 2, 2, 6]), torch.randint(0, 30, (7,)), torch.tensor([0, 3, 3, 5, 7])),
                {"batch_dim": None}),  # offsets2 has a bag more than the batch: fixed shapes
    "images": (Images, lambda: (torch.randn(3, 2, 8, 6),), {}),
    "recurrent": (Recurrent, lambda: (torch.randn(3, 7, 4), torch.randn(4, 3, 6), torch.randn(2, 7, 5),
                                      torch.randn(2, 7, 5)), {"batch_dim": {"x": 0, "h0": 1, "h1": None, "c1": None}}),
    "attention": (Attention, lambda: (torch.randn(5, 3, 8), torch.randn(7, 3, 8), torch.rand(3, 7) < 0.3,
                                      torch.randn(5, 7)), {"batch_dim": {"q": 1, "memory": 1, "padding": 0, "mask": None}}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_ops_match_pytorch(case, seed):
    make, inputs, options = CASES[case]
    module = make()
    if case == "images":  # running statistics that are not the initial 0 and 1
        for bn in (module.bn0, module.bn):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
    if case == "attention":
        example = inputs()
        example[2][:, 0] = False  # a query with every key masked is NaN in both
        model = compare_with_torch(module, example, **options)
    else:
        model = compare_with_torch(module, inputs(), **options)
    assert set(model.state_dict()) == set(module.state_dict())  # the state_dict's names, every one


def test_batch_follows_in_reshapes(seed):
    module = Dense()
    model = tandem.from_torch(module, (torch.randn(5, 6), torch.randn(5, 6)))
    assert "{name: view, op: reshape, shape: [batch, 2, 6]}" in model.yaml  # x.size(0) is the batch
    assert "{name: reshape, op: reshape, shape: [batch, 6, 2]}" in model.yaml  # and so is its -1
    x, y = torch.randn(9, 6), torch.randn(9, 6)  # another batch than the example's
    module.eval()
    assert_close(model(x, y)["output_0"].numpy(), module(x, y)[0].detach().numpy(), 1e-5, "batch 9")


def test_the_yaml_reads_as_written(tmp_path, seed):
    module = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    model = tandem.from_torch(module, torch.randn(2, 4), name="mlp", save_to=tmp_path / "mlp")
    assert model.yaml == (tmp_path / "mlp.yaml").read_text()
    assert "- {name: 0, op: linear, inputs: input, in_features: 4, out_features: 8}" in model.yaml
    assert "- {name: 1, op: relu}" in model.yaml
    run = subprocess.run([CLI, "run", str(tmp_path / "mlp.yaml"), "--weights", str(tmp_path / "mlp.safetensors"),
                          "--batch", "3"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    again = tandem.Model.load(tmp_path / "mlp.yaml")
    again.load_weights(tmp_path / "mlp.safetensors")
    x = torch.randn(3, 4)
    assert torch.equal(again(x)["output"], model(x)["output"])
    # to_torch returns what the module returned: a tensor; the same from the saved file
    for back in [tandem.to_torch(model), tandem.to_torch(again)]:
        out = back(x)
        assert isinstance(out, torch.Tensor)
        assert_close(out.detach().numpy(), module(x).detach().numpy(), 1e-6, "to_torch(from_torch)")


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 3), nn.Linear(4, 2)

    def forward(self, x):
        return self.a(x), self.b(x)


def test_to_torch_returns_a_tuple_where_the_module_did(seed):
    module = TwoHeads()
    x = torch.randn(5, 4)
    back = tandem.to_torch(tandem.from_torch(module, torch.randn(2, 4)))
    got, want = back(x), module(x)
    assert isinstance(got, tuple) and len(got) == 2
    for g, w in zip(got, want):
        assert_close(g.detach().numpy(), w.detach().numpy(), 1e-6, "to_torch(from_torch) tuple")


def test_save_to_a_missing_directory_says_so(tmp_path):
    module = nn.Sequential(nn.Linear(4, 2))
    with pytest.raises(tandem.ModelError, match="save_to '.*nothere/mlp': the directory '.*nothere' does not exist; "
                                                "create it first"):
        tandem.from_torch(module, torch.randn(2, 4), save_to=tmp_path / "nothere" / "mlp")


class Wrapped(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 8)
        self.rnn = nn.DataParallel(nn.GRU(8, 8), dim=1)
        self.mlp = nn.DataParallel(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3)))

    def forward(self, tokens):
        out, _ = self.rnn(self.embed(tokens))
        return self.mlp(out.flatten(0, 1))


def test_data_parallel_wrappers_become_blocks(seed):
    module = Wrapped()
    tokens = torch.randint(0, 50, (6, 4))
    with pytest.raises(tandem.ModelError, match="nn.DataParallel at 'rnn': this torch has no CUDA"):
        tandem.from_torch(module, tokens, batch_dim=1)
    model = tandem.from_torch(module, tokens, batch_dim=1, data_parallel={
        "rnn": {"devices": ["cuda:0", "cuda:1"], "dim": 1}, "mlp": {"devices": [0, 1], "output_device": 1}})
    assert "data_parallel: {devices: [cuda:0, cuda:1], output_device: cuda:0, dim: 1}" in model.yaml
    assert "data_parallel: {devices: [cuda:0, cuda:1], output_device: cuda:1}" in model.yaml
    assert list(model.state_dict()) == list(module.state_dict())  # rnn.module.weight_ih_l0, mlp.module.0.weight...
    out = model(tokens)["output"]  # placed over the simulated GPUs: replicas, scatter and gather
    plan = model.last_plan()
    assert {l.device for l in plan.layers if l.path.startswith("rnn.module@")} == {"cuda:0", "cuda:1"}
    module.eval()
    assert_close(out.numpy(), module(tokens).detach().numpy(), 1e-5, "data-parallel output")


def test_whole_model_in_data_parallel(seed):
    module = nn.DataParallel(nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)))
    x = torch.randn(6, 3)
    model = tandem.from_torch(module, x, data_parallel={"devices": ["cuda:0", "cuda:1"]})
    assert list(model.state_dict()) == list(module.state_dict()) == ["module.0.weight", "module.0.bias",
                                                                     "module.2.weight", "module.2.bias"]
    assert_close(model(x)["output"].numpy(), module(x).detach().numpy(), 1e-6, "output")


class ToDevices(nn.Module):
    """Written for two GPUs, torch's model-parallel way; converted on a machine without."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        h = self.emb(x).to("cuda:0")
        h = torch.relu(self.fc1(h)).cuda(1)
        return self.fc2(h).cpu()


def test_device_moves_become_device_annotations(seed):
    module = ToDevices()
    x = torch.randint(0, 10, (5,))
    model = tandem.from_torch(module, x)
    assert "{name: fc1, op: linear, in_features: 4, out_features: 8, device: cuda:0}" in model.yaml
    assert "{name: fc2, op: linear, in_features: 8, out_features: 2, device: cuda:1}" in model.yaml
    assert "{name: emb, op: embedding" in model.yaml and "emb, op: embedding, inputs: x, num_embeddings: 10, " \
        "embedding_dim: 4}" in model.yaml  # nothing moved it: the cpu's
    out = model(x)["output"]
    plan = model.last_plan()
    assert [plan.device_of(p) for p in ("emb", "fc1", "relu", "fc2")] == ["cpu", "cuda:0", "cuda:0", "cuda:1"]
    with torch.no_grad():
        want = module.fc2(torch.relu(module.fc1(module.emb(x))))
    assert_close(out.numpy(), want.numpy(), 1e-6, "output")


@pytest.mark.parametrize("loss, section", [
    (nn.CrossEntropyLoss(label_smoothing=0.1, ignore_index=3),
     "loss: {op: cross_entropy, input: fc, target: label, ignore_index: 3, label_smoothing: 0.1}"),
    (nn.NLLLoss(reduction="sum"), "loss: {op: nll_loss, input: fc, target: label, reduction: sum}"),
])
def test_class_losses(loss, section):
    module = nn.Sequential()
    module.add_module("fc", nn.Linear(4, 5))
    model = tandem.from_torch(module, torch.randn(3, 4), loss=loss, example_targets={"label": torch.tensor([0, 1, 2])},
                              train={"epochs": 2, "optimizer": {"name": "adam", "lr": 0.01}})
    assert section in model.yaml and "label: {shape: [batch], dtype: int64}" in model.yaml
    assert "train: {epochs: 2, optimizer: {name: adam, lr: 0.01}}" in model.yaml
    trainer = tandem.Trainer(model)
    assert trainer.settings["optimizer"]["name"] == "adam"
    trainer.step(input=torch.randn(3, 4), label=torch.tensor([0, 1, 4]))


def test_regression_losses():
    module = nn.Sequential(nn.Linear(4, 2))
    for loss, op in [(nn.MSELoss(), "mse_loss"), (nn.BCEWithLogitsLoss(), "binary_cross_entropy_with_logits")]:
        model = tandem.from_torch(module, torch.randn(3, 4), loss=loss, example_targets=torch.rand(3, 2))
        assert "loss: {op: %s, input: 0, target: target}" % op in model.yaml
        assert tandem.Trainer(model).step(input=torch.randn(3, 4), target=torch.rand(3, 2)) > 0
    with pytest.raises(tandem.ModelError, match="with class weights"):
        tandem.from_torch(module, torch.randn(3, 4), loss=nn.CrossEntropyLoss(weight=torch.ones(2)),
                          example_targets=torch.tensor([0, 1, 1]))
    with pytest.raises(tandem.ModelError, match="loss L1Loss: Tandem's losses are"):
        tandem.from_torch(module, torch.randn(3, 4), loss=nn.L1Loss(), example_targets=torch.rand(3, 2))


def line_of(code, whole=False, cls=None):
    """HERE:N (code) for the line of Unconvertible (or `cls`) that holds `code` (is `code`,
    whole)."""
    cls = cls or Unconvertible
    lines = inspect.getsource(cls).splitlines()
    first = inspect.getsourcelines(cls)[1]
    for i, line in enumerate(lines):
        if (line.strip() == code) if whole else (code in line):
            return "%s:%d (%s)" % (HERE, first + i, line.strip())
    raise AssertionError(code)


class Unconvertible(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 3, 1)
        self.fc = nn.Linear(3, 3)
        self.register_buffer("scale", torch.ones(3))  # a buffer converts (a buffer layer)

    def forward(self, x):
        y = self.conv(x.flip(2)).permute(0, 2, 3, 4, 1)
        y = self.fc(y).pow(3)
        y = self.fc(y)
        return y.abs() * self.scale


def test_what_cannot_be_converted_is_named_with_its_line():
    with pytest.raises(tandem.ModelError) as error:
        tandem.from_torch(Unconvertible(), torch.randn(2, 3, 4, 1, 1))
    message = str(error.value)
    assert message.startswith("from_torch(Unconvertible): cannot convert")
    for what in ["'conv' (torch.nn.Conv3d), at %s: torch.nn.Conv3d: Tandem has no such op" % line_of("self.conv(x"),
                 "'flip', at %s: tensor method .flip(): Tandem has no such op" % line_of(".flip("),
                 "'pow_1', at %s: tensor method .pow(): Tandem has no such op" % line_of(".pow(3)"),
                 "'fc' (torch.nn.Linear), at %s: called a second time" % line_of("y = self.fc(y)", whole=True),
                 "'abs_1', at %s: tensor method .abs(): Tandem has no such op" % line_of("y.abs() * self.scale"),
                 "from_torch converts torch.nn's AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool1d, "
                 "AdaptiveMaxPool2d, AvgPool1d, AvgPool2d, BatchNorm1d, BatchNorm2d,"]:
        assert what in message, "%r not in\n%s" % (what, message)
    assert "which Tandem cannot make" not in message  # reading an unconvertible op is not an error of its own
    assert message.count("\n  ") == 5


def test_other_refusals():
    class BothOutputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = nn.GRU(2, 3)

        def forward(self, x):
            out, h = self.gru(x)
            return out, h

    with pytest.raises(tandem.ModelError, match="'gru' \\(gru\\): both h_n and output are read"):
        tandem.from_torch(BothOutputs(), torch.randn(4, 2, 2), batch_dim=1)

    class Weights(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(4, 2)

        def forward(self, x):
            return self.attn(x, x, x)[1]

    with pytest.raises(tandem.ModelError, match="its attention weights are read"):
        tandem.from_torch(Weights(), torch.randn(3, 2, 4), batch_dim=1)

    class Branchy(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(tandem.ModelError, match="torch.fx cannot trace the module's forward"):
        tandem.from_torch(Branchy(), torch.randn(2, 2))
    with pytest.raises(tandem.ModelError, match="input 'x' is torch.float64"):
        tandem.from_torch(nn.Sequential(nn.Linear(2, 2)).double(), {"x": torch.randn(2, 2, dtype=torch.float64)})
    with pytest.raises(tandem.ModelError, match="the module is a single Linear"):
        tandem.from_torch(nn.Linear(2, 2), torch.randn(2, 2))


@pytest.mark.parametrize("module", [nn.Softmax(dim=-1), nn.GELU(), nn.Hardswish()], ids=lambda m: type(m).__name__)
def test_a_lone_parameter_free_module_converts(module, seed):
    """With nothing in its state_dict to name, a lone module needs no wrapping: its one layer
    is named after its type, and computes torch's output at another batch size."""
    model = tandem.from_torch(module, torch.randn(3, 7))
    assert "{name: %s, op: " % type(module).__name__.lower() in model.yaml
    x = torch.randn(5, 7)
    assert_close(model(x)["output"].numpy(), module(x).numpy(), 1e-5, type(module).__name__)


class Einsums(nn.Module):
    """einsum as attention writes it, one that needs its output permuted, and a buffer
    indexed into a learned table (maxvit's relative position bias)."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(7, 4))
        self.register_buffer("index", torch.tensor([[0, 3, 6], [2, 2, 5]]))

    def forward(self, q, k):
        scores = torch.einsum("bhid,bhjd->bhij", q, k * 0.5)
        mixed = torch.einsum("bhij,bhjd->bihd", scores.softmax(-1), k)
        return mixed, 2 * self.table[self.index]


def test_einsum_a_number_and_an_indexed_table_convert(seed):
    model = compare_with_torch(Einsums(), (torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4)),
                               inputs=(torch.randn(3, 2, 3, 4), torch.randn(3, 2, 3, 4)))
    assert "op: scale" in model.yaml and "op: index_select" in model.yaml
    assert "{name: index, op: buffer, inputs: einsum_1.permute, shape: [2, 3], dtype: int64}" in model.yaml
    assert "{name: rows, op: index_select, inputs: [table, flat_index], dim: 0}" in model.yaml


class CosineScores(nn.Module):
    """swin v2's cosine attention written as a user would: F.normalize along the last and a
    middle dim, a learned scale clamped (torch.clamp and the method forms) and exponentiated."""

    def __init__(self):
        super().__init__()
        self.logit_scale = nn.Parameter(torch.tensor([[[0.3]], [[1.5]]]))  # one past the bound

    def forward(self, q, k):
        scores = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        scale = torch.clamp(self.logit_scale, max=1.0).exp()
        return scores * scale, F.normalize(q, p=2.0, dim=2, eps=1e-6).clamp(-0.4, 0.4), \
            torch.exp(q.clamp_min(-1.0).clamp_max(1.0))


def test_normalize_clamp_and_exp_convert(seed):
    model = compare_with_torch(CosineScores(), (torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)),
                               inputs=(torch.randn(3, 2, 5, 4), torch.randn(3, 2, 5, 4)))
    for op in ["{name: normalize, op: normalize, inputs: q, dim: -1}",
               "{name: normalize_2, op: normalize, inputs: q, dim: 2, eps: 1.0e-06}",
               "{name: clamp, op: clamp, max: 1.0}", "{name: clamp_1, op: clamp, min: -0.4, max: 0.4}",
               "{name: clamp_min, op: clamp, inputs: q, min: -1.0}", "{name: exp_1, op: exp}"]:
        assert op in model.yaml, op


class NormsTandemCannotWrite(nn.Module):
    def forward(self, x, y):
        return F.normalize(x, p=1.0, dim=-1), torch.clamp(x, max=y)


def test_normalize_and_clamp_tandem_cannot_write_are_named_with_their_lines():
    with pytest.raises(tandem.ModelError) as error:
        tandem.from_torch(NormsTandemCannotWrite(), (torch.randn(2, 4), torch.randn(2, 4)))
    message = str(error.value)
    for what in ["'normalize', at %s: F.normalize with p=1.0: Tandem's normalize divides by the Euclidean norm"
                 % line_of("F.normalize(x, p=1.0", cls=NormsTandemCannotWrite),
                 "'clamp', at %s: clamp with a tensor max: Tandem's clamp takes numbers"
                 % line_of("torch.clamp(x, max=y)", cls=NormsTandemCannotWrite)]:
        assert what in message, "%r not in\n%s" % (what, message)


class BadIndexing(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(5, 2))

    def forward(self, x, y):
        a = torch.einsum("ii->i", x)
        b = self.table[y > 0]
        return a, b


def test_einsum_and_indexing_tandem_cannot_write_are_named_with_their_lines():
    with pytest.raises(tandem.ModelError) as error:
        tandem.from_torch(BadIndexing(), (torch.randn(4, 4), torch.randn(5)), batch_dim=None)
    message = str(error.value)
    for what in ["'einsum', at %s: einsum 'ii->i' of 1 operands: Tandem writes einsum as a matmul" % line_of(
                 'torch.einsum("ii->i", x)', cls=BadIndexing),
                 "'getitem', at %s: indexing with a torch.bool tensor: Tandem indexes rows by int64 indices"
                 % line_of("self.table[y > 0]", cls=BadIndexing)]:
        assert what in message, "%r not in\n%s" % (what, message)

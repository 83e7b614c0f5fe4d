"""Every model of the zoo (docs/zoo/), written in PyTorch as a PyTorch user would write it
(nn.DataParallel where the zoo's file has data_parallel:), converted by from_torch: the
result gives PyTorch's outputs (1e-5) and gradients (1e-4), and it is the zoo's own model:
the same parameters (nn.DataParallel's `module.` aside) computing the same outputs."""
import os

os.environ.setdefault("TANDEM_SIM_GPUS", "2")  # the zoo's data_parallel blocks over two (simulated) GPUs

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tandem  # noqa: E402
from conftest import assert_close, config  # noqa: E402
from torch_compare import compare_with_torch  # noqa: E402

DP = {"devices": ["cuda:0", "cuda:1"]}


class DigitsCNN(nn.Module):  # configs/digits_cnn.yaml
    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm2d(1)
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.act1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.act2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(2)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(256, 10)

    def forward(self, x):
        image = x.view(-1, 1, 8, 8)
        h = self.pool1(self.act1(self.bn1(self.conv1(self.norm(image)))))
        h = self.pool2(self.act2(self.bn2(self.conv2(h))))
        return self.fc(self.flat(h))


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(32, 256)

    def forward(self, x):
        out, _ = self.gru(x)
        return out


class CharGRU(nn.Module):  # configs/char_gru.yaml
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(128, 32)
        self.rnn = nn.DataParallel(Recurrent(), dim=1)  # sequence-first: split along the batch, dim 1
        self.head = nn.Linear(256, 128)

    def forward(self, tokens):
        return self.head(self.rnn(self.embed(tokens))).flatten(0, 1)


class BertMiniNet(nn.Module):  # configs/bert_mini.yaml's block `net`
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(64, 256)
        self.pos = nn.Embedding(32, 256)
        self.embed_norm = nn.LayerNorm(256)
        self.encoder = nn.Sequential(*[nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
                                       for _ in range(4)])
        self.head = nn.Linear(256, 64)

    def forward(self, tokens, positions):
        h = self.embed_norm(self.tok(tokens) + self.pos(positions))
        return self.head(self.encoder(h)).flatten(0, 1)


class BertMini(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.DataParallel(BertMiniNet())

    def forward(self, tokens, positions):
        return self.net(tokens, positions)


class Bottom(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act1 = nn.Linear(13, 512), nn.ReLU()
        self.fc2, self.act2 = nn.Linear(512, 256), nn.ReLU()
        self.fc3, self.act3 = nn.Linear(256, 64), nn.ReLU()

    def forward(self, dense):
        return self.act3(self.fc3(self.act2(self.fc2(self.act1(self.fc1(dense))))))


class Tables(nn.Module):
    def __init__(self, rows):
        super().__init__()
        for k in range(8):
            setattr(self, "t%d" % k, nn.EmbeddingBag(rows, 64, mode="sum", sparse=True))

    def forward(self, *cats):
        return [getattr(self, "t%d" % k)(c) for k, c in enumerate(cats)]


class Top(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act1 = nn.Linear(145, 512), nn.ReLU()
        self.fc2, self.act2 = nn.Linear(512, 256), nn.ReLU()
        self.fc3 = nn.Linear(256, 1)

    def forward(self, bottom, t0, t1, t2, t3, t4, t5, t6, t7):
        vectors = [bottom, t0, t1, t2, t3, t4, t5, t6, t7]
        z = torch.cat(vectors, 1).view(-1, 9, 64)
        zt = torch.cat([v.view(-1, 64, 1) for v in vectors], 2)
        pairs = torch.matmul(z, zt).flatten(1)  # every pairwise dot product
        features = torch.cat([bottom, pairs], 1)
        return self.fc3(self.act2(self.fc2(self.act1(self.fc1(features)))))


class DLRM(nn.Module):  # configs/dlrm.yaml, with tables of `rows` rows
    def __init__(self, rows):
        super().__init__()
        self.bottom = nn.DataParallel(Bottom())
        self.tables = Tables(rows)
        self.top = nn.DataParallel(Top())

    def forward(self, dense, cat_0, cat_1, cat_2, cat_3, cat_4, cat_5, cat_6, cat_7):
        return self.top(self.bottom(dense), *self.tables(cat_0, cat_1, cat_2, cat_3, cat_4, cat_5, cat_6, cat_7))


def away_from_kinks(module, draw, margin=1e-5, tries=300):
    """Inputs whose every ReLU input lies further than `margin` from 0: at a kink float
    rounding may take the other side in torch and Tandem and move whole gradient rows."""
    seen = []
    hooks = [m.register_forward_hook(lambda m, args, out: seen.append(args[0].abs().min().item()))
             for m in module.modules() if isinstance(m, nn.ReLU)]
    hooks += [m.linear1.register_forward_hook(lambda m, args, out: seen.append(out.abs().min().item()))
              for m in module.modules() if isinstance(m, nn.TransformerEncoderLayer) and m.activation is F.relu]
    module.eval()
    try:
        for _ in range(tries):
            inputs = draw()
            seen.clear()
            with torch.no_grad():
                module(*inputs)
            if min(seen, default=1.0) > margin:
                return inputs
    finally:
        for h in hooks:
            h.remove()
    raise AssertionError("no inputs %g away from every ReLU kink in %d draws" % (margin, tries))


def zoo_names(twin_name):
    """The zoo file's parameter name for the twin's: data_parallel adds no `module.`."""
    return twin_name.replace(".module.", ".")


def assert_is_the_zoo_model(converted, zoo_text, inputs):
    zoo = tandem.Model.from_yaml(zoo_text)
    converted_state = converted.state_dict()
    zoo_state = zoo.state_dict()
    assert sorted(zoo_names(n) for n in converted_state) == sorted(zoo_state)
    for name, value in converted_state.items():
        assert value.shape == zoo_state[zoo_names(name)].shape, name
    zoo.load_state_dict({zoo_names(n): v for n, v in converted_state.items()})
    zoo.to("cpu")
    ours = tandem.Model.from_yaml(converted.yaml)
    ours.load_state_dict(converted_state)
    ours.to("cpu")
    want = list(zoo(*inputs).values())[0]
    got = list(ours(*inputs).values())[0]
    assert_close(got.numpy(), want.numpy(), 1e-5, "the zoo model's output")


def test_digits_cnn(seed):
    twin = DigitsCNN()
    for bn in (twin.norm, twin.bn1, twin.bn2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2)
    inputs = away_from_kinks(twin, lambda: (torch.randn(4, 64) * 4 + 6,))
    model = compare_with_torch(twin, inputs, loss=nn.CrossEntropyLoss(), example_targets={"label": torch.arange(4)})
    assert "loss: {op: cross_entropy, input: fc, target: label}" in model.yaml
    assert_is_the_zoo_model(model, open(config("digits_cnn.yaml")).read(), inputs)


def test_char_gru(seed):
    twin = CharGRU()
    tokens = torch.randint(0, 128, (64, 4))
    model = compare_with_torch(twin, (tokens,), batch_dim=1, data_parallel={"rnn": dict(DP, dim=1)})
    assert "data_parallel: {devices: [cuda:0, cuda:1], output_device: cuda:0, dim: 1}" in model.yaml
    plan = model.last_plan()
    assert {l.device for l in plan.layers if l.path.startswith("rnn.module.gru@")} == {"cuda:0", "cuda:1"}
    assert_is_the_zoo_model(model, open(config("char_gru.yaml")).read(), (tokens,))


def test_bert_mini(seed):
    twin = BertMini()
    positions = torch.arange(32).repeat(2, 1)
    inputs = away_from_kinks(twin, lambda: (torch.randint(0, 64, (2, 32)), positions))
    model = compare_with_torch(twin, inputs, data_parallel={"net": DP})
    assert "encoder" in model.yaml and "self_attn" in model.yaml
    assert_is_the_zoo_model(model, open(config("bert_mini.yaml")).read(), inputs)


def test_dlrm_with_small_tables(seed):
    rows = 1000
    twin = DLRM(rows)

    def draw():
        return (torch.randn(4, 13),) + tuple(torch.randint(0, rows, (4, 1)) for _ in range(8))

    inputs = away_from_kinks(twin, draw)
    model = compare_with_torch(twin, inputs, data_parallel={"bottom": DP, "top": DP})
    assert "sparse: true" in model.yaml
    zoo_text = open(config("dlrm.yaml")).read().replace("num_embeddings: 1000000", "num_embeddings: %d" % rows)
    assert_is_the_zoo_model(model, zoo_text, inputs)

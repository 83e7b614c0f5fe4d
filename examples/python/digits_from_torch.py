#!/usr/bin/python3
"""A small PyTorch model brought to Tandem: converted by tracing, its embedding placed on
the CPU and its MLP data-parallel over two (simulated) GPUs, trained on sklearn's digits,
its loss curve plotted to a PNG, its trained weights given back to PyTorch.

    /usr/bin/python3 examples/python/digits_from_torch.py [--epochs 10] [--out digits_loss.png]

Written as notebook cells (# %%): run it whole, or cell by cell in an editor that knows
them. Needs the build (scripts/build.sh puts the package in build/python).
"""
# %% Set-up
import argparse
import gzip
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
try:
    import tandem
except ImportError:  # not on PYTHONPATH: the build's copy, as after scripts/build.sh
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    import tandem

import matplotlib
import numpy
import torch
import torch.nn as nn

matplotlib.use("Agg")  # a file, no window
import matplotlib.pyplot as plt  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--out", default=os.path.join(ROOT, "build", "digits_loss.png"), help="where the plot goes")
args = parser.parse_args()

# %% The data: 1,797 handwritten digits, 8x8 pixels of intensity 0..16, and their labels
with gzip.open("/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz", "rt") as f:
    table = numpy.loadtxt(f, delimiter=",")
pixels = table[:, :64].astype(numpy.int64)  # each intensity a token: the embedding's input
labels = table[:, 64].astype(numpy.int64)
print("digits: %d images, labels %s" % (len(labels), sorted(set(labels.tolist()))))


# %% A small PyTorch model: an embedding of the 17 intensities, and an MLP over two GPUs
class DigitsNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(17, 8)
        self.mlp = nn.DataParallel(nn.Sequential(nn.Linear(64 * 8, 128), nn.ReLU(), nn.Linear(128, 10)))

    def forward(self, pixels):
        return self.mlp(self.embed(pixels).flatten(1))


torch.manual_seed(0)
net = DigitsNet()

# %% Converted by tracing: the YAML is the model's, its parameters named as net.state_dict()
# (torch without CUDA keeps no device_ids for nn.DataParallel: say which GPUs it spreads over)
model = tandem.from_torch(
    net, (torch.from_numpy(pixels[:32]),),
    loss=nn.CrossEntropyLoss(), example_targets={"label": torch.from_numpy(labels[:32])},
    data_parallel={"devices": ["cuda:0", "cuda:1"]})
print(model.yaml)

# %% Placed: the embedding on the cpu, the MLP's replicas on cuda:0 and cuda:1 (simulated here)
model.place(sim_gpus=2, place={"embed": "cpu"})
print(model.plan(batch=64, training=True))

# %% Trained, every step's loss kept for the plot
trainer = tandem.Trainer(model, optimizer="adam", lr=3e-3, batch=64, epochs=args.epochs, validation_split=0.2)
losses = []


def show(epoch):
    print("epoch %2d  loss %.4f  validation loss %.4f  accuracy %.2f%%" % (
        epoch["epoch"], epoch["train_loss"], epoch["validation_loss"], 100 * epoch["validation_accuracy"]))


history = trainer.fit({"pixels": pixels, "label": labels}, on_step=lambda step: losses.append(step["loss"]),
                      on_epoch=show)
print(model.report(totals=True))

# %% The loss curve
plt.figure(figsize=(6, 3.5))
plt.plot(range(1, len(losses) + 1), losses, linewidth=0.8, label="training loss (each step)")
steps_per_epoch = len(losses) // len(history)
plt.plot([steps_per_epoch * e["epoch"] for e in history], [e["validation_loss"] for e in history], "o-",
         label="validation loss (each epoch)")
plt.xlabel("step")
plt.ylabel("cross entropy")
plt.yscale("log")
plt.title("DigitsNet from PyTorch, trained by Tandem on 2 GPUs", fontsize=10)
plt.legend()
plt.tight_layout()
os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
plt.savefig(args.out, dpi=120)
print("loss curve written to %s" % args.out)

# %% The trained weights back in the PyTorch module: it now classifies as Tandem does
net.load_state_dict({name: torch.from_numpy(value.copy()) for name, value in model.state_dict().items()})
net.eval()
with torch.no_grad():
    torch_predictions = net(torch.from_numpy(pixels)).argmax(1).numpy()
tandem_predictions = model(pixels)["output"].argmax(1)
print("PyTorch with the trained weights: %.2f%% of all digits right, the same predictions as Tandem's: %s" % (
    100 * (torch_predictions == labels).mean(), bool((torch_predictions == tandem_predictions).all())))

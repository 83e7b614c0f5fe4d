"""PyTorch's data parallelism tutorial in Python: configs/dp_tutorial.yaml (one linear(5, 2)
in a data_parallel block) fed 100 random samples in batches of 30, printing what each
replica and the caller see. The tutorial's print inside forward() is a forward hook here,
called once per replica with its chunk (docs/data-parallel.md):

    python3 examples/python/data_parallel_tutorial.py --sim-gpus 2
"""
import argparse
import os

import numpy

import tandem

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sim-gpus", type=int, default=2, help="simulated GPUs to place the model on (default 2)")
    args = parser.parse_args()
    model = tandem.Model.load(os.path.join(ROOT, "configs", "dp_tutorial.yaml"))
    model.place(sim_gpus=args.sim_gpus)
    listed = model.data_parallel_blocks[0]["devices"]  # a list, or "all": every GPU
    used = args.sim_gpus if listed == "all" else len(listed)
    note = "" if used == args.sim_gpus else ", %d of the %d as the model file lists them" % (used, args.sim_gpus)
    print("Let's use %d GPUs! (simulated%s)" % (used, note))

    def in_model(layer, inputs, output):  # the tutorial's print in Model.forward
        print("\tIn Model: input size", tuple(inputs[0].shape), "output size", tuple(output.shape), "on", layer.device)

    model.register_forward_hook(in_model, layer="model.fc")
    data = numpy.random.default_rng(1).standard_normal((100, 5)).astype(numpy.float32)  # RandomDataset(5, 100)
    for start in range(0, 100, 30):
        x = data[start:start + 30]
        y = model(x)["model.fc"]
        print("Outside: input size", x.shape, "output_size", y.shape)


if __name__ == "__main__":
    main()

"""Writes the fuzz targets' seed inputs that configs/ and the tests do not hold as files:
safetensors files (weights, each dtype, a checkpoint's metadata), CSV files with the
settings byte fuzz_csv.cpp reads first, command lines with NUL-separated arguments, and
NumPy files (.npy of each dtype Tandem reads, .npz stored and deflated) written by numpy.
Deterministic; run from anywhere: /usr/bin/python3 tests/fuzz/make_seeds.py"""
import gzip
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(HERE, "seeds")


def write(kind, name, data):
    os.makedirs(os.path.join(SEEDS, kind), exist_ok=True)
    with open(os.path.join(SEEDS, kind, name), "wb") as f:
        f.write(data)


def safetensors(tensors, metadata=None):
    """tensors: name -> (dtype, shape, raw bytes)."""
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


def f32(*values):
    return struct.pack("<%df" % len(values), *values)


def main():
    write("safetensors", "weights.safetensors", safetensors({
        "fc.weight": ("F32", [2, 3], f32(1, 2, 3, 4, 5, 6)),
        "fc.bias": ("F32", [2], f32(0.5, -0.5)),
        "emb.weight": ("F32", [0, 4], b""),
    }, {"format": "pt"}))
    write("safetensors", "dtypes.safetensors", safetensors({
        "f64": ("F64", [2], struct.pack("<2d", 1.5, -2)),
        "f16": ("F16", [2], struct.pack("<2H", 0x3C00, 0x7C00)),
        "bf16": ("BF16", [2], struct.pack("<2H", 0x3F80, 0xFFC0)),
        "i64": ("I64", [1], struct.pack("<q", -7)),
        "i32": ("I32", [2], struct.pack("<2i", 1, -1)),
        "i16": ("I16", [1], struct.pack("<h", 300)),
        "i8": ("I8", [1], struct.pack("<b", -3)),
        "u8": ("U8", [1], b"\xff"),
        "bool": ("BOOL", [2], b"\x00\x01"),
        "scalar": ("F32", [], f32(3)),
    }))
    write("safetensors", "checkpoint.safetensors", safetensors({
        "fc.weight": ("F32", [1, 2], f32(1, 2)),
        "fc.bias": ("F32", [1], f32(0)),
        "optimizer.step": ("I64", [1], struct.pack("<q", 4)),
        "optimizer.fc.weight.exp_avg": ("F32", [1, 2], f32(0.1, 0.2)),
        "optimizer.fc.weight.exp_avg_sq": ("F32", [1, 2], f32(0.01, 0.02)),
        "optimizer.fc.bias.exp_avg": ("F32", [1], f32(0.1)),
        "optimizer.fc.bias.exp_avg_sq": ("F32", [1], f32(0.01)),
    }, {"tandem_checkpoint": "1", "model": "tiny", "epoch": "2", "step": "4", "total_steps": "10",
        "seed": "7", "optimizer": "adam", "lr": "0.001", "batch": "4", "epochs": "5"}))
    write("safetensors", "empty.safetensors", safetensors({}))

    head = "name: m\ninputs:\n  x: {shape: [batch, 3]}\n"
    yaml_models = {
        "train_sections.yaml": head + "targets:\n  y: {shape: [batch], dtype: int64, high: 5}\nlayers:\n"
        "  - {name: fc, op: linear, in_features: 3, out_features: 5, init: {weight: {uniform: [-0.1, 0.1]}, bias: zeros}}\n"
        "loss: {op: cross_entropy, input: fc, target: y, label_smoothing: 0.1}\n"
        "train:\n  epochs: 2\n  batch: 4\n  seed: 3\n  optimizer: {name: sgd, lr: 0.1, momentum: 0.9, nesterov: true}\n"
        "  schedule: {name: step, step_size: 2, gamma: 0.5}\n  clip_grad_norm: 1.0\n"
        "  loss_scaling: {init_scale: 1024, growth_factor: 2, backoff_factor: 0.5, growth_interval: 10}\n"
        "  data: {path: d.csv, format: csv, header: true, columns: {x: \"1:4\", y: \"0\"}}\n"
        "placement: {policy: balanced, max_memory: 1MiB}\n",
        "anchors.yaml": head + "layers:\n  - &l {name: a, op: relu}\n  - {name: b, op: tanh}\n  - *l\n",
        "quoted.yaml": "name: 'it''s \"q\"'\ninputs: {\"x\": {shape: [batch, 3]}}\nlayers: [{op: \"relu\"}]\n",
        "documents.yaml": "---\n" + head + "layers: [{op: relu}]\n...\n---\n",
    }
    for name, text in yaml_models.items():
        write("yaml_model", name, text.encode())

    rows = "".join("%d,%s\n" % (i % 5, ",".join("%g" % (0.5 * i + j) for j in range(3))) for i in range(6))
    label_last = "".join("%s,%d\n" % (",".join("%g" % (0.25 * i - j) for j in range(3)), i % 5) for i in range(6))
    write("csv", "plain.csv", b"\x00" + label_last.encode())
    write("csv", "header.csv", b"\x01" + ("a,b,c,label\n" + label_last).encode())
    write("csv", "mapped.csv", b"\x04" + rows.encode())
    write("csv", "crlf.csv", b"\x00" + label_last.replace("\n", "\r\n").encode())
    write("csv", "gzip.csv.gz", b"\x02" + gzip.compress(label_last.encode(), mtime=0))
    write("csv", "gzip_mapped.csv.gz", b"\x06" + gzip.compress(rows.encode(), mtime=0))
    write("csv", "ignored.csv", b"\x00" + b"1,2,3,-100\n4,5,6.5e-3,4\n")

    command_lines = {
        "check": ["check", "configs/recommender.yaml", "--json"],
        "run": ["run", "configs/seed_mlp.yaml", "--batch", "32", "--seed", "7", "--repeat", "3"],
        "run_files": ["run", "m.yaml", "--weights", "w.safetensors", "--inputs", "x.safetensors", "--outputs",
                      "y.safetensors", "--json"],
        "run_placed": ["run", "m.yaml", "--sim-gpus", "2", "--sim-gpu-memory", "64KiB", "--placement", "balanced",
                       "--max-memory", "1MiB", "--place", "enc.*=cuda:1", "--place", "dp=cpu", "--report"],
        "plan": ["plan", "m.yaml", "--sim-gpus", "1", "--train", "--batch", "8", "--bind", "seq=16", "--dot", "p.dot"],
        "train": ["train", "m.yaml", "--epochs", "2", "--batch", "4", "--lr", "0.01", "--optimizer", "adamw",
                  "--seed", "18446744073709551615", "--validation-split", "0.25", "--no-shuffle", "--keep-last",
                  "--save", "c.safetensors", "--resume", "c.safetensors"],
        "bench": ["train", "m.yaml", "--bench-steps", "5", "--bind", "seq=3", "--placement", "embeddings-on-cpu"],
        "devices": ["devices", "--sim-gpus", "4", "--sim-gpu-memory", "4GiB", "--json"],
        "help": ["run", "--help"],
    }
    for name, args in command_lines.items():
        write("command_line", name, "\0".join(args).encode())


def numpy_seeds():
    import io
    import numpy

    def saved(save, *args, **kwargs):
        buffer = io.BytesIO()
        save(buffer, *args, **kwargs)
        return buffer.getvalue()

    values = numpy.arange(6, dtype=numpy.float64).reshape(2, 3) - 2.5
    for dtype in ["<f4", "<f8", "<f2", "<i8", "<i4", "|i1", "|u1", "|b1"]:
        write("numpy", "array_%s.npy" % dtype.strip("<|"), saved(numpy.save, values.astype(dtype)))
    write("numpy", "scalar.npy", saved(numpy.save, numpy.float32(1.5)))
    write("numpy", "stored.npz", saved(numpy.savez, x=values.astype("<f4"), ids=numpy.arange(4)))
    write("numpy", "deflated.npz", saved(numpy.savez_compressed, x=values.astype("<f4"), ids=numpy.arange(4)))


if __name__ == "__main__":
    main()
    numpy_seeds()

#!/usr/bin/python3
"""Self-test of the oracle: safetensors round trip, parameter names, reference errors,
and make_cases end to end (including `oracle: skip`). Run: /usr/bin/python3 tests/oracle/selftest.py"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import tandem_torch as tt  # noqa: E402
from safetensors_np import read_safetensors, read_safetensors_np, write_safetensors  # noqa: E402

FAILS = []


def check(cond, what):
    print("%s %s" % ("ok  " if cond else "FAIL", what))
    if not cond:
        FAILS.append(what)


def test_safetensors(tmp):
    path = os.path.join(tmp, "t.safetensors")
    tensors = {
        "a.weight": torch.randn(3, 5),
        "b": torch.arange(7, dtype=torch.int64) - 3,
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
        "t": torch.randn(4, 6).t(),  # not contiguous
    }
    write_safetensors(path, tensors, metadata={"format": "pt"})
    back = read_safetensors(path)
    check(set(back) == set(tensors), "safetensors: same names")
    for k, v in tensors.items():
        check(back[k].dtype == v.dtype and back[k].shape == v.shape and torch.equal(back[k], v),
              "safetensors: %s round-trips (%s %s)" % (k, v.dtype, list(v.shape)))
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    check(n % 8 == 0, "safetensors: header padded to a multiple of 8")
    header = json.loads(raw[8:8 + n])
    check(header["__metadata__"] == {"format": "pt"}, "safetensors: metadata kept")
    check(header["a.weight"]["dtype"] == "F32" and header["b"]["dtype"] == "I64", "safetensors: F32 / I64 codes")
    ends = sorted(tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__")
    check(ends[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ends, ends[1:])) and ends[-1][1] == len(raw) - 8 - n,
          "safetensors: data_offsets tile the data buffer")
    # a file from another writer: header without padding, tensors in reverse order
    hdr = json.dumps({"y": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},
                      "x": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr + struct.pack("<q", 42) + struct.pack("<2f", 1.5, -2.0))
    arrs, meta = read_safetensors_np(path)
    check(meta is None and arrs["x"].tolist() == [42] and arrs["y"].tolist() == [1.5, -2.0],
          "safetensors: reads a foreign file")
    check(arrs["y"].dtype == np.float32, "safetensors: native float32")


def test_names():
    _, spec = tt.build_model(os.path.join(ROOT, "configs/mlp_4x1024.yaml"))
    model, spec = tt.build_model(os.path.join(ROOT, "configs/mlp_4x1024.yaml"))
    want = {"hidden.%d.fc.%s" % (i, p) for i in range(3) for p in ("weight", "bias")} | {"head.weight", "head.bias"}
    check(set(model.state_dict()) == want, "mlp_4x1024 state_dict keys")
    check(model.state_dict()["hidden.1.fc.weight"].shape == (1024, 1024), "mlp_4x1024 weight shape")
    check(list(spec.outputs) == ["head"], "mlp_4x1024 default output = last layer")

    model, spec = tt.build_model(os.path.join(ROOT, "configs/recommender.yaml"))
    shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
    want = {
        "bottom.fc1.weight": [64, 13], "bottom.fc1.bias": [64],
        "bottom.fc2.weight": [32, 64], "bottom.fc2.bias": [32],
        "items.weight": [100000, 32], "tags.weight": [5000, 32],
        "top.fc1.weight": [64, 96], "top.fc1.bias": [64],
        "top.norm.weight": [64], "top.norm.bias": [64],
        "top.fc2.weight": [1, 64], "top.fc2.bias": [1],
    }
    check(shapes == want, "recommender state_dict keys and shapes")
    check(spec.symbols == ["batch", "tags"], "recommender symbols")

    model, _ = tt.build_model(os.path.join(ROOT, "configs/seed_nested_dp.yaml"))
    check(set(model.state_dict()) == {"block1.weight", "block1.bias", "block2.fc.weight", "block2.fc.bias",
                                      "block3.weight", "block3.bias"}, "seed_nested_dp: no module. prefix")


def _doc(layers, **extra):
    d = {"name": "t", "inputs": {"x": {"shape": ["batch", 4]}}, "layers": layers}
    d.update(extra)
    return d


def expect_error(doc, what):
    try:
        tt.build_model("<test>", doc=doc)
    except tt.SpecError as e:
        check(True, "refused: %s (%s)" % (what, e))
        return
    check(False, "refused: %s" % what)


def test_errors():
    lin = {"op": "linear", "in_features": 4, "out_features": 4}
    expect_error(_doc([dict(lin, name="a", inputs="b"), dict(lin, name="b")]), "reference to a later layer")
    expect_error(_doc([dict(lin, name="a", inputs="a")]), "reference to itself")
    expect_error(_doc([{"name": "blk", "layers": [dict(lin, name="a", inputs="blk")]}]), "reference to the enclosing block")
    expect_error(_doc([dict(lin, name="a"), dict(lin, name="b", inputs="a.fc")]), "dotted path through a leaf")
    expect_error(_doc([dict(lin, name="a", future=1)]), "unknown attribute")
    expect_error(_doc([dict(lin, name="a")], future={}), "unknown top-level key")
    expect_error(_doc([dict(lin, name="a"), dict(lin, name="a")]), "duplicate name")
    expect_error(_doc([dict(lin, name="a", repeat=2)]), "repeat on a leaf")
    expect_error(_doc([{"name": "m", "module": "loop"}], modules={"loop": {"layers": [{"module": "loop"}]}}),
                 "recursive module")
    expect_error(_doc([{"op": "add"}]), "add with one input")
    expect_error(_doc([dict(lin, name="a", max_norm=1.0)]), "linear has no max_norm")
    expect_error(_doc([{"op": "embedding", "num_embeddings": 4, "embedding_dim": 2, "max_norm": 1.0}]), "max_norm set")
    # a block's sibling scope: an inner layer sees the outer earlier siblings only
    ok = _doc([dict(lin, name="p"), {"name": "blk", "layers": [dict(lin, name="q", inputs="p")]}],
              train={"epochs": 1}, loss="mse", placement={}, oracle="run")
    model, spec = tt.build_model("<test>", doc=ok)
    check([s.ins for s in spec.plan] == [["input:x"], ["layer:p"]], "outer-sibling reference; train/loss/placement ignored")


def test_make_cases(tmp):
    cases = os.path.join(tmp, "yaml")
    os.makedirs(cases)
    with open(os.path.join(cases, "good.yaml"), "w") as f:
        f.write("name: good\ninputs:\n  x: {shape: [batch, 3]}\nlayers:\n"
                "  - {name: fc, op: linear, in_features: 3, out_features: 2}\n")
    with open(os.path.join(cases, "future.yaml"), "w") as f:
        f.write("name: future\noracle: skip\ninputs:\n  x: {shape: [batch, 3]}\nlayers:\n"
                "  - {name: fc, op: conv9d, in_features: 3}\n")
    out = os.path.join(tmp, "out")
    r = subprocess.run([sys.executable, os.path.join(HERE, "make_cases.py"), "--out", out, "--seed", "7", cases],
                       capture_output=True, text=True)
    check(r.returncode == 0 and "skipping" in r.stderr, "make_cases: oracle: skip is skipped")
    m = json.load(open(os.path.join(out, "manifest.json")))
    check(m["seed"] == 7 and [c["name"] for c in m["cases"]][0] == "good-b1" and len(m["cases"]) == 2,
          "make_cases: manifest")
    c = m["cases"][1]
    w = read_safetensors(os.path.join(c["dir"], "weights.safetensors"))
    i = read_safetensors(os.path.join(c["dir"], "inputs.safetensors"))
    e = read_safetensors(os.path.join(c["dir"], "expected.safetensors"))
    check(torch.allclose(e["fc"], i["x"] @ w["fc.weight"].t() + w["fc.bias"], atol=1e-6), "make_cases: expected = x W^T + b")
    check(2 <= c["bindings"]["batch"] <= 9 and list(i["x"].shape) == [c["bindings"]["batch"], 3], "make_cases: batch binding")
    with open(os.path.join(cases, "future.yaml"), "w") as f:
        f.write("name: future\ninputs:\n  x: {shape: [batch, 3]}\nlayers:\n"
                "  - {name: fc, op: conv9d, in_features: 3}\n")
    r = subprocess.run([sys.executable, os.path.join(HERE, "make_cases.py"), "--out", out, cases],
                       capture_output=True, text=True)
    check(r.returncode == 1 and "conv9d" in r.stderr, "make_cases: unbuildable YAML without oracle: skip fails")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_safetensors(tmp)
        test_names()
        test_errors()
        test_make_cases(tmp)
    print("selftest: %s" % ("FAILED: %d" % len(FAILS) if FAILS else "all passed"))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

"""`tandem run` on inputs and weights as users have them: NumPy's .npy and .npz (stored and
compressed), CSV, and a state_dict saved through torch's nn.DataParallel; and every refusal
(a file of the wrong kind, arrays Tandem cannot take, weights that do not fit) with exit
code 2 and a message naming the file and the problem. The files are written by numpy and
torch themselves, with fresh random values each run; outputs from them must equal the
outputs from the same values in safetensors.
"""
import json
import os
import struct
import subprocess

import numpy
import pytest
import torch

from conftest import CLI, assert_close, config

DTYPES = {numpy.dtype("float32"): "F32", numpy.dtype("int64"): "I64"}


def write_safetensors(path, tensors, misalign=False):
    """The format by hand (the safetensors package is not a dependency): header, then data.
    `misalign`: data starting at an odd byte, as the format allows (other writers do not pad)."""
    header, offset, blobs = {}, 0, []
    for name, array in sorted(tensors.items()):
        array = numpy.ascontiguousarray(array)
        blob = array.tobytes()
        header[name] = {"dtype": DTYPES[array.dtype], "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8 + (1 if misalign else 0))
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype = {"F32": numpy.float32, "I64": numpy.int64}[entry["dtype"]]
        out[name] = numpy.frombuffer(data[8 + n + begin:8 + n + end], dtype=dtype).reshape(entry["shape"])
    return out


def run(*args):
    r = subprocess.run([CLI, "run", *map(str, args)], capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


def outputs(*args):
    code, text = run(*args, "--json")
    assert code == 0, text
    return {name: o["values"] for name, o in json.loads(text)["outputs"].items()}


def refused(message, *args):
    code, text = run(*args)
    assert code == 2, text
    assert message in text, text
    return text


@pytest.fixture
def digits(tmp_path, rng):
    """digits_mlp (one input, x [batch, 64]) with random weights, and inputs as safetensors."""
    model = config("digits_mlp.yaml")
    weights = tmp_path / "w.safetensors"
    code, text = run(model, "--seed", int(rng.integers(1 << 30)), "--save-weights", weights)
    assert code == 0, text
    x = rng.standard_normal((int(rng.integers(2, 9)), 64)).astype(numpy.float32)
    reference = tmp_path / "x.safetensors"
    write_safetensors(reference, {"x": x})
    return model, weights, x, outputs(model, "--weights", weights, "--inputs", reference)


def test_npy_npz_and_csv_inputs_give_the_outputs_of_safetensors(digits, tmp_path):
    model, weights, x, want = digits
    numpy.save(tmp_path / "x.npy", x)
    numpy.savez(tmp_path / "stored.npz", x=x)
    numpy.savez_compressed(tmp_path / "deflated.npz", x=x)
    numpy.savetxt(tmp_path / "x.csv", x, delimiter=",", fmt="%.9g")  # 9 digits: float32 exactly
    # a header line, as pandas and spreadsheets write it, is skipped
    numpy.savetxt(tmp_path / "header.csv", x, delimiter=",", fmt="%.9g", comments="",
                  header=",".join("pixel%d" % i for i in range(64)))
    for name in ["x.npy", "stored.npz", "deflated.npz", "x.csv", "header.csv"]:
        assert outputs(model, "--weights", weights, "--inputs", tmp_path / name) == want, name
    # by content, not by name: an .npz named .bin reads as one
    os.rename(tmp_path / "deflated.npz", tmp_path / "inputs.bin")
    assert outputs(model, "--weights", weights, "--inputs", tmp_path / "inputs.bin") == want
    # float64 arrays become float32
    numpy.save(tmp_path / "x64.npy", x.astype(numpy.float64))
    assert outputs(model, "--weights", weights, "--inputs", tmp_path / "x64.npy") == want


def test_npz_of_several_inputs_with_int32_indices(tmp_path, rng):
    model = config("recommender.yaml")
    batch, tags = int(rng.integers(2, 6)), 7
    arrays = {
        "dense": rng.standard_normal((batch, 13)).astype(numpy.float32),
        "item_ids": rng.integers(0, 100000, (batch, 8)),
        "tag_ids": rng.integers(0, 5000, tags),
        "tag_offsets": numpy.sort(numpy.concatenate([[0], rng.integers(0, tags, batch - 1)])),
    }
    write_safetensors(tmp_path / "x.safetensors", arrays)
    want = outputs(model, "--inputs", tmp_path / "x.safetensors")
    numpy.savez_compressed(tmp_path / "x.npz", **{k: v.astype(numpy.int32) if v.dtype == numpy.int64 else v
                                                  for k, v in arrays.items()})
    assert outputs(model, "--inputs", tmp_path / "x.npz") == want
    numpy.save(tmp_path / "one.npy", arrays["dense"])
    refused("one.npy holds one array, but model 'recommender' has 4 inputs (dense, item_ids, tag_ids, tag_offsets)",
            model, "--inputs", tmp_path / "one.npy")


def test_arrays_tandem_cannot_take_are_refused_by_name(digits, tmp_path):
    model, weights, x, _ = digits
    cases = {
        "fortran.npy": (numpy.asfortranarray(x), "the array is in Fortran order"),
        "big.npy": (x.astype(">f4"), "the array is big-endian ('>f4')"),
        "objects.npy": (numpy.array([1, "a"], dtype=object), "the array holds Python objects"),
        "complex.npy": (x.astype(numpy.complex64), "dtype '<c8' is not supported"),
        "uint64.npy": (x.astype(numpy.uint64), "dtype '<u8' is not supported"),
    }
    for name, (array, message) in cases.items():
        numpy.save(tmp_path / name, array, allow_pickle=True)
        refused(str(tmp_path / name) + ": " + message, model, "--inputs", tmp_path / name)
    numpy.savez(tmp_path / "positional.npz", x)
    refused("positional.npz: array 'arr_0' is not an input of model 'digits_mlp' (its inputs: x); name the arrays",
            model, "--inputs", tmp_path / "positional.npz")
    # cut short, and one byte of deflated data changed
    numpy.save(tmp_path / "x.npy", x)
    data = (tmp_path / "x.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-5])
    refused("cut.npy: shape [", model, "--inputs", tmp_path / "cut.npy")
    numpy.savez_compressed(tmp_path / "z.npz", x=x)
    data = bytearray((tmp_path / "z.npz").read_bytes())
    data[100] ^= 0xFF
    (tmp_path / "z.npz").write_bytes(bytes(data))
    refused("z.npz: member 'x.npy'", model, "--inputs", tmp_path / "z.npz")
    (tmp_path / "z.npz").write_bytes(bytes(data[:len(data) // 2]))
    refused("z.npz: no zip end-of-directory record", model, "--inputs", tmp_path / "z.npz")


def test_a_file_of_the_wrong_kind_is_named_as_what_it_is(digits, tmp_path):
    model, weights, x, _ = digits
    numpy.savetxt(tmp_path / "x.csv", x, delimiter=",")
    refused("x.csv is CSV, not safetensors", model, "--weights", tmp_path / "x.csv")
    torch.save({k: torch.from_numpy(v.copy()) for k, v in read_safetensors(weights).items()}, tmp_path / "w.pt")
    text = refused("w.pt is a PyTorch file (torch.save), not safetensors", model, "--weights", tmp_path / "w.pt")
    assert "model.save_weights" in text
    refused("w.pt is a PyTorch file (torch.save), not inputs Tandem reads", model, "--inputs", tmp_path / "w.pt")
    torch.save({"x": torch.from_numpy(x)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    refused("legacy.pt is a Python pickle", model, "--weights", tmp_path / "legacy.pt")
    numpy.savez(tmp_path / "w.npz", x=x)
    refused("w.npz is a NumPy archive (.npz, numpy.savez), not safetensors", model, "--weights", tmp_path / "w.npz")
    refused("digits_mlp.yaml is YAML, not inputs Tandem reads", model, "--inputs", model)
    import gzip
    (tmp_path / "x.data").write_bytes(gzip.compress(b"1,2\n"))
    refused("x.data is a gzip file; inputs are read from", model, "--inputs", tmp_path / "x.data")
    refused("x.data is a gzip file, not safetensors", model, "--weights", tmp_path / "x.data")
    # a cut safetensors file is still refused for what is wrong in it
    (tmp_path / "cut.safetensors").write_bytes(weights.read_bytes()[:200])
    refused("cut.safetensors: header length", model, "--inputs", tmp_path / "cut.safetensors")
    (tmp_path / "words.safetensors").write_text("not a safetensors file at all")
    refused("words.safetensors is text, not inputs Tandem reads", model, "--inputs", tmp_path / "words.safetensors")


class DigitsMLP(torch.nn.Module):
    """configs/digits_mlp.yaml in torch: the same parameter names."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(64)
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(64, 128), torch.nn.Linear(128, 128), torch.nn.Linear(128, 10)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(self.norm(x))))))


def test_weights_saved_through_data_parallel_load_with_a_note(tmp_path, rng):
    module = DigitsMLP()
    state = torch.nn.DataParallel(module).state_dict()
    assert all(k.startswith("module.") for k in state)
    write_safetensors(tmp_path / "dp.safetensors", {k: v.numpy() for k, v in state.items()})
    x = rng.standard_normal((3, 64)).astype(numpy.float32)
    numpy.save(tmp_path / "x.npy", x)
    code, text = run(config("digits_mlp.yaml"), "--weights", tmp_path / "dp.safetensors", "--inputs", tmp_path / "x.npy",
                     "--json")
    assert code == 0, text
    result = json.loads(text)
    assert any("every name began with 'module.'" in n for n in result["notes"]), result["notes"]
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    assert_close(numpy.array(result["outputs"]["fc3"]["values"]).reshape(want.shape), want, 1e-5, "fc3")
    code, text = run(config("digits_mlp.yaml"), "--weights", tmp_path / "dp.safetensors")
    assert code == 0 and "note: " in text and "nn.DataParallel" in text, text

    # only some names prefixed: not guessed; the message says what to do
    mixed = {k: v.numpy() for k, v in state.items()}
    mixed["fc1.bias"] = mixed.pop("module.fc1.bias")
    write_safetensors(tmp_path / "mixed.safetensors", mixed)
    refused("strip the prefix", config("digits_mlp.yaml"), "--weights", tmp_path / "mixed.safetensors")


def test_weights_stored_at_odd_offsets_load_as_aligned_ones(digits, tmp_path):
    # mapped weights are views of the file where aligned, copies where not: the same values
    model, weights, x, want = digits
    write_safetensors(tmp_path / "odd.safetensors", read_safetensors(weights), misalign=True)
    numpy.save(tmp_path / "x.npy", x)
    assert outputs(model, "--weights", tmp_path / "odd.safetensors", "--inputs", tmp_path / "x.npy") == want


def test_weights_that_do_not_fit_list_every_problem(digits, tmp_path):
    model, weights, x, _ = digits
    state = read_safetensors(weights)
    state = {k: v.copy() for k, v in state.items()}
    del state["fc1.bias"], state["fc2.bias"]
    state["fc1.weight"] = numpy.zeros((3, 64), numpy.float32)
    state["fc3.weight"] = numpy.zeros((10, 7), numpy.float32)
    state["head.weight"] = numpy.zeros(2, numpy.float32)
    state["norm.bias"] = state["norm.bias"].astype(numpy.int64)
    for i in range(25):
        state["extra.%02d" % i] = numpy.zeros(1, numpy.float32)
    write_safetensors(tmp_path / "bad.safetensors", state)
    text = refused("bad.safetensors does not fit model 'digits_mlp': 2 parameter(s) missing: 'fc1.bias', 'fc2.bias'",
                   model, "--weights", tmp_path / "bad.safetensors")
    assert "26 tensor(s) the model does not have: 'extra.00'" in text, text
    assert ", and 6 more" in text, text
    assert "2 of the wrong shape: 'fc1.weight' is [3, 64], the model's [128, 64], 'fc3.weight' is [10, 7]" in text, text
    assert "1 of the wrong dtype: 'norm.bias' is int64, the model's float32" in text, text


def test_the_python_package_warns_of_the_stripped_prefix(tmp_path):
    import tandem

    module = DigitsMLP()
    state = torch.nn.DataParallel(module).state_dict()
    write_safetensors(tmp_path / "dp.safetensors", {k: v.numpy() for k, v in state.items()})
    model = tandem.Model.load(config("digits_mlp.yaml"))
    with pytest.warns(UserWarning, match="nn.DataParallel"):
        model.load_weights(tmp_path / "dp.safetensors")
    assert numpy.array_equal(numpy.asarray(model.state_dict()["fc2.weight"]), module.fc2.weight.detach().numpy())

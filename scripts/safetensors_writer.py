"""Writes int64 and float32 tensors as a safetensors file with the standard library alone
(the data scripts run without numpy or torch): scripts/make_char_data.py,
scripts/make_mlm_data.py, scripts/make_click_data.py."""
import array
import json
import os
import struct
import sys

# safetensors dtype -> array typecode
TYPECODES = {"I64": "q", "F32": "f"}


def write_safetensors(path, tensors, metadata):
    """tensors: name -> (shape, flat list of numbers) written as little-endian int64, or
    (shape, flat list, "F32") for float32, through a temporary file renamed into place (a
    reader never sees half a file)."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, spec in tensors.items():
        shape, values = spec[0], spec[1]
        dtype = spec[2] if len(spec) > 2 else "I64"
        blob = array.array(TYPECODES[dtype], values)  # a copy: byteswap() must not touch the caller's
        if sys.byteorder != "little":
            blob.byteswap()
        raw = blob.tobytes()
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)

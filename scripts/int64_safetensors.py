"""Writes int64 tensors as a safetensors file with the standard library alone (the data
scripts run without numpy or torch): scripts/make_char_data.py, scripts/make_mlm_data.py."""
import array
import json
import os
import struct
import sys


def write_safetensors(path, tensors, metadata):
    """tensors: name -> (shape, flat list of ints), written as little-endian int64, through a
    temporary file renamed into place (a reader never sees half a file)."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, (shape, values) in tensors.items():
        blob = array.array("q", values)
        if sys.byteorder != "little":
            blob.byteswap()
        raw = blob.tobytes()
        header[name] = {"dtype": "I64", "shape": shape, "data_offsets": [offset, offset + len(raw)]}
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

"""A small reader/writer for the safetensors format, using only numpy (and torch if present).

Format: 8-byte little-endian u64 N, then N bytes of JSON header
  {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
   "__metadata__": {"key": "value"}}           # optional, string -> string
padded with spaces to a multiple of 8, then the data buffer. Offsets are relative to the
start of the data buffer; data is little-endian, C order.
"""
import json
import struct

import numpy as np

_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_BF16 = "BF16"


def _code_of(arr):
    for code, dt in _DTYPES.items():
        if arr.dtype == dt or arr.dtype == dt.newbyteorder("="):
            return code
    raise TypeError("safetensors: unsupported dtype %s" % arr.dtype)


def _to_numpy(value):
    try:
        import torch
        if isinstance(value, torch.Tensor):
            return value.detach().cpu().contiguous().numpy()
    except ImportError:  # pragma: no cover
        pass
    return np.asarray(value)


def read_safetensors_np(path):
    """Returns (dict name -> numpy array, metadata dict or None), in file order."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: too short for a safetensors file" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError("%s: header length %d past the end of the file" % (path, n))
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = memoryview(raw)[8 + n:]
    metadata = header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        shape = [int(d) for d in info["shape"]]
        code = info["dtype"]
        if not (0 <= begin <= end <= len(data)):
            raise ValueError("%s: tensor %r has bad data_offsets" % (path, name))
        count = int(np.prod(shape, dtype=np.int64))
        if code == _BF16:
            u16 = np.frombuffer(data[begin:end], dtype="<u2")
            arr = (u16.astype(np.uint32) << 16).view(np.float32)
        elif code in _DTYPES:
            arr = np.frombuffer(data[begin:end], dtype=_DTYPES[code])
        else:
            raise ValueError("%s: tensor %r has unsupported dtype %s" % (path, name, code))
        if arr.size != count:
            raise ValueError("%s: tensor %r: %d bytes do not hold shape %s" % (path, name, end - begin, shape))
        out[name] = arr.reshape(shape).astype(arr.dtype.newbyteorder("="), copy=True)
    return out, metadata


def read_safetensors(path):
    """dict name -> torch.Tensor."""
    import torch
    arrays, _ = read_safetensors_np(path)
    return {k: torch.from_numpy(v) for k, v in arrays.items()}


def write_safetensors(path, tensors, metadata=None):
    """tensors: dict name -> torch.Tensor or numpy array. Names are written sorted."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        arr = np.asarray(_to_numpy(tensors[name]))  # (ascontiguousarray would make 0-d 1-d)
        code = _code_of(arr)
        arr = arr.astype(_DTYPES[code], copy=False)  # little-endian
        b = arr.tobytes(order="C")  # C order whatever the strides
        header[name] = {"dtype": code, "shape": list(arr.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * ((8 - len(hbytes) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for b in blobs:
            f.write(b)

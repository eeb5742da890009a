"""Safetensors read and write with numpy only (no `safetensors` package).

A file is: 8 bytes little-endian u64 header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
{str: str}}, then the raw little-endian data; offsets count from the end of
the header.

    read(path)                -> ({name: np.ndarray}, metadata)
    write(path, tensors, dtype=None, metadata=None)

bf16 has no numpy dtype: read() widens it to float32 (the 16 bits become the
top half of the f32 word, exact); write() with dtype "BF16" rounds float32 to
bf16 to nearest even. Other dtypes keep their numpy type.
"""

import json
import struct

import numpy as np

_NP = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U64": np.uint64, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8,
    "BOOL": np.bool_,
}
_NAME = {np.dtype(v).str: k for k, v in _NP.items()}


def bf16_to_f32(u16):
    """uint16 bf16 bit patterns -> float32 values (exact)."""
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """float32 -> uint16 bf16 bit patterns, rounded to nearest even (NaN kept NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    if nan.any():
        r[nan] = 0x7FC0
    return r


def rel(out, ref):
    """||out - ref|| / ||ref|| in float64 (numpy arrays or torch tensors)."""
    def arr(x):
        return np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=np.float64)
    out, ref = arr(out), arr(ref)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def read_header(path):
    """(header dict without __metadata__, metadata dict, data start offset)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: shorter than a safetensors header")
        n = struct.unpack("<Q", raw)[0]
        hdr = json.loads(f.read(n))
    meta = hdr.pop("__metadata__", {}) or {}
    return hdr, meta, 8 + n


def read(path, names=None):
    """Every tensor (or those in `names`) as numpy arrays; bf16 as float32."""
    hdr, meta, start = read_header(path)
    out = {}
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        for name, v in hdr.items():
            if names is not None and name not in names:
                continue
            dt, shape = v["dtype"], list(v["shape"])
            a, b = v["data_offsets"]
            if not (0 <= a <= b and start + b <= size):
                raise ValueError(f"{path}: tensor {name}: offsets {a}..{b} outside the file")
            f.seek(start + a)
            buf = f.read(b - a)
            if dt == "BF16":
                arr = bf16_to_f32(np.frombuffer(buf, dtype="<u2"))
            elif dt in _NP:
                arr = np.frombuffer(buf, dtype=np.dtype(_NP[dt]).newbyteorder("<")).astype(_NP[dt])
            else:
                raise ValueError(f"{path}: tensor {name}: dtype {dt} not supported")
            count = int(np.prod(shape)) if shape else 1
            if arr.size != count:
                raise ValueError(f"{path}: tensor {name}: shape {shape} does not match {b - a} bytes")
            out[name] = arr.reshape(shape)
    return out, meta


def write(path, tensors, dtype=None, metadata=None):
    """Writes {name: array} in sorted name order. dtype "BF16" / "F32" / "F16"
    converts every floating tensor; None keeps each array's own dtype
    (float32 stays F32). Integer tensors always keep theirs."""
    hdr = {"__metadata__": {str(k): str(v) for k, v in (metadata or {"format": "pt"}).items()}}
    blobs, off = [], 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        floating = np.issubdtype(a.dtype, np.floating)
        if floating and dtype == "BF16":
            dt, data = "BF16", f32_to_bf16(a).astype("<u2").tobytes()
        elif floating and dtype in ("F32", "F16"):
            np_t = np.float32 if dtype == "F32" else np.float16
            dt, data = dtype, np.ascontiguousarray(a, dtype=np_t).astype(np.dtype(np_t).newbyteorder("<")).tobytes()
        else:
            dt = _NAME.get(a.dtype.str) or _NAME.get(a.dtype.newbyteorder("=").str)
            if dt is None:
                raise ValueError(f"tensor {name}: numpy dtype {a.dtype} has no safetensors name")
            data = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        hdr[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)

#!/usr/bin/python3
"""Writes tests/data/ggml_ref.bin: random blocks of every ggml block type edge0
dequantizes, with gguf-py's (llama.cpp's numpy reference) dequantized values,
for tests/test_ggml.c to compare with bit for bit.

    /usr/bin/python3 tests/data/gen_ggml_ref.py GGUF_PY_DIR [OUT]

GGUF_PY_DIR is llama.cpp's gguf-py directory (the one holding the `gguf`
package); needs numpy.

Format (little-endian): b"E0GGREF1", then per type: u32 type id, u32 block
count nb, u32 bytes per block, u32 values per block, the nb raw blocks, then
the nb * values f32 results.
"""
import struct
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as Q  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

# type -> byte offsets of its f16 fields within a block (ggml-common.h)
HALVES = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2],
    Q.Q6_K: [208], Q.IQ4_NL: [0], Q.IQ4_XS: [0],
}

rng = np.random.default_rng(20261201)


def sane_half():
    """A finite f16 bit pattern: mostly normal values of either sign from
    2^-14 to ~4, sometimes zero or subnormal."""
    u = rng.random()
    if u < 0.05:
        return 0
    if u < 0.12:
        return int(rng.integers(1, 0x400)) | (int(rng.integers(0, 2)) << 15)
    f = np.float16(rng.uniform(2.0 ** -14, 4.0) * rng.choice([-1.0, 1.0]))
    return int(f.view(np.uint16))


out = open(sys.argv[2] if len(sys.argv) > 2 else "tests/data/ggml_ref.bin", "wb")
out.write(b"E0GGREF1")
for qt, halves in HALVES.items():
    blck, size = GGML_QUANT_SIZES[qt]
    nb = 24 if blck == 32 else 8
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    for b in range(nb):
        for off in halves:
            h = sane_half()
            raw[b, off] = h & 0xFF
            raw[b, off + 1] = h >> 8
    vals = dequantize(raw.reshape(-1), qt).astype(np.float32, copy=False)
    assert vals.size == nb * blck
    assert np.all(np.isfinite(vals))
    out.write(struct.pack("<4I", int(qt), nb, size, blck))
    out.write(raw.tobytes())
    out.write(vals.astype("<f4").tobytes())
out.close()

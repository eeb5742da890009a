#!/usr/bin/python3
"""A benchmark folder for MTP speculative decoding (issue 41,
docs/experiments.md session 32): an mlx model folder SRC (e.g. `edge0
synth --shape qwen3.6-35b-a3b --route-profile qwen36`) with an MTP block
added in DST, for `edge0 bench DST --mtp-accept P`:

    /usr/bin/python3 scripts/mtp_bench_folder.py SRC DST [--layer N]

The block is layer N (default 3, a full-attention layer of the Qwen3.5
shapes) copied as mtp.layers.0 (4-bit like the rest, so a draft costs what
a real block would), a random 4-bit mtp.fc and zero-centred norms, in
DST/mtp.safetensors; the shards and tokenizer are symbolic links to SRC's,
the index and config.json copies that add the block (its router and shared
expert gate 8-bit, as the layer's). Its drafts are noise: only speed.
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "train"))
import st  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("src")
ap.add_argument("dst")
ap.add_argument("--layer", type=int, default=3)
args = ap.parse_args()
SRC, DST = args.src, args.dst
os.makedirs(DST, exist_ok=True)
idx = json.load(open(f'{SRC}/model.safetensors.index.json'))
cfg = json.load(open(f'{SRC}/config.json'))
pre = f'language_model.model.layers.{args.layer}.'
names = [k for k in idx['weight_map'] if k.startswith(pre)]
out = {}
by_file = {}
for k in names: by_file.setdefault(idx['weight_map'][k], []).append(k)
raw = {}
for fn, ks in by_file.items():
    hdr, meta, start = st.read_header(f'{SRC}/{fn}')
    with open(f'{SRC}/{fn}', 'rb') as f:
        for k in ks:
            h = hdr[k]; a, b = h['data_offsets']
            f.seek(start + a); raw[k] = (h['dtype'], h['shape'], f.read(b - a))
def norm_zero(dtype, shape, data):
    assert dtype == 'BF16'
    u = np.frombuffer(data, dtype='<u2').astype(np.uint32) << 16
    x = u.view(np.float32) - 1.0
    return dtype, shape, st.f32_to_bf16(x).astype('<u2').tobytes()
tensors = {}
for k, (dt, shp, data) in raw.items():
    n = 'mtp.layers.0.' + k[len(pre):]
    if k.endswith('layernorm.weight') or k.endswith('_norm.weight'):
        dt, shp, data = norm_zero(dt, shp, data)
    tensors[n] = (dt, shp, data)
H = cfg.get('text_config', cfg)['hidden_size']
rng = np.random.default_rng(41)
codes = rng.integers(0, 2**32, size=(H, 2 * H * 4 // 32), dtype=np.uint64).astype(np.uint32)
sc = np.full((H, 2 * H // 64), 0.02, np.float32)
tensors['mtp.fc.weight'] = ('U32', [H, 2 * H * 4 // 32], codes.tobytes())
tensors['mtp.fc.scales'] = ('BF16', [H, 2 * H // 64], st.f32_to_bf16(sc).astype('<u2').tobytes())
tensors['mtp.fc.biases'] = ('BF16', [H, 2 * H // 64], st.f32_to_bf16(-7.5 * sc).astype('<u2').tobytes())
for nm in ('pre_fc_norm_embedding', 'pre_fc_norm_hidden', 'norm'):
    tensors[f'mtp.{nm}.weight'] = ('BF16', [H], np.zeros(H, '<u2').tobytes())
hdr, off, blobs = {'__metadata__': {'format': 'mlx'}}, 0, []
for k in sorted(tensors):
    dt, shp, data = tensors[k]
    hdr[k] = {'dtype': dt, 'shape': shp, 'data_offsets': [off, off + len(data)]}
    blobs.append(data); off += len(data)
h = json.dumps(hdr, separators=(',', ':')).encode(); h += b' ' * (-len(h) % 8)
with open(f'{DST}/mtp.safetensors', 'wb') as f:
    f.write(struct.pack('<Q', len(h))); f.write(h)
    for b in blobs: f.write(b)
for k in tensors: idx['weight_map'][k] = 'mtp.safetensors'
json.dump(idx, open(f'{DST}/model.safetensors.index.json', 'w'))
q = cfg['quantization']
for m in ('mlp.gate', 'mlp.shared_expert_gate'):
    q['mtp.layers.0.' + m] = q[pre + m]
cfg['mtp_num_hidden_layers'] = 1
json.dump(cfg, open(f'{DST}/config.json', 'w'), indent=1)
for fn in os.listdir(SRC):
    if fn.endswith('.safetensors') or fn == 'tokenizer.json':
        if not os.path.exists(f'{DST}/{fn}'): os.symlink(f'{SRC}/{fn}', f'{DST}/{fn}')
print(len(tensors), 'MTP tensors,', off / 2**20, 'MiB')

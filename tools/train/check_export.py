#!/usr/bin/python3
"""Round trip of export.py through edge0.

    nice -n 19 /usr/bin/python3 tools/train/check_export.py [--edge0 build/edge0] [--keep DIR]

1. The qwen35moe fixture's weights (hf/) loaded by qwen35.py, with an MTP
   block added (mtp_num_hidden_layers 1, seeded random weights rounded to
   bf16 values so that a bf16 export is exact).
2. Exported as bf16 and as f32; each folder read back by qwen35.load_hf
   (strict: every name known) must hold the same values bit for bit, its
   main-model tensor names must be the fixture's hf/ names, and its mtp.*
   names those of edge0's MTP test checkpoint (tests/data/mtp/hf, which
   llama.cpp's converter turns into GGUF nextn.* tensors).
3. `edge0 logits` on each folder (golden ids as one prefill, then
   --prefill 12 with decode steps; golden_long ids with --prefill 100)
   against qwen35.py's forward and the transformers golden logits.
4. `edge0 info` on the folder, and on tests/data/mtp's GGUF for contrast
   (edge0 reports an MTP block only for GGUF files so far: its HF loader
   never looks mtp.* up).
Exits 1 when a check fails.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export  # noqa: E402
import qwen35  # noqa: E402
import st  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
FIX = os.path.normpath(os.path.join(ROOT, "..", "shared", "fixtures", "qwen35moe"))
MTP_HF = os.path.join(ROOT, "tests", "data", "mtp", "hf")
MTP_GGUF = os.path.join(ROOT, "tests", "data", "mtp", "model-F32.gguf")


def bf16_round(t):
    return torch.as_tensor(st.bf16_to_f32(st.f32_to_bf16(t.numpy())))


def fixture_with_mtp(seed=41):
    base = qwen35.load_hf(os.path.join(FIX, "hf"))
    d = base.cfg.to_hf()
    d["mtp_num_hidden_layers"] = 1
    model = qwen35.Qwen35Moe(qwen35.Config(d)).init_weights(seed)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("mtp."):
                if name.endswith("norm.weight"):  # zero-centred, multiples of 2^-7 as the fixture's
                    p.copy_(torch.randint(-32, 33, p.shape, generator=gen) / 128.0)
                p.copy_(bf16_round(p))
    model.load_tensors(base.state_dict(), strict=False)
    return model.eval()


def edge0_logits(edge0, folder, ids, prefill, out):
    cmd = [edge0, "logits", folder, "--ids", ",".join(str(int(i)) for i in ids), "--out", out,
           "--threads", "1", "--kernels", "exact"]
    if prefill:
        cmd += ["--prefill", str(prefill)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{' '.join(cmd[:3])} ... failed:\n{r.stderr}")
    return st.read(out)[0]["logits"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--edge0", default=os.path.join(ROOT, "build", "edge0"))
    ap.add_argument("--keep", help="export into this folder (kept) instead of a temporary one")
    a = ap.parse_args()
    torch.set_grad_enabled(False)
    fails = []

    def bound(what, r, limit):
        if not r <= limit:
            fails.append(f"{what}: {r:.3e} > {limit:.0e}")

    model = fixture_with_mtp()
    gold = st.read(os.path.join(FIX, "golden.safetensors"))[0]
    long = st.read(os.path.join(FIX, "golden_long.safetensors"))[0]
    fix_names = set(st.read_header(os.path.join(FIX, "hf", "model.safetensors"))[0])
    mtp_ref = {n for n in st.read_header(os.path.join(MTP_HF, "model.safetensors"))[0] if n.startswith("mtp.")}

    def norm_experts(names, E):  # mtp expert names with the expert index cut to < E
        out = set()
        for n in names:
            s = n.split(".")
            if "experts" in s and int(s[s.index("experts") + 1]) >= E:
                continue
            out.add(n)
        return out

    with tempfile.TemporaryDirectory() as tmp:
        base = a.keep or tmp
        os.makedirs(base, exist_ok=True)
        for dtype in ("bf16", "f32"):
            dst = export.export(model, os.path.join(base, f"export-{dtype}"), dtype)
            print(f"== {dtype}: {dst}")
            back = qwen35.load_hf(dst)  # strict
            diff = max(float((p - back.state_dict()[n]).abs().max()) for n, p in model.state_dict().items())
            print(f"  read back by qwen35.load_hf: largest difference {diff:g}")
            if diff:
                fails.append(f"{dtype} export read back differs by {diff}")
            names = set(st.read_header(os.path.join(dst, "model.safetensors"))[0])
            main_names = {n for n in names if not n.startswith("mtp.")}
            mtp_names = {n for n in names if n.startswith("mtp.")}
            same_main = main_names == fix_names
            same_mtp = norm_experts(mtp_names, 4) == mtp_ref
            print(f"  tensor names: main model = fixture hf/: {same_main}; "
                  f"{len(mtp_names)} mtp.* = tests/data/mtp/hf's (experts 0-3 there): {same_mtp}")
            if not (same_main and same_mtp):
                fails.append(f"{dtype}: names differ (main {sorted(main_names ^ fix_names)[:4]}, "
                             f"mtp {sorted(norm_experts(mtp_names, 4) ^ mtp_ref)[:4]})")
            for label, g, prefill in (("golden", gold, 0), ("golden, --prefill 12", gold, 12),
                                      ("golden_long, --prefill 100", long, 100)):
                ids = g["input_ids"].astype(np.int64)
                mine = back(torch.as_tensor(ids))["logits"][0].numpy()
                e0 = edge0_logits(a.edge0, dst, ids, prefill, os.path.join(tmp, "logits.safetensors"))
                r_mine, r_gold, r_mg = st.rel(e0, mine), st.rel(e0, g["logits"]), st.rel(mine, g["logits"])
                print(f"  {label}: edge0 vs qwen35.py {r_mine:.3e}, edge0 vs golden {r_gold:.3e}, "
                      f"qwen35.py vs golden {r_mg:.3e}")
                bound(f"{dtype} {label} edge0 vs qwen35.py", r_mine, 1e-4)
                bound(f"{dtype} {label} edge0 vs golden", r_gold, 1e-4)
            # the MTP block runs on what was read back
            h = back(torch.as_tensor(gold["input_ids"].astype(np.int64)))["hidden"]
            m = back.forward_mtp(h[:, :-1], torch.as_tensor(gold["input_ids"][1:].astype(np.int64))[None])
            print(f"  MTP logits {tuple(m['logits'].shape)}, finite: {bool(torch.isfinite(m['logits']).all())}")
        dst = os.path.join(base, "export-bf16")
        for what, path in (("export-bf16", dst), ("tests/data/mtp/model-F32.gguf", MTP_GGUF)):
            r = subprocess.run([a.edge0, "info", path], capture_output=True, text=True)
            print(f"== edge0 info {what} (rc {r.returncode}):")
            print("  " + "\n  ".join((r.stdout + r.stderr).strip().splitlines()))
    # edge0's MTP test checkpoint (names llama.cpp's converter accepted) loads here, strictly
    ref = qwen35.load_hf(MTP_HF)
    print(f"tests/data/mtp/hf read by qwen35.load_hf (strict): ok, {ref.cfg.mtp_num_hidden_layers} MTP layer")
    if fails:
        print("FAIL: " + "; ".join(fails))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

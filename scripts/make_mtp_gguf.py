#!/usr/bin/python3
"""Remakes tests/data/mtp: a small Qwen3.5-MoE checkpoint with its
multi-token-prediction (MTP) block, and the GGUF files llama.cpp's own tools
make of it (issue 36).

    /usr/bin/python3 scripts/make_mtp_gguf.py --llama LLAMA [--quantize BIN] [--out DIR]

LLAMA: llama.cpp's source, a tree or a bare git directory (the peer kit's
source, ../shared/peer/README.md); only convert_hf_to_gguf.py, conversion/
and gguf-py/ are used. BIN: llama-quantize built from the same source
(cmake, target llama-quantize; the peer kit's build_llama.sh builds it).
Needs Debian's python3-torch, python3-numpy, python3-yaml and python3-tqdm.

The checkpoint (DIR/hf, Qwen3_5MoeForCausalLM, bf16) is
../shared/fixtures/qwen35moe/hf cut down so that its GGUF files stay small:
the fixture's 4 layers (3 DeltaNet + 1 attention, heads unchanged) with the
hidden width cut from 128 to 32, the first 4 of its 16 experts (top-2) and
the first 32 of 128 expert and shared-expert rows, every weight sliced from
the fixture's. Added to it, as the published Qwen3.5 / 3.6 checkpoints
carry it (`mtp_num_hidden_layers: 1`): mtp.fc [H, 2H],
mtp.pre_fc_norm_embedding / pre_fc_norm_hidden / norm [H] and mtp.layers.0,
a full-attention decoder layer with its MoE (per-expert tensors, as the
main layers) and shared expert, with seeded random values (norms
zero-centred, multiples of 2^-7 as the fixture's). Its tokenizer is the
first 1021 ids of Qwen3's byte-level BPE (assets/qwen3-tokenizer) with the
merges among them, and <|endoftext|> <|im_start|> <|im_end|> as 1021-1023
(eos <|im_end|>), with the Qwen3.5 chat template.

GGUF files, all by convert_hf_to_gguf.py (then llama-quantize for Q4_0):
  model-F32.gguf, model-Q8_0.gguf   default options: the MTP block is blk.4
  model-Q4_0.gguf                   llama-quantize model-F32.gguf ... Q4_0
  model-*-nomtp.gguf                the same with --no-mtp (the reference)
  draft-Q8_0.gguf                   --mtp: the MTP block alone, a draft file
The script checks that every tensor of each -nomtp file is in the MTP file
with the same type, shape and bytes.

transformers is not packaged for Debian 12; the converter imports it only
for AutoConfig (it reads config.json itself when that fails, which the
stand-in below makes it do) and AutoTokenizer (the stand-in reads
tokenizer.json: vocabulary and added tokens). The converter identifies the
pre-tokenizer by hashing the full tokenizer's ids of a test text, which a
cut vocabulary cannot reproduce: the stand-in answers "qwen2", the name the
converter gives Qwen3's tokenizer, after checking that tokenizer.json's
split regex is that tokenizer's. Debian 12's torch (1.13) has no fp8
dtypes, which the converter names in tables only: placeholders stand in
(this checkpoint is bf16).
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared"))

H, E, TOPK, I, IS = 32, 4, 2, 32, 32  # the cut model's widths
N_BPE = 1021                           # BPE ids kept; 3 special tokens follow
SEED = 36
QWEN_SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
              "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


# ---- safetensors (bf16 kept as uint16) ----------------------------------------
def st_read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, v in hdr.items():
        if name == "__metadata__":
            continue
        assert v["dtype"] == "BF16", name
        a, b = v["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=np.uint16).reshape(v["shape"])
    return out


def st_write(path, tensors):
    hdr, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name in sorted(tensors):
        b = np.ascontiguousarray(tensors[name]).tobytes()
        hdr[name] = {"dtype": "BF16", "shape": list(tensors[name].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def bf16(x):
    """f32 values (exactly representable ones stay exact) as bf16 bits, rounded to nearest even."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


# ---- the checkpoint -----------------------------------------------------------
def cut(name, t, cfg):
    """The fixture tensor `name` cut to the small widths (rows / columns by role)."""
    hid = cfg["hidden_size"]
    s = name.split(".")
    if name in ("lm_head.weight", "model.embed_tokens.weight"):
        return t[:, :H]
    if s[-1] == "weight" and s[-2] in ("norm", "input_layernorm", "post_attention_layernorm") \
            and "linear_attn" not in s and "self_attn" not in s:
        assert t.shape == (hid,), name
        return t[:H]
    if ".mlp.experts." in name:
        e = int(s[-3])
        if e >= E:
            return None
        return t[:H, :I] if s[-2] == "down_proj" else t[:I, :H]
    if name.endswith("mlp.gate.weight"):
        return t[:E, :H]
    if ".shared_expert." in name:
        return t[:H, :IS] if s[-2] == "down_proj" else t[:IS, :H]
    if name.endswith("shared_expert_gate.weight"):
        return t[:, :H]
    if name.endswith(("out_proj.weight", "o_proj.weight")):
        return t[:H, :]
    if name.endswith(("in_proj_qkv.weight", "in_proj_z.weight", "in_proj_a.weight", "in_proj_b.weight",
                      "q_proj.weight", "k_proj.weight", "v_proj.weight")):
        return t[:, :H]
    return t  # conv1d, A_log, dt_bias, linear_attn.norm, q_norm, k_norm: no hidden axis


def mtp_tensors(cfg, rng):
    """The MTP block in the published checkpoints' names and shapes, seeded random values."""
    hd, nh, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def mat(rows, cols):
        return bf16(rng.normal(0.0, 0.5 / np.sqrt(cols), size=(rows, cols)))

    def norm(n):  # zero-centred, multiples of 2^-7 (1 + w exact in bf16)
        return bf16(rng.integers(-32, 33, size=n) / 128.0)

    p = "mtp.layers.0."
    t = {
        "mtp.fc.weight": mat(H, 2 * H),
        "mtp.pre_fc_norm_embedding.weight": norm(H),
        "mtp.pre_fc_norm_hidden.weight": norm(H),
        "mtp.norm.weight": norm(H),
        p + "input_layernorm.weight": norm(H),
        p + "post_attention_layernorm.weight": norm(H),
        p + "self_attn.q_proj.weight": mat(2 * nh * hd, H),  # per head: query, then gate
        p + "self_attn.k_proj.weight": mat(nkv * hd, H),
        p + "self_attn.v_proj.weight": mat(nkv * hd, H),
        p + "self_attn.o_proj.weight": mat(H, nh * hd),
        p + "self_attn.q_norm.weight": norm(hd),
        p + "self_attn.k_norm.weight": norm(hd),
        p + "mlp.gate.weight": mat(E, H),
        p + "mlp.shared_expert.gate_proj.weight": mat(IS, H),
        p + "mlp.shared_expert.up_proj.weight": mat(IS, H),
        p + "mlp.shared_expert.down_proj.weight": mat(H, IS),
        p + "mlp.shared_expert_gate.weight": mat(1, H),
    }
    for e in range(E):
        t[p + f"mlp.experts.{e}.gate_proj.weight"] = mat(I, H)
        t[p + f"mlp.experts.{e}.up_proj.weight"] = mat(I, H)
        t[p + f"mlp.experts.{e}.down_proj.weight"] = mat(H, I)
    return t


def make_tokenizer(dst):
    with open(os.path.join(ROOT, "assets", "qwen3-tokenizer", "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    model = tok["model"]
    vocab = {k: v for k, v in model["vocab"].items() if v < N_BPE}
    assert len(vocab) == N_BPE
    # byte-level BPE: merge k makes id 256 + k
    merges = model["merges"][:N_BPE - 256]
    for k, m in enumerate(merges):
        assert vocab["".join(m)] == 256 + k, m
    model["vocab"], model["merges"] = vocab, merges
    names = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok["added_tokens"] = [{"id": N_BPE + i, "content": c, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": True} for i, c in enumerate(names)]
    with open(os.path.join(dst, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(SHARED, "tokenizers", "qwen35", "chat_template.jinja"), encoding="utf-8") as f:
        template = f.read()
    tc = {"add_bos_token": False, "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
          "model_max_length": 1024, "tokenizer_class": "Qwen2Tokenizer", "chat_template": template,
          "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"}
                                   for a in tok["added_tokens"]}}
    with open(os.path.join(dst, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, ensure_ascii=False, indent=1)


def make_checkpoint(dst):
    src = os.path.join(SHARED, "fixtures", "qwen35moe", "hf")
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["architectures"] == ["Qwen3_5MoeForCausalLM"] and cfg["hidden_size"] == 128
    w = {}
    for name, t in st_read(os.path.join(src, "model.safetensors")).items():
        c = cut(name, t, cfg)
        if c is not None:
            w[name] = c
    w.update(mtp_tensors(cfg, np.random.default_rng(SEED)))
    cfg.update(hidden_size=H, num_experts=E, num_experts_per_tok=TOPK, moe_intermediate_size=I,
               shared_expert_intermediate_size=IS, intermediate_size=4 * H, eos_token_id=N_BPE + 2,
               mtp_num_hidden_layers=1, mtp_use_dedicated_embeddings=False)
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    st_write(os.path.join(dst, "model.safetensors"), w)
    make_tokenizer(dst)


# ---- running the converter ----------------------------------------------------
STANDIN = '''"""A stand-in for the two transformers classes convert_hf_to_gguf.py uses
(scripts/make_mtp_gguf.py says why)."""
import json, os


class AutoConfig:
    @staticmethod
    def from_pretrained(path, **kw):
        raise RuntimeError("stand-in: no transformers here, read config.json")


class _Added:
    def __init__(self, a):
        self.content, self.special, self.normalized = a["content"], a["special"], a["normalized"]


class _Tokenizer:
    def __init__(self, path):
        with open(os.path.join(path, "tokenizer.json"), encoding="utf-8") as f:
            tok = json.load(f)
        self.split_regex = tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
        self.vocab = dict(tok["model"]["vocab"])
        self.added_tokens_decoder = {a["id"]: _Added(a) for a in tok["added_tokens"]}
        self._added = {a["content"]: a["id"] for a in tok["added_tokens"]}
        self.vocab.update(self._added)

    def get_added_vocab(self):
        return dict(self._added)

    def encode(self, text, add_special_tokens=False):
        if text in self._added:
            return [self._added[text]]
        raise NotImplementedError("stand-in tokenizer: only added tokens are encoded")

    def decode(self, ids):
        return "".join(self.added_tokens_decoder[i].content for i in ids)


class AutoTokenizer:
    @staticmethod
    def from_pretrained(path, **kw):
        return _Tokenizer(path)
'''

DRIVER = '''import runpy, sys
QWEN_SPLIT = sys.argv[3]
sys.path.insert(0, sys.argv[1])   # the stand-in transformers
sys.path.insert(0, sys.argv[2])   # llama.cpp's converter
import torch
for n in ("float8_e4m3fn", "float8_e5m2"):  # torch < 2.1 (Debian 12 has 1.13): only dict keys here
    if not hasattr(torch, n):
        setattr(torch, n, type(n, (), {})())
import conversion.base as base

def vocab_base_pre(self, tokenizer):
    assert tokenizer.split_regex == QWEN_SPLIT, "not Qwen's pre-tokenizer"
    return "qwen2"

base.TextModel.get_vocab_base_pre = vocab_base_pre
script = sys.argv[2] + "/convert_hf_to_gguf.py"
sys.argv = [script] + sys.argv[4:]
runpy.run_path(script, run_name="__main__")
'''


def llama_source(llama, tmp):
    if os.path.isfile(os.path.join(llama, "convert_hf_to_gguf.py")):
        return llama
    dst = os.path.join(tmp, "llama")
    os.makedirs(dst)
    arc = subprocess.run(["git", "--git-dir", llama, "archive", "HEAD", "convert_hf_to_gguf.py", "gguf-py",
                          "conversion"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", dst], input=arc, check=True)
    return dst


def convert(src, hf, out, *opts):
    tmp = os.path.dirname(hf)
    stand = os.path.join(tmp, "standin")
    if not os.path.isdir(stand):
        os.makedirs(os.path.join(stand, "transformers"))
        with open(os.path.join(stand, "transformers", "__init__.py"), "w") as f:
            f.write(STANDIN)
        with open(os.path.join(tmp, "driver.py"), "w") as f:
            f.write(DRIVER)
    cmd = [sys.executable, os.path.join(tmp, "driver.py"), stand, src, QWEN_SPLIT, hf, "--outfile", out, *opts]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"convert_hf_to_gguf.py {' '.join(opts)} failed:\n{r.stderr[-4000:]}")


# ---- checks -------------------------------------------------------------------
def gguf_tensors(path, gguf):
    r = gguf.GGUFReader(path)
    return {t.name: (int(t.tensor_type), tuple(int(x) for x in t.shape), bytes(t.data.tobytes())) for t in r.tensors}


def check_pair(mtp, ref, gguf):
    a, b = gguf_tensors(mtp, gguf), gguf_tensors(ref, gguf)
    for name, v in b.items():
        if a.get(name) != v:
            sys.exit(f"{mtp}: tensor {name} differs from {ref}'s")
    extra = sorted(set(a) - set(b))
    assert extra and all(n.startswith("blk.4.") for n in extra), extra
    return len(extra)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama", required=True, help="llama.cpp source tree or bare git directory")
    ap.add_argument("--quantize", required=True, help="llama-quantize built from the same source")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "mtp"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = llama_source(os.path.abspath(a.llama), tmp)
        sys.path.insert(0, os.path.join(src, "gguf-py"))
        import gguf
        hf = os.path.join(tmp, "hf")
        make_checkpoint(hf)
        out = os.path.abspath(a.out)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        shutil.copytree(hf, os.path.join(out, "hf"))
        for typ in ("f32", "q8_0"):
            T = typ.upper()
            convert(src, hf, os.path.join(out, f"model-{T}.gguf"), "--outtype", typ)
            convert(src, hf, os.path.join(out, f"model-{T}-nomtp.gguf"), "--outtype", typ, "--no-mtp")
        convert(src, hf, os.path.join(out, "draft-Q8_0.gguf"), "--outtype", "q8_0", "--mtp")
        for suf in ("", "-nomtp"):
            r = subprocess.run([a.quantize, os.path.join(out, f"model-F32{suf}.gguf"),
                                os.path.join(out, f"model-Q4_0{suf}.gguf"), "Q4_0"], capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"llama-quantize failed:\n{r.stderr[-4000:]}")
        for T in ("F32", "Q8_0", "Q4_0"):
            n = check_pair(os.path.join(out, f"model-{T}.gguf"), os.path.join(out, f"model-{T}-nomtp.gguf"), gguf)
            print(f"model-{T}.gguf: every tensor of model-{T}-nomtp.gguf, byte for byte, and {n} of the MTP block")
        total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)
        print(f"{out}: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()

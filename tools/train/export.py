#!/usr/bin/python3
"""Writes a qwen35.Qwen35Moe as a Hugging Face folder that edge0 loads.

    export(model, dst, dtype="bf16", tokenizer=None)
    /usr/bin/python3 tools/train/export.py SRC DST [--dtype bf16|f32] [--tokenizer DIR]

SRC: an HF folder (config.json + safetensors, any layout qwen35.load_hf
reads) or a checkpoint train.py saved (a .pt file holding {"config": HF
config dict, "state_dict": ...}).

DST gets:
  config.json             flat, model_type qwen3_5_moe_text, architectures
                          Qwen3_5MoeForCausalLM (as transformers'
                          save_pretrained writes the fixture's hf/), plus
                          mtp_num_hidden_layers and
                          mtp_use_dedicated_embeddings false
  generation_config.json  eos / bos / pad ids when the config has them
  model.safetensors       one tensor per parameter under its HF name: per-
                          expert experts (model.layers.L.mlp.experts.E.
                          {gate,up,down}_proj.weight), norms as the
                          zero-centred w (the HF convention; edge0 adds the
                          1), conv1d [C, 1, K], mtp.* (fc, pre_fc_norm_
                          embedding, pre_fc_norm_hidden, layers.0.*, norm);
                          lm_head.weight only when not tied. bf16 (rounded
                          to nearest even) or f32; __metadata__ format pt.
  the tokenizer files of --tokenizer DIR, copied, when given.
The folder is written as DST.tmp and renamed when complete.
"""

import argparse
import json
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen35  # noqa: E402
import st  # noqa: E402

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "vocab.json",
                   "merges.txt", "special_tokens_map.json")


def export(model, dst, dtype="bf16", tokenizer=None):
    """Writes `model` to the folder dst (replaced if it exists). dtype: bf16
    or f32. tokenizer: a folder whose tokenizer files are copied."""
    if dtype not in ("bf16", "f32"):
        raise ValueError("dtype must be bf16 or f32")
    tmp = dst.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    cfg = model.cfg.to_hf()
    cfg["dtype"] = "bfloat16" if dtype == "bf16" else "float32"
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    gen = {k: cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if cfg.get(k) is not None}
    if gen:
        with open(os.path.join(tmp, "generation_config.json"), "w") as f:
            json.dump(gen, f, indent=2, sort_keys=True)
            f.write("\n")
    tensors = {name: t.detach().to("cpu", torch.float32).numpy() for name, t in model.state_dict().items()}
    st.write(os.path.join(tmp, "model.safetensors"), tensors, dtype="BF16" if dtype == "bf16" else "F32",
             metadata={"format": "pt"})
    if tokenizer:
        for fn in TOKENIZER_FILES:
            if os.path.exists(os.path.join(tokenizer, fn)):
                shutil.copyfile(os.path.join(tokenizer, fn), os.path.join(tmp, fn))
    shutil.rmtree(dst, ignore_errors=True)
    os.rename(tmp, dst)
    return dst


def load_any(src):
    """A Qwen35Moe from an HF folder or a train.py checkpoint (.pt)."""
    if os.path.isdir(src):
        return qwen35.load_hf(src)
    ck = torch.load(src, map_location="cpu")
    model = qwen35.Qwen35Moe(qwen35.Config(ck["config"]))
    model.load_state_dict(ck["state_dict"])
    return model.eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="HF folder or train.py checkpoint (.pt)")
    ap.add_argument("dst", help="output folder")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "f32"))
    ap.add_argument("--tokenizer", help="folder whose tokenizer files to copy")
    a = ap.parse_args()
    model = load_any(a.src)
    export(model, a.dst, a.dtype, a.tokenizer)
    n = sum(p.numel() for p in model.parameters())
    print(f"{a.dst}: {n / 1e6:.2f} M parameters ({a.dtype}), "
          f"MTP layers {model.cfg.mtp_num_hidden_layers}")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""The trained demo model's routing on held-out text, as a trace for
scripts/route_stats.py (issue 41: "its routing statistics ... printed by the
routing script of the real-routing issue"):

    /usr/bin/python3 tools/train/route_trace.py MODEL_DIR IDS.bin OUT.jsonl [--tokens N] [--window W]

MODEL_DIR: an HF export (assets/demo-model); IDS.bin: uint16 token ids (the
corpus's test split, tools/corpus/prepare.py). The first N ids (default
4096) run through the PyTorch reference (tools/train/qwen35.py, whose
routing edge0 matches: check_export.py) in windows of W (default 256), each
from an empty context, as a decode would see them one after another; each
MoE layer's top-k of each token is one JSONL line {"layer", "token",
"experts"}, tokens numbered across windows.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen35  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("ids")
    ap.add_argument("out")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--window", type=int, default=256)
    args = ap.parse_args()
    model = qwen35.load_hf(args.model)
    k = model.cfg.num_experts_per_tok
    ids = np.fromfile(args.ids, dtype="<u2")[: args.tokens].astype(np.int64)
    if len(ids) < args.window:
        raise SystemExit(f"{args.ids}: fewer than --window {args.window} ids")
    n = 0
    with open(args.out, "w") as f, torch.no_grad():
        for w0 in range(0, len(ids) - args.window + 1, args.window):
            out = model(torch.from_numpy(ids[w0:w0 + args.window]))
            for layer, r in enumerate(out["routers"]):
                top = r.float().topk(k, -1).indices.tolist()
                for t, ex in enumerate(top):
                    f.write(json.dumps({"layer": layer, "token": n + t, "experts": ex}) + "\n")
            n += args.window
    print(f"{args.out}: {n} tokens x {len(out['routers'])} MoE layers, top-{k} of {model.cfg.num_experts}")


if __name__ == "__main__":
    main()

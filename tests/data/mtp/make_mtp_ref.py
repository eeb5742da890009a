#!/usr/bin/python3
"""Writes tests/data/mtp/mtp_ref.safetensors: the PyTorch reference of the
multi-token-prediction (MTP) block of tests/data/mtp/hf, for test_mtp.

    /usr/bin/python3 tests/data/mtp/make_mtp_ref.py

The model is tools/train/qwen35.py's (float32, the recurrent Gated DeltaNet:
the form edge0 computes), loaded with its MTP block. For a fixed prompt of
N ids it writes
  input_ids    I32 [N]
  logits       F32 [N, V]      the main model's logits at every position
  mtp_logits   F32 [N - 1, V]  the MTP block's logits at positions 0..N-2:
               position t reads the main model's hidden state at t (after
               the final norm) and the embedding of ids[t + 1], and
               predicts ids[t + 2] (qwen35.py forward_mtp)
The tests compare edge0's MTP logits with these; they need no torch. Run
once; the committed file is the reference.
"""

import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import qwen35  # noqa: E402
import st  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
N = 40
SEED = 41


def main():
    model = qwen35.load_hf(os.path.join(HERE, "hf"))
    V = model.cfg.vocab_size
    rng = np.random.default_rng(SEED)
    ids = rng.integers(0, V - 3, size=N).astype(np.int64)  # ordinary tokens (the 3 last are special)
    with torch.no_grad():
        t = torch.as_tensor(ids)[None]
        out = model(t, deltanet="recurrent")
        mtp = model.forward_mtp(out["hidden"][:, :-1], t[:, 1:])
    st.write(os.path.join(HERE, "mtp_ref.safetensors"), {
        "input_ids": ids.astype(np.int32),
        "logits": out["logits"][0].numpy().astype(np.float32),
        "mtp_logits": mtp["logits"][0].numpy().astype(np.float32),
    }, metadata={"source": "tests/data/mtp/make_mtp_ref.py", "deltanet": "recurrent"})


if __name__ == "__main__":
    main()

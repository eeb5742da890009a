#!/usr/bin/python3
"""Checks qwen35.py against the transformers reference of the qwen35moe
fixture (shared/fixtures/README.md).

    nice -n 19 /usr/bin/python3 tools/train/check_fixture.py [--fixture DIR]

Loads DIR/hf (and DIR/hf-fused, which must give the same logits), runs the
golden input_ids through both DeltaNet forms (the recurrent loop and the
chunked form) and prints the relative L2 (||out - ref|| / ||ref||) of the
logits, every hidden state, every MoE block's input, output and router
logits (in the model, and the block alone on the reference input), then the
logits of golden_long (160 tokens, three 64-token chunks). Exits 1 when any
logits exceed 1e-4 or an MoE block alone exceeds 1e-5 (the fixture
README's bounds for f32 reference arithmetic).
"""

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen35  # noqa: E402
import st  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "fixtures", "qwen35moe"))
LOGITS_MAX, MOE_MAX = 1e-4, 1e-5


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixture", default=DEFAULT)
    a = ap.parse_args()
    torch.set_grad_enabled(False)
    fails = []

    def bound(what, r, limit):
        if not r <= limit:
            fails.append(f"{what}: {r:.3e} > {limit:.0e}")

    model = qwen35.load_hf(os.path.join(a.fixture, "hf"))
    gold, meta = st.read(os.path.join(a.fixture, "golden.safetensors"))
    ids = torch.as_tensor(gold["input_ids"].astype(np.int64))
    print(f"golden.safetensors: {ids.numel()} tokens, transformers {meta.get('transformers')}")

    runs = {}
    for mode in ("recurrent", "chunked"):
        trace = {}
        out = model(ids, deltanet=mode, trace=trace)
        runs[mode] = (out, trace)
        r = st.rel(out["logits"][0], gold["logits"])
        print(f"  logits ({mode} DeltaNet): {r:.3e}")
        bound(f"golden logits ({mode})", r, LOGITS_MAX)
    out_r, out_c = runs["recurrent"][0]["logits"], runs["chunked"][0]["logits"]
    print(f"  chunked vs recurrent logits: {st.rel(out_c, out_r):.3e}")

    out, trace = runs["chunked"]
    hs = gold["hidden_states"]
    n = hs.shape[0]
    for i in range(n):
        # transformers stores the embeddings, every layer's output but the
        # last, and the last layer's output after the final norm
        if i < n - 1:
            what = "embeddings" if i == 0 else f"layer {i - 1} output"
            print(f"  hidden_states[{i}] ({what}): {st.rel(trace['hidden_states'][i][0], hs[i]):.3e}")
        else:
            print(f"  hidden_states[{i}] (layer {i - 1} output after the final norm): "
                  f"{st.rel(out['hidden'][0], hs[i]):.3e}")
    for L, lt in enumerate(trace["layers"]):
        block = model.model.layers[L].mlp
        alone, router_alone = block(torch.as_tensor(gold[f"moe.{L}.in"]))
        r_alone = st.rel(alone, gold[f"moe.{L}.out"])
        print(f"  layer {L} ({model.cfg.layer_types[L]}): moe.in {st.rel(lt['moe_in'][0], gold[f'moe.{L}.in']):.3e}"
              f"  moe.out {st.rel(lt['moe_out'][0], gold[f'moe.{L}.out']):.3e}"
              f"  router_logits {st.rel(lt['router'], gold[f'router_logits.{L}']):.3e}"
              f"  | block alone: out {r_alone:.3e}, router_logits {st.rel(router_alone, gold[f'router_logits.{L}']):.3e}")
        bound(f"moe.{L} alone", r_alone, MOE_MAX)

    fused = os.path.join(a.fixture, "hf-fused")
    if os.path.isdir(fused):
        fm = qwen35.load_hf(fused)
        r = st.rel(fm(ids)["logits"][0], gold["logits"])
        print(f"  hf-fused layout: logits {r:.3e}")
        bound("hf-fused logits", r, LOGITS_MAX)

    # the two DeltaNet forms must also agree in their gradients (training
    # uses the chunked one)
    with torch.enable_grad():
        w = torch.randn(out["logits"].shape, generator=torch.Generator().manual_seed(0))
        grads = {}
        for mode in ("recurrent", "chunked"):
            model.zero_grad()
            (model(ids, deltanet=mode)["logits"] * w).sum().backward()
            grads[mode] = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        print(f"  chunked vs recurrent gradients (every parameter): {st.rel(grads['chunked'], grads['recurrent']):.3e}")
        model.zero_grad()

    gl, meta = st.read(os.path.join(a.fixture, "golden_long.safetensors"))
    ids = torch.as_tensor(gl["input_ids"].astype(np.int64))
    print(f"golden_long.safetensors: {ids.numel()} tokens")
    long = {}
    for mode in ("recurrent", "chunked"):
        long[mode] = model(ids, deltanet=mode)["logits"][0]
        r = st.rel(long[mode], gl["logits"])
        print(f"  logits ({mode} DeltaNet): {r:.3e}")
        bound(f"golden_long logits ({mode})", r, LOGITS_MAX)
    print(f"  chunked vs recurrent logits: {st.rel(long['chunked'], long['recurrent']):.3e}")

    if fails:
        print("FAIL: " + "; ".join(fails))
        return 1
    print(f"ok: every logits within {LOGITS_MAX:.0e}, every MoE block alone within {MOE_MAX:.0e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

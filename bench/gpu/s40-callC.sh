#!/bin/bash
# For session 40 (written in 39, which was lent no machine), after s40-callA/B on the same warm
# machine (llama-bench in /tmp/peer/repack), if call A did not get to it: the Qwen3-30B-A3B shape's GPU same run, not run since session 36 (0.89x / 0.71x / 0.65x decode at 8
# GiB, 16 GiB, resident; its edge0 runs then peaked 43-45 MiB over the budgets, fixed since by one
# allocation a session, never checked on this shape). llama.cpp's -ncmoe: session 36's best under
# each budget and the next one up.
#   tar -xJf .peer/gpu.tar.xz && DL=330 bash .gpu/s40-callC.sh      carry [".peer"]
. "$(dirname "$0")/prologue.sh" 330
f=/dev/shm/q30.gguf
[ -s $f ] || .gpu/bin/edge0 synth --shape qwen3-30b-a3b --format gguf $f 2>&1 | tail -1
echo "=== same run q30 $(el)"
[ -x /tmp/peer/repack/llama-bench ] || { echo "no llama-bench"; exit 0; }
NCMOE="8:32,34 16:7,9" timeout $(( DL - 10 - ($(date +%s) - T0) )) bash scripts/gpu_same_run.sh .gpu/bin/edge0 \
    /tmp/peer/repack $f 8 16 2>&1 | grep -E "^===|^\||^model|peak|decode_tok_s|prefill_tok_s|vram_hit" || true
echo "=== end $(el)"

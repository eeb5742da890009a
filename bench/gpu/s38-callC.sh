#!/bin/bash
# Session 38, after s38-callB.sh on the same warm machine (llama.cpp built in /tmp/peer): the same
# run on the 30B shape with Qwen3-30B-A3B's measured routing (synth --route-profile qwen3-30b),
# then on uniform routing if the time allows. The 35B files go first (the disk holds 64 GiB).
#   tar -xJf .peer/gpu.tar.xz && DL=560 bash .gpu/s38-callC.sh      carry [".peer"]
. "$(dirname "$0")/prologue.sh" 560
[ "${SEG:-0}" = 1 ] && export E0_GPU_SEGMENTS=1
echo "E0_GPU_SEGMENTS=${E0_GPU_SEGMENTS:-unset}"
rm -f /root/q36.gguf /root/q36p.gguf
[ -x /tmp/peer/repack/llama-bench ] || { echo "llama.cpp is not built here: $(tail -3 /tmp/peer.log 2>&1)"; exit 0; }
for m in q30p:--route-profile=qwen3-30b q30:; do
    n=${m%%:*} a=${m#*:}
    left 200 || break
    [ -s /root/$n.gguf ] || .gpu/bin/edge0 synth --shape qwen3-30b-a3b --format gguf ${a/=/ } /root/$n.gguf > /tmp/synth-$n.log 2>&1
    echo "=== same run $n ${a/=/ }, budgets 8 16 resident $(el)"
    timeout $(( DL - 10 - ($(date +%s) - T0) )) bash scripts/gpu_same_run.sh .gpu/bin/edge0 /tmp/peer/repack /root/$n.gguf 8 16 2>&1 |
        grep -vE "^edge0 bench: |^ *\"|^[{}]|^build_commit|^\"|ggml_cuda_init|Device 0" || true
    rm -f /root/$n.gguf
done
echo "=== end $(el)"

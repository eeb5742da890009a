#!/bin/bash
# For session 37, right after s37-callA.sh on the same warm machine (its files /root/q36.gguf and
# /root/q30.gguf in place): llama.cpp's CUDA build started (setsid; ~4.5 min), then, once it is
# there, the GPU same run of both shapes (scripts/gpu_same_run.sh, VRAM 8 and 16 GiB and all
# resident) with whatever call A kept. Two calls if the build outlives this one:
#   tar -xJf .peer/gpu.tar.xz && DL=560 bash .gpu/s37-callB.sh      carry [".peer"]
#   (.peer: gpu.tar.xz, llama-src.tar.xz, build_llama.sh; pack bench/gpu/prologue.sh into .gpu too)
. "$(dirname "$0")/prologue.sh" 560
if [ ! -e /tmp/peer.started ]; then
    touch /tmp/peer.started
    mkdir -p /tmp/llama && tar -xJf .peer/llama-src.tar.xz -C /tmp/llama
    CUDA=1 setsid nohup nice -n 19 bash .peer/build_llama.sh /tmp/llama /tmp/peer > /tmp/peer.log 2>&1 < /dev/null &
fi
# on a fresh machine (call A's files gone) the two checkpoints are made while llama.cpp builds
for m in q36:qwen3.6-35b-a3b q30:qwen3-30b-a3b; do
    [ -s /root/${m%%:*}.gguf ] || .gpu/bin/edge0 synth --shape ${m#*:} --format gguf /root/${m%%:*}.gguf > /tmp/synth-${m%%:*}.log 2>&1
done
while [ ! -x /tmp/peer/repack/llama-bench ] && left 240; do sleep 5; done
echo "=== llama build: $(ls /tmp/peer/repack 2>/dev/null | grep -c llama-bench) $(tail -1 /tmp/peer.log | cut -c1-150) $(el)"
[ -x /tmp/peer/repack/llama-bench ] || exit 0
for m in q36 q30; do
    left 150 || break
    [ -s /root/$m.gguf ] || continue
    echo "=== same run $m, budgets 8 16 resident $(el)"
    timeout $(( DL - 10 - ($(date +%s) - T0) )) bash scripts/gpu_same_run.sh .gpu/bin/edge0 /tmp/peer/repack /root/$m.gguf 8 16 2>&1 |
        grep -vE "^edge0 bench: |^ *\"|^[{}]|^build_commit|^\"|ggml_cuda_init|Device 0" || true
done
echo "=== end $(el)"

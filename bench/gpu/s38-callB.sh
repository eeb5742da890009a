#!/bin/bash
# Session 38, right after s37-callA.sh on the same warm machine (llama.cpp's CUDA build started
# there; /root/q36.gguf and /root/q36p.gguf in place): the GPU same run (scripts/gpu_same_run.sh,
# VRAM 8 and 16 GiB and all resident) first on the 35B shape with Qwen3.6's measured routing
# (synth --route-profile qwen36: what a user's cache sees; llama.cpp's -ncmoe computes every
# routed expert wherever it lives, so its speed does not depend on the routing), then on uniform
# routing (the worst case for any cache). SEG=1 runs edge0 with $E0_GPU_SEGMENTS=1.
#   tar -xJf .peer/gpu.tar.xz && DL=560 bash .gpu/s38-callB.sh      carry [".peer"]
. "$(dirname "$0")/prologue.sh" 560
[ "${SEG:-0}" = 1 ] && export E0_GPU_SEGMENTS=1
echo "E0_GPU_SEGMENTS=${E0_GPU_SEGMENTS:-unset}"
if [ ! -e /tmp/peer.started ]; then
    touch /tmp/peer.started
    mkdir -p /tmp/llama && tar -xJf .peer/llama-src.tar.xz -C /tmp/llama
    CUDA=1 setsid nohup nice -n 19 bash .peer/build_llama.sh /tmp/llama /tmp/peer > /tmp/peer.log 2>&1 < /dev/null &
fi
[ -s /root/q36p.gguf ] || .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf --route-profile qwen36 \
    /root/q36p.gguf > /tmp/synth-q36p.log 2>&1
while [ ! -x /tmp/peer/repack/llama-bench ] && left 240; do sleep 5; done
echo "=== llama build: $(ls /tmp/peer/repack 2>/dev/null | grep -c llama-bench) $(tail -1 /tmp/peer.log | cut -c1-150) $(el)"
[ -x /tmp/peer/repack/llama-bench ] || exit 0
for m in ${MODELS:-q36p q36}; do
    left 150 || break
    [ -s /root/$m.gguf ] || continue
    echo "=== same run $m, budgets 8 16 resident $(el)"
    timeout $(( DL - 10 - ($(date +%s) - T0) )) bash scripts/gpu_same_run.sh .gpu/bin/edge0 /tmp/peer/repack /root/$m.gguf 8 16 2>&1 |
        grep -vE "^edge0 bench: |^ *\"|^[{}]|^build_commit|^\"|ggml_cuda_init|Device 0" || true
done
echo "=== end $(el)"

#!/bin/bash
# Session 38, call B, right after s38-callA.sh on the same warm machine (llama.cpp's CUDA build
# and /root/q36.gguf, /root/q36p.gguf made there): the GPU same run (scripts/gpu_same_run.sh, VRAM
# 8 and 16 GiB and all resident; edge0 with --warm-up as llama-bench warms up) on the 35B shape
# with Qwen3.6's measured routing (synth --route-profile qwen36: what a user's cache sees;
# llama.cpp's -ncmoe computes every routed expert where it lives, so its speed does not depend on
# the routing); then the capped condition on the uniform file (scripts/gpu_capped_run.sh: VRAM
# 8 GiB, a 12 GiB cgroup, pages dropped; edge0 cold, and with --warm-up as llama-bench); then
# the uniform same run if time is left. SEG=1: edge0 with $E0_GPU_SEGMENTS=1.
#   tar -xJf .peer/gpu.tar.xz && DL=560 SEG=? bash .gpu/s38-callB.sh      carry [".peer"]
. "$(dirname "$0")/prologue.sh" 560
export E0_GPU_SEGMENTS=${SEG:-0}
echo "E0_GPU_SEGMENTS=$E0_GPU_SEGMENTS"
if [ ! -e /tmp/peer.started ]; then
    touch /tmp/peer.started
    mkdir -p /tmp/llama && tar -xJf .peer/llama-src.tar.xz -C /tmp/llama
    CUDA=1 setsid nohup nice -n 19 bash .peer/build_llama.sh /tmp/llama /tmp/peer > /tmp/peer.log 2>&1 < /dev/null &
fi
for m in q36: q36p:--route-profile=qwen36; do # on a fresh machine (call A's files gone)
    n=${m%%:*} a=${m#*:}
    [ -e /tmp/$n.done ] || [ -e /tmp/synth.started ] ||
        { .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf ${a/=/ } /root/$n.gguf > /tmp/synth-$n.log 2>&1; touch /tmp/$n.done; }
done
while { [ ! -x /tmp/peer/repack/llama-bench ] || [ ! -e /tmp/q36p.done ]; } && left 300; do sleep 5; done
echo "=== llama build: $(ls /tmp/peer/repack 2>/dev/null | grep -c llama-bench) $(tail -1 /tmp/peer.log | cut -c1-150); q36p $(cat /tmp/q36p.done) $(el)"
[ -x /tmp/peer/repack/llama-bench ] || exit 0
same() {
    echo "=== same run $1, budgets 8 16 resident $(el)"
    timeout $(( DL - 10 - ($(date +%s) - T0) )) bash scripts/gpu_same_run.sh .gpu/bin/edge0 /tmp/peer/repack /root/$1.gguf 8 16 2>&1 |
        grep -vE "^edge0 bench: |^ *\"|^[{}]|^build_commit|^\"|ggml_cuda_init|Device 0" || true
}
[ -s /root/q36p.gguf ] && left 250 && same q36p
if left 200; then
    echo "=== capped q36 $(el)"
    timeout $(( DL - 10 - ($(date +%s) - T0) )) bash scripts/gpu_capped_run.sh .gpu/bin/edge0 /tmp/peer/repack /root/q36.gguf 8 12G 2>&1 | grep -vE "^ *\"|^[{}]"
fi
left 250 && same q36
echo "=== end $(el)"

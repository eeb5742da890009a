#!/bin/bash
# Issue 40's many-core same run on the device machine's host (16 cores, the GPU unused): both
# shapes (`edge0 synth --format gguf`, one file for both engines), warm, prefill 512 and decode
# 64, at 2, 4, 8 and 16 threads, edge0 (`bench --gpu off`) against llama.cpp (`llama-bench -ngl 0`
# with CUDA_VISIBLE_DEVICES empty: its CPU backend, weight repacking on, its default), alternated
# per thread count. Written in session 34, not run: it needs a llama.cpp build in /tmp/peer (a
# call before it, e.g. bench/gpu/s34-callA.sh, starts one) and the synth files that call leaves
# (/root/q36.gguf, /dev/shm/q30.gguf; made here if absent). carry [".peer"]:
#   tar -xJf .peer/gpu.tar.xz && DL=570 bash bench/cpu16/scaling-call.sh
# FILES="/root/q36.gguf" (or /dev/shm/q30.gguf) runs one shape, for a call of its own.
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-570}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
lscpu | grep -E "Model name|^CPU\(s\)|Thread|NUMA node\(s\)"; free -g | head -2
while [ ! -x /tmp/peer/repack/llama-bench ] && left 300; do sleep 5; done
[ -x /tmp/peer/repack/llama-bench ] || { echo "no llama.cpp build in /tmp/peer"; tail -5 /tmp/peer.log; exit 1; }
[ -s /root/q36.gguf ] || .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf /root/q36.gguf > /dev/null 2>&1
FILES=${FILES:-/root/q36.gguf /dev/shm/q30.gguf}
[[ $FILES != *q30* || -s /dev/shm/q30.gguf ]] || .gpu/bin/edge0 synth --shape qwen3-30b-a3b --format gguf /dev/shm/q30.gguf > /dev/null 2>&1
cat $FILES > /dev/null # warm: both files in the page cache
for f in $FILES; do
    for t in 2 4 8 16; do
        left 60 || break 2
        echo "=== $(basename $f) $t threads: edge0 $(el)"
        timeout 240 .gpu/bin/edge0 bench $f --gpu off --threads $t --prefill 512 --decode 64 --skip-cold 2>&1 |
            grep -E "prefill [0-9]|decode [0-9]|DRAM|touched"
        echo "=== $(basename $f) $t threads: llama.cpp $(el)"
        CUDA_VISIBLE_DEVICES= timeout 240 /tmp/peer/repack/llama-bench -m $f -ngl 0 -t $t -p 512 -n 64 -r 1 -o md 2>&1 |
            grep -E "^\|"
    done
done
echo "=== end $(el)"

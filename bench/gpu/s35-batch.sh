#!/bin/bash
# For session 35 (written in 34, not run): `serve --parallel 4` on the GPU, the 35B shape all
# resident, 1 and 4 streaming clients (scripts/load.py), with the slots decoded one after another
# (the default) and in one batched pass ($E0_GPU_BATCH=1, bit-identical to each alone in
# test_gpu's test_batch_decode since session 33). If the batched pass wins at 4 clients, make it
# the default (model/gpu_glue.c session_gpu_batch_on). Needs /root/q36.gguf (call A leaves it).
#   DL=300 bash bench/gpu/s35-batch.sh     (after tar -xJf .peer/gpu.tar.xz)
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
el() { echo "($(( $(date +%s) - T0 )) s)"; }
f=/root/q36.gguf
[ -s $f ] || { f=/dev/shm/q36.gguf; [ -s $f ] || .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf $f > /dev/null 2>&1; }
for b in 0 1; do
    echo "=== serve --parallel 4 on the GPU, E0_GPU_BATCH=$b $(el)"
    E0_GPU_BATCH=$b timeout 140 python3 scripts/load.py $f --bin .gpu/bin/edge0 --server-args "--parallel 4" \
        --clients 1,4 --prompt-tokens 64-128 --max-tokens 64 --requests-per-client 2 --seconds 40 --drain 40 2>&1 | tail -8
done
echo "=== end $(el)"

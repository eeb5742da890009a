#!/bin/bash
# A device call of about three minutes (session 32, when the device could not be had for longer):
# test_gpu (split decode attention against the CPU, batched decode bit-identical), then all-resident
# decode after a 512-id prompt with E0_GPU_SPLIT=1 and auto on both shapes, then serve on the GPU.
# Pack as next-call.sh says; run with carry [".peer"]: tar -xJf .peer/gpu.tar.xz && DL=200 bash .gpu/short.sh
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-200}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
( .gpu/bin/edge0 synth --shape qwen3-30b-a3b --format gguf /dev/shm/q30.gguf > /tmp/synth30.log 2>&1
  .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf /dev/shm/q36.gguf > /tmp/synth36.log 2>&1 ) &
SP=$!
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 100 .gpu/bin/test_gpu 2>&1 | grep -v "not here" | tail -25
wait $SP
for m in q30 q36; do
    for a in 1 auto; do
        left 30 || break
        echo "=== $m all resident: E0_GPU_SPLIT=$a $(el)"
        E0_GPU_SPLIT=$a timeout 40 .gpu/bin/edge0 bench /dev/shm/$m.gguf --prefill 512 --decode 64 --skip-cold --threads 16 2>&1 |
            grep -E "prefill [0-9]|decode [0-9]"
    done
done
if left 40; then
    echo "=== serve on the GPU, --parallel 2, E0_GPU_BATCH=1 $(el)"
    E0_GPU_BATCH=1 .gpu/bin/edge0 serve .gpu/shared/gguf/tiny-qwen35moe/model-Q4_K_M.gguf --gpu 0 --port 8197 --parallel 2 > /tmp/serve3.log 2>&1 &
    timeout 30 python3 scripts/serve_smoke.py 8197 2; pkill -f "serve .gpu/shared"
fi
echo "=== end $(el)"

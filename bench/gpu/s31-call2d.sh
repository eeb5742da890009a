#!/bin/bash
# Session 31, call 2d (issue 38; what 250 s of device time left allows): test_gpu (attend_warps
# checked on every fixture, whole-layer prefill on by default, route_sort gone), attend_warps
# ($E0_GPU_ATTN=warps) against attend on Qwen3-30B-A3B all resident, then serve on the GPU (the tiny
# GGUF fixture, two requests at once). Pack as s31-pdl.sh says, with this file as .gpu/run.sh.
# Run: tar -xJf .peer/gpu.tar.xz && DL=125 bash .gpu/run.sh
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-200}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
.gpu/bin/edge0 synth --shape qwen3-30b-a3b --format gguf /dev/shm/q30.gguf > /tmp/synth30.log 2>&1 &
SP=$!
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 100 .gpu/bin/test_gpu 2>&1 | grep -v "not here"
wait $SP; tail -1 /tmp/synth30.log
for a in attend warps; do
    left 15 || break
    echo "=== q30 all resident: E0_GPU_ATTN=$a $(el)"
    E0_GPU_ATTN=$a .gpu/bin/edge0 bench /dev/shm/q30.gguf --prefill 512 --decode 32 --skip-cold --threads 16 2>&1 |
        grep -E "prefill [0-9]|decode [0-9]"
done
left 20 && { echo "=== serve on the GPU: the tiny Qwen3.5-MoE GGUF fixture, --parallel 2, two requests at once $(el)"
.gpu/bin/edge0 serve .gpu/shared/gguf/tiny-qwen35moe/model-Q4_K_M.gguf --gpu 0 --port 8199 --parallel 2 > /tmp/serve1.log 2>&1 &
timeout 25 python3 scripts/serve_smoke.py 8199 2; pkill -f "serve .gpu/shared"; sleep 1
grep -E "serving|GPU|rror" /tmp/serve1.log | head -4
}
echo "=== end $(el)"

#!/bin/bash
# Session 31, call 2b (issue 38; call 2 without llama.cpp, for the device time left): test_gpu with whole-layer prefill on by default; serve on the GPU
# (scripts/serve_smoke.py: concurrent chat requests); where a
# Qwen3-30B-A3B decode step's time goes (Nsight Compute, one kernel at a time: call 1 measured its
# resident decode at 68.8 tok/s against 107 for the 35B shape); then the same runs, Qwen3.6-35B-A3B
# and Qwen3-30B-A3B, 8 and 16 GiB and all resident, against llama.cpp's CUDA build.
# Pack as s31-pdl.sh says, with this file as .gpu/run.sh. Run: tar -xJf .peer/gpu.tar.xz && DL=340 bash .gpu/run.sh
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-400}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
( .gpu/bin/edge0 synth --shape qwen3-30b-a3b --format gguf /dev/shm/q30.gguf > /tmp/synth30.log 2>&1
  .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf /dev/shm/q36.gguf > /tmp/synth36.log 2>&1 ) &
SP=$!
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 .gpu/bin/test_gpu 2>&1 | grep -v "not here"
echo "=== serve on the GPU: the tiny Qwen3.5-MoE GGUF fixture, --parallel 2, two requests at once $(el)"
.gpu/bin/edge0 serve .gpu/shared/gguf/tiny-qwen35moe/model-Q4_K_M.gguf --gpu 0 --port 8199 --parallel 2 > /tmp/serve1.log 2>&1 &
timeout 60 python3 scripts/serve_smoke.py 8199 2; pkill -f "serve .gpu/shared"; sleep 1; grep -E "serving|GPU|rror" /tmp/serve1.log | head -5
wait $SP; tail -1 /tmp/synth30.log; tail -1 /tmp/synth36.log
echo "=== serve on the GPU: q36 synth, --vram-budget 8G, --parallel 4, four requests at once $(el)"
.gpu/bin/edge0 serve /dev/shm/q36.gguf --gpu 0 --vram-budget 8G --port 8198 --parallel 4 > /tmp/serve2.log 2>&1 &
timeout 120 python3 scripts/serve_smoke.py 8198 4; pkill -f "serve /dev/shm/q36" ; sleep 2; grep -E "serving|GPU|rror" /tmp/serve2.log | head -5
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
echo "=== ncu ($NCU): q30 all resident, prefill 1, decode 4, graphs off so that each launch is seen $(el)"
E0_GPU_GRAPH=0 timeout 90 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --log-file /tmp/ncu.csv \
    .gpu/bin/edge0 bench /dev/shm/q30.gguf --prefill 1 --decode 4 --skip-cold --threads 16 2>&1 | grep -E "decode [0-9]|rror" | tail -2
python3 scripts/ncu_step.py /tmp/ncu.csv 48 | head -40
[ -n "${OUT:-}" ] && xz -1 -c /tmp/ncu.csv > "$OUT/ncu-q30.csv.xz"
# edge0 alone (no time for llama.cpp's build this call): both shapes all resident, the new attention
# kernel (edge0) against the one before (edge0_old, 9f6b477), then 8 and 16 GiB
for m in q30 q36; do
    for e in edge0_old edge0 edge0_old edge0; do
        left 25 || break
        echo "=== $m all resident: $e $(el)"
        .gpu/bin/$e bench /dev/shm/$m.gguf --prefill 512 --decode 64 --skip-cold --threads 16 2>&1 |
            grep -E "prefill [0-9]|decode [0-9]"
    done
done
for m in q36 q30; do
    for b in 8G 16G; do
        left 25 || break
        echo "=== $m --vram-budget $b $(el)"
        .gpu/bin/edge0 bench /dev/shm/$m.gguf --prefill 512 --decode 64 --skip-cold --threads 16 --vram-budget $b 2>&1 |
            grep -E "prefill [0-9]|decode [0-9]|VRAM expert cache \("
    done
done
echo "=== end $(el)"

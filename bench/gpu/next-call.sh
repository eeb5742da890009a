#!/bin/bash
# The next session's first device call (written in session 30, not run): test_gpu (its graph-and-fused
# run now uses route_sort), then route_sort's A/B (E0_GPU_ROUTE_SORT=1 against the same build without),
# all resident and at 8 GiB, then the Qwen3-30B-A3B same run against llama.cpp's CUDA build (started at
# nice 19 at the beginning) in what DL leaves. Pack here first:
#   LIMIT_MB=95 SHARED=/work/shared scripts/gpu_pack.sh fixtures/qwen35moe/mlx gguf/qwen3moe/model-Q4_0.gguf \
#       gguf/tiny-qwen35moe/model-Q4_K_M.gguf
#   cp bench/gpu/next-call.sh .gpu/run.sh; cp /work/shared/peer/build_llama.sh .peer/ and make its target
#   list `--target llama-bench` only; /work/shared/peer/pack_llama_src.sh SRC .peer/llama-src.tar.xz;
#   XZ_OPT=-1 tar -cJf .peer/gpu.tar.xz .gpu
# run with carry [".peer"]: tar -xJf .peer/gpu.tar.xz && DL=560 bash .gpu/run.sh
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
DL=${DL:-400}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [ "$DL" -ge 400 ]; then
    mkdir -p /tmp/llama && tar -xJf .peer/llama-src.tar.xz -C /tmp/llama
    CUDA=1 setsid nohup nice -n 19 bash .peer/build_llama.sh /tmp/llama /tmp/peer > /tmp/peer.log 2>&1 < /dev/null &
fi
.gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf /dev/shm/q36.gguf > /tmp/synth.log 2>&1 &
SP=$!
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 .gpu/bin/test_gpu 2>&1 | grep -v "not here"
wait $SP; tail -1 /tmp/synth.log
B="bench /dev/shm/q36.gguf --prefill 512 --skip-cold --threads 16"
pat="prefill [0-9]|decode [0-9]|VRAM expert cache \(|rror"
run() { echo "=== $1 $2: E0_GPU_ROUTE_SORT=$3 $(el)"; E0_GPU_ROUTE_SORT=$3 .gpu/bin/edge0 $B $2 2>&1 | grep -E "$pat"; }
for i in 1 2; do left 40 && run resident "--decode 128" 0; left 40 && run resident "--decode 128" 1; done
for i in 1 2; do left 40 && run 8G "--decode 64 --vram-budget 8G" 0; left 40 && run 8G "--decode 64 --vram-budget 8G" 1; done
left 150 || { echo "=== end (no time for the same run) $(el)"; exit 0; }
echo "=== synth q30 $(el)"
.gpu/bin/edge0 synth --shape qwen3-30b-a3b --format gguf /dev/shm/q30.gguf 2>&1 | tail -1
while [ ! -x /tmp/peer/repack/llama-bench ] && left 120; do sleep 5; done
echo "=== llama build: $(ls /tmp/peer/repack 2>/dev/null | grep llama-bench) $(el)"
tail -2 /tmp/peer.log
if [ -x /tmp/peer/repack/llama-bench ] && left 100; then
    echo "=== same run q30 $(el)"
    timeout $(( DL - ($(date +%s) - T0) )) bash scripts/gpu_same_run.sh .gpu/bin/edge0 /tmp/peer/repack /dev/shm/q30.gguf 8 16 2>&1 | grep -E "^\||^model|^edge0 |^=== "
fi
echo "=== end $(el)"

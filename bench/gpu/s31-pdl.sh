#!/bin/bash
# Session 31, call 1 (issue 38): programmatic dependent launch, and the VRAM cache's whole-layer prefill. test_gpu with the PDL module (its
# graph-and-fused run launches with PDL and route_sort, the rerun without: the same bits), then
# decode alternated over the variants: main's launches (compute_75 PTX), route_sort, the PDL PTX with
# plain launches, PDL launches, PDL launches with the products' L2 prefetch, all with route_sort;
# all resident and at 8 GiB; then the Qwen3-30B-A3B same run in what DL leaves.
# Pack: LIMIT_MB=95 SHARED=/work/shared scripts/gpu_pack.sh fixtures/qwen35moe/mlx \
#   gguf/qwen3moe/model-Q4_0.gguf gguf/tiny-qwen35moe/model-Q4_K_M.gguf; cp bench/gpu/s31-pdl.sh .gpu/run.sh;
#   XZ_OPT=-1 tar -cJf .peer/gpu.tar.xz .gpu (.peer also holds llama-src.tar.xz and build_llama.sh)
# run with carry [".peer"]: tar -xJf .peer/gpu.tar.xz && DL=570 bash .gpu/run.sh
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-400}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [ "$DL" -ge 500 ]; then
    mkdir -p /tmp/llama && tar -xJf .peer/llama-src.tar.xz -C /tmp/llama
    CUDA=1 setsid nohup nice -n 19 bash .peer/build_llama.sh /tmp/llama /tmp/peer > /tmp/peer.log 2>&1 < /dev/null &
fi
.gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf /dev/shm/q36.gguf > /tmp/synth.log 2>&1 &
SP=$!
echo "=== test_gpu, E0_GPU_PDL=1 E0_GPU_PDL_PREFETCH=1 $(el)"
E0_GPU_PDL=1 E0_GPU_PDL_PREFETCH=1 E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 \
    .gpu/bin/test_gpu 2>&1 | grep -v "not here"
wait $SP; tail -1 /tmp/synth.log
B="bench /dev/shm/q36.gguf --prefill 512 --skip-cold --threads 16"
pat="prefill [0-9]|decode [0-9]|VRAM expert cache \(|rror"
# variant NAME ENV...: one bench run under those variables
run() {
    local tag=$1 args=$2
    shift 2
    echo "=== $tag [$*] $(el)"
    env "$@" .gpu/bin/edge0 $B $args 2>&1 | grep -E "$pat"
}
V0="E0_GPU_ROUTE_SORT=0"
V1="E0_GPU_ROUTE_SORT=1"
V2="E0_GPU_ROUTE_SORT=1 E0_GPU_PDL=ptx"
V3="E0_GPU_ROUTE_SORT=1 E0_GPU_PDL=1"
V4="E0_GPU_ROUTE_SORT=1 E0_GPU_PDL=1 E0_GPU_PDL_PREFETCH=1"
for i in 1 2; do
    for v in "$V0" "$V1" "$V2" "$V3" "$V4"; do left 60 && run resident "--decode 128" $v; done
done
# whole-layer prefill (E0_GPU_WHOLE=1) against the per-layer readback (E0_GPU_WHOLE=0), 8 and 16 GiB
for b in 8G 16G; do
    left 60 && run $b "--decode 64 --vram-budget $b" $V0 E0_GPU_WHOLE=0
    left 60 && run $b "--decode 64 --vram-budget $b" $V0 E0_GPU_WHOLE=1
done
for v in "$V3" "$V4"; do left 60 && run 8G "--decode 64 --vram-budget 8G" $v E0_GPU_WHOLE=1; done
left 200 || { echo "=== end (no time for the same run) $(el)"; exit 0; }
echo "=== synth q30 $(el)"
.gpu/bin/edge0 synth --shape qwen3-30b-a3b --format gguf /dev/shm/q30.gguf 2>&1 | tail -1
while [ ! -x /tmp/peer/repack/llama-bench ] && left 150; do sleep 5; done
echo "=== llama build: $(ls /tmp/peer/repack 2>/dev/null | grep llama-bench) $(el)"
tail -2 /tmp/peer.log
if [ -x /tmp/peer/repack/llama-bench ] && left 120; then
    echo "=== same run q30 $(el)"
    timeout $(( DL - ($(date +%s) - T0) )) bash scripts/gpu_same_run.sh .gpu/bin/edge0 /tmp/peer/repack /dev/shm/q30.gguf 8 16 2>&1 | grep -E "^\||^model|^edge0 |^=== "
fi
echo "=== end $(el)"

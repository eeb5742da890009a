#!/bin/bash
# The next session's first device call (written in session 31): test_gpu (its test_batch_decode
# checks E0_GPU_BATCH=1), serve on the GPU (scripts/serve_smoke.py, plain and batched), Qwen3-30B-A3B's decode step under Nsight Compute, then the same runs
# of both shapes against llama.cpp's CUDA build (started at nice 19 first) with whole-layer prefill
# on by default; decode attention split over blocks against one block a head first
# ($E0_GPU_SPLIT=auto against 1, session 33: if it wins, make it the
# default before the same runs). Pack here first:
#   LIMIT_MB=95 SHARED=/work/shared scripts/gpu_pack.sh fixtures/qwen35moe/mlx gguf/qwen3moe/model-Q4_0.gguf \
#       gguf/tiny-qwen35moe/model-Q4_K_M.gguf
#   cp bench/gpu/next-call.sh .gpu/run.sh; .peer/ holds llama-src.tar.xz (/work/shared/peer/pack_llama_src.sh
#   on a source tree of the kit's llama.cpp) and build_llama.sh (the kit's, its target list cut to
#   `--target llama-bench`); XZ_OPT=-1 tar -cJf .peer/gpu.tar.xz .gpu
# run with carry [".peer"]: tar -xJf .peer/gpu.tar.xz && DL=570 bash .gpu/run.sh
# Two calls on one warm machine (session 33): PREP=1 runs the tests and leaves the llama.cpp build and
# the synth files running (setsid) for the next call, which skips what is already there; see
# bench/gpu/train-call.sh.
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-570}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# SHORT=1 (a call of a few minutes): no llama.cpp build, no same runs
if [ -z "${SHORT:-}" ] && [ ! -e /tmp/llama.started ]; then
    touch /tmp/llama.started
    mkdir -p /tmp/llama && tar -xJf .peer/llama-src.tar.xz -C /tmp/llama
    CUDA=1 setsid nohup nice -n 19 bash .peer/build_llama.sh /tmp/llama /tmp/peer > /tmp/peer.log 2>&1 < /dev/null &
fi
[ -s /dev/shm/q36.gguf.done ] || setsid nohup bash -c '.gpu/bin/edge0 synth --shape qwen3-30b-a3b --format gguf /dev/shm/q30.gguf > /tmp/synth30.log 2>&1
  .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf /dev/shm/q36.gguf > /tmp/synth36.log 2>&1; echo ok > /dev/shm/q36.gguf.done' < /dev/null > /dev/null 2>&1 &
synth_wait() { while [ ! -s /dev/shm/q36.gguf.done ]; do sleep 2; done; }
if [ -z "${TESTED:-}" ]; then
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 120 .gpu/bin/test_gpu 2>&1 | grep -v "not here"
echo "=== serve on the GPU: the tiny Qwen3.5-MoE GGUF fixture, --parallel 2, two requests at once $(el)"
.gpu/bin/edge0 serve .gpu/shared/gguf/tiny-qwen35moe/model-Q4_K_M.gguf --gpu 0 --port 8199 --parallel 2 > /tmp/serve1.log 2>&1 &
timeout 30 python3 scripts/serve_smoke.py 8199 2; pkill -f "serve .gpu/shared"; sleep 1
grep -E "serving|GPU|rror" /tmp/serve1.log | head -4
echo "=== the same with the slots decoded in one pass (E0_GPU_BATCH=1) $(el)"
E0_GPU_BATCH=1 .gpu/bin/edge0 serve .gpu/shared/gguf/tiny-qwen35moe/model-Q4_K_M.gguf --gpu 0 --port 8197 --parallel 2 > /tmp/serve3.log 2>&1 &
timeout 30 python3 scripts/serve_smoke.py 8197 2; pkill -f "serve .gpu/shared"; sleep 1
fi
if [ -n "${PREP:-}" ]; then echo "=== end (prep: llama.cpp build and synth left running) $(el)"; exit 0; fi
synth_wait; tail -1 /tmp/synth30.log; tail -1 /tmp/synth36.log
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
ncu30() {
echo "=== ncu: q30 all resident after a 512-id prompt, decode 2, graphs off so that each launch is seen $(el)"
E0_GPU_GRAPH=0 timeout 120 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --log-file /tmp/ncu.csv \
    .gpu/bin/edge0 bench /dev/shm/q30.gguf --prefill 512 --decode 2 --skip-cold --threads 16 2>&1 | grep -E "decode [0-9]|rror" | tail -2
python3 scripts/ncu_step.py /tmp/ncu.csv 48 1 | head -30
[ -n "${OUT:-}" ] && xz -1 -c /tmp/ncu.csv > "$OUT/ncu-q30.csv.xz"
}
[ -n "${SHORT:-}" ] || ncu30
for a in 1 auto 1 auto; do
    echo "=== q30 all resident: E0_GPU_SPLIT=$a $(el)"
    E0_GPU_SPLIT=$a .gpu/bin/edge0 bench /dev/shm/q30.gguf --prefill 512 --decode 64 --skip-cold --threads 16 2>&1 |
        grep -E "prefill [0-9]|decode [0-9]" | tee -a /tmp/ab-$a.txt
done
# the same runs below take the kernel whose slower decode of the two was faster
best() { grep -oE "decode [0-9]+ tokens: [0-9.]+" "$1" | grep -oE "[0-9.]+$" | sort -n | head -1; }
wa=$(best /tmp/ab-1.txt); ww=$(best /tmp/ab-auto.txt)
echo "decode, the slower of two: one block a head $wa, split $ww tok/s"
if python3 -c "import sys; sys.exit(0 if float(sys.argv[2] or 0) > float(sys.argv[1] or 0) else 1)" "$wa" "$ww"; then
    export E0_GPU_SPLIT=auto; echo "=> the same runs with E0_GPU_SPLIT=auto"
fi
if left 380; then
echo "=== ncu: q36 all resident after a 512-id prompt, decode 2 (E0_GPU_SPLIT=${E0_GPU_SPLIT:-1}) $(el)"
E0_GPU_GRAPH=0 timeout 100 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --log-file /tmp/ncu36.csv \
    .gpu/bin/edge0 bench /dev/shm/q36.gguf --prefill 512 --decode 2 --skip-cold --threads 16 2>&1 | grep -E "decode [0-9]|rror" | tail -2
python3 scripts/ncu_step.py /tmp/ncu36.csv 40 1 | head -30
[ -n "${OUT:-}" ] && xz -1 -c /tmp/ncu36.csv > "$OUT/ncu-q36.csv.xz"
fi
if [ -n "${SHORT:-}" ]; then
    for a in 1 auto; do
        left 45 || break
        echo "=== q36 all resident: E0_GPU_SPLIT=$a $(el)"
        E0_GPU_SPLIT=$a .gpu/bin/edge0 bench /dev/shm/q36.gguf --prefill 512 --decode 64 --skip-cold --threads 16 2>&1 |
            grep -E "prefill [0-9]|decode [0-9]"
    done
    left 110 && ncu30
    echo "=== end (short call) $(el)"; exit 0
fi
while [ ! -x /tmp/peer/repack/llama-bench ] && left 150; do sleep 5; done
echo "=== llama build: $(ls /tmp/peer/repack 2>/dev/null | grep llama-bench) $(el)"
cp /dev/shm/q36.gguf /root/q36.gguf & CP=$!
for m in q36 capped q30; do
    if [ $m = capped ]; then
        wait $CP; left 200 || continue
        echo "=== capped: VRAM 8 GiB, host memory 12 GiB (the 35B shape's file on disk) $(el)"
        timeout $(( DL - 60 - ($(date +%s) - T0) )) bash scripts/gpu_capped_run.sh .gpu/bin/edge0 /tmp/peer/repack /root/q36.gguf 8 12G 2>&1
        continue
    fi
    left 130 || break
    bs="8 16"; left 300 || bs=16 # a short call: the budget furthest from llama.cpp, and all resident
    echo "=== same run $m, budgets $bs $(el)"
    timeout $(( DL - ($(date +%s) - T0) )) bash scripts/gpu_same_run.sh .gpu/bin/edge0 /tmp/peer/repack /dev/shm/$m.gguf $bs 2>&1 |
        grep -vE "^edge0 bench: |^ *\"|^[{}]|^build_commit|^\"" || true
done
echo "=== end $(el)"

#!/bin/bash
# A short device call (written in session 33, not run: too little device time was left): test_gpu
# (its test_models checks decode attention split over 8 blocks a head, attend_split + attend_merge,
# against the CPU), then Qwen3.6-35B-A3B's shape all resident after a 512-id prompt with
# E0_GPU_SPLIT=1 (one block a head, attend_warps: the default) against E0_GPU_SPLIT=auto, twice,
# then Qwen3-30B-A3B's if time is left. If the split wins, make auto the default (gpu.c). Pack as next-call.sh says; run with carry [".peer"]:
#   tar -xJf .peer/gpu.tar.xz && DL=230 bash .gpu/split.sh
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-230}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import transformers; print(\"transformers\", transformers.__version__)" 2>&1 | tail -1
( .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf /dev/shm/q36.gguf > /tmp/synth36.log 2>&1
  .gpu/bin/edge0 synth --shape qwen3-30b-a3b --format gguf /dev/shm/q30.gguf > /tmp/synth30.log 2>&1 ) &
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 90 .gpu/bin/test_gpu 2>&1 | grep -v "not here" |
    grep -E "RUN|OK|FAIL|ERROR|worst|block a head|bit-identical to each|PASSED" | head -40
while [ ! -s /tmp/synth36.log ] || ! grep -q "^wrote" /tmp/synth36.log; do sleep 2; left 30 || break; done
tail -1 /tmp/synth36.log
for m in q36 q30; do
    for sp in 1 auto 1 auto; do
        left 25 || break
        [ -s /dev/shm/$m.gguf ] || break
        echo "=== $m all resident: E0_GPU_SPLIT=$sp $(el)"
        E0_GPU_SPLIT=$sp timeout 30 .gpu/bin/edge0 bench /dev/shm/$m.gguf --prefill 512 --decode 64 --skip-cold --threads 16 2>&1 |
            grep -E "prefill [0-9]|decode [0-9]"
    done
done
echo "=== end $(el)"

#!/bin/bash
# Session 34, call C: test_gpu after call A (its sizing of the host cache's test fixed, the fusions
# that measured nothing taken out, the split attention the default), then q36 all resident with the
# vector products' chunk loop unrolled by 4 (.gpu/unroll.ptx: the next chunks' loads in flight
# during this one's products; the same sums) against the committed kernels, alternated.
#   tar -xJf .peer/gpu.tar.xz && DL=300 bash .gpu/s34-callC.sh
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-300}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
[ -s /root/q36.gguf ] || (.gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf /dev/shm/q36.gguf > /tmp/synth36.log 2>&1; ln -sf /dev/shm/q36.gguf /tmp/q36.gguf) &
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 150 .gpu/bin/test_gpu 2>&1 | grep -v "not here" > /tmp/test_gpu.log
grep -E "^\[|host expert cache|block a head|DIFF|FAIL|rror" /tmp/test_gpu.log | head -60
[ -n "${OUT:-}" ] && cp /tmp/test_gpu.log "$OUT/"
wait
f=/root/q36.gguf; [ -s $f ] || f=/dev/shm/q36.gguf
for v in now unroll now unroll; do
    left 40 || break
    echo "=== q36 all resident: $v $(el)"
    [ $v = unroll ] && export E0_GPU_PTX=.gpu/unroll.ptx
    timeout 40 .gpu/bin/edge0 bench $f --prefill 512 --decode 64 --skip-cold --threads 16 2>&1 | grep -E "prefill [0-9]|decode [0-9]"
    unset E0_GPU_PTX
done
echo "=== end $(el)"

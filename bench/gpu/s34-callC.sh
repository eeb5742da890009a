#!/bin/bash
# Session 34, call C (not run: the session's device time was spent; the next session's first call): test_gpu after call A (its sizing of the host cache's test fixed, the fusions
# that measured nothing taken out, the split attention the default, and decode over the VRAM cache
# guessing the next MoE layer's experts: its router on this layer's input, the misses among them
# copied in on the copy stream while this layer computes); q36 at VRAM 8 and 16 GiB with the
# guesses ($E0_GPU_PREFETCH=1) and without, alternated; then all resident with the vector
# products' chunk loop unrolled by 4 (.gpu/unroll.ptx) and with the gate-up rows' two matrices in
# one loop (.gpu/unroll2.ptx) against the committed kernels, alternated.
# The variants: bench/gpu/s34-unroll.patch and s34-unroll2.patch on src/gpu/kernels_mm.cuh, each
# built to PTX as bench/gpu/s34-nou2f.sh builds its (nvcc -ptx -arch=compute_75 -O3), into .gpu/.
#   tar -xJf .peer/gpu.tar.xz && DL=280 bash .gpu/s34-callC.sh
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-280}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
f=/root/q36.gguf
[ -s $f ] || { f=/dev/shm/q36.gguf; .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf $f > /tmp/synth36.log 2>&1 & }
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 60 .gpu/bin/test_gpu 2>&1 | grep -v "not here" > /tmp/test_gpu.log
grep -E "^\[|host expert cache|guesses|block a head|injected|request:|DIFF|FAIL|rror" /tmp/test_gpu.log | head -80
[ -n "${OUT:-}" ] && cp /tmp/test_gpu.log "$OUT/"
wait
run() { timeout 40 .gpu/bin/edge0 bench $f --prefill 512 --decode 64 --skip-cold --threads 16 "$@" 2>&1 |
    grep -E "prefill [0-9]|decode [0-9]|VRAM expert cache|guessed"; }
for v in 8:on 8:off 16:on 16:off 8:on 8:off; do
    left 60 || break
    echo "=== q36 VRAM ${v%:*} GiB, guesses ${v#*:} $(el)"
    [ ${v#*:} = on ] && export E0_GPU_PREFETCH=1
    run --vram-budget ${v%:*}G
    unset E0_GPU_PREFETCH
done
for v in now unroll unroll2 now unroll unroll2; do
    left 20 || break
    echo "=== q36 all resident: $v $(el)"
    [ $v != now ] && export E0_GPU_PTX=.gpu/$v.ptx
    run
    unset E0_GPU_PTX
done
echo "=== end $(el)"

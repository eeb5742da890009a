#!/bin/bash
# (Hung in session 35 at its bare `wait`, which waits for the `exec > >(tee)` process substitution too;
# bench/gpu/s36-callA.sh waits for the synth's pid only.)
# Session 35, call A: test_gpu with the expert products in explicit IEEE operations and their
# host replica (test_replica: the host's bits against the card's, every format; test_budgets:
# the host computing up to 3 misses a MoE call, bit-identical to all resident); the 35B shape
# all resident with these kernels against the committed ones before them (.gpu/old.ptx through
# $E0_GPU_PTX) and with the products' chunk loop unrolled by 4 (.gpu/unroll.ptx:
# bench/gpu/s35-unroll.patch, the same sums), alternated; VRAM 8 and 16 GiB with the host computing up to N misses a MoE call
# ($E0_GPU_HOST_MISS=N) against none; then session 34's next-layer guesses ($E0_GPU_PREFETCH=1);
# last, the llama.cpp CPU build for the 16-core scaling call in the background.
#   tar -xJf .peer/gpu.tar.xz && DL=400 bash .gpu/s35-callA.sh      carry [".peer"]
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-400}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
lscpu | grep -E "Model name|^CPU\(s\)"
f=/root/q36.gguf
[ -s $f ] || .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf $f > /tmp/synth36.log 2>&1 &
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 100 .gpu/bin/test_gpu 2>&1 | grep -v "not here" > /tmp/test_gpu.log
grep -E "^\[|replica|host|bit-identical|worst|DIFF|FAIL|rror" /tmp/test_gpu.log | grep -v "relative L2" | head -90
[ -n "${OUT:-}" ] && cp /tmp/test_gpu.log "$OUT/"
wait
run() { timeout 40 .gpu/bin/edge0 bench $f --prefill 512 --decode 64 --skip-cold --threads 16 "$@" 2>&1 |
    grep -E "prefill [0-9]|decode [0-9]|VRAM expert cache|guessed|computed by the host"; }
for v in new unroll old new unroll old; do
    left 40 || break
    echo "=== q36 all resident: $v kernels $(el)"
    [ $v != new ] && export E0_GPU_PTX=.gpu/$v.ptx
    run
    unset E0_GPU_PTX
done
for v in 8:0 8:2 8:4 8:8 16:0 16:2 16:4 8:0 8:4; do
    left 40 || break
    echo "=== q36 VRAM ${v%:*} GiB, host misses up to ${v#*:} $(el)"
    E0_GPU_HOST_MISS=${v#*:} run --vram-budget ${v%:*}G
done
for v in 8:on 16:on; do
    left 40 || break
    echo "=== q36 VRAM ${v%:*} GiB, guesses ${v#*:} $(el)"
    E0_GPU_PREFETCH=1 run --vram-budget ${v%:*}G
done
if [ -s .peer/llama-src.tar.xz ] && [ ! -e /tmp/peer.started ]; then
    touch /tmp/peer.started; mkdir -p /tmp/llama && tar -xJf .peer/llama-src.tar.xz -C /tmp/llama
    setsid nohup bash .peer/build_llama.sh /tmp/llama /tmp/peer > /tmp/peer.log 2>&1 < /dev/null &
    echo "llama.cpp build started"
fi
echo "=== end $(el)"

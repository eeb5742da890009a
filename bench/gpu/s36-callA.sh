#!/bin/bash
# For session 36 (written in 35, not run): test_gpu (test_replica: the host's replica against the
# card, every format, with the products back in the order nvcc gave them before session 35;
# test_budgets' host-miss mode; test_models' host cache counting the guesses); the 35B shape
# all resident with these kernels against session 34's (.gpu/old.ptx, $E0_GPU_PTX), alternated:
# they should now be equal; VRAM 8 GiB with the host computing up to N = 0, 1, 2, 3 misses a MoE
# call ($E0_GPU_HOST_MISS), then with the next layer's guesses ($E0_GPU_PREFETCH=1) alone and with
# N = 2; 16 GiB with N = 0, 1, 2; then N timed while decoding (=auto) against 0, 256 tokens. Session 35's call A hung on a bare `wait` (bash waits for the
# `exec > >(tee)` process substitution too): this one waits for the synth's pid only.
# All resident also with the products summed "vertically" (.gpu/vertical.ptx: each lane's 16 partial
# sums elementwise across its chunks, folded once a row: an order the host could keep at its own
# kernels' speed; bench/gpu/s36-vertical.patch on src/gpu/kernels_mm.cuh, built as s34-nou2f.sh
# builds its PTX: nvcc -ptx -arch=compute_75 -O3).
#   pack as in s35-callA.sh (.gpu/old.ptx: git show 162e753:src/gpu/kernels.ptx), then
#   tar -xJf .peer/gpu.tar.xz && DL=420 bash .gpu/s36-callA.sh      carry [".peer"]
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-420}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
lscpu | grep -E "Model name|^CPU\(s\)|MHz"; grep -o "avx512[a-z]*" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
f=/root/q36.gguf
sp=
[ -s $f ] || { .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf $f > /tmp/synth36.log 2>&1 & sp=$!; }
echo "=== the host's replica of the expert products, 1 and 16 threads, against DRAM $(el)"
timeout 60 .gpu/bin/bench_replica 16
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 100 .gpu/bin/test_gpu 2>&1 | grep -v "not here" > /tmp/test_gpu.log
grep -E "^\[|replica|host|bit-identical|DIFF|FAIL|rror" /tmp/test_gpu.log | grep -v "relative L2" | head -90
[ -n "${OUT:-}" ] && cp /tmp/test_gpu.log "$OUT/"
[ -n "$sp" ] && wait $sp
run() { timeout 40 .gpu/bin/edge0 bench $f --prefill 512 --decode 64 --skip-cold --threads 16 "$@" 2>&1 |
    grep -E "prefill [0-9]|decode [0-9]|VRAM expert cache \(|guessed|computed by the host"; }
for v in new old vertical new old vertical; do
    left 40 || break
    echo "=== q36 all resident: $v kernels $(el)"
    [ $v != new ] && export E0_GPU_PTX=.gpu/$v.ptx
    run
    unset E0_GPU_PTX
done
for v in 8:0:0 8:1:0 8:2:0 8:3:0 8:0:1 8:2:1 8:0:0 16:0:0 16:1:0 16:2:0; do
    left 30 || break
    IFS=: read -r b n p <<< "$v"
    echo "=== q36 VRAM $b GiB, host misses up to $n, guesses $p $(el)"
    E0_GPU_HOST_MISS=$n E0_GPU_PREFETCH=$p run --vram-budget ${b}G
done
# the number timed while decoding (5 settings x 10 steps of measuring, then kept): 256 tokens
for v in 8:auto 8:0 16:auto 16:0; do
    left 30 || break
    echo "=== q36 VRAM ${v%:*} GiB, host misses ${v#*:}, decode 256 $(el)"
    E0_GPU_HOST_MISS=${v#*:} run --vram-budget ${v%:*}G --decode 256
done
echo "=== end $(el)"

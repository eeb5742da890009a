#!/bin/bash
# Session 36, call B: test_gpu with the next layer's guesses on by default and a decode call's
# routing read back in one round trip (into pinned memory) instead of three; one decode step of the
# 35B shape all resident under Nsight Compute (each kernel's duration, clocks and caches left
# alone), to see where the 5.6 ms a token go; VRAM 16 and 8 GiB: this build against the last
# commit's (.gpu/bin/edge0-old, with $E0_GPU_PREFETCH=1), alternated, and 16 GiB without guesses.
#   pack as in s36-callA.sh plus .gpu/bin/edge0-old (0c2af4b's), then   tar -xJf .peer/gpu.tar.xz && DL=420 bash .gpu/s36-callB.sh   carry [".peer"]
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-420}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
f=/root/q36.gguf
sp=
[ -s $f ] || { .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf $f > /tmp/synth36.log 2>&1 & sp=$!; }
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 100 .gpu/bin/test_gpu 2>&1 | grep -v "not here" > /tmp/test_gpu.log
grep -E "^\[|replica|bit-identical|DIFF|FAIL" /tmp/test_gpu.log | grep -v "relative L2" | grep -vE "^ +VRAM cache|through a host" | head -40
[ -n "${OUT:-}" ] && cp /tmp/test_gpu.log "$OUT/"
[ -n "$sp" ] && wait $sp
echo "=== ncu: prefill 4, decode 3, all resident $(el)"
ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv -c 2600 \
    timeout 150 .gpu/bin/edge0 bench $f --prefill 4 --decode 3 --skip-cold --threads 16 > /tmp/ncu.csv 2> /tmp/ncu.err
tail -3 /tmp/ncu.err; wc -l /tmp/ncu.csv
[ -n "${OUT:-}" ] && xz -c /tmp/ncu.csv > "$OUT/ncu-q36-decode.csv.xz"
run() { timeout 40 $bin bench $f --prefill 512 --decode 64 --skip-cold --threads 16 "$@" 2>&1 |
    grep -E "prefill [0-9]|decode [0-9]|VRAM expert cache \(|guessed"; }
for v in 16:new 16:old 16:new 16:old 16:new0 8:new 8:old 8:new 8:old resident:new; do
    left 30 || break
    b=${v%:*} w=${v#*:}
    bin=.gpu/bin/edge0 p=1
    [ $w = old ] && bin=.gpu/bin/edge0-old
    [ $w = new0 ] && p=0
    echo "=== q36 VRAM $b, $w $(el)"
    if [ $b = resident ]; then E0_GPU_PREFETCH=$p run; else E0_GPU_PREFETCH=$p run --vram-budget ${b}G; fi
done
echo "=== end $(el)"

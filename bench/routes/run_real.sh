#!/bin/sh
# Session 30 (issue 40): the published real routing captures (bench/routes/real)
# converted to edge0 traces, their statistics beside the profiles', and
# `edge0 bench --replay` of the Qwen3.6 capture on the tiny-e256 shape against
# the same shape written with the qwen36 routing profile, in the same run
# (2 threads, pread I/O, no prefetch guesses, prefill 16, decode 128).
#   bench/routes/run_real.sh [OUTDIR]   (default bench/routes; needs build/edge0)
set -e
OUT=${1:-bench/routes}
R=bench/routes/real
B=build/edge0
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$OUT/real"
conv() { # SOURCE NAME LAYERS EXPERTS [PROFILE] [MORE ARGS]
    src=$1 name=$2 L=$3 E=$4 prof=$5
    shift 5 || shift $#
    python3 scripts/route_convert.py "$src" -o "$OUT/real/$name.trace" --layers "$L" --experts "$E" "$@"
    if [ -n "$prof" ]; then
        python3 scripts/route_stats.py "$OUT/real/$name.trace" --profile "$prof" > "$OUT/real/$name.stats.txt"
    else
        python3 scripts/route_stats.py "$OUT/real/$name.trace" > "$OUT/real/$name.stats.txt"
    fi
    cat "$OUT/real/$name.stats.txt"
}
conv $R/qwen36-routecapture5-rank0.jsonl qwen36-e256 4 256 qwen36
conv $R/granite-3.0-1b-a400m-moe_expert_trace.json granite-native 24 32 ""
conv $R/granite-3.0-1b-a400m-moe_expert_trace.json granite-e256 4 256 ""

$B synth --shape tiny-e256 --no-sync "$T/plain" > /dev/null
$B synth --shape tiny-e256 --no-sync --route-profile qwen36 "$T/qwen36" > /dev/null
run() { # NAME MODEL [BENCH ARGS]
    name=$1 m=$2
    shift 2
    for slots in 64 307; do
        $B bench "$m" --io pread --threads 2 --prefill 16 --decode 128 --skip-cold \
            --opt prefetch_cap=0 --opt cache_slots=$slots --trace "$OUT/replay-$name-s$slots.trace" "$@" \
            > "$OUT/replay-$name-s$slots.bench.txt" 2>&1
        grep -E "routing:|cache hit rate|of experts" "$OUT/replay-$name-s$slots.bench.txt"
    done
    python3 scripts/route_stats.py "$OUT/replay-$name-s64.trace" --profile qwen36 > "$OUT/replay-$name.stats.txt"
}
run real-qwen36 "$T/plain" --replay "$OUT/real/qwen36-e256.trace"
run profile-qwen36 "$T/qwen36"
run real-granite "$T/plain" --replay "$OUT/real/granite-e256.trace"
exit 0

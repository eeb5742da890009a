#!/bin/sh
# Session 29 (issue 40): routing profiles against the published statistics.
# Writes the profile checkpoints into a temp dir, decodes 128 greedy tokens
# with `edge0 bench --trace` (2 threads, pread I/O, no prefetch guesses, two
# prefill lengths = two contexts) and prints scripts/route_stats.py's tables.
#   bench/routes/run.sh [OUTDIR]   (default bench/routes; needs build/edge0)
set -e
OUT=${1:-bench/routes}
B=build/edge0
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$OUT"
run() { # NAME SHAPE PROFILE FORMAT [PROFILE TO COMPARE WITH]
    name=$1 shape=$2 prof=$3 fmt=$4 cmp=${5:-$3}
    dst="$T/$name"
    [ "$fmt" = gguf ] && dst="$T/$name.gguf"
    set -- --shape "$shape" --format "$fmt" --no-sync
    [ "$prof" != none ] && set -- "$@" --route-profile "$prof"
    $B synth "$@" "$dst" > /dev/null
    for pf in 16 40; do
        $B bench "$dst" --io pread --threads 2 --prefill $pf --decode 128 --skip-cold \
            --opt prefetch_cap=0 --trace "$OUT/$name-p$pf.trace" > "$OUT/$name-p$pf.bench.txt" 2>&1
    done
    {
        for pf in 16 40; do
            echo "== $name, prefill $pf, decode 128"
            python3 scripts/route_stats.py "$OUT/$name-p$pf.trace" --profile "$cmp"
            echo
        done
    } > "$OUT/$name.stats.txt"
    cat "$OUT/$name.stats.txt"
    rm -rf "$dst"
}
run uniform-e256 tiny-e256 none mlx qwen36
run qwen36-e256 tiny-e256 qwen36 mlx
run qwen36-e256-gguf tiny-e256 qwen36 gguf
run uniform-e128 tiny-e128 none mlx qwen3-30b
run qwen3-30b-e128 tiny-e128 qwen3-30b mlx
run qwen3-30b-e128-gguf tiny-e128 qwen3-30b gguf
[ -n "$E0_ROUTES_MID" ] && run qwen36-mid mid qwen36 mlx
exit 0

#!/bin/sh
# Session 29 cache policy study (docs/experiments.md "Session 29: cache policy
# on realistic routing"): bench --stats on both routing profiles, uniform and
# skew-1 routing, two seeds and two prompt lengths; then the real cache's hit
# rate with each policy at 10% / 30% of the experts (prefetch on, as shipped).
# Usage: bench/policy/run.sh OUTDIR (checkpoints are written to a temp dir)
set -e
B=${E0_BIN:-build/edge0}
OUT=${1:-bench/policy}
D=$(mktemp -d)
for seed in 1 2; do
  $B synth --shape tiny-e256 --route-profile qwen36 --seed $seed --no-sync $D/q36-s$seed >/dev/null
  $B synth --shape tiny-e128 --route-profile qwen3-30b --seed $seed --no-sync $D/q30-s$seed >/dev/null
  $B synth --shape tiny-e256 --route-skew 1 --seed $seed --no-sync $D/skew-s$seed >/dev/null
  $B synth --shape tiny-e256 --seed $seed --no-sync $D/uni-s$seed >/dev/null
done
for m in q36 q30 skew uni; do for seed in 1 2; do for pf in 16 40; do
  echo "== $m seed $seed prefill $pf"
  $B bench $D/$m-s$seed --io pread --threads 2 --prefill $pf --decode 256 --skip-cold --stats 2>/dev/null
done; done; done > $OUT/study.log
for m in q36 q30 skew uni; do
  E=256; [ $m = q30 ] && E=128
  for share in 10 30; do
    slots=$(( 4 * E * share / 100 ))
    for p in lru router recent; do
      echo "== $m seed 1 prefill 16 slots $slots ($share%) cache_policy=$p"
      $B bench $D/$m-s1 --io pread --threads 2 --prefill 16 --decode 256 --skip-cold \
         --opt cache_slots=$slots --opt cache_policy=$p 2>/dev/null | grep -E "cache hit rate|decode 256"
    done
  done
done > $OUT/real.log
rm -rf $D

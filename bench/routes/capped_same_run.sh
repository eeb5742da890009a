#!/usr/bin/env bash
# Issue 40's capped decode on realistic routing: the peer kit's same run (8 GiB cgroup, 2
# threads, edge0 --mem-budget 7.8G against llama.cpp mmap) on a checkpoint written with a
# routing profile, then on the same checkpoint with the real Qwen3.6-35B-A3B route capture
# replayed (bench --replay; the capture's 2 layers mapped onto the shape's, 7 tokens apart
# per copy, experts kept or taken mod E: scripts/route_convert.py prints the mapping).
#
#   bench/routes/capped_same_run.sh SHAPE PROFILE DIR    (e.g. qwen3.6-35b-a3b qwen36 /work/cache)
#
# RUNS="replay" runs only the replay. DIR gets the edge0 checkpoint (SHAPE-PROFILE/) and the peer's GGUF (the kit's make_gguf.py,
# random Q4_0: llama.cpp routes its own routers, uniform: it cannot run the profile or the
# replay, which live in edge0's router); both are made when missing. Output: the same-run
# tables and each engine's raw output in bench/routes/capped/SHAPE-{profile,replay}/.
set -eu
shape=$1 profile=$2 dir=$3
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
shared=${SHARED:-$root/../shared}
peer=${PEER:-$HOME/.cache/edge0-peer}
e0=$root/build/edge0
case $shape in
qwen3.6-35b-a3b) kit=qwen35moe L=40 E=256 ;;
qwen3-30b-a3b) kit=qwen3moe L=48 E=128 ;;
*) echo "capped_same_run: shape $shape: qwen3.6-35b-a3b or qwen3-30b-a3b" >&2; exit 2 ;;
esac
model=$dir/$shape-$profile gguf=$dir/$kit.gguf
[ -f "$model/config.json" ] || "$e0" synth --shape "$shape" --route-profile "$profile" "$model"
[ -f "$gguf" ] || /usr/bin/python3 "$shared/peer/make_gguf.py" --model "$kit" --out "$gguf"
out=$here/capped
mkdir -p "$out"
trace=$out/$shape-replay.trace
python3 "$root/scripts/route_convert.py" "$here/real/qwen36-routecapture5-rank0.jsonl" -o "$trace" \
    --layers $L --experts $E --reuse-shift 7
for run in ${RUNS:-profile replay}; do
    args=""
    # under replay the speculative loads are predicted from the synthetic router's logits, which
    # the trace overrides (session 30): 3,979 loads a run, 104 used (2.6%); they only add reads
    [ $run = replay ] && args="--replay $trace --opt prefetch_cap=0"
    rm -rf "$out/$shape-$run"
    E0=$e0 E0_MODEL=$model GGUF=$gguf PEER=$peer ONLY=capped E0_ARGS="$args" \
        bash "$shared/peer/same_run.sh" "$out/$shape-$run" | tee "$out/$shape-$run.txt"
done

#!/usr/bin/env bash
# The GPU same run (issue 38): edge0 and llama.cpp's CUDA build on one GGUF
# file and one card, in one call, each at the VRAM budgets given.
#
#   scripts/gpu_same_run.sh EDGE0 LLAMA_BIN_DIR MODEL.gguf [BUDGET_GIB ...]   (default: 8 16)
#
# For each budget B: `edge0 bench --vram-budget BG --warm-up` (decode 64
# after the 512-id prefill, each timed after an untimed pass of other ids, as
# llama-bench warms up before its runs), then llama.cpp's
# configuration for a card of that size, `llama-bench -ngl 99 -ncmoe N`
# (attention, dense weights and KV on the card, the experts of the first N
# layers computed by the CPU from RAM), for three N around the estimate
# from the file's sizes; each run's peak device memory is sampled with
# nvidia-smi (100 ms), and llama.cpp's figure at B is the best of the runs
# whose peak stayed under B. llama-bench runs with -d 0,512: its prefill
# from an empty context, its decode after 512 positions (as edge0's; the
# decode from an empty context is shown beside it). Then both with
# everything on the card. The
# edge0 figures come with their limits (device memory and PCIe bandwidth,
# measured by bench at start); the table gives the ratios, edge0 over
# llama.cpp. Threads: all cores for both. Needs python3 for the table.
# A rerun may name llama.cpp's -ncmoe per budget (NCMOE="8:30 16:12,14", found
# by an earlier full run on the same card and shape) and leave out the
# all-resident pair (RESIDENT=0).
set -eu
E0=$1 LB=$2 M=$3
shift 3
budgets=${*:-8 16}
T=$(nproc)
out=$(mktemp -d)
smi() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
# Runs "$@" with its output in $out/$tag.log and its peak device memory (MiB
# over what was in use before) in $out/$tag.peak.
sampled() {
    local tag=$1
    shift
    local base
    base=$(smi)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$out/$tag.smi" &
    local s=$!
    "$@" >"$out/$tag.log" 2>&1 || echo "($tag: exit $?)" >>"$out/$tag.log"
    kill $s 2>/dev/null || true
    wait $s 2>/dev/null || true
    sort -n "$out/$tag.smi" | tail -1 | awk -v b="$base" '{print $1 - b}' >"$out/$tag.peak"
    cat "$out/$tag.log"
    echo "peak device memory: $(cat "$out/$tag.peak") MiB over the $base MiB in use before"
}
info=$("$E0" info "$M" --json --gpu off 2>/dev/null)
read -r L X D < <(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["moe_layers"], j["expert_bytes"], j["non_expert_bytes"])' "$info")
echo "model $M: $L MoE layers, $((X >> 20)) MiB of experts, $((D >> 20)) MiB of the rest; $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); $T threads"
echo "edge0 $("$E0" --version | head -1); llama.cpp $("$LB/llama-bench" --version 2>&1 | head -1 || true)"
runs=$budgets
[ "${RESIDENT:-1}" = 0 ] || runs="$runs resident"
for B in $runs; do
    if [ "$B" = resident ]; then vb=auto; ns=0; else
        vb=${B}G
        # layers whose experts fit beside the rest and ~1.5 GiB of KV and buffers
        fit=$(python3 -c "import sys; L,X,D,B=map(float,sys.argv[1:]); print(max(0,min(int(L),int((B*2**30-D-1.5*2**30)/(X/L)))))" "$L" "$X" "$D" "$B")
        n0=$((L - fit))
        ns=$(for n in $((n0 - 2)) $n0 $((n0 + 2)); do [ $n -ge 0 ] && [ $n -le "$L" ] && echo $n; done | sort -un | paste -sd' ')
        for bn in ${NCMOE:-}; do [ "${bn%%:*}" = "$B" ] && ns=${bn#*:} && ns=${ns//,/ }; done
    fi
    echo "=== budget $B: edge0 --vram-budget $vb"
    sampled "e0-$B" "$E0" bench "$M" --prefill 512 --decode 64 --skip-cold --warm-up --vram-budget "$vb" --threads "$T" --json
    for n in $ns; do
        echo "=== budget $B: llama-bench -ngl 99 -ncmoe $n"
        sampled "ll-$B-$n" "$LB/llama-bench" -m "$M" -ngl 99 -ncmoe "$n" -p 512 -n 64 -d 0,512 -r 2 -t "$T" -o csv
    done
done
python3 - "$out" "$runs" <<'EOF'
import csv, glob, io, json, os, sys
out, budgets = sys.argv[1], sys.argv[2].split()
def peak(tag):
    try: return float(open(f"{out}/{tag}.peak").read())
    except Exception: return float("nan")
print("\n| VRAM budget | engine | config | peak MiB | prefill 512 tok/s | decode 64 after 512 tok/s | (llama.cpp: after 0) | edge0 / llama.cpp |")
print("|---|---|---|---|---|---|---|---|")
for B in budgets:
    try:
        t = open(f"{out}/e0-{B}.log").read(); j = json.JSONDecoder().raw_decode(t[t.index("\n{") + 1:])[0]["warm"]
        e = (j["prefill_tok_s"], j["decode_tok_s"])
    except Exception: e = None
    best = None
    for f in sorted(glob.glob(f"{out}/ll-{B}-*.log")):
        tag = os.path.basename(f)[:-4]; n = tag.split("-")[-1]
        lines = [l for l in open(f) if l.startswith("build_commit,") or l.startswith('"')]
        rows = list(csv.DictReader(io.StringIO("".join(lines))))
        # prefill from an empty context, decode after 512 positions as edge0 bench decodes
        # (older llama-bench without n_depth: its decode from an empty context)
        depth = lambda r: r.get("n_depth", "0")
        pp = [float(r["avg_ts"]) for r in rows if r.get("n_prompt") == "512" and depth(r) == "0"]
        tg = [float(r["avg_ts"]) for r in rows if r.get("n_gen") == "64" and depth(r) == "512"]
        tg0 = [float(r["avg_ts"]) for r in rows if r.get("n_gen") == "64" and depth(r) == "0"]
        tg = tg or tg0
        if not pp or not tg: continue
        fits = B == "resident" or peak(tag) <= float(B) * 1024
        print(f"| {B} | llama.cpp | -ngl 99 -ncmoe {n}{'' if fits else ' (over the budget)'} | {peak(tag):.0f} | {pp[0]:.1f} | {tg[0]:.1f} | {tg0[0] if tg0 else float('nan'):.1f} | |")
        if fits and (best is None or tg[0] > best[1]): best = (pp[0], tg[0], n)
    if e:
        r = f"prefill {e[0]/best[0]:.2f}x, decode {e[1]/best[1]:.2f}x (against -ncmoe {best[2]})" if best else "no llama.cpp run fit"
        over = B != "resident" and peak('e0-' + B) > float(B) * 1024
        print(f"| {B} | edge0 | --vram-budget {'auto' if B == 'resident' else B + 'G'}{' (over the budget)' if over else ''} | {peak('e0-' + B):.0f} | {e[0]:.1f} | {e[1]:.1f} | | {r} |")
EOF
rm -rf "$out"

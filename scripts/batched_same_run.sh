#!/usr/bin/env bash
# Batched decode, edge0 against llama.cpp in the same run (issue 16): rounds
# of `scripts/peer_batched.sh GGUF` (llama-batched-bench) and `edge0 bench
# MODEL --batch` (the same npp / ntg / sequence counts), alternating, so a
# drift of the host's memory bandwidth lands on both engines; per sequence
# count, the median aggregate decode tokens/s of each and the median of the
# rounds' ratios.
#
#   scripts/batched_same_run.sh MODEL GGUF [options]
#
# Options:
#   --rounds N       rounds of both engines (default 3)
#   --npp N --ntg N --npl LIST --threads N     (64, 64, 1,2,4,8, 2)
#   --memcap SIZE    both inside scripts/memcap.sh SIZE (llama.cpp without repacking, edge0 with its
#                    default --mem-budget auto), the page cache dropped before each run
#   --e0-args "ARGS" further edge0 bench arguments (e.g. "--io load")
#   --out DIR        keep every round's JSON and logs here (default: a temporary directory, removed)
#   --bin PATH       edge0 (default build/edge0)
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
MODEL= GGUF= ROUNDS=3 NPP=64 NTG=64 NPL=1,2,4,8 THREADS=2 MEMCAP= E0ARGS= OUT= BIN=$ROOT/build/edge0
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) ROUNDS=$2; shift ;;
    --npp) NPP=$2; shift ;;
    --ntg) NTG=$2; shift ;;
    --npl) NPL=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --memcap) MEMCAP=$2; shift ;;
    --e0-args) E0ARGS=$2; shift ;;
    --out) OUT=$2; shift ;;
    --bin) BIN=$2; shift ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;/^set -u/d'; exit 0 ;;
    -*) echo "batched_same_run: unknown option $1" >&2; exit 2 ;;
    *) if [ -z "$MODEL" ]; then MODEL=$1; elif [ -z "$GGUF" ]; then GGUF=$1
       else echo "batched_same_run: MODEL and GGUF only" >&2; exit 2; fi ;;
    esac
    shift
done
[ -n "$MODEL" ] && [ -n "$GGUF" ] || { echo "usage: scripts/batched_same_run.sh MODEL GGUF [options] (--help)" >&2; exit 2; }
[[ $ROUNDS =~ ^[1-9][0-9]?$ ]] || { echo "batched_same_run: --rounds takes 1..99" >&2; exit 2; }
[ -x "$BIN" ] || { echo "batched_same_run: no $BIN (make)" >&2; exit 2; }
KEEP=1
if [ -z "$OUT" ]; then OUT=$(mktemp -d /tmp/edge0-batched-XXXXXX); KEEP=0; fi
mkdir -p "$OUT" || exit 2

PEERARGS=(--npp "$NPP" --ntg "$NTG" --npl "$NPL" --threads "$THREADS")
[ -n "$MEMCAP" ] && PEERARGS+=(--memcap "$MEMCAP")
# shellcheck disable=SC2206 # E0ARGS is a list of words
E0CMD=("$BIN" bench "$MODEL" --skip-cold --skip-warm --batch "$NPL" --prefill "$NPP" --decode "$NTG"
       --threads "$THREADS" --json $E0ARGS)
[ -n "$MEMCAP" ] && E0CMD=("$ROOT/scripts/memcap.sh" "$MEMCAP" -- "${E0CMD[@]}")

drop() { # the model's pages out of the page cache, so a capped run is charged for what it reads
    python3 - "$@" <<'PY'
import os, sys
for path in sys.argv[1:]:
    files = [os.path.join(path, f) for f in os.listdir(path)] if os.path.isdir(path) else [path]
    for f in files:
        if os.path.isfile(f):
            fd = os.open(f, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
PY
}

for r in $(seq 1 "$ROUNDS"); do
    echo "batched_same_run: round $r/$ROUNDS: llama-batched-bench" >&2
    scripts/peer_batched.sh "$GGUF" "${PEERARGS[@]}" --json "$OUT/llama_$r.json" >"$OUT/llama_$r.txt" \
        2>"$OUT/llama_$r.log" || { echo "batched_same_run: peer_batched.sh failed ($OUT/llama_$r.log)" >&2; tail -5 "$OUT/llama_$r.log" >&2; exit 1; }
    echo "batched_same_run: round $r/$ROUNDS: edge0 bench --batch" >&2
    [ -n "$MEMCAP" ] && drop "$MODEL"
    "${E0CMD[@]}" >"$OUT/edge0_$r.json" 2>"$OUT/edge0_$r.log" ||
        { echo "batched_same_run: edge0 bench failed ($OUT/edge0_$r.log)" >&2; tail -5 "$OUT/edge0_$r.log" >&2; exit 1; }
    grep -h '^memcap:' "$OUT/llama_$r.log" "$OUT/edge0_$r.log" >&2
done

python3 - "$OUT" "$ROUNDS" "$MODEL" "$GGUF" "$MEMCAP" <<'PY' || exit 1
import json, statistics as st, sys, re, os
out, rounds, model, gguf, memcap = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def med(v): return st.median(v) if v else float("nan")
L, E, oom = {}, {}, 0
dram = []
for r in range(1, rounds + 1):
    for lv in json.load(open("%s/llama_%d.json" % (out, r)))["levels"]:
        L.setdefault(lv["clients"], []).append(lv["agg_tok_s"])
    e = json.load(open("%s/edge0_%d.json" % (out, r)))
    dram.append(e["dram_bw"] / 1e9)
    for b in e["batched"]:
        E.setdefault(b["seqs"], []).append(b["decode_agg_tok_s"])
    for f in ("llama_%d.log" % r, "edge0_%d.log" % r):
        m = re.search(r"oom kills (\d+)", open(os.path.join(out, f), errors="replace").read())
        if m: oom += int(m.group(1))
print("batched decode, same run: %d rounds alternating; edge0 %s, llama.cpp %s%s" % (
    rounds, model, gguf, ", memcap %s" % memcap if memcap else ""))
print("edge0 bench's DRAM read per round: %s GB/s" % " ".join("%.1f" % d for d in dram))
print("%-5s %12s %12s %8s   %s" % ("seqs", "edge0 tok/s", "llama tok/s", "ratio", "per-round ratios"))
for n in sorted(set(L) & set(E)):
    ratios = [a / b for a, b in zip(E[n], L[n])]
    print("%-5d %12.2f %12.2f %7.2fx   %s" % (n, med(E[n]), med(L[n]), med(ratios),
                                            " ".join("%.2f" % x for x in ratios)))
print("(aggregate generated tokens/s while all sequences decode: llama-batched-bench's S_TG, "
      "edge0 bench --batch; ratio = median of the rounds' edge0 / llama.cpp)")
if memcap: print("oom kills: %d" % oom)
PY
rc=$?
[ "$KEEP" = 0 ] && rm -rf "$OUT"
exit $rc

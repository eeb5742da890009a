#!/usr/bin/env bash
# llama.cpp's batched decode on a GGUF, as the peer figure for scripts/load.py
# (issue 16): llama-batched-bench -npp 64 -ntg 64 -npl 1,2,4,8 -t 2, printed in
# load.py's table form (one row per number of parallel sequences).
#
#   agg tok/s   generated tokens/s of all sequences together while they decode
#               (llama-batched-bench's S_TG: npl x ntg / T_TG)
#   ratio       over the npl = 1 figure
#   e2e tok/s   npl x ntg over the whole time, prefill included (T)
#   TTFT p50    the prefill of all npl prompts in one batch (T_PP), in ms
#   ITL p50     the mean decode step (T_TG / ntg): every step gives each sequence one token
#
#   scripts/peer_batched.sh GGUF [--json FILE]                # warm: the file read into the page cache first
#   scripts/peer_batched.sh GGUF --memcap 8G                  # in an 8 GiB memory cgroup, pages dropped first
#   scripts/load.py MODEL --peer FILE                         # edge0 / llama.cpp per level
#
# Options:
#   --peer DIR       the peer kit (default ~/.cache/edge0-peer: repack/llama-batched-bench, built
#                    by the kit's build_llama.sh); or --bin PATH to the binary itself
#   --npp N --ntg N --npl LIST --threads N     (64, 64, 1,2,4,8, 2)
#   --memcap SIZE    run inside scripts/memcap.sh SIZE (root); implies --no-repack
#   --no-repack      keep the weights in the file mapping. llama.cpp's default (repacking on) copies
#                    the repackable weights into anonymous memory; it is turned off by itself when
#                    the file does not fit in MemAvailable, so the run cannot take the machine's memory
#   --json FILE      the rows as JSON (load.py --peer reads it)
#   --out DIR        keep llama-batched-bench's output and log here
#   -- ARGS          further llama-batched-bench arguments
# The context is sized to what the bench needs (npl x (npp + ntg) tokens), not the model's trained
# length, so the KV cache stays small.
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)

GGUF= PEER=${PEER:-$HOME/.cache/edge0-peer} BIN= NPP=64 NTG=64 NPL=1,2,4,8 THREADS=2 MEMCAP= REPACK=1 JSON= OUT= EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
    --peer) PEER=$2; shift ;;
    --bin) BIN=$2; shift ;;
    --npp) NPP=$2; shift ;;
    --ntg) NTG=$2; shift ;;
    --npl) NPL=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --memcap) MEMCAP=$2; REPACK=0; shift ;;
    --no-repack) REPACK=0 ;;
    --json) JSON=$2; shift ;;
    --out) OUT=$2; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;/^set -u/d'; exit 0 ;;
    -*) echo "peer_batched: unknown option $1" >&2; exit 2 ;;
    *) [ -z "$GGUF" ] || { echo "peer_batched: one GGUF file" >&2; exit 2; }; GGUF=$1 ;;
    esac
    shift
done
[ -n "$GGUF" ] && [ -f "$GGUF" ] || { echo "usage: scripts/peer_batched.sh GGUF [options] (--help)" >&2; exit 2; }
for v in "$NPP" "$NTG" "$THREADS"; do
    [[ $v =~ ^[1-9][0-9]{0,5}$ ]] || { echo "peer_batched: --npp, --ntg and --threads take a positive integer" >&2; exit 2; }
done
[[ $NPL =~ ^[1-9][0-9]{0,3}(,[1-9][0-9]{0,3})*$ ]] || { echo "peer_batched: --npl takes N,N,..." >&2; exit 2; }
if [ -z "$BIN" ]; then
    BIN=$PEER/repack/llama-batched-bench
    [ -x "$BIN" ] || BIN=$PEER/build-repack/bin/llama-batched-bench
fi
[ -x "$BIN" ] || { echo "peer_batched: no llama-batched-bench under $PEER (cmake --build $PEER/build-repack --target llama-batched-bench -j2), or --bin" >&2; exit 2; }
export LD_LIBRARY_PATH=$(dirname "$BIN")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

KEEP=1
if [ -z "$OUT" ]; then OUT=$(mktemp -d /tmp/edge0-peer-batched-XXXXXX); KEEP=0; fi
mkdir -p "$OUT" || exit 2

maxnpl=$(tr , '\n' <<<"$NPL" | sort -n | tail -1)
CTX=$((maxnpl * (NPP + NTG)))
size=$(stat -L -c %s "$GGUF")
avail=$(( $(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) * 1024 ))
if [ "$REPACK" = 1 ] && [ $((size + (1 << 30))) -gt "$avail" ]; then
    echo "peer_batched: $(numfmt --to=iec "$size") of weights would not fit in MemAvailable $(numfmt --to=iec "$avail") once repacked: --no-repack" >&2
    REPACK=0
fi
help=$("$BIN" --help 2>&1)
# llama-batched-bench runs no warm-up: its first level would pay for the first passes' page
# faults (seconds on a 20 GB model). A first, untimed level of the smallest count does; its row
# is dropped below.
first=${NPL%%,*}
ARGS=(-m "$GGUF" -npp "$NPP" -ntg "$NTG" -npl "$first,$NPL" -t "$THREADS" -c "$CTX" --output-format jsonl)
if [ "$REPACK" = 0 ]; then
    if grep -q -- '--no-repack' <<<"$help"; then ARGS+=(--no-repack)
    elif [ -d "$PEER/norepack" ]; then export LD_LIBRARY_PATH=$PEER/norepack:$LD_LIBRARY_PATH
    else echo "peer_batched: this llama.cpp has no --no-repack and $PEER/norepack is missing" >&2; exit 2; fi
fi
grep -q -- '--fit ' <<<"$help" && ARGS+=(--fit off) # no automatic resizing: the context is what we asked

# The page cache: warm (read the file first), or under a cap dropped first so that the
# cgroup is charged for every page the run reads.
python3 - "$GGUF" "$([ -n "$MEMCAP" ] && echo drop || echo warm)" <<'PY' || exit 2
import os, sys
path, how = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDONLY)
if how == "drop":
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
else:
    while os.read(fd, 1 << 24):
        pass
os.close(fd)
PY

CMD=("$BIN" "${ARGS[@]}" "${EXTRA[@]}")
[ -n "$MEMCAP" ] && CMD=("$ROOT/scripts/memcap.sh" "$MEMCAP" -- "${CMD[@]}")
echo "peer_batched: ${CMD[*]}" >&2
"${CMD[@]}" >"$OUT/bench.jsonl" 2>"$OUT/bench.log"
rc=$?
[ -n "$MEMCAP" ] && grep '^memcap:' "$OUT/bench.log" >&2
if [ $rc != 0 ]; then
    echo "peer_batched: llama-batched-bench exited $rc; the end of its log ($OUT/bench.log):" >&2
    tail -n 20 "$OUT/bench.log" >&2
    exit 1
fi

python3 - "$OUT/bench.jsonl" "$JSON" "$GGUF" "$REPACK" "$MEMCAP" "$OUT/bench.log" <<'PY' || exit 1
import json, re, sys
src, out, gguf, repack, memcap, log = sys.argv[1:7]
rows = []
for line in open(src):
    line = line.strip()
    if line.startswith("{"):
        rows.append(json.loads(line))
if len(rows) < 2:
    sys.exit("peer_batched: llama-batched-bench printed no results (see %s)" % log)
rows = rows[1:]  # the warm-up level
levels = []
for r in rows:
    pl, tg = r["pl"], r["tg"]
    levels.append({"clients": pl, "agg_tok_s": r["speed_tg"], "e2e_tok_s": pl * tg / r["t"] if r["t"] else None,
                   "ttft_ms": r["t_pp"] * 1e3, "itl_mean_ms": r["t_tg"] / tg * 1e3 if tg else None,
                   "pp_tok_s": r["speed_pp"], "npp": r["pp"], "ntg": tg, "n_kv_max": r["n_kv_max"]})
m = re.search(r"memcap: limit (\S+), peak (\S+), oom kills (\d+)", open(log, errors="replace").read())
head = "%-6s %10s %7s %10s %9s %9s %8s %8s %12s %10s %6s  %s" % (
    "level", "agg tok/s", "ratio", "e2e tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "late ITL p99",
    "late TTFT", "reqs", "errors")
print("llama-batched-bench: %s, npp %d, ntg %d, %d threads, repack %s%s" % (
    gguf, rows[0]["pp"], rows[0]["tg"], rows[0]["n_threads"], "on" if repack == "1" else "off",
    ", memcap %s" % memcap if memcap else ""))
print(head)
base = next((L["agg_tok_s"] for L in levels if L["clients"] == 1), None)
for L in levels:
    print("%-6d %10.2f %7s %10.2f %9.0f %9s %8.1f %8s %12s %10s %6d  %s" % (
        L["clients"], L["agg_tok_s"], "%.2fx" % (L["agg_tok_s"] / base) if base else "-", L["e2e_tok_s"],
        L["ttft_ms"], "-", L["itl_mean_ms"], "-", "-", "-", L["clients"], "0"))
print("(times in ms; TTFT = the prefill of all sequences' prompts in one batch, ITL = the mean decode step)")
if m:
    print("memcap: limit %s, peak %s, oom kills %s" % m.groups())
if out:
    json.dump({"tool": "llama-batched-bench", "gguf": gguf, "repack": repack == "1", "memcap": memcap or None,
               "levels": levels, "raw": rows}, open(out, "w"), indent=1)
PY
[ "$KEEP" = 0 ] && rm -rf "$OUT"
exit 0

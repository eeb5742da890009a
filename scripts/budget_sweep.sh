#!/usr/bin/env bash
# Does `--mem-budget auto` pick as well as a person would? (issue 15)
#
# For each memory cap, runs `edge0 bench` inside a fresh cgroup of that size
# (scripts/memcap.sh: page cache counted) with no flags, then with
# hand-tuned budgets (fractions of the cap), round after round so drift on a
# shared machine hits every configuration alike. Each run is a cold bench
# (checkpoint pages dropped first): a short prefill, then decode. Reports,
# per cap: the plan auto printed, every configuration's median decode tok/s,
# its OOM kills and the cgroup's peak, and auto / best hand-tuned.
#
#   scripts/budget_sweep.sh MODEL                       # caps 4G 8G 12G, 3 rounds
#   scripts/budget_sweep.sh MODEL --caps "8G" --rounds 5 --fractions "0.8 0.9 0.97"
#
# Options: --caps LIST, --fractions LIST (hand-tuned budgets as shares of the
# cap), --rounds N, --prefill N (16), --decode N (32), --bin PATH
# (build/edge0), --out DIR (keep the logs; default a temp dir, removed).
set -u
cd "$(dirname "$0")/.."
MODEL= CAPS="4G 8G 12G" FRACS="0.8 0.88 0.94 0.97" ROUNDS=3 P=16 N=32 BIN=build/edge0 OUT=
while [ $# -gt 0 ]; do
    case "$1" in
    --caps) CAPS=$2; shift ;;
    --fractions) FRACS=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --prefill) P=$2; shift ;;
    --decode) N=$2; shift ;;
    --bin) BIN=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;/^set -u/d'; exit 0 ;;
    -*) echo "budget_sweep: unknown option $1" >&2; exit 2 ;;
    *) MODEL=$1 ;;
    esac
    shift
done
[ -n "$MODEL" ] || { echo "usage: $0 MODEL [options] (see --help)" >&2; exit 2; }
[ -x "$BIN" ] || { echo "budget_sweep: no binary $BIN (make first)" >&2; exit 2; }
KEEP=1
[ -z "$OUT" ] && { OUT=$(mktemp -d /tmp/edge0-sweep-XXXXXX); KEEP=0; }
mkdir -p "$OUT"
: >"$OUT/runs.tsv" # cap, config, round, decode tok/s, oom kills, peak

for cap in $CAPS; do
    capb=$(numfmt --from=iec "${cap%B}") || exit 2
    configs="auto"
    for f in $FRACS; do configs="$configs $(awk -v c="$capb" -v f="$f" 'BEGIN {printf "%.0fM", c * f / 1048576}')"; done
    for r in $(seq 1 "$ROUNDS"); do
        for cfg in $configs; do
            log=$OUT/$cap-$cfg-$r
            flags=()
            [ "$cfg" != auto ] && flags=(--mem-budget "$cfg")
            scripts/memcap.sh "$cap" -- "$BIN" bench "$MODEL" --skip-warm --prefill "$P" --decode "$N" --json \
                "${flags[@]}" >"$log.json" 2>"$log.err"
            tok=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['cold']['decode_tok_s'])" "$log.json" 2>/dev/null || echo 0)
            oom=$(sed -n 's/.*oom kills \([0-9]*\).*/\1/p' "$log.err")
            peak=$(sed -n 's/.*peak \([^,]*\),.*/\1/p' "$log.err")
            printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$cap" "$cfg" "$r" "$tok" "${oom:-?}" "$peak" >>"$OUT/runs.tsv"
            echo "budget_sweep: cap $cap, $cfg, round $r: decode $tok tok/s, oom kills ${oom:-?}, peak $peak"
            [ "$cfg" = auto ] && [ "$r" = 1 ] &&
                python3 -c "import json,sys; print('  plan:', json.load(open(sys.argv[1]))['io'])" "$log.json" 2>/dev/null
        done
    done
done

python3 - "$OUT/runs.tsv" <<'EOF'
import sys, statistics
from collections import defaultdict
runs = defaultdict(list); ooms = defaultdict(int)
order = []
for line in open(sys.argv[1]):
    cap, cfg, r, tok, oom, peak = line.rstrip("\n").split("\t")
    if (cap, cfg) not in runs: order.append((cap, cfg))
    runs[(cap, cfg)].append(float(tok)); ooms[(cap, cfg)] += int(oom) if oom.isdigit() else 1
print("\ncap    budget      median decode tok/s   runs                     oom kills")
for cap in dict.fromkeys(c for c, _ in order):
    best = ("", 0.0)
    for c, cfg in order:
        if c != cap: continue
        m = statistics.median(runs[(c, cfg)])
        print(f"{cap:6} {cfg:10} {m:12.2f}          {' '.join(f'{x:.2f}' for x in runs[(c, cfg)]):24} {ooms[(c, cfg)]}")
        if cfg != "auto" and m > best[1]: best = (cfg, m)
    a = statistics.median(runs[(cap, "auto")])
    print(f"{cap:6} auto / best hand-tuned ({best[0]}): {a / best[1] if best[1] else 0:.3f}")
EOF
[ "$KEEP" = 0 ] && rm -rf "$OUT"
exit 0

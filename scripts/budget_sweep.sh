#!/usr/bin/env bash
# Does `--mem-budget auto` pick as well as a person would? (issue 15)
#
# For each memory cap, runs `edge0 bench` inside a fresh cgroup of that size
# (scripts/memcap.sh: page cache counted) with no flags, then with
# hand-tuned budgets (fractions of the cap), round after round so drift on a
# shared machine hits every configuration alike. Each run is a cold bench
# (checkpoint pages dropped first): a short prefill, then decode. Reports,
# per cap: the plan auto printed, every configuration's median decode tok/s,
# its OOM kills and the cgroup's peak, and auto / best hand-tuned; then,
# round by round, auto / each hand-tuned budget of the same round (runs
# made one after the other), with the expert bytes each read per decoded
# token and the disk bandwidth `bench` measured at its start.
#
#   scripts/budget_sweep.sh MODEL                       # caps 4G 8G 12G, 3 rounds
#   scripts/budget_sweep.sh MODEL --caps "8G" --rounds 5 --fractions "0.8 0.9 0.97"
#
# Options: --caps LIST, --fractions LIST (hand-tuned budgets as shares of the
# cap), --rounds N, --prefill N (16), --decode N (32), --bin PATH
# (build/edge0), --out DIR (keep the logs; default a temp dir, removed),
# --hand-first (each round runs the hand-tuned budgets before auto, so each
# auto run is compared with the hand-tuned run made just before it).
set -u
cd "$(dirname "$0")/.."
MODEL= CAPS="4G 8G 12G" FRACS="0.8 0.88 0.94 0.97" ROUNDS=3 P=16 N=32 BIN=build/edge0 OUT= HAND_FIRST=0
while [ $# -gt 0 ]; do
    case "$1" in
    --caps) CAPS=$2; shift ;;
    --fractions) FRACS=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --prefill) P=$2; shift ;;
    --decode) N=$2; shift ;;
    --bin) BIN=$2; shift ;;
    --out) OUT=$2; shift ;;
    --hand-first) HAND_FIRST=1 ;;
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
: >"$OUT/runs.tsv" # cap, config, round, decode tok/s, oom kills, peak, MB read/token, disk GB/s

for cap in $CAPS; do
    capb=$(numfmt --from=iec "${cap%B}") || exit 2
    hand=
    for f in $FRACS; do hand="$hand $(awk -v c="$capb" -v f="$f" 'BEGIN {printf "%.0fM", c * f / 1048576}')"; done
    configs="auto$hand"
    [ "$HAND_FIRST" = 1 ] && configs="${hand# } auto"
    for r in $(seq 1 "$ROUNDS"); do
        for cfg in $configs; do
            log=$OUT/$cap-$cfg-$r
            flags=()
            [ "$cfg" != auto ] && flags=(--mem-budget "$cfg")
            scripts/memcap.sh "$cap" -- "$BIN" bench "$MODEL" --skip-warm --prefill "$P" --decode "$N" --json \
                "${flags[@]}" >"$log.json" 2>"$log.err"
            read -r tok mb bw < <(python3 -c "
import json, sys
j = json.load(open(sys.argv[1])); c = j['cold']
print(c['decode_tok_s'], '%.1f' % (c['decode_bytes_read_per_token'] / 1e6), '%.2f' % (j['disk_bw'] / 1e9))" \
                "$log.json" 2>/dev/null || echo "0 0 0")
            oom=$(sed -n 's/.*oom kills \([0-9]*\).*/\1/p' "$log.err")
            peak=$(sed -n 's/.*peak \([^,]*\),.*/\1/p' "$log.err")
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$cap" "$cfg" "$r" "$tok" "${oom:-?}" "$peak" "$mb" "$bw" >>"$OUT/runs.tsv"
            echo "budget_sweep: cap $cap, $cfg, round $r: decode $tok tok/s, oom kills ${oom:-?}, peak $peak, $mb MB read/token, disk $bw GB/s"
            [ "$r" = 1 ] &&
                python3 -c "import json,sys; print('  plan:', json.load(open(sys.argv[1]))['io'])" "$log.json" 2>/dev/null
        done
    done
done

python3 - "$OUT/runs.tsv" <<'EOF'
import sys, statistics
from collections import defaultdict
runs = defaultdict(list); ooms = defaultdict(int)
order = []
rows = {}
for line in open(sys.argv[1]):
    cap, cfg, r, tok, oom, peak, mb, bw = line.rstrip("\n").split("\t")
    if (cap, cfg) not in runs: order.append((cap, cfg))
    runs[(cap, cfg)].append(float(tok)); ooms[(cap, cfg)] += int(oom) if oom.isdigit() else 1
    rows[(cap, cfg, r)] = (float(tok), oom, mb, bw)
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
print("\nper round: auto / hand-tuned of the same round (decode tok/s, oom kills, MB read/token, disk GB/s)")
for c, cfg in order:
    if cfg == "auto": continue
    for r in sorted({k[2] for k in rows if k[0] == c}, key=int):
        a, h = rows.get((c, "auto", r)), rows.get((c, cfg, r))
        if not a or not h: continue
        print(f"{c:6} round {r}: auto {a[0]:.2f} ({a[1]}, {a[2]}, {a[3]}) / {cfg} {h[0]:.2f} "
              f"({h[1]}, {h[2]}, {h[3]}) = {a[0] / h[0] if h[0] else 0:.3f}")
EOF
[ "$KEEP" = 0 ] && rm -rf "$OUT"
exit 0

#!/usr/bin/env bash
# Soak test of `edge0 serve` (not part of make test).
#
# N clients send a mix of requests for M minutes to a server on 127.0.0.1:
# plain and streamed chat, completions, conversations that continue (prefix
# reuse), clients that leave mid-stream, malformed and refused requests,
# /health, /v1/models, /metrics. Then the server is stopped with SIGTERM.
#
# Report: requests served, answers by status, p50/p99 latency, the server's
# RSS after the warm-up and at the end, less the prefix cache's snapshots
# (they fill up to --cache-ram by design; must not grow by more than 5%: a
# fall is no leak, and the cache's bytes partly reuse memory that RSS already
# counted after the warm-up, so the difference can fall while RSS holds), its exit
# status and any sanitizer report. Exit 0 when: the server ran to the end,
# exited 0, reported nothing, answered no 500, and the RSS stayed flat
# (with --hog: it fell by at least half of what the other process took, and
# that process lived).
#
#   scripts/soak.sh                                  # 8 clients, 2 minutes, build/edge0
#   scripts/soak.sh --asan --clients 32 --minutes 10 # the acceptance run: ASan + LSan build
#
# Options:
#   --bin PATH       the edge0 binary (default build/edge0; --asan: build-asan/edge0)
#   --asan           build build-asan/edge0 (ASan + UBSan) first and use it
#   --clients N      concurrent clients (8)
#   --minutes M      duration (2)
#   --warmup S       seconds before the start RSS is taken (60, or a tenth of the run if less)
#   --model DIR      a model directory (default: a tiny synthesized one with the Qwen3 tokenizer)
#   --out DIR        keep logs and per-request records here (default: a temp dir, removed on success)
#   --max-tokens N   largest max_tokens a client asks for (24)
#   --memcap SIZE    run the server in a fresh memory cgroup of SIZE (root; cgroup v1 or v2)
#                    with no --io or budget flags, so edge0 sizes itself (--mem-budget auto);
#                    report the cgroup's usage each minute and its OOM kills (must be 0)
#   --hog SIZE@MIN   at minute MIN, another process in the same cgroup takes SIZE of memory
#                    and holds it to the end (issue 15: the cache must shrink, no OOM kill)
#   -- ARGS          further `edge0 serve` arguments
#
#   scripts/soak.sh --model M --clients 4 --minutes 30 --memcap 8G             # issue 15
#   scripts/soak.sh --model M --clients 4 --minutes 30 --memcap 8G --hog 3G@10
set -u
cd "$(dirname "$0")/.."

BIN=build/edge0 ASAN=0 CLIENTS=8 MINUTES=2 WARMUP= MODEL= OUT= MAXTOK=24 EXTRA=() MEMCAP= HOG=
while [ $# -gt 0 ]; do
    case "$1" in
    --bin) BIN=$2; shift ;;
    --asan) ASAN=1; BIN=build-asan/edge0 ;;
    --clients) CLIENTS=$2; shift ;;
    --minutes) MINUTES=$2; shift ;;
    --warmup) WARMUP=$2; shift ;;
    --model) MODEL=$2; shift ;;
    --out) OUT=$2; shift ;;
    --max-tokens) MAXTOK=$2; shift ;;
    --memcap) MEMCAP=$2; shift ;;
    --hog) HOG=$2; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;/^set -u/d'; exit 0 ;;
    *) echo "soak: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
command -v curl >/dev/null || { echo "soak: needs curl (scripts/deps.sh installs it)" >&2; exit 2; }

if [ "$ASAN" = 1 ]; then
    make --no-print-directory BUILD=build-asan OPT="-O1 -g -fno-omit-frame-pointer" \
        SAN="-fsanitize=address,undefined -fno-sanitize-recover=all" build-asan/edge0 >/dev/null || exit 2
    # A smaller quarantine fills during the warm-up, so RSS can be flat after it; LSan checks leaks at exit.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:quarantine_size_mb=16:malloc_context_size=8}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
fi
[ -x "$BIN" ] || { echo "soak: no binary $BIN (make first, or --asan)" >&2; exit 2; }

KEEP=1
if [ -z "$OUT" ]; then OUT=$(mktemp -d /tmp/edge0-soak-XXXXXX); KEEP=0; fi
mkdir -p "$OUT"
if [ -z "$MODEL" ]; then
    MODEL=$OUT/model
    if [ ! -d "$MODEL" ]; then
        "$BIN" synth --shape tiny "$MODEL" >/dev/null || exit 2
        cp assets/qwen3-tokenizer/tokenizer.json "$MODEL/" || exit 2
    fi
fi
DURATION=$((MINUTES * 60))
[ -z "$WARMUP" ] && WARMUP=$((DURATION / 10 < 60 ? DURATION / 10 : 60))

CG=
IO=(--io pread)
if [ -n "$MEMCAP" ]; then
    limit=$(numfmt --from=iec "${MEMCAP%B}") || exit 2
    if [ -d /sys/fs/cgroup/memory ]; then
        CG=/sys/fs/cgroup/memory/edge0-soak-$$
        mkdir "$CG" && echo "$limit" >"$CG/memory.limit_in_bytes" || exit 2
        cg_usage() { cat "$CG/memory.usage_in_bytes"; }
        cg_ooms() { awk '/oom_kill /{print $2}' "$CG/memory.oom_control"; }
    else
        CG=/sys/fs/cgroup/edge0-soak-$$
        mkdir "$CG" && echo "$limit" >"$CG/memory.max" || exit 2
        cg_usage() { cat "$CG/memory.current"; }
        cg_ooms() { awk '/oom_kill /{print $2}' "$CG/memory.events"; }
    fi
    IO=() # edge0 chooses the I/O mode and the budget from the cgroup's limit
fi
(
    [ -n "$CG" ] && echo $BASHPID >"$CG/cgroup.procs"
    exec "$BIN" serve "$MODEL" --port 0 "${IO[@]}" --max-queue $((CLIENTS * 2 + 8)) --ctx 2048 "${EXTRA[@]}"
) 2>"$OUT/server.log" &
SRV=$!
PORT=
for _ in $(seq 1 600); do
    PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/server.log")
    [ -n "$PORT" ] && break
    kill -0 $SRV 2>/dev/null || break
    sleep 0.1
done
if [ -z "$PORT" ]; then echo "soak: the server did not start:" >&2; cat "$OUT/server.log" >&2; exit 1; fi
URL=http://127.0.0.1:$PORT
rss() { awk '/^VmRSS:/ {printf "%.0f\n", $2 * 1024}' /proc/$SRV/status 2>/dev/null; }
# Bytes of session snapshots the prefix cache holds (--cache-ram): they grow up to its budget by
# design, so the RSS that must stay flat is the RSS less these.
pcache() { curl -s --max-time 5 "$URL/metrics" 2>/dev/null | awk '/^edge0_prefix_cache_bytes / {c = $2} END {printf "%.0f\n", c}'; }
echo "soak: $BIN serve on $URL (pid $SRV), $CLIENTS clients for $MINUTES min, warm-up ${WARMUP}s, logs in $OUT"

# One client: requests until the deadline, one line per request:
#   kind <TAB> status (000: no answer, abort: left on purpose) <TAB> seconds
client() {
    local id=$1 end=$2 rec=$OUT/client-$1.tsv n=0 last="" last_q=""
    RANDOM=$((id * 7919 + 1))
    : >"$rec"
    while [ "$(date +%s)" -lt "$end" ]; do
        n=$((n + 1))
        local r=$((RANDOM % 100)) tok=$((RANDOM % MAXTOK + 1)) kind body url=/v1/chat/completions
        local args=(-s -o "$OUT/c$id.body" -w '%{http_code}\t%{time_total}' --max-time 600)
        local q="client $id question $n: $RANDOM"
        if [ $r -lt 30 ]; then
            kind=chat; body="{\"messages\":[{\"role\":\"user\",\"content\":\"$q\"}],\"max_tokens\":$tok}"
        elif [ $r -lt 50 ]; then
            kind=stream
            body="{\"messages\":[{\"role\":\"user\",\"content\":\"$q\"}],\"max_tokens\":$tok,\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0.8,\"seed\":$n}"
        elif [ $r -lt 60 ]; then
            kind=completion; url=/v1/completions; body="{\"prompt\":\"$q\",\"max_tokens\":$tok}"
        elif [ $r -lt 68 ] && [ -n "$last" ]; then
            kind=continue # the last conversation, one turn further
            body="{\"messages\":[{\"role\":\"user\",\"content\":\"$last_q\"},{\"role\":\"assistant\",\"content\":$last},{\"role\":\"user\",\"content\":\"$q\"}],\"max_tokens\":$tok}"
        elif [ $r -lt 74 ]; then
            kind=leave # a long stream the client abandons
            body="{\"messages\":[{\"role\":\"user\",\"content\":\"$q\"}],\"max_tokens\":1500,\"stream\":true}"
            args=(-s -o /dev/null -w '%{http_code}\t%{time_total}' --max-time 0.$((RANDOM % 9 + 1)))
        elif [ $r -lt 86 ]; then
            case $((RANDOM % 6)) in
            0) kind=bad_json; body='{"messages": [' ;;
            1) kind=bad_role; body='{"messages":[{"role":"robot","content":"x"}]}' ;;
            2) kind=bad_max; body='{"messages":[{"role":"user","content":"x"}],"max_tokens":0}' ;;
            3) kind=bad_type; body='{"messages":"x"}' ;;
            4) kind=not_found; url=/v1/nothing; body='{}' ;;
            5) kind=bad_method; url=/health; body='{}' ;;
            esac
        else
            case $((RANDOM % 3)) in 0) url=/health ;; 1) url=/v1/models ;; 2) url=/metrics ;; esac
            kind=get; body=
        fi
        local t0 res
        t0=$(date +%s.%N)
        if [ -n "$body" ]; then
            res=$(printf '%s' "$body" | curl "${args[@]}" -H 'Content-Type: application/json' --data-binary @- "$URL$url")
        else
            res=$(curl "${args[@]}" "$URL$url")
        fi
        local rc=$?
        if [ "$kind" = leave ] && [ $rc = 28 ]; then
            res="abort	$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN {printf "%.3f", a - b}')"
        fi
        printf '%s\t%s\n' "$kind" "$res" >>"$rec"
        if [ "$kind" = chat ] && [ "${res%%	*}" = 200 ]; then
            # the answer becomes the next "continue" request's history, JSON-escaped by the server already
            last=$(sed -n 's/.*"content":\("\([^"\\]\|\\.\)*"\).*/\1/p' "$OUT/c$id.body" | head -1)
            [ -z "$last" ] && last='""'
            last_q=$q
        fi
    done
}

START=$(date +%s)
END=$((START + DURATION))
for i in $(seq 1 "$CLIENTS"); do client "$i" "$END" & done
sleep "$WARMUP"
RSS0=$(rss) PC0=$(pcache)
echo "soak: RSS after the ${WARMUP}s warm-up: $((RSS0 / 1048576)) MiB (prefix cache $((PC0 / 1048576)) MiB of it)"
: >"$OUT/rss.tsv"
HOGPID=
while [ "$(date +%s)" -lt "$END" ] && kill -0 $SRV 2>/dev/null; do
    printf '%s\t%s\t%s\n' "$(($(date +%s) - START))" "$(rss)" "$([ -n "$CG" ] && cg_usage)" >>"$OUT/rss.tsv"
    if [ -n "$HOG" ] && [ -z "$HOGPID" ] && [ $(($(date +%s) - START)) -ge $((${HOG#*@} * 60)) ]; then
        hog=$(numfmt --from=iec "${HOG%@*}")
        (
            [ -n "$CG" ] && echo $BASHPID >"$CG/cgroup.procs"
            exec python3 -c "import sys, time; b = bytearray($hog); b[::4096] = b'x' * len(b[::4096]); time.sleep(1e6)"
        ) &
        HOGPID=$!
        echo "soak: minute ${HOG#*@}: another process takes ${HOG%@*} (pid $HOGPID)"
    fi
    sleep 10
done
[ -n "$HOGPID" ] && { kill -0 "$HOGPID" 2>/dev/null && HOGALIVE=yes || HOGALIVE=NO; kill "$HOGPID" 2>/dev/null; }
RSS1=$(rss) PC1=$(pcache) # at the deadline, still under load (as the start figure was)
wait_clients() { for p in $(jobs -p); do [ "$p" != "$SRV" ] && wait "$p"; done; }
wait_clients 2>/dev/null
ALIVE=0; kill -0 $SRV 2>/dev/null && ALIVE=1
sleep 2
RSS2=$(rss) # idle
PRESSURE=$(curl -s "$URL/metrics" 2>/dev/null | grep -E '^edge0_(expert_cache_(slots|limit)|memory_pressure)')
curl -s "$URL/metrics" >"$OUT/metrics.txt"
kill -TERM $SRV 2>/dev/null
wait $SRV
EXIT=$?

cat "$OUT"/client-*.tsv >"$OUT/requests.tsv"
TOTAL=$(wc -l <"$OUT/requests.tsv")
echo
echo "== edge0 serve soak: $CLIENTS clients, $MINUTES min, $(basename "$BIN")${ASAN_OPTIONS:+ (ASAN_OPTIONS=$ASAN_OPTIONS)}"
echo "requests sent: $TOTAL ($(awk -v d=$DURATION 'END {printf "%.1f", NR / d}' "$OUT/requests.tsv")/s)"
echo "by kind and status:"
awk -F'\t' '{c[$1 " " $2]++} END {for (k in c) printf "  %-14s %d\n", k, c[k]}' "$OUT/requests.tsv" | sort
echo "answers by status:"
awk -F'\t' '{c[$2]++} END {for (k in c) printf "  %-6s %d\n", k, c[k]}' "$OUT/requests.tsv" | sort
pct() { # kinds... -> "p50 p99 n" of seconds for status 200
    awk -F'\t' -v kinds=" $* " 'index(kinds, " " $1 " ") && $2 == 200 {print $3}' "$OUT/requests.tsv" | sort -g |
        awk '{v[NR] = $1} END {if (!NR) {print "- - 0"; exit}
             i50 = int(0.50 * NR + 0.999); i99 = int(0.99 * NR + 0.999);
             printf "%.3f %.3f %d\n", v[i50 < 1 ? 1 : i50], v[i99 < 1 ? 1 : i99], NR}'
}
read -r P50 P99 NGEN <<<"$(pct chat stream completion continue)"
read -r E50 E99 NERR <<<"$(pct bad_json bad_role bad_max bad_type not_found bad_method get)"
echo "latency of generation requests answered 200 (n=$NGEN): p50 ${P50}s p99 ${P99}s"
echo "latency of other requests (n=$NERR, error answers excluded): p50 ${E50}s p99 ${E99}s"
ERRLAT=$(awk -F'\t' '$1 ~ /^bad_|not_found/ {print $3}' "$OUT/requests.tsv" | sort -g |
    awk '{v[NR] = $1} END {if (NR) printf "p50 %.3fs p99 %.3fs (n=%d)", v[int(0.5 * NR + 0.999)], v[int(0.99 * NR + 0.999)], NR}')
echo "latency of error answers: $ERRLAT"
SERVED=$(awk '/^edge0: .* POST .* 200 /' "$OUT/server.log" | wc -l)
CANCEL=$(awk '/ 499 .*finish=cancelled/' "$OUT/server.log" | wc -l)
echo "server log: $SERVED generation requests served (200), $CANCEL cancelled by clients that left"
echo "prefix reuse: $(awk '/^edge0_cached_prompt_tokens_total / {c = $2} /^edge0_prompt_tokens_total / {p = $2} END {printf "%d of %d prompt tokens cached", c, p}' "$OUT/metrics.txt")"
DRIFT=$(awk -v a="$RSS0" -v b="$RSS1" -v c0="${PC0:-0}" -v c1="${PC1:-0}" \
    'BEGIN {a -= c0; b -= c1; printf "%.2f", (a > 0 ? 100 * (b - a) / a : 999)}')
MAXRSS=$(awk -F'\t' 'BEGIN {m = 0} $2 > m {m = $2} END {print m}' "$OUT/rss.tsv")
echo "RSS under load: $((RSS0 / 1048576)) MiB after the warm-up, $((${RSS1:-0} / 1048576)) MiB at the end, max $((MAXRSS / 1048576)) MiB; idle after the run: $((${RSS2:-0} / 1048576)) MiB"
echo "prefix cache (--cache-ram): $((${PC0:-0} / 1048576)) MiB after the warm-up, $((${PC1:-0} / 1048576)) MiB at the end; RSS less the cache: $(((RSS0 - ${PC0:-0}) / 1048576)) -> $(((${RSS1:-0} - ${PC1:-0}) / 1048576)) MiB (${DRIFT}%, must not grow by more than 5%)"
echo "RSS each minute (s:MiB): $(awk -F'\t' '$1 % 60 < 10 {printf "%d:%d ", $1, $2 / 1048576}' "$OUT/rss.tsv")"
SAN=$(grep -cE 'ERROR: (Address|Leak)Sanitizer|runtime error:|SUMMARY: (Address|Undefined)' "$OUT/server.log")
echo "server: ran to the end: $([ $ALIVE = 1 ] && echo yes || echo NO), exit status $EXIT, sanitizer reports: $SAN"
OOMS=0
if [ -n "$CG" ]; then
    OOMS=$(cg_ooms)
    echo "cgroup $MEMCAP: usage each minute (s:MiB): $(awk -F'\t' '$1 % 60 < 10 {printf "%d:%d ", $1, $3 / 1048576}' "$OUT/rss.tsv"); OOM kills: $OOMS"
    [ -n "$HOG" ] && echo "the ${HOG%@*} process: $([ -n "$HOGPID" ] && echo "alive at the end: ${HOGALIVE:-?}" || echo "never started")"
    grep -m3 'io \|mem budget' "$OUT/server.log" | sed 's/^/plan: /'
    echo "$PRESSURE"
fi
PCB=$(awk '/^edge0_prefix_cache_budget_bytes / {printf "%.0f", $2}' "$OUT/metrics.txt")
PCMAX=$(awk '/^edge0_prefix_cache_bytes / {printf "%.0f", $2}' "$OUT/metrics.txt")
PCOK=1
[ -n "$PCB" ] && [ "${PCB:-0}" -gt 0 ] && [ "${PCMAX:-0}" -gt "$PCB" ] && PCOK=0
[ -n "$PCB" ] && echo "prefix cache at the end: $((${PCMAX:-0} / 1048576)) MiB of its $((PCB / 1048576)) MiB budget$([ $PCOK = 0 ] && echo ": OVER")"
FIVE=$(awk -F'\t' '$2 ~ /^5/ && $2 != 503' "$OUT/requests.tsv" | wc -l)
OK=1
[ $ALIVE = 1 ] && [ $EXIT = 0 ] && [ "$SAN" = 0 ] && [ "$FIVE" = 0 ] && [ "${OOMS:-0}" = 0 ] && [ $PCOK = 1 ] || OK=0
[ -n "$CG" ] && rmdir "$CG" 2>/dev/null
if [ -n "$HOG" ]; then
    # the cache must have given memory back to the other process (at least
    # half of what it took) and that process must have lived
    SHRANK=$(awk -v a="$RSS0" -v b="${RSS1:-0}" -v h="$(numfmt --from=iec "${HOG%@*}")" 'BEGIN {print (a - b >= h / 2) ? "yes" : "NO"}')
    echo "the server gave memory back to the ${HOG%@*} process: $SHRANK ($(((RSS0 - ${RSS1:-0}) / 1048576)) MiB)"
    [ "$SHRANK" = yes ] && [ "${HOGALIVE:-NO}" = yes ] || OK=0
else
    awk -v d="$DRIFT" 'BEGIN {exit !(d <= 5)}' || OK=0
fi
if [ $OK = 1 ]; then
    echo "soak: PASS"
    [ $KEEP = 0 ] && rm -rf "$OUT"
    exit 0
fi
echo "soak: FAIL (logs in $OUT)"
grep -E 'Sanitizer|runtime error' -A20 "$OUT/server.log" | head -60
exit 1

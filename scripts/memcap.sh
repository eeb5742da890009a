#!/usr/bin/env bash
# Runs a command inside a fresh memory cgroup capped at LIMIT (page cache
# included, as the kernel charges it), then reports the cgroup's peak usage,
# OOM kills and the command's exit status. Needs root and the cgroup v1
# memory controller (or cgroup v2 mounted at /sys/fs/cgroup).
#   scripts/memcap.sh 8G -- build/edge0 demo MODEL --mem-budget 7.2G --stats
set -u
[ $# -ge 3 ] && [ "$2" = "--" ] || { echo "usage: $0 LIMIT -- COMMAND..." >&2; exit 2; }
limit=$(numfmt --from=iec "${1%B}") || exit 2
shift 2
name=edge0-memcap-$$
if [ -d /sys/fs/cgroup/memory ]; then
    cg=/sys/fs/cgroup/memory/$name
    mkdir "$cg" || exit 1
    echo "$limit" > "$cg/memory.limit_in_bytes"
    peak_file=$cg/memory.max_usage_in_bytes
    oom() { awk '/oom_kill /{print $2}' "$cg/memory.oom_control"; }
else
    cg=/sys/fs/cgroup/$name
    mkdir "$cg" || exit 1
    echo "$limit" > "$cg/memory.max"
    peak_file=$cg/memory.peak
    oom() { awk '/oom_kill /{print $2}' "$cg/memory.events"; }
fi
( echo $BASHPID > "$cg/cgroup.procs" && exec "$@" )
rc=$?
echo "memcap: limit $(numfmt --to=iec --format=%.2f "$limit"), peak $(numfmt --to=iec --format=%.2f "$(cat "$peak_file")"), oom kills $(oom), exit $rc" >&2
rmdir "$cg" 2>/dev/null
exit $rc

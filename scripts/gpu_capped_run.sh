#!/usr/bin/env bash
# Issue 38's capped GPU condition: a VRAM budget and host memory capped below the model (a
# memory cgroup that counts the page cache, scripts/memcap.sh), both engines on one GGUF file on
# disk (not tmpfs: a tmpfs file's pages are charged to whoever wrote them, not to the cap).
#
#   scripts/gpu_capped_run.sh EDGE0 LLAMA_BIN_DIR MODEL.gguf [VRAM_GIB [CAP]]   (8, 12G)
#
# The file's pages are dropped before each run. edge0: `bench --vram-budget VRAM --skip-warm`,
# then the same with --warm-up (llama-bench's procedure; its host budget from the cgroup's limit;
# prefill 512, decode 32). llama.cpp: `llama-bench
# -ngl 99 -ncmoe N` (mmap, its CPU experts read through the page cache) for the N that
# gpu_same_run.sh estimates for VRAM and the next one up, prefill 512 and decode 16 from an
# empty context, one repetition. Prints each engine's lines, the cgroup's peak and OOM kills,
# and the ratios.
set -eu
E0=$1 LB=$2 M=$3
V=${4:-8} CAP=${5:-12G}
here=$(cd "$(dirname "$0")" && pwd)
T=$(nproc)
drop() { python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$M"; }
info=$("$E0" info "$M" --json --gpu off 2>/dev/null)
read -r L X D < <(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["moe_layers"], j["expert_bytes"], j["non_expert_bytes"])' "$info")
fit=$(python3 -c "import sys; L,X,D,B=map(float,sys.argv[1:]); print(max(0,min(int(L),int((B*2**30-D-1.5*2**30)/(X/L)))))" "$L" "$X" "$D" "$V")
n0=$((L - fit))
echo "capped: $M ($(( (X + D) >> 20 )) MiB), VRAM $V GiB, host memory cgroup $CAP, $T threads"
# edge0 twice: the cold run alone (the first prompt after start), and with --warm-up, which times
# the second of two passes of different ids as llama-bench times its runs after a warm-up pass
# (its warm-up read the file through the same cgroup's page cache; edge0's fills its RAM and VRAM
# expert caches)
for w in "" --warm-up; do
    drop
    echo "=== edge0 bench --vram-budget ${V}G --skip-warm $w inside $CAP"
    "$here/memcap.sh" "$CAP" -- "$E0" bench "$M" --prefill 512 --decode 32 --skip-warm $w --vram-budget "${V}G" \
        --threads "$T" --json > /tmp/capped-e0.json 2> /tmp/capped-e0.err || true
    grep -E "memcap|rror" /tmp/capped-e0.err || true
    python3 -c 'import json,sys; t="\n"+open(sys.argv[1]).read(); j=json.JSONDecoder().raw_decode(t[t.index("\n{")+1:])[0]["cold"]; print("edge0%s: prefill %.2f, decode %.2f tok/s" % (sys.argv[2], j["prefill_tok_s"], j["decode_tok_s"]))' /tmp/capped-e0.json "${w:+ $w}" || true
done
for n in $n0 $((n0 + 2)); do
    [ $n -le "$L" ] || continue
    drop
    echo "=== llama-bench -ngl 99 -ncmoe $n inside $CAP"
    "$here/memcap.sh" "$CAP" -- "$LB/llama-bench" -m "$M" -ngl 99 -ncmoe $n -p 512 -n 16 -r 1 -t "$T" -o csv \
        > /tmp/capped-ll-$n.csv 2> /tmp/capped-ll-$n.err || true
    grep -E "memcap|rror" /tmp/capped-ll-$n.err || true
    python3 -c '
import csv, io, sys
rows = [r for r in csv.DictReader(io.StringIO("".join(l for l in open(sys.argv[1]) if l.startswith("build_commit,") or l.startswith("\""))))]
pp = [float(r["avg_ts"]) for r in rows if r.get("n_prompt") == "512"]
tg = [float(r["avg_ts"]) for r in rows if r.get("n_gen") == "16"]
print("llama.cpp -ncmoe %s: prefill %s, decode %s tok/s" % (sys.argv[2], pp[0] if pp else "-", tg[0] if tg else "-"))' /tmp/capped-ll-$n.csv $n || true
done

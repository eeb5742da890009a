#!/bin/bash
# Session 38, call D (the ~300 s of device time left after call C's start was refused; no
# llama.cpp build fits): test_gpu on this build (the profiled routing kernel with its window read
# at once; segments on by default); the capped condition, edge0 alone, with the whole-layer
# prefill's VRAM victims copied back to the host cache (E0_GPU_HCACHE_PREFILL_KEEP=1, as before)
# and not (0; bench/gpu/hcache_sim.py: disk 70.6% -> 47.8% of the experts a warmed pass); then
# edge0 alone on the 35B shape with Qwen3.6's measured routing (q36p): all resident, VRAM 8 and
# 16 GiB (bench --warm-up, as gpu_same_run.sh runs it), to set against call B's q36p runs.
#   tar -xJf .peer/gpu.tar.xz && DL=285 bash .gpu/s38-callD.sh      carry [".peer"]
. "$(dirname "$0")/prologue.sh" 285
(.gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf /root/q36.gguf > /tmp/synth.log 2>&1; sync; touch /tmp/q36.done
 .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf --route-profile qwen36 /root/q36p.gguf > /tmp/synthp.log 2>&1; touch /tmp/q36p.done) &
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 150 .gpu/bin/test_gpu 2>&1 | grep -v "not here" > /tmp/test_gpu.log
grep -E "^\[|bit-identical|DIFF|FAIL|ERROR|LINE|profile" /tmp/test_gpu.log | grep -v "relative L2" |
    grep -vE "^ +VRAM cache|through a host|64 greedy|batched steps" | head -30
[ -n "${OUT:-}" ] && cp /tmp/test_gpu.log "$OUT/"
while [ ! -e /tmp/q36.done ] && left 200; do sleep 2; done
drop() { python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"; }
for k in 0 1; do # 0 first: the new rule
    left 55 || break
    drop /root/q36.gguf
    echo "=== capped q36 (VRAM 8 GiB, 12 GiB cgroup, pages dropped), --warm-up, E0_GPU_HCACHE_PREFILL_KEEP=$k $(el)"
    E0_GPU_HCACHE_PREFILL_KEEP=$k timeout 75 scripts/memcap.sh 12G -- .gpu/bin/edge0 bench /root/q36.gguf --prefill 512 \
        --decode 32 --skip-warm --warm-up --vram-budget 8G --threads 16 --stats 2>&1 |
        grep -E "memcap|prefill [0-9]|decode [0-9]|cache \(|host expert cache|from disk"
done
while [ ! -e /tmp/q36p.done ] && left 60; do sleep 2; done
for b in auto 8G 16G; do
    left 30 || break
    echo "=== q36p --vram-budget $b $(el)"
    timeout 40 .gpu/bin/edge0 bench /root/q36p.gguf --prefill 512 --decode 64 --skip-cold --warm-up --threads 16 \
        --vram-budget $b --stats 2>&1 | grep -E "prefill [0-9]|decode [0-9]|VRAM expert cache \("
done
echo "=== end $(el)"

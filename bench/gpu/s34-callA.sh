#!/bin/bash
# Session 34, call A of two on one warm machine: leaves llama.cpp's CUDA build (nice 19) and the
# synth files running (setsid) for call B (s34-callB.sh); test_gpu (the host expert cache: every
# budget's logits bit-identical to all resident with misses read into it; the dequantization's
# 2^23 conversions; the split attention against the CPU); all resident, 512-id prompt, decode 64,
# E0_GPU_SPLIT=1 against auto on q36 (alternated), Nsight Compute of a q36 decode step with the
# winner, q30 the same; the winner goes to /tmp/split.choice for call B; then edge0 alone
# in the capped condition (VRAM 8 GiB, 12 GiB cgroup, file on disk, pages dropped) with the host
# expert cache (exclusive, then not: $E0_GPU_HCACHE_EXCL=0) and without it ($E0_GPU_HCACHE=0:
# session 33's path); Nsight Compute last. Pack:
#   rm -rf .gpu && LIMIT_MB=85 SHARED=/work/shared scripts/gpu_pack.sh fixtures/qwen35moe/mlx \
#       gguf/qwen3moe/model-Q4_0.gguf gguf/tiny-qwen35moe/model-Q4_K_M.gguf
#   cp bench/gpu/s34-call[AB].sh .gpu/; rm .gpu/bin/bench_gpu; bash bench/gpu/s34-nou2f.sh > .gpu/nou2f.ptx
#   XZ_OPT=-1 tar -cJf .peer/gpu.tar.xz .gpu
#   (.peer: gpu.tar.xz, llama-src.tar.xz, build_llama.sh); carry [".peer"]:
#   tar -xJf .peer/gpu.tar.xz && DL=560 bash .gpu/s34-callA.sh
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-560}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
nproc; free -g | head -2; df -h /root /dev/shm | tail -2
python3 -c "import transformers; print('transformers', transformers.__version__)" 2>&1 | tail -1
if [ ! -e /tmp/llama.started ]; then
    touch /tmp/llama.started
    mkdir -p /tmp/llama && tar -xJf .peer/llama-src.tar.xz -C /tmp/llama
    CUDA=1 setsid nohup nice -n 19 bash .peer/build_llama.sh /tmp/llama /tmp/peer > /tmp/peer.log 2>&1 < /dev/null &
fi
[ -e /tmp/synth.started ] || { touch /tmp/synth.started; setsid nohup bash -c '
  .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf /root/q36.gguf > /tmp/synth36.log 2>&1; sync; echo ok > /tmp/q36.done
  .gpu/bin/edge0 synth --shape qwen3-30b-a3b --format gguf /dev/shm/q30.gguf > /tmp/synth30.log 2>&1; echo ok > /tmp/q30.done' < /dev/null > /dev/null 2>&1 & }
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 150 .gpu/bin/test_gpu 2>&1 | grep -v "not here" > /tmp/test_gpu.log
grep -E "^\[|worst|host expert cache|DIFF|FAIL|rror" /tmp/test_gpu.log | head -70
[ -n "${OUT:-}" ] && cp /tmp/test_gpu.log "$OUT/"
while [ ! -e /tmp/q36.done ]; do sleep 2; left 200 || break; done
echo "q36: $(tail -1 /tmp/synth36.log) $(el)"
ab() {
    for sp in 1 auto 1 auto; do
        left 120 || break
        echo "=== $1 all resident: E0_GPU_SPLIT=$sp $(el)"
        E0_GPU_SPLIT=$sp timeout 40 .gpu/bin/edge0 bench $2 --prefill 512 --decode 64 --skip-cold --threads 16 2>&1 |
            grep -E "prefill [0-9]|decode [0-9]" | tee -a /tmp/ab-$1-$sp.txt
    done
}
ab q36 /root/q36.gguf
slow() { grep -oE "decode [0-9]+ tokens: [0-9.]+" "$1" 2>/dev/null | grep -oE "[0-9.]+$" | sort -n | head -1; }
a1=$(slow /tmp/ab-q36-1.txt); aa=$(slow /tmp/ab-q36-auto.txt)
echo "q36 decode, the slower of two: one block a head $a1, split $aa tok/s"
if python3 -c "import sys; sys.exit(0 if float(sys.argv[2] or 0) > float(sys.argv[1] or 0) else 1)" "$a1" "$aa"; then
    echo auto > /tmp/split.choice; else echo 1 > /tmp/split.choice; fi
export E0_GPU_SPLIT=$(cat /tmp/split.choice); echo "=> E0_GPU_SPLIT=$E0_GPU_SPLIT from here (and in call B)"
# the dequantization's 2^23 conversions (against a PTX built from the same sources with the
# conversions as before: .gpu/nou2f.ptx) and the new fusions (against E0_GPU_FUSE=1: no mixed-format
# groups of projections, routing apart from the grouping, the experts' sum apart from the next norm)
for v in new nou2f fuse1 new nou2f fuse1; do
    left 260 || break
    echo "=== q36 all resident: $v $(el)"
    case $v in nou2f) export E0_GPU_PTX=.gpu/nou2f.ptx;; fuse1) export E0_GPU_FUSE=1;; esac
    timeout 40 .gpu/bin/edge0 bench /root/q36.gguf --prefill 512 --decode 64 --skip-cold --threads 16 2>&1 |
        grep -E "prefill [0-9]|decode [0-9]"
    unset E0_GPU_PTX E0_GPU_FUSE
done
drop() { python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"; }
for hc in default excl0 0; do
    left 130 || break
    drop /root/q36.gguf
    echo "=== capped, edge0 alone: VRAM 8 GiB, 12 GiB cgroup, host cache: $hc $(el)"
    dec=32
    case $hc in excl0) export E0_GPU_HCACHE_EXCL=0;; 0) export E0_GPU_HCACHE=0; dec=8;; esac
    timeout $(( DL - 30 - ($(date +%s) - T0) )) bash scripts/memcap.sh 12G -- .gpu/bin/edge0 bench /root/q36.gguf --prefill 512 \
        --decode $dec --skip-warm --vram-budget 8G --threads 16 2>&1 | grep -E "memcap|GPU 0|prefill [0-9]|decode [0-9]|cache|disk|rror" | cut -c1-900
    unset E0_GPU_HCACHE E0_GPU_HCACHE_EXCL
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
if left 120 && [ -n "$NCU" ]; then
echo "=== ncu: q36 all resident after a 512-id prompt, decode 2 $(el)"
E0_GPU_GRAPH=0 timeout 100 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --log-file /tmp/ncu36.csv \
    .gpu/bin/edge0 bench /root/q36.gguf --prefill 512 --decode 2 --skip-cold --threads 16 2>&1 | grep -E "decode [0-9]|rror" | tail -2
python3 scripts/ncu_step.py /tmp/ncu36.csv 40 1 | head -24
[ -n "${OUT:-}" ] && xz -1 -c /tmp/ncu36.csv > "$OUT/ncu-q36.csv.xz"
fi
echo "=== llama build: $(ls /tmp/peer/repack 2>/dev/null | grep -c llama-bench) $(tail -1 /tmp/peer.log | cut -c1-150)"
echo "=== end $(el)"

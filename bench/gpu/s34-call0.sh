#!/bin/bash
# Session 34, first device call: test_gpu (the dequantization now converts small integers with
# the 2^23 trick instead of the int-to-float unit: logits must keep their bits and their
# agreement with the CPU; the split attention against the CPU), then all resident, 512-id
# prompt, decode 64: q36 and q30 with E0_GPU_SPLIT=1 (one block a head) against auto (flash
# decoding), alternated; Nsight Compute of a q36 decode step with the split; the disk's direct
# read bandwidth (for the capped path). Pack as split-call.sh says; run with carry [".peer"]:
#   tar -xJf .peer/gpu.tar.xz && DL=330 bash .gpu/call0.sh
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-330}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "import transformers; print('transformers', transformers.__version__)" 2>&1 | tail -1
( .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf /dev/shm/q36.gguf > /tmp/synth36.log 2>&1
  .gpu/bin/edge0 synth --shape qwen3-30b-a3b --format gguf /dev/shm/q30.gguf > /tmp/synth30.log 2>&1 ) &
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 100 .gpu/bin/test_gpu 2>&1 | grep -v "not here" |
    grep -E "RUN|OK|FAIL|ERROR|worst|rel|block a head|bit-identical|PASSED|Assert" | head -60
while ! grep -q "^wrote" /tmp/synth36.log 2>/dev/null; do sleep 2; left 30 || break; done
tail -1 /tmp/synth36.log
ab() {
    for sp in 1 auto 1 auto; do
        left 40 || break
        echo "=== $1 all resident: E0_GPU_SPLIT=$sp $(el)"
        E0_GPU_SPLIT=$sp timeout 30 .gpu/bin/edge0 bench /dev/shm/$1.gguf --prefill 512 --decode 64 --skip-cold --threads 16 2>&1 |
            grep -E "prefill [0-9]|decode [0-9]"
    done
}
ab q36
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
if left 150 && [ -n "$NCU" ]; then
echo "=== ncu: q36 all resident after a 512-id prompt, decode 2, E0_GPU_SPLIT=auto $(el)"
E0_GPU_SPLIT=auto E0_GPU_GRAPH=0 timeout 100 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --log-file /tmp/ncu36.csv \
    .gpu/bin/edge0 bench /dev/shm/q36.gguf --prefill 512 --decode 2 --skip-cold --threads 16 2>&1 | grep -E "decode [0-9]|rror" | tail -2
python3 scripts/ncu_step.py /tmp/ncu36.csv 40 1 | head -30
[ -n "${OUT:-}" ] && xz -1 -c /tmp/ncu36.csv > "$OUT/ncu-q36.csv.xz"
fi
while ! grep -q "^wrote" /tmp/synth30.log 2>/dev/null; do sleep 2; left 60 || break; done
ab q30
if left 25; then
echo "=== disk: 4 GiB written, then read direct by 8 readers of 1 MiB blocks $(el)"
df -h /tmp | tail -1
dd if=/dev/zero of=/tmp/disk.bin bs=16M count=256 oflag=direct 2>&1 | tail -1
s=$(date +%s.%N)
for i in 0 1 2 3 4 5 6 7; do dd if=/tmp/disk.bin of=/dev/null bs=1M count=512 skip=$((i * 512)) iflag=direct 2>/dev/null & done; wait
python3 -c "import sys,time; print('direct read, 8 readers: %.2f GB/s' % (4*2**30/(time.time()-float(sys.argv[1]))/1e9))" $s
rm -f /tmp/disk.bin
fi
echo "=== end $(el)"

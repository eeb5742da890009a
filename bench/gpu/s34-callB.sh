#!/bin/bash
# Session 34, call B (right after s34-callA.sh on the same warm machine): the GPU same runs of
# the 35B shape (VRAM 8 and 16 GiB and all resident, scripts/gpu_same_run.sh) and the capped
# condition (scripts/gpu_capped_run.sh: VRAM 8 GiB, 12 GiB cgroup, both engines) first;
# E0_GPU_SPLIT as call A chose. carry [".peer"]:
#   DL=570 bash .gpu/s34-callB.sh
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-570}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
[ -s /tmp/split.choice ] && export E0_GPU_SPLIT=$(cat /tmp/split.choice)
echo "E0_GPU_SPLIT=${E0_GPU_SPLIT:-unset}"
while [ ! -x /tmp/peer/repack/llama-bench ] && left 400; do sleep 5; done
echo "=== llama build: $(ls /tmp/peer/repack 2>/dev/null | grep llama-bench) $(el)"
[ -x /tmp/peer/repack/llama-bench ] || { tail -5 /tmp/peer.log; exit 1; }
echo "=== capped: VRAM 8 GiB, host memory 12 GiB (the 35B shape's file on disk) $(el)"
timeout 260 bash scripts/gpu_capped_run.sh .gpu/bin/edge0 /tmp/peer/repack /root/q36.gguf 8 12G 2>&1
for m in q36; do
    left 150 || break
    f=/root/q36.gguf; [ $m = q30 ] && f=/dev/shm/q30.gguf
    [ -e /tmp/$m.done ] || continue
    echo "=== same run $m, budgets 8 16 resident $(el)"
    timeout $(( DL - 10 - ($(date +%s) - T0) )) bash scripts/gpu_same_run.sh .gpu/bin/edge0 /tmp/peer/repack $f 8 16 2>&1 |
        grep -vE "^edge0 bench: |^ *\"|^[{}]|^build_commit|^\"" || true
done
echo "=== end $(el)"

#!/bin/bash
# Session 36, call D (right after s36-callC.sh on the same warm machine): the GPU same run of the 35B
# shape, VRAM 8 and 16 GiB and all resident (scripts/gpu_same_run.sh), with the next layer's guesses
# on (the default since this session) and a decode call's routing read back in one round trip.
#   DL=560 bash .gpu/s36-callD.sh      carry [".peer"]
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-560}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
while { [ ! -e /tmp/q36.done ] || [ ! -x /tmp/peer/repack/llama-bench ]; } && left 300; do sleep 5; done
echo "=== q36: $(cat /tmp/q36.done 2>/dev/null); llama build: $(ls /tmp/peer/repack 2>/dev/null | grep -c llama-bench) $(el)"
[ -x /tmp/peer/repack/llama-bench ] || { tail -5 /tmp/peer.log; exit 1; }
echo "=== same run q36, budgets 8 16 resident $(el)"
timeout $(( DL - 10 - ($(date +%s) - T0) )) bash scripts/gpu_same_run.sh .gpu/bin/edge0 /tmp/peer/repack /root/q36.gguf 8 16 2>&1 |
    grep -vE "^edge0 bench: |^ *\"|^[{}]|^build_commit|^\"" || true
echo "=== end $(el)"

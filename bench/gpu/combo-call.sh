#!/bin/bash
# One device call for when the budget holds only one (session 33): short-call.sh (test_gpu, attend
# against attend_warps on both shapes, serve batched) in its first ~210 s, then the demo model's
# training (issue 41) in the rest, one after the other so that the timings do not share the card.
# Pack as next-call.sh says, plus .peer/train-data.tar.xz; run with carry [".peer"]:
#   tar -xJf .peer/gpu.tar.xz && DL=590 bash .gpu/combo.sh
cd "$(dirname "$0")/.."
T0=$(date +%s)
DL=${DL:-590}
DL=210 bash .gpu/short.sh
cp "${OUT:-/tmp}/run.log" "${OUT:-/tmp}/short.log" 2>/dev/null || true
left=$(( DL - ($(date +%s) - T0) - 25 ))
echo "=== training: budget $left s"
BUDGET=$left bash tools/train/device_train.sh 3000 --batch 64 --eval-every 500 --log-every 100

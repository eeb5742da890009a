#!/bin/bash
# The first of two device calls on one warm machine (session 33): test_gpu and serve on the GPU
# (next-call.sh with PREP=1, which also starts the llama.cpp CUDA build and the synth files with
# setsid for the second call), then the demo model's training (issue 41) in the rest of the call.
# Pack as next-call.sh says, plus .peer/train-data.tar.xz (tools/train/device_train.sh); run with
# carry [".peer"]:
#   tar -xJf .peer/gpu.tar.xz && DL=590 bash .gpu/train.sh
# then, within the machine's idle release, the second call:
#   tar -xJf .peer/gpu.tar.xz && TESTED=1 DL=570 bash .gpu/run.sh
cd "$(dirname "$0")/.."
T0=$(date +%s)
DL=${DL:-590}
PREP=1 DL=120 bash .gpu/run.sh

left=$(( DL - ($(date +%s) - T0) - 25 ))
echo "=== training: budget $left s"
BUDGET=$left bash tools/train/device_train.sh 3000 --batch 64 --eval-every 500 --log-every 100

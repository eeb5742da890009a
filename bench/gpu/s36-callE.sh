#!/bin/bash
# Session 36, call E (right after s36-callD.sh, same warm machine, llama.cpp's CUDA build in
# /tmp/peer/repack): the GPU same run of the Qwen3-30B-A3B shape, VRAM 8 and 16 GiB and all resident.
#   tar -xJf .peer/gpu.tar.xz; bash .gpu/s36-callE.sh      carry [".peer"]
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
T0=$(date +%s)
.gpu/bin/edge0 synth --shape qwen3-30b-a3b --format gguf /root/q30.gguf > /tmp/s30.log 2>&1
echo "synth $(( $(date +%s) - T0 )) s"
timeout 230 bash scripts/gpu_same_run.sh .gpu/bin/edge0 /tmp/peer/repack /root/q30.gguf 8 16 2>&1 |
    grep -vE "^edge0 bench: |^ *\"|^[{}]|^build_commit|^\"|ggml_cuda_init|Device 0"
echo "end $(( $(date +%s) - T0 )) s"

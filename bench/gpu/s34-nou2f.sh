#!/bin/bash
# The kernels' PTX with session 33's dequantization (int-to-float conversions) and every other
# kernel as now: kernels.cu of the working tree, kernels_mm.cuh of commit cacb98b. Prints it.
set -eu
cd "$(dirname "$0")/../.."
t=$(mktemp -d)
cp src/gpu/kernels.cu "$t/"
git show cacb98b:src/gpu/kernels_mm.cuh > "$t/kernels_mm.cuh"
PATH=$PATH:/usr/local/cuda/bin nvcc -ptx -arch=compute_75 -O3 -o "$t/k.ptx" "$t/kernels.cu"
cat "$t/k.ptx"
rm -rf "$t"

#!/usr/bin/env bash
# Packs what a GPU run on the device machine needs into .gpu/ (ignored by
# git: add "/.gpu/" to .git/info/exclude), built here: the stripped test and
# bench programs and edge0, the shared libraries they link that a bare CUDA
# image lacks, and fixtures from $SHARED (default ../shared) -- as many as
# the 64 MiB that travels with the working tree allows, in the order given.
#
#   scripts/gpu_pack.sh [FIXTURE ...]     e.g. fixtures/qwen35moe/mlx gguf/qwen3moe/model-Q4_0.gguf
#
# There: LD_LIBRARY_PATH=$PWD/.gpu/lib E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 .gpu/bin/test_gpu
set -eu
cd "$(dirname "$0")/.."
shared=${SHARED:-../shared}
limit=${LIMIT_MB:-62}
make -j2 build/edge0 build/tests/test_gpu build/bench/bench_gpu build/bench/bench_replica >/dev/null
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib .gpu/shared
for b in build/edge0 build/tests/test_gpu build/bench/bench_gpu build/bench/bench_replica; do strip -o .gpu/bin/"$(basename "$b")" "$b"; done
for b in .gpu/bin/*; do
    ldd "$b" | awk '$3 ~ /^\// {print $3}' | grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' || true
done | sort -u | while read -r l; do cp -L "$l" .gpu/lib/; done
tree_mb() { (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | awk '{print int($1 / 1048576)}'; }
used=$(( $(tree_mb) + $(du -sm .gpu | cut -f1) ))
for f in "$@"; do
    sz=$(du -sm "$shared/$f" | cut -f1)
    if [ $((used + sz)) -gt "$limit" ]; then echo "gpu_pack: $f left out ($sz MiB; $used MiB in use)"; continue; fi
    mkdir -p ".gpu/shared/$(dirname "$f")"
    cp -r "$shared/$f" ".gpu/shared/$f"
    used=$((used + sz))
done
echo "gpu_pack: .gpu holds $(du -sm .gpu | cut -f1) MiB; with the tree about $used MiB"

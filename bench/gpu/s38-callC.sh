#!/bin/bash
# Session 38, call C (a fresh machine, the session's last ~450 s of device time): the profiled
# routing kernel with the window read at once (kernels.cu route_profile: call B's q36p runs spent
# ~2.5 ms a token in it, all resident 132 against 200 tok/s on uniform routing) and segments on by
# default. llama.cpp's llama-bench alone built at once (call A's build_llama.sh failed on
# llama-server); the profiled 35B file made; test_gpu on this build; q36p all resident, edge0
# alone; then the same run on q36p at 8 and 16 GiB against llama.cpp's best -ncmoe of call B
# (30 and 12), without the resident pair (RESIDENT=0).
#   tar -xJf .peer/gpu.tar.xz && DL=440 bash .gpu/s38-callC.sh      carry [".peer"]
. "$(dirname "$0")/prologue.sh" 440
mkdir -p /tmp/llama /tmp/peer && tar -xJf .peer/llama-src.tar.xz -C /tmp/llama
setsid nohup bash -c 'cmake -S /tmp/llama -B /tmp/peer/build-repack -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/peer.log 2>&1 &&
  cmake --build /tmp/peer/build-repack -j16 --target llama-bench >> /tmp/peer.log 2>&1 &&
  cp -a /tmp/peer/build-repack/bin /tmp/peer/repack' < /dev/null > /dev/null 2>&1 &
.gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf --route-profile qwen36 /root/q36p.gguf 2>&1 | tail -1
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 150 .gpu/bin/test_gpu 2>&1 | grep -v "not here" > /tmp/test_gpu.log
grep -E "^\[|bit-identical|DIFF|FAIL|ERROR|LINE|profile" /tmp/test_gpu.log | grep -v "relative L2" |
    grep -vE "^ +VRAM cache|through a host|64 greedy|batched steps" | head -30
[ -n "${OUT:-}" ] && cp /tmp/test_gpu.log "$OUT/"
echo "=== q36p all resident, edge0 alone $(el)"
timeout 45 .gpu/bin/edge0 bench /root/q36p.gguf --prefill 512 --decode 64 --skip-cold --warm-up --threads 16 2>&1 |
    grep -E "prefill [0-9]|decode [0-9]"
while [ ! -x /tmp/peer/repack/llama-bench ] && left 150; do sleep 3; done
echo "=== llama build: $(ls /tmp/peer/repack 2>/dev/null | grep -c llama-bench) $(tail -1 /tmp/peer.log | cut -c1-150) $(el)"
[ -x /tmp/peer/repack/llama-bench ] || exit 0
echo "=== same run q36p, budgets 8 16 $(el)"
NCMOE="8:30 16:12" RESIDENT=0 timeout $(( DL - 5 - ($(date +%s) - T0) )) bash scripts/gpu_same_run.sh .gpu/bin/edge0 \
    /tmp/peer/repack /root/q36p.gguf 8 16 2>&1 | grep -E "^===|^\||decode_tok_s|prefill_tok_s|vram_hit|peak|^\"?build_commit|^\"[0-9a-f]" || true
echo "=== end $(el)"

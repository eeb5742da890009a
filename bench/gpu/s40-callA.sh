#!/bin/bash
# For session 40 (written in 38 for 39 and made one call there after an hour of refused starts;
# session 39 was lent no machine): llama.cpp's llama-bench built at once (setsid, niced; its
# llama-server target failed in session 38, so llama-bench alone); the uniform 35B file made and synced before anything reads it, the 30B
# shape's in /dev/shm beside it; test_gpu on this build (the profiled routing kernel's shared-memory
# form, unverified); the device-staged decode against the host's copies at 16 GiB; the capped
# condition (VRAM 8 GiB, a 12 GiB cgroup, pages dropped, --warm-up) with the host cache's prefill
# rules alternated: keep (the default) against hold (docs/experiments.md session 38:
# bench/gpu/hcache_sim.py predicts 65% -> ~27% of the experts read from disk in the timed
# prefill); then the 30B shape's same run (s40-callC.sh's) once llama-bench is built.
# Pack: rm -rf .gpu && LIMIT_MB=85 SHARED=/work/shared scripts/gpu_pack.sh fixtures/qwen35moe/mlx \
#   gguf/qwen3moe/model-Q4_0.gguf gguf/tiny-qwen35moe/model-Q4_K_M.gguf; cp bench/gpu/s40-call*.sh
#   bench/gpu/prologue.sh .gpu/; rm .gpu/bin/bench_gpu .gpu/bin/bench_replica;
#   XZ_OPT=-6 tar -cJf .peer/gpu.tar.xz .gpu; .peer also holds llama-src.tar.xz (the peer kit's
#   pack_llama_src.sh of erm14254/llama.cpp-minimax-m3-combined, fetched) -- under 64 MiB with the tree
#   tar -xJf .peer/gpu.tar.xz && DL=560 bash .gpu/s40-callA.sh      carry [".peer"]
. "$(dirname "$0")/prologue.sh" 560
if [ -s .peer/llama-src.tar.xz ] && [ ! -e /tmp/peer.started ]; then
    touch /tmp/peer.started
    mkdir -p /tmp/llama /tmp/peer && tar -xJf .peer/llama-src.tar.xz -C /tmp/llama
    setsid nohup nice -n 10 bash -c 'cmake -S /tmp/llama -B /tmp/peer/build-repack -DCMAKE_BUILD_TYPE=Release \
      -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/peer.log 2>&1 &&
      cmake --build /tmp/peer/build-repack -j16 --target llama-bench >> /tmp/peer.log 2>&1 &&
      cp -a /tmp/peer/build-repack/bin /tmp/peer/repack' < /dev/null > /dev/null 2>&1 &
fi
f=/root/q36.gguf
[ -s $f ] || { .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf $f > /tmp/synth36.log 2>&1; sync; } &
sp=$!
f30=/dev/shm/q30.gguf
[ -s $f30 ] || .gpu/bin/edge0 synth --shape qwen3-30b-a3b --format gguf $f30 > /tmp/synth30.log 2>&1 &
sp30=$!
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 150 .gpu/bin/test_gpu 2>&1 | grep -v "not here" > /tmp/test_gpu.log
grep -E "^\[|bit-identical|DIFF|FAIL|ERROR|LINE|profile" /tmp/test_gpu.log | grep -v "relative L2" |
    grep -vE "^ +VRAM cache|through a host|64 greedy|batched steps" | head -30
[ -n "${OUT:-}" ] && cp /tmp/test_gpu.log "$OUT/"
wait $sp
sync
echo "q36: $(tail -1 /tmp/synth36.log | cut -c1-160) $(el)"
# the device-staged decode ($E0_GPU_STAGE=1: routing never leaves the card, misses staged from the
# pinned pages by moe_stage) against the host's copies (the default), uniform routing, the file in the
# page cache: session 38's trace says a 16 GiB layer (94% VRAM hits) waits ~0.1 ms on the host's round
# trip, which the staged step does not make; session 30 measured it -6% at 8 GiB and +1% at 16 GiB
# when the kernels were twice as slow
for b in 16; do
    for s in 0 1 1 0; do
        left 400 || break 2
        echo "=== q36 VRAM $b GiB, E0_GPU_STAGE=$s $(el)"
        E0_GPU_STAGE=$s timeout 40 .gpu/bin/edge0 bench $f --skip-cold --prefill 512 --decode 64 --vram-budget ${b}G \
            --threads 16 --stats 2>&1 | grep -oE "decode [0-9].*|VRAM expert cache \(.*|a decode step.s misses [a-z ]+" | cut -c1-200
    done
done
drop() { python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"; }
for r in keep hold hold keep; do
    left 300 || break
    drop $f
    echo "=== capped q36 (VRAM 8 GiB, 12 GiB cgroup, pages dropped), --warm-up, E0_GPU_HCACHE_PREFILL=$r $(el)"
    E0_GPU_HCACHE_PREFILL=$r timeout 90 scripts/memcap.sh 12G -- .gpu/bin/edge0 bench $f --prefill 512 \
        --decode 32 --skip-warm --warm-up --vram-budget 8G --threads 16 --stats 2>&1 |
        grep -E "memcap|prefill [0-9]|decode [0-9]|cache \(|checkpoint read"
done
wait $sp30
echo "q30: $(tail -1 /tmp/synth30.log | cut -c1-160) $(el)"
# where the 30B shape's all-resident decode step goes (session 36: 0.65x llama.cpp against the 35B
# shape's 0.74x then): each kernel's time with E0_GPU_PROFILE=1 (no graphs), both shapes
for g in $f30 $f; do
    left 260 || break
    echo "=== $(basename $g) all resident, E0_GPU_PROFILE=1, decode 64 after 16 $(el)"
    E0_GPU_PROFILE=1 timeout 60 .gpu/bin/edge0 bench $g --skip-cold --prefill 16 --decode 64 --threads 16 2>&1 |
        grep -E "decode [0-9]|profile|launches" | cut -c1-150
done
while [ ! -x /tmp/peer/repack/llama-bench ] && left 200; do sleep 3; done
echo "=== llama build: $(ls /tmp/peer/repack 2>/dev/null | grep -c llama-bench) $(tail -1 /tmp/peer.log 2>/dev/null | cut -c1-150) $(el)"
if [ -x /tmp/peer/repack/llama-bench ] && left 230; then
    echo "=== same run q30 $(el)"
    NCMOE="8:32 16:7" timeout $(( DL - 10 - ($(date +%s) - T0) )) bash scripts/gpu_same_run.sh .gpu/bin/edge0 \
        /tmp/peer/repack $f30 8 16 2>&1 | grep -E "^===|^\||^model|peak|decode_tok_s|prefill_tok_s|vram_hit" || true
fi
echo "=== end $(el)"

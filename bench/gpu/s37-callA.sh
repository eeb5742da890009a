#!/bin/bash
# For session 37 (written in 36; run in 37 on a9c28bb's build): test_gpu on this build (kernels: the routing's logits in
# registers, x staged four floats a load, Q6_K's bits as aligned words; host: the guessed copies
# issued right after the routing readback; a session in one allocation); then
#  - all resident, 35B shape, decode 128: this build's PTX against 8cd44cc's (.gpu/old.ptx via
#    $E0_GPU_PTX) and against this one with Q6_K's loads as before (.gpu/nq6.ptx: the sources with
#    bench/gpu/s37-nq6.patch applied, nvcc -ptx -arch=compute_75 -O3; ptxas gives mm_q6_k 72
#    registers with the aligned words, 64 without), alternated: the kernels alone;
#  - VRAM 8 and 16 GiB: this binary (the recent policy, the CPU cache's default, now the VRAM
#    cache's too), the same with --opt cache_policy=lru, and 8cd44cc's (.gpu/bin/edge0-old: LRU, the
#    guessed copies after the layer's launches), all with this PTX, alternated;
#  - the 30B shape at 8 and 16 GiB: edge0's peak device memory (nvidia-smi, 100 ms), which went 43
#    and 45 MiB over those budgets in session 36 (callE-same-run-q30.log);
#  - the policies on a checkpoint with Qwen3.6's measured routing, 8 GiB;
#  - one decode step's timeline at 8 GiB ($E0_GPU_TRACE, gpu/trace.c): where the 15 ms go.
# Pack: rm -rf .gpu && LIMIT_MB=85 SHARED=/work/shared scripts/gpu_pack.sh fixtures/qwen35moe/mlx \
#   gguf/qwen3moe/model-Q4_0.gguf gguf/tiny-qwen35moe/model-Q4_K_M.gguf; cp bench/gpu/s37-callA.sh bench/gpu/prologue.sh .gpu/;
#   git show 8cd44cc:src/gpu/kernels.ptx > .gpu/old.ptx; build 8cd44cc's edge0 in a worktree and
#   strip -o .gpu/bin/edge0-old it; the nq6 PTX into .gpu/nq6.ptx; v7 and v7c: git apply
#   bench/gpu/s37-v7.patch, nvcc -ptx -arch=compute_75 -O3 [-DMM_RU=1] -o .gpu/v7[c].ptx src/gpu/kernels.cu,
#   git checkout src/gpu/kernels_mm.cuh; rm .gpu/bin/bench_gpu .gpu/bin/bench_replica;
#   XZ_OPT=-1 tar -cJf .peer/gpu.tar.xz .gpu; move .peer/llama-src.tar.xz and train-data.tar.xz out
#   (the tree and .peer must stay under 64 MiB), then
#   tar -xJf .peer/gpu.tar.xz && DL=540 bash .gpu/s37-callA.sh      carry [".peer"]
. "$(dirname "$0")/prologue.sh" 540
f=/root/q36.gguf f30=/root/q30.gguf
sp=
[ -s $f ] || { { .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf $f > /tmp/synth36.log 2>&1;
                 .gpu/bin/edge0 synth --shape qwen3-30b-a3b --format gguf $f30 > /tmp/synth30.log 2>&1; } & sp=$!; }
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 150 .gpu/bin/test_gpu 2>&1 | grep -v "not here" > /tmp/test_gpu.log
grep -E "^\[|replica|bit-identical|DIFF|FAIL|ERROR|LINE" /tmp/test_gpu.log | grep -v "relative L2" | grep -vE "^ +VRAM cache|through a host|64 greedy|batched steps" | head -40
[ -n "${OUT:-}" ] && cp /tmp/test_gpu.log "$OUT/"
# Session 37's variants: v7 (bench/gpu/s37-v7.patch): Q4_K rows' chunks loaded as vectors before any
# is used, a gate-up pair's two rows together (ptxas sm_90: 100-125 registers); v7c the same with one
# chunk at a time in the plain forms (74-80 plain, 100-104 gate-up); wN: $E0_GPU_VEC_WARPS=N, blocks
# of as few as N warps for the products of few rows (router, shared expert, out projections);
# seg: $E0_GPU_SEGMENTS=1, a budgeted decode step's launches between two routing readbacks as one
# graph each (captured at the first step, replayed after)
echo "=== test_gpu, E0_GPU_SEGMENTS=1 (a budgeted decode step in graphs between the readbacks) $(el)"
E0_GPU_SEGMENTS=1 E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 150 .gpu/bin/test_gpu 2>&1 |
    grep -v "not here" > /tmp/test_gpu_seg.log
grep -E "^\[|bit-identical|DIFF|FAIL|ERROR|LINE" /tmp/test_gpu_seg.log | grep -v "relative L2" | grep -vE "^ +VRAM cache|through a host|64 greedy|batched steps" | head -20
[ -n "${OUT:-}" ] && cp /tmp/test_gpu_seg.log "$OUT/"
echo "=== test_gpu, v7c PTX, E0_GPU_VEC_WARPS=2 $(el)"
E0_GPU_VEC_WARPS=2 E0_GPU_PTX=.gpu/v7c.ptx E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 150 .gpu/bin/test_gpu 2>&1 |
    grep -v "not here" > /tmp/test_gpu_v7c.log
grep -E "^\[|bit-identical|DIFF|FAIL|ERROR|LINE" /tmp/test_gpu_v7c.log | grep -v "relative L2" | grep -vE "^ +VRAM cache|through a host|64 greedy|batched steps" | head -20
[ -n "${OUT:-}" ] && cp /tmp/test_gpu_v7c.log "$OUT/"
[ -n "$sp" ] && wait $sp
run() { timeout 40 $bin bench $1 --prefill 512 --decode ${D:-64} --skip-cold --threads 16 "${@:2}" 2>&1 |
    grep -E "prefill [0-9]|decode [0-9]|VRAM expert cache \(|guessed"; }
for v in 8:new 8:seg 16:new 16:seg 8:old 16:old 8:new 8:seg 16:new 16:seg 8:lru 16:lru; do
    left 40 || break
    b=${v%:*} w=${v#*:}
    bin=.gpu/bin/edge0 opt=
    [ $w = old ] && bin=.gpu/bin/edge0-old
    [ $w = lru ] && opt="--opt cache_policy=lru"
    [ $w = seg ] && export E0_GPU_SEGMENTS=1
    echo "=== q36 VRAM $b GiB: $w binary $opt $(el)"
    run $f --vram-budget ${b}G $opt --stats
    unset E0_GPU_SEGMENTS
done
for v in new neww2 v7 v7c v7cw2 nq6 new neww2 v7 v7c v7cw2 old; do
    left 40 || break
    echo "=== q36 all resident, decode 128: $v PTX $(el)"
    bin=.gpu/bin/edge0
    case $v in
    *w[124]) export E0_GPU_VEC_WARPS=${v##*w} ;;
    esac
    p=${v%w[124]}
    [ $p != new ] && export E0_GPU_PTX=.gpu/$p.ptx
    D=128 run $f
    unset E0_GPU_PTX E0_GPU_VEC_WARPS
done
for b in 8 16; do
    left 40 || break
    echo "=== q30 VRAM $b GiB: peak device memory $(el)"
    base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > /tmp/smi.$b &
    s=$!
    bin=.gpu/bin/edge0 run $f30 --vram-budget ${b}G
    kill $s; wait $s 2>/dev/null
    echo "peak $(( $(sort -n /tmp/smi.$b | tail -1) - base )) MiB over the $base in use before; budget $((b * 1024)) MiB"
done
# one decode step's timeline at 8 GiB ($E0_GPU_TRACE: device and host times of each layer's points)
for b in 8 16; do
    left 60 || break
    echo "=== q36 VRAM $b GiB: the 20th decode step's timeline $(el)"
    E0_GPU_TRACE=20 timeout 40 .gpu/bin/edge0 bench $f --prefill 512 --decode 32 --skip-cold --threads 16 \
        --vram-budget ${b}G > /tmp/trace$b.txt 2>&1
    [ -n "${OUT:-}" ] && cp /tmp/trace$b.txt "$OUT/"
    grep -E "trace|logits" /tmp/trace$b.txt | head -3
    grep -E " layer +(0|1|2|3) " /tmp/trace$b.txt | head -24
done
# the VRAM cache's policies on the 35B shape with Qwen3.6's measured routing (synth --route-profile
# qwen36; no next-layer guesses there): recent (the default) against lru and lfu, decode 128
left 120 && .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf --route-profile qwen36 /root/q36p.gguf \
    > /tmp/synth36p.log 2>&1
for v in recent lru lfu recent lru lfu; do
    left 40 || break
    [ -s /root/q36p.gguf ] || break
    echo "=== q36, Qwen3.6's routing, VRAM 8 GiB, policy $v $(el)"
    bin=.gpu/bin/edge0 D=128 run /root/q36p.gguf --vram-budget 8G --opt cache_policy=$v
done
echo "=== end $(el)"

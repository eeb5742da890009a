#!/bin/bash
# Session 38, call A (session 37's questions, bench/gpu/s37-callA.sh cut down to what decides a
# default, on this session's build): llama.cpp's CUDA build and the 35B files (uniform, then
# Qwen3.6's measured routing) started for call B; then
#  - test_gpu on this build, with E0_GPU_SEGMENTS=1, and with the v7c PTX + E0_GPU_VEC_WARPS=2;
#  - VRAM 8 and 16 GiB, decode 64 after 512 (--warm-up): this build with and without segments
#    (a budgeted decode step's launches between two routing readbacks as graphs), alternated;
#  - all resident, decode 128: this build's PTX against v7 / v7c (bench/gpu/s37-v7.patch) and
#    E0_GPU_VEC_WARPS=2, alternated;
#  - one decode step's timeline at 16 and 8 GiB ($E0_GPU_TRACE).
# Pack (scripts/gpu_pack.sh; the v7 PTXs as in s37-callA.sh's header; .peer also holds
# llama-src.tar.xz and build_llama.sh for the build):
#   tar -xJf .peer/gpu.tar.xz && DL=540 bash .gpu/s38-callA.sh      carry [".peer"]
. "$(dirname "$0")/prologue.sh" 540
if [ -s .peer/llama-src.tar.xz ] && [ ! -e /tmp/peer.started ]; then
    touch /tmp/peer.started
    mkdir -p /tmp/llama && tar -xJf .peer/llama-src.tar.xz -C /tmp/llama
    CUDA=1 setsid nohup nice -n 19 bash .peer/build_llama.sh /tmp/llama /tmp/peer > /tmp/peer.log 2>&1 < /dev/null &
fi
f=/root/q36.gguf
[ -e /tmp/synth.started ] || { touch /tmp/synth.started; setsid nohup bash -c '
  .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf /root/q36.gguf > /tmp/synth36.log 2>&1; sync; echo ok > /tmp/q36.done
  .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf --route-profile qwen36 /root/q36p.gguf > /tmp/synth36p.log 2>&1; sync; echo ok > /tmp/q36p.done' \
  < /dev/null > /dev/null 2>&1 & }
tg() { # tag, then environment for test_gpu
    local tag=$1; shift
    echo "=== test_gpu $tag $(el)"
    env "$@" E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 150 .gpu/bin/test_gpu 2>&1 |
        grep -v "not here" > /tmp/test_gpu_$tag.log
    grep -E "^\[|replica|bit-identical|DIFF|FAIL|ERROR|LINE" /tmp/test_gpu_$tag.log | grep -v "relative L2" |
        grep -vE "^ +VRAM cache|through a host|64 greedy|batched steps" | head -40
    [ -n "${OUT:-}" ] && cp /tmp/test_gpu_$tag.log "$OUT/"
}
tg new E0_GPU_SEGMENTS=0
tg seg E0_GPU_SEGMENTS=1
tg v7cw2 E0_GPU_VEC_WARPS=2 E0_GPU_PTX=.gpu/v7c.ptx
while [ ! -e /tmp/q36.done ] && left 300; do sleep 3; done
echo "q36: $(tail -1 /tmp/synth36.log | cut -c1-200) $(el)"
run() { timeout 45 .gpu/bin/edge0 bench $1 --prefill 512 --decode ${D:-64} --skip-cold --warm-up --threads 16 "${@:2}" 2>&1 |
    grep -E "prefill [0-9]|decode [0-9]|VRAM expert cache \(|guessed"; }
for v in 8:new 8:seg 16:new 16:seg 8:seg 8:new 16:seg 16:new; do
    left 200 || break
    b=${v%:*} w=${v#*:}
    echo "=== q36 VRAM $b GiB: $w $(el)"
    E0_GPU_SEGMENTS=$([ $w = seg ] && echo 1 || echo 0) run $f --vram-budget ${b}G --stats
done
for v in new v7 v7c neww2 v7cw2 v7cw2 neww2 v7c v7 new; do
    left 110 || break
    echo "=== q36 all resident, decode 128: $v $(el)"
    unset E0_GPU_PTX E0_GPU_VEC_WARPS
    case $v in *w2) export E0_GPU_VEC_WARPS=2 ;; esac
    p=${v%w2}
    [ $p != new ] && export E0_GPU_PTX=.gpu/$p.ptx
    D=128 run $f
    unset E0_GPU_PTX E0_GPU_VEC_WARPS
done
for b in 16 8; do
    left 60 || break
    echo "=== q36 VRAM $b GiB: the 20th decode step's timeline (without segments: a traced pass has none) $(el)"
    E0_GPU_TRACE=20 timeout 40 .gpu/bin/edge0 bench $f --prefill 512 --decode 32 --skip-cold \
        --threads 16 --vram-budget ${b}G > /tmp/trace$b.txt 2>&1
    [ -n "${OUT:-}" ] && cp /tmp/trace$b.txt "$OUT/"
    grep -E "trace|logits" /tmp/trace$b.txt | head -3
    grep -E " layer +(0|1|2) " /tmp/trace$b.txt | head -18
done
echo "=== q36p: $(cat /tmp/q36p.done 2>/dev/null) llama build: $(ls /tmp/peer/repack 2>/dev/null | grep -c llama-bench) $(tail -1 /tmp/peer.log | cut -c1-150) $(el)"
echo "=== end $(el)"

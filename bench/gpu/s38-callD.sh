#!/bin/bash
# Session 38, call D (the ~300 s of device time left after call C's start was refused; no
# llama.cpp build fits): test_gpu on this build (the profiled routing kernel with its window read
# at once; segments on by default), then edge0 alone on the 35B shape with Qwen3.6's measured
# routing (q36p): all resident, and VRAM 8 and 16 GiB (bench --warm-up, as gpu_same_run.sh runs
# it), to set against call B's q36p runs of both engines.
#   tar -xJf .peer/gpu.tar.xz && DL=290 bash .gpu/s38-callD.sh      carry [".peer"]
. "$(dirname "$0")/prologue.sh" 290
(.gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf --route-profile qwen36 /root/q36p.gguf > /tmp/synth.log 2>&1; touch /tmp/q36p.done) &
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 150 .gpu/bin/test_gpu 2>&1 | grep -v "not here" > /tmp/test_gpu.log
grep -E "^\[|bit-identical|DIFF|FAIL|ERROR|LINE|profile" /tmp/test_gpu.log | grep -v "relative L2" |
    grep -vE "^ +VRAM cache|through a host|64 greedy|batched steps" | head -30
[ -n "${OUT:-}" ] && cp /tmp/test_gpu.log "$OUT/"
while [ ! -e /tmp/q36p.done ] && left 100; do sleep 2; done
echo "q36p: $(tail -1 /tmp/synth.log | cut -c1-160) $(el)"
for b in auto 8G 16G 8G 16G auto; do
    left 30 || break
    echo "=== q36p --vram-budget $b $(el)"
    timeout 40 .gpu/bin/edge0 bench /root/q36p.gguf --prefill 512 --decode 64 --skip-cold --warm-up --threads 16 \
        --vram-budget $b --stats 2>&1 | grep -E "prefill [0-9]|decode [0-9]|VRAM expert cache \("
done
echo "=== end $(el)"

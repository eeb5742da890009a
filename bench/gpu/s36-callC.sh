#!/bin/bash
# Session 36, call C: llama.cpp's CUDA build and the 35B shape's file started (setsid) for call D's
# same run (s36-callD.sh); meanwhile test_gpu again (test_budgets counts the guesses the host
# cache serves: call B's one failure).
#   pack as in s36-callA.sh (.peer: gpu.tar.xz, llama-src.tar.xz, build_llama.sh), then
#   tar -xJf .peer/gpu.tar.xz && DL=300 bash .gpu/s36-callC.sh      carry [".peer"]
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-300}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [ ! -e /tmp/peer.started ]; then
    touch /tmp/peer.started
    mkdir -p /tmp/llama && tar -xJf .peer/llama-src.tar.xz -C /tmp/llama
    CUDA=1 setsid nohup nice -n 19 bash .peer/build_llama.sh /tmp/llama /tmp/peer > /tmp/peer.log 2>&1 < /dev/null &
fi
[ -e /tmp/synth.started ] || { touch /tmp/synth.started; setsid nohup bash -c '
  .gpu/bin/edge0 synth --shape qwen3.6-35b-a3b --format gguf /root/q36.gguf > /tmp/synth36.log 2>&1; sync; echo ok > /tmp/q36.done
' > /dev/null 2>&1 < /dev/null & }
echo "=== test_gpu $(el)"
E0_SHARED=.gpu/shared E0_REQUIRE_GPU=1 E0_BIN=.gpu/bin/edge0 timeout 150 .gpu/bin/test_gpu 2>&1 | grep -v "not here" > /tmp/test_gpu.log
grep -E "^\[|bit-identical|DIFF|FAIL|ERROR|LINE" /tmp/test_gpu.log | grep -v "relative L2" | grep -vE "^ +VRAM cache|through a host" | head -40
[ -n "${OUT:-}" ] && cp /tmp/test_gpu.log "$OUT/"
while { [ ! -e /tmp/q36.done ] || [ ! -x /tmp/peer/repack/llama-bench ]; } && left 15; do sleep 5; done
echo "=== q36: $(cat /tmp/q36.done 2>/dev/null); llama build: $(ls /tmp/peer/repack 2>/dev/null | grep -c llama-bench) $(tail -1 /tmp/peer.log | cut -c1-150) $(el)"

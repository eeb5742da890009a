#!/bin/bash
# For session 40 (written in 38 for 39; session 39 was lent no machine), right after s40-callA.sh
# on the same warm machine (llama-bench built or building in /tmp/peer; /root/q36.gguf and /root/q36p.gguf made): the GPU same run on the 35B shape with
# Qwen3.6's measured routing (the profile kernel with its window read at once: session 38's call
# D), then the capped same run (scripts/gpu_capped_run.sh) with the host cache's prefill rule that
# call A found faster (RULE=keep|hold).
#   tar -xJf .peer/gpu.tar.xz && DL=560 RULE=? bash .gpu/s40-callB.sh      carry [".peer"]
. "$(dirname "$0")/prologue.sh" 560
export E0_GPU_HCACHE_PREFILL=${RULE:-keep}
echo "E0_GPU_HCACHE_PREFILL=$E0_GPU_HCACHE_PREFILL"
while [ ! -x /tmp/peer/repack/llama-bench ] && left 420; do sleep 3; done
echo "=== llama build: $(ls /tmp/peer/repack 2>/dev/null | grep -c llama-bench) $(tail -1 /tmp/peer.log 2>/dev/null | cut -c1-150) $(el)"
[ -x /tmp/peer/repack/llama-bench ] || exit 0
if [ -s /root/q36p.gguf ] && left 250; then
    echo "=== same run q36p, budgets 8 16 resident $(el)"
    timeout $(( DL - 200 - ($(date +%s) - T0) )) bash scripts/gpu_same_run.sh .gpu/bin/edge0 /tmp/peer/repack \
        /root/q36p.gguf 8 16 2>&1 | grep -E "^===|^\||^model|peak|decode_tok_s|prefill_tok_s|vram_hit" || true
fi
if left 180; then
    echo "=== capped q36 $(el)"
    timeout $(( DL - 10 - ($(date +%s) - T0) )) bash scripts/gpu_capped_run.sh .gpu/bin/edge0 /tmp/peer/repack \
        /root/q36.gguf 8 12G 2>&1 | grep -vE "^ *\"|^[{}]"
fi
echo "=== end $(el)"

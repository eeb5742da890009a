#!/usr/bin/env bash
# Trains the demo model on the device machine (one GPU, PyTorch there; issue 41). Pack here first:
#   tools/corpus/fetch.sh && /usr/bin/python3 tools/corpus/prepare.py     (~/.cache/edge0-train/data)
#   mkdir -p .peer && tar -C ~/.cache/edge0-train -cJf .peer/train-data.tar.xz data
# then run there, with carry [".peer"]:
#   [CONFIG='{"hidden_size": 192}'] [BUDGET=SECONDS] bash tools/train/device_train.sh [STEPS] [extra train.py flags]
# BUDGET cuts STEPS to what fits in that many seconds (train.py --time-budget; the log gives the count).
# The log and the exported folder (hf/: config.json, model.safetensors, the cut tokenizer) come
# back under $OUT; commit the log under bench/train/ with the card and the command.
set -eu
cd "$(dirname "$0")/../.."
steps=${1:-6000}
shift || true
out=${OUT:-/tmp/train-out}
mkdir -p /tmp/train "$out"
tar -xJf .peer/train-data.tar.xz -C /tmp/train
d=/tmp/train/data
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
# the chat's end of turn ends a generation (and the text's end): their ids in the cut vocabulary
python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); ids={a["content"]: a["id"] for a in t["added_tokens"]}
c=json.loads(sys.argv[2]); c["eos_token_id"]=[ids["<|im_end|>"], ids["<|endoftext|>"]]; print(json.dumps(c))' \
    $d/tokenizer.json "${CONFIG:-{\}}" > /tmp/train/config.json
cat /tmp/train/config.json
python3 tools/train/train.py --config /tmp/train/config.json --train $d/train.bin --valid $d/valid.bin --out /tmp/train/run \
    --vocab-size "$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); print(1 + max(list(t["model"]["vocab"].values()) + [a["id"] for a in t["added_tokens"]]))' $d/tokenizer.json)" \
    --tokenizer $d --steps "$steps" --test $d/test.bin ${BUDGET:+--time-budget "$BUDGET"} --device cuda --amp bf16 --seed 41 "$@" 2>&1 | tee "$out/train.log"
cp -r /tmp/train/run/hf "$out/hf"
cp $d/CORPUS-LICENSE $d/stats.json $d/baselines.json "$out/"

#!/usr/bin/env bash
# The testbed pair under stock SGLang 0.5.15 (DFLASH, block 16) and target-only, on one GPU, with the
# held-out prompts the reference engine measured in results/testbed/reference-cpu/.
#   bash results/testbed/sglang_dflash.sh TARGET_DIR DATA_DIR OUT_DIR
# SGLang as in ../shared/device/README.md: triton attention, pytorch sampling, no grammar backend.
set -euo pipefail
TARGET=$1; DATA=$2; OUT_DIR=$3
SERVER=(--server-arg=--attention-backend --server-arg=triton --server-arg=--sampling-backend
        --server-arg=pytorch --server-arg=--grammar-backend --server-arg=none
        --server-arg=--mem-fraction-static --server-arg=0.3)
python3 -m ddbench sweep --engine sglang --gpus 0 --model "$TARGET" \
  --draft ddbench/assets/SmolLM2-135M-Instruct-DFlash-b16 --methods ar,dflash \
  --datasets gsm8k,humaneval,mt-bench --num-prompts 12 --max-new-tokens 128 --data-dir "$DATA" \
  --out "$OUT_DIR" "${SERVER[@]}"

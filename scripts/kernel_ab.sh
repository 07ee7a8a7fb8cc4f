#!/usr/bin/env bash
# The draft-side round of two versions of the kernels on one GPU, interleaved (needs only torch, triton, typer and
# rich: no SGLang, no pieces). First an untimed pass of each, side by side, so that Triton's cache holds both
# versions' compiles; then PASSES timed passes (default 3), old then new, each a fresh process alone on the GPU.
#   bash scripts/kernel_ab.sh OLD_DIR NEW_DIR OUT [kernel bench flags, e.g. --impls triton --batches 64 --budgets 256]
# OLD_DIR and NEW_DIR hold ddtree_core/ and ddbench/ (e.g. `git archive 77d27da ddtree_core ddbench | tar -x -C old`;
# ddbench.kernels.kernel_bench, or ddbench.kernel_bench before the split). OUT gets nvidia-smi.txt, a folder
# (cells.csv, run.json) and a log per process: warm-{old,new}, {old,new}-{1..PASSES}; then summary.csv, the
# round's medians per pass: `python3 scripts/kernel_ab.py OUT`.
set -uo pipefail
old=$(realpath "$1") new=$(realpath "$2") out=$3
shift 3
flags=("$@")
mkdir -p "$out"
bench() {  # bench DIR NAME: one process of DIR's kernel bench into $out/NAME
  (cd "$1" && PYTHONPATH=$1 python3 -c 'import sys, typer
try:
    from ddbench.kernels.kernel_bench import main
except ImportError:
    from ddbench.kernel_bench import main
sys.argv[0] = "kernel_bench"
typer.run(main)' --out "$out/$2" "${flags[@]}" > "$out/$2.log" 2>&1)
  echo "$2 rc=$? $(date +%T)"
}
nvidia-smi > "$out/nvidia-smi.txt"
bench "$old" warm-old &
bench "$new" warm-new
wait
for pass in $(seq 1 "${PASSES:-3}"); do
  bench "$old" "old-$pass"
  bench "$new" "new-$pass"
done
python3 "$(dirname "$0")/kernel_ab.py" "$out"

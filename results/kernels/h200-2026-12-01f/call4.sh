# call 4: the tiles' candidates found by the scan (the working tree) against the emit kernel after it (sed), rounds
# at 1 x 256 profiled; then the round checked in a CUDA graph against the torch build, and the top-K's GPU tests
export PYTHONPATH=$PWD; K=$OUT/call4; mkdir -p $K; { git status --short; git diff HEAD --stat; } > $K/tree.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $K/gpu.txt
R="python3 -m ddbench.kernel_bench --impls triton --vocabs 152064 --batches 1 --budgets 256 --profile"
{ date; timeout 280 $R --out $K/in_scan; date
  sed -i 's/^_EMIT_IN_SCAN = True/_EMIT_IN_SCAN = False/' ddtree_core/kernels/topk_radix.py; git diff --stat
  timeout 60 $R --out $K/apart; date
  sed -i 's/^_EMIT_IN_SCAN = False/_EMIT_IN_SCAN = True/' ddtree_core/kernels/topk_radix.py; git diff --stat
  timeout 30 $R --out $K/in_scan2; date
  timeout 80 python3 results/kernels/h200-2026-12-01f/graph_check.py 1x256,2x256,64x256 4,12; date
  timeout 150 python3 -m pytest -q -m gpu tests/test_kernels_topk_radix.py -x; date
} > $K/log.txt 2>&1
rm -f $K/apart/run.json $K/in_scan2/run.json $K/in_scan2/kernels.csv

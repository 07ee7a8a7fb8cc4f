# call 1: level 0's prologue in the level build (c745210), rounds at 1 x 256 (drafts x 4 profiled, x 12) and
# 1, 64 x 64; then the same kernel with the prologue off (sed), profiled at 1 x 256
export PYTHONPATH=$PWD; K=$OUT/call1; mkdir -p $K; { git status --short; git diff HEAD --stat; } > $K/tree.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $K/gpu.txt
R="python3 -m ddbench.kernel_bench --impls triton --vocabs 152064"
{ date; timeout 240 $R --batches 1 --budgets 256 --profile --out $K/first; date
  timeout 60 $R --batches 1 --budgets 256 --logit-scale 12 --out $K/first12
  timeout 200 $R --batches 1,64 --budgets 64 --out $K/first64
  timeout 60 $R --batches 1,64 --budgets 64 --logit-scale 12 --out $K/first64x12
  sed -i 's/^    if (FINE_BITS > 0) \& (AHEAD == 0):  # level 0/    if False:  # level 0/' ddtree_core/kernels/tree_build.py
  git diff --stat | tail -1; timeout 240 $R --batches 1 --budgets 256 --profile --out $K/loop; date
} > $K/log.txt 2>&1
rm -f $K/*/run.json; (cd $K && tar czf runs.tgz */ && rm -rf */)

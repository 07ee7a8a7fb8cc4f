# call 1: the build by deviations as a function of its own (noinline), rounds and trees; then inlined again (sed)
export PYTHONPATH=$PWD; K=$OUT/call1; mkdir -p $K; { git status --short; git diff HEAD --stat; } > $K/tree.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $K/gpu.txt
R="python3 -m ddbench.kernel_bench --impls triton --vocabs 152064"
{ timeout 260 $R --batches 1,64 --budgets 256,64 --out $K/ni4
  timeout 60 $R --batches 1,64 --budgets 256,64 --out $K/ni12 --logit-scale 12
  timeout 60 python3 results/kernels/h200-2026-12-01d/check_ref.py 1x256,64x64 4,12,20 ''
  sed -i 's/@triton.jit(noinline=True)/@triton.jit/' ddtree_core/kernels/tree_build.py
  git diff --stat
  timeout 180 $R --batches 1 --budgets 256 --out $K/in4
  timeout 30 $R --batches 1 --budgets 256 --out $K/in12 --logit-scale 12
} > $K/log.txt 2>&1
rm -f $K/ni12/run.json $K/in4/run.json $K/in12/run.json

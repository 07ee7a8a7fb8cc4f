# call 1: the round at 1 x 256 and 64 x 256 with the next kernel let in at the start of: nothing (v0), the mask (v1),
# + the selection (v2); each by sed on the device's copy
export PYTHONPATH=$PWD; K=$OUT/call1; mkdir -p $K; { git status --short; git diff HEAD --stat; } > $K/tree.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $K/gpu.txt
R="python3 -m ddbench.kernel_bench --impls triton --vocabs 152064 --batches 1,64 --budgets 256"
E='s/^    wait_for_inputs(PDL)$/    let_next_start(PDL)\n    wait_for_inputs(PDL)/'
{ date; timeout 300 $R --out $K/v0; date
  sed -i "$E" ddtree_core/kernels/tree_mask.py; git diff --stat
  timeout 80 $R --out $K/v1; date
  sed -i "/Kernel 2's work for one row/{n;$E}" ddtree_core/kernels/topk_radix.py; git diff --stat
  timeout 120 $R --out $K/v2; date
} > $K/log.txt 2>&1
rm -f $K/v1/run.json $K/v2/run.json

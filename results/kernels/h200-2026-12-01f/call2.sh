# call 2 (call 1's machine): + the build (v3), + the tiles' candidates (v4), the rounds checked in a CUDA graph
# against the torch round, then nothing again (v0b)
export PYTHONPATH=$PWD; K=$OUT/call2; mkdir -p $K; { git status --short; git diff HEAD --stat; } > $K/tree.txt
R="python3 -m ddbench.kernel_bench --impls triton --vocabs 152064 --batches 1,64 --budgets 256"
E='s/^    wait_for_inputs(PDL)$/    let_next_start(PDL)\n    wait_for_inputs(PDL)/'
{ date; sed -i "$E" ddtree_core/kernels/tree_mask.py ddtree_core/kernels/tree_build.py
  sed -i "/Kernel 2's work for one row/{n;$E}" ddtree_core/kernels/topk_radix.py; git diff --stat
  timeout 260 $R --out $K/v3; date
  sed -i "/no per-token work on the rest of the tile/{n;$E}" ddtree_core/kernels/topk_radix.py; git diff --stat
  timeout 90 $R --out $K/v4; date
  timeout 90 python3 results/kernels/h200-2026-12-01f/graph_check.py 1x256,64x256 4,12; date  # then: graph_check_call2.py
  git checkout ddtree_core/kernels; git diff --stat
  timeout 60 $R --out $K/v0b; date
} > $K/log.txt 2>&1
rm -f $K/v3/run.json $K/v4/run.json $K/v0b/run.json

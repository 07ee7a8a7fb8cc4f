# call 6: a bushy tree's small last levels sorted in a block of 32 (this commit), against before (git checkout);
# both with TAILS off (sed), so that only the level build compiles (batch 1, budget 256, default drafts)
export PYTHONPATH=$PWD; K=$OUT/call6; mkdir -p $K; { git status --short; git diff HEAD --stat; } > $K/tree.txt
R="python3 -m ddbench.kernel_bench --impls triton --vocabs 152064 --batches 1 --budgets 256"
off() { sed -i 's/"TAILS": n <= 256,/"TAILS": False,/' ddtree_core/kernels/tree_build.py; git diff --stat; }
{ off; timeout 90 $R --out $K/small
  timeout 25 python3 results/kernels/h200-2026-12-01e/small_check.py 4,20
  git checkout ddtree_core/kernels/tree_build.py; off; timeout 70 $R --out $K/before
} > $K/log.txt 2>&1
rm -f $K/*/run.json

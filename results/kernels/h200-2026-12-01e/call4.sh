# call 4 (the machine of calls 2-3): batches 8 and 32, TAILS on (the default) and off (sed), default and chain-like drafts
export PYTHONPATH=$PWD; K=$OUT/call4; mkdir -p $K; { git status --short; git diff HEAD --stat; } > $K/tree.txt
R="python3 -m ddbench.kernel_bench --impls triton --vocabs 152064 --batches 8,32 --budgets 64,256"
{ timeout 60 $R --out $K/tails4; timeout 60 $R --out $K/tails12 --logit-scale 12
  sed -i 's/"TAILS": n <= 256,/"TAILS": False,/' ddtree_core/kernels/tree_build.py; git diff --stat
  timeout 150 $R --out $K/level4; timeout 60 $R --out $K/level12 --logit-scale 12
  git checkout ddtree_core/kernels/tree_build.py
} > $K/log.txt 2>&1
rm -f $K/*/run.json

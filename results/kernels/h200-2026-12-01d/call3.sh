# call 3: the build's k_ranks an argument, TAILS' chain and wide test before the root's stores (this commit);
# rounds with TAILS off, then on (sed), then every tree against the torch build
export PYTHONPATH=$PWD; K=$OUT/call3; mkdir -p $K; { git status --short; git diff HEAD --stat; } > $K/tree.txt
R="python3 -m ddbench.kernel_bench --impls triton --vocabs 152064 --batches 1,64 --budgets 256,64"
{ timeout 90 $R --out $K/base4
  timeout 90 $R --out $K/base12 --logit-scale 12
  sed -i 's/"TAILS": False,/"TAILS": True,/' ddtree_core/kernels/tree_build.py; git diff --stat ddtree_core/kernels/tree_build.py
  timeout 250 $R --out $K/tails12 --logit-scale 12
  timeout 60 $R --out $K/tails4
  timeout 100 python3 results/kernels/h200-2026-12-01d/check_ref.py 1x256,64x64 4,12,20 'TAILS=0'
} > $K/log.txt 2>&1
rm -f $K/*/run.json

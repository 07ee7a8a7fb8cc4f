# call 2: the scan's loads evict_first (this commit's kernel); GPU top-K tests; rounds with TAILS off, then on (sed)
export PYTHONPATH=$PWD; K=$OUT/call2; mkdir -p $K; git status --short > $K/status.txt; git diff HEAD --stat > $K/diffstat.txt
R="python3 -m ddbench.kernel_bench --impls triton --vocabs 152064 --batches 1,64 --budgets 256,64"
{ timeout 120 python3 -m pytest -q -m gpu tests/test_kernels_topk_radix.py
  timeout 90 $R --out $K/base4
  timeout 90 $R --out $K/base12 --logit-scale 12
  sed -i 's/"TAILS": False,/"TAILS": True,/' ddtree_core/kernels/tree_build.py; git diff --stat ddtree_core/kernels/tree_build.py
  timeout 250 $R --out $K/tails12 --logit-scale 12
  timeout 60 $R --out $K/tails4
} > $K/log.txt 2>&1

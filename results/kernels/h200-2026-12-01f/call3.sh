# call 3: the union keeps only the candidates that reach the highest tile floor (the working tree); its selection
# block (UBLOCK) 2,048 (as before), 1,024, 512 by sed; then the union as committed (base); rounds at 1 x 256 profiled
export PYTHONPATH=$PWD; K=$OUT/call3; mkdir -p $K; { git status --short; git diff HEAD --stat; } > $K/tree.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $K/gpu.txt
R="python3 -m ddbench.kernel_bench --impls triton --vocabs 152064 --batches 1 --budgets 256 --profile"
{ date; timeout 280 $R --out $K/u2048; date
  timeout 80 python3 results/kernels/h200-2026-12-01f/graph_check.py 1x256,64x256 4,12; date
  sed -i 's/UBLOCK=min(2048, /UBLOCK=min(1024, /' ddtree_core/kernels/topk_radix.py; git diff --stat
  timeout 60 $R --out $K/u1024; date
  sed -i 's/UBLOCK=min(1024, /UBLOCK=min(512, /' ddtree_core/kernels/topk_radix.py; git diff --stat
  timeout 60 $R --out $K/u512; date
  git checkout ddtree_core/kernels/topk_radix.py; git diff --stat
  timeout 60 $R --out $K/base; date
} > $K/log.txt 2>&1
rm -f $K/u1024/run.json $K/u512/run.json $K/base/run.json

# call 6: the level build's final nodes ranked by merging its levels (MERGE, on by default up to 4 levels: the working
# tree): rounds at 1 x 256 (profiled), chain-like drafts too; the round in a CUDA graph against the torch build;
# rounds at 64 x 64
export PYTHONPATH=$PWD; K=$OUT/call6; mkdir -p $K; { git status --short; git diff HEAD --stat; } > $K/tree.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $K/gpu.txt
R="python3 -m ddbench.kernel_bench --impls triton --vocabs 152064"
{ date; timeout 250 $R --batches 1 --budgets 256 --profile --out $K/b1; date
  timeout 30 $R --batches 1 --budgets 256 --logit-scale 12 --out $K/b1s12; date
  timeout 60 python3 results/kernels/h200-2026-12-01f/graph_check.py 1x256,64x256 4,12; date
  timeout 180 $R --batches 64 --budgets 64 --out $K/b64; date
  timeout 20 $R --batches 64 --budgets 64 --logit-scale 12 --out $K/b64s12; date
} > $K/log.txt 2>&1
rm -f $K/b1s12/run.json $K/b64/run.json $K/b64s12/run.json

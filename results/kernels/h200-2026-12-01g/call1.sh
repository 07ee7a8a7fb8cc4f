# call 1: the build as two kernels (SPLIT: the tails build, then the level build of the rows it left) against one,
# rounds at 1 x 256 (drafts x 4 and x 12), profiled; then one warp for the walk (sed)
export PYTHONPATH=$PWD; K=$OUT/call1; mkdir -p $K; { git status --short; git diff HEAD --stat; } > $K/tree.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $K/gpu.txt
R="python3 -m ddbench.kernel_bench --impls triton --vocabs 152064 --batches 1 --budgets 256 --profile"
ON='s/^        "SPLIT": False,$/        "SPLIT": True,/'; OFF='s/^        "SPLIT": True,$/        "SPLIT": False,/'
{ date; timeout 240 $R --out $K/one; date
  timeout 60 $R --out $K/one12 --logit-scale 12; date
  sed -i "$ON" ddtree_core/kernels/tree_build.py; git diff --stat | tail -1
  timeout 240 $R --out $K/split; date
  timeout 60 $R --out $K/split12 --logit-scale 12; date
  sed -i "$OFF" ddtree_core/kernels/tree_build.py; git diff --stat | tail -1
  timeout 40 $R --out $K/one_b; date
  sed -i "$ON" ddtree_core/kernels/tree_build.py; git diff --stat | tail -1
  timeout 40 $R --out $K/split_b; date
  sed -i 's/num_warps=4 if w_pad >= 512 else 1,/num_warps=1,/' ddtree_core/kernels/tree_walk.py; git diff --stat | tail -1
  timeout 60 $R --out $K/split_walk1; date
} > $K/log.txt 2>&1
rm -f $K/*/run.json; (cd $K && tar czf runs.tgz */ && rm -rf */)

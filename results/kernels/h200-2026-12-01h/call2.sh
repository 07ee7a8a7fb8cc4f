# call 2: level 0's prologue (c745210): the Triton round in a CUDA graph against the torch build, the 1 x 256 round
# three more times, the GPU kernel tests
export PYTHONPATH=$PWD; K=$OUT/call2; mkdir -p $K; { git status --short; git diff HEAD --stat; } > $K/tree.txt
R="python3 -m ddbench.kernel_bench --impls triton --vocabs 152064 --batches 1 --budgets 256"
{ date; timeout 200 python3 results/kernels/h200-2026-12-01f/graph_check.py 1x256,2x256,64x256 4,12; date
  for i in a b c; do timeout 60 $R --out $K/again_$i; done; date
  timeout 200 python3 -m pytest -q -m gpu tests/test_kernels.py -x; date
} > $K/log.txt 2>&1
rm -f $K/*/run.json; (cd $K && tar czf runs.tgz */ && rm -rf */)

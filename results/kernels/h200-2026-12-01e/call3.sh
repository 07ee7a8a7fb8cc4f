# call 3 (the machine of call 2, its Triton cache warm): the grid at vocab 32,000; GPU top-K tests cut by timeouts before
export PYTHONPATH=$PWD; K=$OUT/call3; mkdir -p $K; { git status --short; git diff HEAD --stat; } > $K/tree.txt
{ date; timeout 300 python3 -m ddbench.kernel_bench --out $K/grid32 --impls triton --vocabs 32000; date
  timeout 200 python3 -m pytest -q -m gpu tests/test_kernels_topk_radix.py -k "nan or graph"; date
} > $K/log.txt 2>&1
rm -f $K/grid32/run.json

# call 2: the grid at vocab 152,064, triton, this commit's default launch (TAILS on up to budget 256)
export PYTHONPATH=$PWD; K=$OUT/call2; mkdir -p $K; { git status --short; git diff HEAD --stat; } > $K/tree.txt
{ date; timeout 570 python3 -m ddbench.kernel_bench --out $K/grid152 --impls triton --vocabs 152064; date
} > $K/log.txt 2>&1

# call 3 (a fresh machine): the issue's grid at vocab 152,064, triton, with level 0's prologue
export PYTHONPATH=$PWD; K=$OUT/call3; mkdir -p $K; { git status --short; git diff HEAD --stat; } > $K/tree.txt
{ date; timeout 470 python3 -m ddbench.kernel_bench --out $K/grid152 --impls triton --vocabs 152064; date
} > $K/log.txt 2>&1

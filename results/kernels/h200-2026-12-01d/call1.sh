# call 1: the build after the top-K's stream, TAILS on and off; then the scan's loads marked evict_first
export PYTHONPATH=$PWD; K=$OUT/call1; mkdir -p $K; git status --short > $K/status.txt; git diff HEAD --stat > $K/diffstat.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $K/gpu.txt
P=results/kernels/h200-2026-12-01d/l2_probe.py
R="python3 -m ddbench.kernel_bench --impls triton --vocabs 152064 --batches 64 --budgets 64"
{ timeout 150 python3 $P 64x64 12 'TAILS=1'
  timeout 60 python3 $P 64x64 4 ''
  timeout 60 $R --out $K/base12 --logit-scale 12
  python3 results/kernels/h200-2026-12-01d/evict_first.py
  timeout 150 python3 $P 64x64 12 'TAILS=1'
  timeout 60 $R --out $K/evict12 --logit-scale 12
  timeout 60 $R --out $K/evict4
} > $K/log.txt 2>&1

# call 4: this commit (TAILS on by default up to budget 256, the scan's loads evict_first): every tree against the
# torch build; then the GPU top-K tests that call 2's timeout cut
export PYTHONPATH=$PWD; K=$OUT/call4; mkdir -p $K; { git status --short; git diff HEAD --stat; } > $K/tree.txt
{ timeout 330 python3 results/kernels/h200-2026-12-01d/check_ref.py 1x256,64x64 4,12,20 ''
  timeout 150 python3 -m pytest -q -m gpu tests/test_kernels_topk_radix.py
} > $K/log.txt 2>&1

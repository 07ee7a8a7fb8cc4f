"""The level build (TAILS off) against the torch build on the GPU, kernel_bench's drafts at batch 1, budget 256.

    python3 results/kernels/h200-2026-12-01e/small_check.py SCALES

For each scale (randn x scale, 16 positions, vocab 152,064, seeds 0-3) prints whether every field of the tree equals
batched.py's.
"""

import sys

import torch

from ddbench.kernel_bench import draft_logits
from ddtree_core.kernels import tree_build
from ddtree_core.tree import build_tree_from_topk, draft_topk

FIELDS = ("token_ids", "parents", "depths", "num_nodes", "scores")

for scale in sys.argv[1].split(","):
    for seed in range(4):
        lists = draft_topk(draft_logits(1, 16, 152064, float(scale), seed, "cuda"), 256, impl="triton")
        tree = tree_build.build_tree_from_topk(lists, 256, 16, 256, launch={"TAILS": False})
        ref = build_tree_from_topk(lists, 256, max_budget=256, impl="torch")
        equal = all(torch.equal(getattr(tree, f), getattr(ref, f)) for f in FIELDS)
        print(f"x {scale} seed {seed}: depth {int(tree.depths.max())}, equal {equal}", flush=True)

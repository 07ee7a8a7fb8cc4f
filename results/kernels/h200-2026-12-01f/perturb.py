"""How far the kernel benchmark's trees move with their log-probs (CPU, torch build).

    python3 results/kernels/h200-2026-12-01f/perturb.py

64 requests, budget 256, the default drafts (randn x 4, seed 1, vocab 152,064): the torch top-K's lists, then the
same lists with each (request, depth) row's log-probs shifted by a uniform offset in [-eps/2, eps/2]; prints which
requests' trees (parents) change. The Triton and torch top-Ks differ by such offsets (their logsumexps round
differently), so trees built from each one's own lists may differ.
"""

import torch

from ddbench.kernel_bench import draft_logits
from ddtree_core.tree import DraftTopK, build_tree_from_topk, draft_topk

logits = draft_logits(64, 16, 152064, 4.0, 1, "cpu")
lists = draft_topk(logits, 256, impl="torch")
tree = build_tree_from_topk(lists, 256, max_budget=256, impl="torch")
for eps in (1e-7, 3e-7, 1e-6):
    offset = (torch.rand(64, 16, 1, generator=torch.Generator().manual_seed(0)) - 0.5) * eps
    moved = build_tree_from_topk(DraftTopK(log_probs=lists.log_probs + offset, token_ids=lists.token_ids), 256,
                                 max_budget=256, impl="torch")
    changed = (moved.parents != tree.parents).any(1).nonzero().flatten().tolist()
    print(f"eps {eps:g}: {len(changed)} of 64 trees change {changed}")

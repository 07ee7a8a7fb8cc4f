"""How tight TAILS' start bound is for each FR (CPU, float64, no kernel): the b-th best score among the chain and its
one-deviation nodes of rank < FR with their rank-0 chains (what `_deviation_keys` counts, before the histogram
buckets round it), beside the b-th best node's score of the reference tree and the depth-1 bound, on kernel_bench's
drafts at batch 1, budget 256 (randn x 12 and x 4, seeds 0-2).

    python3 results/kernels/h200-2026-12-01e/fr_model.py
"""

import torch

from ddbench.kernel_bench import draft_logits
from ddtree_core.tree import build_tree_from_topk, draft_topk

b = 256
for scale in (12.0, 4.0):
    for seed in range(3):
        lists = draft_topk(draft_logits(1, 16, 152064, scale, seed, "cpu"), b, impl="torch")
        lp = lists.log_probs[0].double()  # [16, K]
        D = lp.shape[0]
        chain = torch.cumsum(lp[:, 0], 0)  # chain score at depth d+1
        ref = build_tree_from_topk(lists, b, max_budget=b, impl="reference")
        true_bth = float(ref.scores[0, b])  # score of the b-th node in pop order (node b)
        out = []
        for fr in (2, 4, 8, 16):
            scores = list(chain.tolist())
            for t in range(D):
                base = float(chain[t - 1]) if t > 0 else 0.0
                for r in range(1, fr):
                    s = base + float(lp[t, r])
                    scores.append(s)
                    for j in range(t + 1, D):
                        s += float(lp[j, 0])
                        scores.append(s)
            scores.sort(reverse=True)
            bound = scores[b - 1] if len(scores) >= b else float("-inf")
            out.append(f"FR {fr}: {bound:.2f}")
        depth1 = float(lp[0, b - 1])
        print(f"x{scale:g} seed {seed}: true b-th {true_bth:.2f}, depth-1 rank b-1 {depth1:.2f}; " + ", ".join(out))

"""Device time of the fused mask kernel per launch (ROWS x num_warps, COLS), on the kernel benchmark's trees.

    python3 results/kernels/h200-2026-11-30h/mask_tune.py OUT.csv

Per (batch, budget) cell: the Triton build's trees of kernel_bench's drafts (seed 0, logit scale 4), then every
launch's mask and positions checked against the default launch's, and its kernel time (torch.profiler, 50 calls).
"""

import csv
import sys

import torch

from ddbench.kernel_bench import draft_logits, kernel_times
from ddtree_core.kernels import tree_mask
from ddtree_core.tree import build_tree_from_topk, draft_topk

CELLS = [(1, 256), (1, 64), (8, 256), (8, 64), (64, 64)]
LAUNCHES = [{}] + [{"ROWS": r, "num_warps": w} for r in (1, 2, 4, 8, 16) for w in (1, 2, 4) if r >= w]
LAUNCHES += [{"ROWS": 2, "COLS": 128, "num_warps": 2}, {"ROWS": 2, "COLS": 512, "num_warps": 2}]

rows = []
for batch, budget in CELLS:
    logits = draft_logits(batch, 16, 152064, 4.0, 0, "cuda")
    tree = build_tree_from_topk(draft_topk(logits, budget, impl="triton"), budget, max_budget=budget, impl="triton")
    roots = torch.arange(batch, device="cuda") * 7 + 100
    want = tree_mask.tree_mask(tree, roots)
    for launch in LAUNCHES:
        got = tree_mask.tree_mask(tree, roots, launch=launch)
        equal = torch.equal(got.mask, want.mask) and torch.equal(got.positions, want.positions)
        times = kernel_times(lambda t=tree, r=roots, launch=launch: tree_mask.tree_mask(t, r, launch=launch), calls=50)
        us = sum(t for name, (_, t) in times.items() if "_mask_kernel" in name)
        label = ",".join(f"{k}={v}" for k, v in launch.items()) or "default"
        rows.append({"batch": batch, "budget": budget, "launch": label, "us": round(us, 2), "equal": equal})
        print(batch, budget, label, round(us, 2), equal, flush=True)
with open(sys.argv[1], "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)

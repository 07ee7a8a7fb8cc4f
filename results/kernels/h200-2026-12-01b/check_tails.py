"""TAILS against the default launch on the kernel benchmark's drafts: equal trees, and the share of requests the
build by deviations made (the rest fell back to the level build).

    python3 results/kernels/h200-2026-12-01b/check_tails.py BUDGETS SCALES BATCHES [launch]
"""

import sys

import torch

from ddbench.build_tune import FLAGS
from ddbench.kernel_bench import draft_logits, parse_launches
from ddtree_core.kernels import topk, tree_build

LENGTH = 16


def main(budgets: str, scales: str, batches: str, text: str = "TAILS=1") -> None:
    (launch,) = parse_launches(text, tree_build.LAUNCH_KEYS, FLAGS)
    fields = ("token_ids", "parents", "depths", "num_nodes", "scores", "ranks")
    for budget in map(int, budgets.split(",")):
        for scale in map(float, scales.split(",")):
            for batch in map(int, batches.split(",")):
                for seed in range(3):
                    logits = draft_logits(batch, LENGTH, 152064, scale, seed, "cuda")
                    lists = topk.draft_topk(logits, budget, 1.0)
                    paths = torch.zeros(batch, dtype=torch.int32, device="cuda")
                    expected = tree_build.build_tree_from_topk(lists, budget, LENGTH, budget)
                    tree = tree_build.build_tree_from_topk(lists, budget, LENGTH, budget, launch=launch, paths=paths)
                    equal = all(torch.equal(getattr(tree, f), getattr(expected, f)) for f in fields)
                    depth = expected.depths.max(dim=1).values.float().mean().item()
                    print(f"budget {budget} x{scale:g} batch {batch} seed {seed}: equal {equal}, "
                          f"tails {int(paths.sum())}/{batch}, mean max depth {depth:.1f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main(*sys.argv[1:])

"""TAILS against the default launch on the kernel benchmark's drafts, with per-request budgets and per-request held
chains in one batch: equal trees, and how many requests the build by deviations made itself.

    python3 results/kernels/h200-2026-12-01c/check_mixed.py BUDGETS SCALES BATCH SEEDS

Per cell (budget N, scale, seed): BATCH requests, budgets drawn in [0, N] (the first N), each holding its chain
with probability 1/2, max_depth drawn in [1, 16] (seed-major). One compile per N for each launch.
"""

import sys

import torch

from ddbench.kernel_bench import draft_logits
from ddtree_core.kernels import topk, tree_build

LENGTH = 16


def main(budgets: str, scales: str, batch: str, seeds: str) -> None:
    fields = ("token_ids", "parents", "depths", "num_nodes", "scores", "ranks")
    batch = int(batch)
    unequal = total = by_tails = 0
    for n in map(int, budgets.split(",")):
        for scale in map(float, scales.split(",")):
            for seed in range(int(seeds)):
                generator = torch.Generator().manual_seed(seed)
                logits = draft_logits(batch, LENGTH, 152064, scale, seed, "cuda")
                lists = topk.draft_topk(logits, n, 1.0)
                budget = torch.randint(0, n + 1, (batch,), generator=generator)
                budget[0] = n
                hold = torch.rand(batch, generator=generator) < 0.5
                depth = int(torch.randint(1, LENGTH + 1, (1,), generator=generator))
                budget, hold = budget.cuda(), hold.cuda()
                paths = torch.zeros(batch, dtype=torch.int32, device="cuda")
                expected = tree_build.build_tree_from_topk(lists, budget, depth, n, hold)
                tree = tree_build.build_tree_from_topk(lists, budget, depth, n, hold, launch={"TAILS": True},
                                                       paths=paths)  # fmt: skip
                equal = all(torch.equal(getattr(tree, f), getattr(expected, f)) for f in fields)
                rows = sum(any(not torch.equal(getattr(tree, f)[i], getattr(expected, f)[i]) for f in fields)
                           for i in range(batch))  # fmt: skip
                unequal += not equal
                total += batch
                by_tails += int(paths.sum())
                print(f"N {n} x{scale:g} seed {seed} depth {depth}: equal {equal} ({rows} unequal requests), "
                      f"tails {int(paths.sum())}/{batch}", flush=True)  # fmt: skip
    print(f"cells unequal: {unequal}; requests {total}, built by TAILS {by_tails}")


if __name__ == "__main__":
    main(*sys.argv[1:])

"""The Triton build against the torch one (batched.py, itself checked against the reference heap) on the GPU.

    python3 results/kernels/h200-2026-12-01d/check_ref.py CELLS SCALES 'launch;launch;...'

CELLS like 1x256,64x64; for kernel_bench's drafts at each scale (16 positions, vocab 152,064, seeds 0 and 1) and
each launch ('' the default; key=value pairs of tree_build.LAUNCH_KEYS), prints whether every field of every tree
equals the torch build's, and how many requests the build by deviations (TAILS) made.
"""

import sys

import torch

from ddbench.build_tune import FLAGS
from ddbench.kernel_bench import draft_logits, parse_launches
from ddtree_core.kernels import tree_build
from ddtree_core.tree import build_tree_from_topk, draft_topk

LENGTH = 16
FIELDS = ("token_ids", "parents", "depths", "num_nodes", "scores")


def main(cells: str, scales: str, text: str) -> None:
    launches = [{}] + parse_launches(text, tree_build.LAUNCH_KEYS, FLAGS)
    bad = 0
    for cell in cells.split(","):
        batch, budget = (int(x) for x in cell.split("x"))
        for scale in scales.split(","):
            for seed in (0, 1):
                lists = draft_topk(draft_logits(batch, LENGTH, 152064, float(scale), seed, "cuda"), budget,
                                   impl="triton")
                want = build_tree_from_topk(lists, budget, max_budget=budget, impl="torch")
                for launch in launches:
                    paths = torch.zeros(batch, dtype=torch.int32, device="cuda")
                    got = tree_build.build_tree_from_topk(lists, budget, LENGTH, budget, launch=launch, paths=paths)
                    equal = all(torch.equal(getattr(got, f), getattr(want, f)) for f in FIELDS)
                    bad += not equal
                    label = ",".join(f"{k}={v}" for k, v in launch.items()) or "default"
                    print(f"{cell} x{scale} seed {seed} {label}: equal {equal}, TAILS built {int(paths.sum())}",
                          flush=True)
    print("all equal" if bad == 0 else f"{bad} UNEQUAL", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])

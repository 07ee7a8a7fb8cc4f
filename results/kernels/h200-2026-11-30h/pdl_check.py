"""The Triton round launched with programmatic dependent launch, replayed in a CUDA graph, against plain launches.

    python3 results/kernels/h200-2026-11-30h/pdl_check.py

Per (batch, budget) cell on kernel_bench's drafts: the round's outputs (top-K lists, trees, mask and positions,
walk) from eager launches without PDL (DDTREE_PDL=0), then a CUDA graph of the same round with PDL (the
default) replayed 50 times back to back; every output must be bit-equal after the first replay and after the
last. Prints one line per cell and exits non-zero on any difference.
"""

import os
import sys

import torch

from ddbench.kernel_bench import capture_graph, deep_walk_target, draft_logits
from ddtree_core.kernels import pdl, tree_mask
from ddtree_core.tree import build_tree_from_topk, draft_topk
from ddtree_core.verify import follow_tree

CELLS = [(1, 256), (1, 64), (8, 256), (8, 64), (64, 64)]


def round_outputs(logits, budget, target, roots):
    topk = draft_topk(logits, budget, impl="triton")
    tree = build_tree_from_topk(topk, budget, max_budget=budget, impl="triton")
    shape = tree_mask.tree_mask(tree, roots)
    walk = follow_tree(tree, target, impl="triton")
    return [topk.token_ids, topk.log_probs, tree.parents, tree.token_ids, tree.scores, shape.mask, shape.positions,
            walk.accepted, walk.accept_lens, walk.bonus]  # fmt: skip


def check(batch: int, budget: int) -> bool:
    logits = draft_logits(batch, 16, 152064, 4.0, 0, "cuda")
    roots = torch.arange(batch, device="cuda") * 7 + 100
    os.environ["DDTREE_PDL"] = "0"
    tree = build_tree_from_topk(draft_topk(logits, budget, impl="triton"), budget, max_budget=budget, impl="triton")
    target = deep_walk_target(tree, 0)
    plain = [t.clone() for t in round_outputs(logits, budget, target, roots)]
    os.environ["DDTREE_PDL"] = "1"
    assert pdl.options(logits.device)["PDL"], "PDL is off on this device"
    outputs = []
    graph = capture_graph(lambda: outputs.__setitem__(slice(None), round_outputs(logits, budget, target, roots)))
    graph.replay()
    torch.cuda.synchronize()
    first = all(torch.equal(a, b) for a, b in zip(outputs, plain))
    for _ in range(50):
        graph.replay()
    torch.cuda.synchronize()
    last = all(torch.equal(a, b) for a, b in zip(outputs, plain))
    print(f"batch {batch} budget {budget}: equal after one replay {first}, after 51 {last}", flush=True)
    return first and last


sys.exit(0 if all([check(batch, budget) for batch, budget in CELLS]) else 1)

"""The first graph_check.py, as call 2 ran it: the Triton round as a CUDA graph against the torch round from its own
top-K lists (a comparison this folder's README shows to be too strict: the two top-Ks' log-probs round differently).

    python3 results/kernels/h200-2026-12-01f/graph_check_call2.py CELLS SCALES
"""

import sys

import torch

from ddbench.kernel_bench import capture_graph, deep_walk_target, draft_logits
from ddtree_core import encoding, mask
from ddtree_core.kernels import tree_mask
from ddtree_core.tree import build_tree_from_topk, draft_topk
from ddtree_core.verify import follow_tree

EXACT = ("ids", "token_ids", "parents", "depths", "num_nodes", "mask", "positions", "accepted", "accept_lens", "bonus")


def outputs(logits, budget, target, roots, impl):
    topk = draft_topk(logits, budget, impl=impl)
    tree = build_tree_from_topk(topk, budget, max_budget=budget, impl=impl)
    if impl == "triton":
        shape = tree_mask.tree_mask(tree, roots)
        the_mask, positions = shape.mask, shape.positions
    else:
        the_mask, positions = mask.ancestor_mask(tree, impl=impl), encoding.positions(tree, roots)
    walk = follow_tree(tree, target, impl=impl)
    return {"ids": topk.token_ids, "log_probs": topk.log_probs, "token_ids": tree.token_ids, "parents": tree.parents,
            "depths": tree.depths, "num_nodes": tree.num_nodes, "scores": tree.scores, "mask": the_mask,
            "positions": positions, "accepted": walk.accepted, "accept_lens": walk.accept_lens, "bonus": walk.bonus}


def same(got: dict, want: dict) -> list[str]:
    bad = [k for k in EXACT if not torch.equal(got[k], want[k])]
    finite = torch.isfinite(want["scores"])
    if not torch.equal(torch.isfinite(got["scores"]), finite) or not torch.allclose(
            got["scores"][finite], want["scores"][finite], atol=1e-4, rtol=0):
        bad.append("scores")
    if not torch.allclose(got["log_probs"], want["log_probs"], atol=1e-4, rtol=0):
        bad.append("log_probs")
    return bad


def check(batch: int, budget: int, scale: float, seed: int) -> bool:
    logits = draft_logits(batch, 16, 152064, scale, seed, "cuda")
    roots = torch.arange(batch, device="cuda") * 7 + 100
    tree = build_tree_from_topk(draft_topk(logits, budget, impl="torch"), budget, max_budget=budget, impl="torch")
    target = deep_walk_target(tree, seed)
    want = {k: v.clone() for k, v in outputs(logits, budget, target, roots, "torch").items()}
    got: dict = {}
    graph = capture_graph(lambda: got.update(outputs(logits, budget, target, roots, "triton")))
    graph.replay()
    torch.cuda.synchronize()
    first = same(got, want)
    for _ in range(99):
        graph.replay()
    torch.cuda.synchronize()
    last = same(got, want)
    depth = int(want["accept_lens"].float().mean())
    print(f"{batch}x{budget} x{scale:g} seed {seed}: walk depth {depth}; after 1 replay "
          f"{'equal' if not first else 'DIFFER ' + ','.join(first)}; after 100 "
          f"{'equal' if not last else 'DIFFER ' + ','.join(last)}", flush=True)
    return not first and not last


def main(cells: str, scales: str) -> None:
    results = [check(int(c.split("x")[0]), int(c.split("x")[1]), float(s), seed)
               for c in cells.split(",") for s in scales.split(",") for seed in (0, 1)]
    print("all equal" if all(results) else f"{results.count(False)} DIFFER", flush=True)
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main(*sys.argv[1:])

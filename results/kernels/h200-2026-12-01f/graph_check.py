"""The Triton round as a CUDA graph (PDL edges, as launched by the working tree), replayed, against the torch build.

    python3 results/kernels/h200-2026-12-01f/graph_check.py CELLS SCALES

CELLS like 1x256,64x64. Per cell, scale and seed (kernel_bench's drafts: 16 positions, vocab 152,064): the Triton
top-K lists once, eagerly, and from them the torch tree, ancestor mask, positions and walk; then the Triton round
(its own top-K, build, mask and walk) captured in one CUDA graph and replayed 100 times back to back, every output
compared bit for bit after the first and the last replay. (The torch top-K's log-probs round differently from the
Triton one's, and trees move with them (perturb.py): a torch round from its own lists is not the reference here.)
Exits non-zero on any difference.
"""

import sys

import torch

from ddbench.kernel_bench import capture_graph, deep_walk_target, draft_logits
from ddtree_core import encoding, mask
from ddtree_core.kernels import tree_mask
from ddtree_core.tree import DraftTopK, build_tree_from_topk, draft_topk
from ddtree_core.verify import follow_tree


def outputs(topk: DraftTopK, budget, target, roots, impl):
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


def differ(got: dict, want: dict) -> list[str]:
    return [k for k in want if not torch.equal(got[k], want[k])]


def check(batch: int, budget: int, scale: float, seed: int) -> bool:
    logits = draft_logits(batch, 16, 152064, scale, seed, "cuda")
    roots = torch.arange(batch, device="cuda") * 7 + 100
    lists = draft_topk(logits, budget, impl="triton")
    lists = DraftTopK(log_probs=lists.log_probs.clone(), token_ids=lists.token_ids.clone())
    tree = build_tree_from_topk(lists, budget, max_budget=budget, impl="torch")
    target = deep_walk_target(tree, seed)
    want = {k: v.clone() for k, v in outputs(lists, budget, target, roots, "torch").items()}
    got: dict = {}
    depth = float(want["accept_lens"].float().mean())
    return replayed(lambda: got.update(outputs(draft_topk(logits, budget, impl="triton"), budget, target, roots,
                                               "triton")),
                    lambda: differ(got, want), f"{batch}x{budget} x{scale:g} seed {seed}: mean walk {depth:.1f}")


def replayed(round_, compare, label: str) -> bool:
    """Capture round_ in a CUDA graph, replay it once and 99 times more, compare() (the fields that differ) after
    the first and the last replay; prints label and both verdicts, returns whether both found nothing."""
    graph = capture_graph(round_)
    graph.replay()
    torch.cuda.synchronize()
    first = compare()
    for _ in range(99):
        graph.replay()
    torch.cuda.synchronize()
    last = compare()
    print(f"{label}; after 1 replay {'equal' if not first else 'DIFFER ' + ','.join(first)}; after 100 "
          f"{'equal' if not last else 'DIFFER ' + ','.join(last)}", flush=True)
    return not first and not last


def run(check, cells: str, scales: str) -> None:
    """check(batch, budget, scale, seed) for each cell (BATCHxBUDGET), scale and seed 0-1; exits 1 on any False."""
    results = [check(int(c.split("x")[0]), int(c.split("x")[1]), float(s), seed)
               for c in cells.split(",") for s in scales.split(",") for seed in (0, 1)]
    print("all equal" if all(results) else f"{results.count(False)} DIFFER", flush=True)
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    run(check, *sys.argv[1:])

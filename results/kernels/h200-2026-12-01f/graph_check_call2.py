"""The comparison of the first graph_check.py, as call 2 ran it (its replays and the round's outputs now
graph_check.py's): the Triton round as a CUDA graph against the torch round from its own top-K lists (a comparison
this folder's README shows to be too strict: the two top-Ks' log-probs round differently).

    python3 results/kernels/h200-2026-12-01f/graph_check_call2.py CELLS SCALES
"""

import sys

import torch
from graph_check import outputs as round_outputs  # this folder's (the script's folder is on sys.path)
from graph_check import replayed, run

from ddbench.kernel_bench import deep_walk_target, draft_logits
from ddtree_core.tree import build_tree_from_topk, draft_topk

EXACT = ("ids", "token_ids", "parents", "depths", "num_nodes", "mask", "positions", "accepted", "accept_lens", "bonus")


def outputs(logits, budget, target, roots, impl):
    return round_outputs(draft_topk(logits, budget, impl=impl), budget, target, roots, impl)


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
    depth = int(want["accept_lens"].float().mean())
    return replayed(lambda: got.update(outputs(logits, budget, target, roots, "triton")), lambda: same(got, want),
                    f"{batch}x{budget} x{scale:g} seed {seed}: walk depth {depth}")


if __name__ == "__main__":
    run(check, *sys.argv[1:])

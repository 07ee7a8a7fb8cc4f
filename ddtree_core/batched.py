"""Batched DDTree build and walk in plain torch: static shapes, no host sync, CUDA-graph capturable.

The heap pops nodes in one total order (tree.py), so the first N pops are the N best nodes of that
order. Because a child never scores above its parent and each depth's top-K list is sorted, those N
nodes can be found level by level instead of one pop at a time:

  level d+1 candidates are pairs (i, r): i = position of a kept depth-d node in its level's order,
  r = rank in depth d+1's top-K list, score = score_i + log_prob[d, r]. Pair (i, r) is beaten by every
  (i', r') with i' <= i and r' <= r, so only pairs with (i+1)(r+1) <= N can be among the N best of a
  level: about N ln N candidates instead of N * K.

Each level keeps its N best candidates under the key (score desc, parent position, rank), and the
tree is the N best of all kept nodes under (score desc, depth, position in level). Both keys pack into
one int64 so that every selection is a single `topk(largest=False)`:

  bits(-score) << 32 | parent_position << 16 | rank        within a level
  bits(-score) << 32 | depth << 16 | position_in_level     across levels

where bits(x) is the IEEE-754 bit pattern of a float32 x >= 0, which orders like x itself.

Holding the chain (tree.py) puts bits 0 on the chain's nodes of finite score and bits(-score) + 1 on
the others. The
chain node is the best of its level, so it is the level's pair (0, 0) and its position 0, and the
pruning above still holds: a pair is beaten by every pair with i' <= i and r' <= r.
"""

from __future__ import annotations

import functools

import torch

from ddtree_core.ops import budgets_tensor
from ddtree_core.types import DraftTopK, DraftTree, TreeWalk

_INVALID = torch.iinfo(torch.int64).max


def draft_topk(logits: torch.Tensor, k: int, draft_temperature: float) -> DraftTopK:
    """Top-k scaled logits per row with ties broken by smaller token id, exactly as the host reference.

    Values are ranked by an int32 key that orders like the float, -0.0 equal to 0.0 and NaN below -inf
    (the reference's stable sort puts NaN last). torch.topk leaves the order of equal keys unspecified,
    so the tied keys at the k-th place are re-chosen by token id (one extra pass over the vocabulary)
    and the k winners are sorted stably.
    """
    vocab = logits.shape[-1]
    scaled = logits.float() / draft_temperature
    key = _order_key(scaled)
    keys, ids = key.topk(k, dim=-1)
    kth = keys[..., -1:]
    num_above = (keys > kth).sum(dim=-1, keepdim=True)
    reversed_ids = vocab - torch.arange(vocab, device=logits.device, dtype=torch.int32)
    tied_keys = torch.where(key == kth, reversed_ids, 0).topk(k, dim=-1).values
    tied_ids = (vocab - tied_keys).to(torch.int64)  # tied token ids, ascending
    slot = torch.arange(k, device=logits.device)
    tied = tied_ids.gather(-1, (slot - num_above).clamp(min=0))
    ids = torch.where(slot < num_above, ids, tied)
    ids = ids.sort(dim=-1, stable=True).values
    order = key.gather(-1, ids).sort(dim=-1, descending=True, stable=True).indices
    ids = ids.gather(-1, order)
    log_probs = scaled.gather(-1, ids) - torch.logsumexp(scaled, dim=-1, keepdim=True)
    return DraftTopK(log_probs=log_probs, token_ids=ids)


def _order_key(x: torch.Tensor) -> torch.Tensor:
    """int32 keys of float32 x that order like x: -0.0 == 0.0, NaN below -inf."""
    bits = (x + 0.0).view(torch.int32)  # + 0.0 turns -0.0 into 0.0
    key = torch.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    return torch.where(x.isnan(), torch.iinfo(torch.int32).min, key)


def build_tree_from_topk(
    topk: DraftTopK,
    budget: int | torch.Tensor,
    max_depth: int,
    max_budget: int,
    hold_chain: bool | torch.Tensor = False,
) -> DraftTree:
    """The DDTree trees of a batch, level-synchronously (see the module docstring)."""
    log_probs = topk.log_probs[:, :max_depth].float()
    batch, depth, k = log_probs.shape
    device = log_probs.device
    n = max_budget
    budgets = budgets_tensor(budget, batch, device).clamp(max=n)
    if n == 0:
        return DraftTree.root_only(batch, max_depth, device)
    parent_pos, rank = _candidate_pairs(n, k, device)
    held = _held(hold_chain, batch, device)
    scores = torch.full((batch, n), float("-inf"), device=device)
    scores[:, 0] = 0.0
    valid = torch.zeros((batch, n), dtype=torch.bool, device=device)
    valid[:, 0] = True
    levels = []
    for d in range(depth):
        cand_scores = scores[:, parent_pos] + log_probs[:, d, rank]
        key = (_held_bits(cand_scores, held, (parent_pos == 0) & (rank == 0)) << 32) | (parent_pos << 16) | rank
        key = torch.where(valid[:, parent_pos], key, _INVALID)
        kept_key, kept = key.topk(n, dim=-1, largest=False)
        scores = cand_scores.gather(1, kept)
        valid = kept_key != _INVALID
        levels.append((scores, valid, parent_pos[kept], rank[kept]))
    return _select_nodes(topk.token_ids[:, :max_depth], levels, budgets, max_depth, held)


def _select_nodes(
    token_ids: torch.Tensor, levels: list, budgets: torch.Tensor, max_depth: int, held: torch.Tensor | None
) -> DraftTree:
    """The N best kept nodes over all levels, numbered in pop order, with their parents."""
    scores, valid, parent_pos, rank = (torch.stack(x, dim=1) for x in zip(*levels))  # [B, D, N]
    batch, depth, n = scores.shape
    device = scores.device
    level = torch.arange(depth, device=device).view(1, depth, 1)
    position = torch.arange(n, device=device).view(1, 1, n)
    bits = _held_bits(scores, None if held is None else held.unsqueeze(2), position == 0)
    key = (bits << 32) | ((level + 1) << 16) | position
    key = torch.where(valid, key, _INVALID).reshape(batch, depth * n)
    picked_key, picked = key.topk(n, dim=-1, largest=False)  # picked: flat (level, slot) per node
    node = torch.arange(1, n + 1, device=device)
    keep = (picked_key != _INVALID) & (node <= budgets.unsqueeze(1))
    node_of_slot = torch.zeros((batch, depth * n), dtype=torch.int64, device=device)
    node_of_slot.scatter_(1, picked, torch.where(keep, node, 0))
    picked_level = picked // n
    parent_slot = (picked_level - 1).clamp(min=0) * n + parent_pos.reshape(batch, -1).gather(1, picked)
    parent = torch.where(picked_level == 0, 0, node_of_slot.gather(1, parent_slot))
    node_rank = rank.reshape(batch, -1).gather(1, picked)
    token = token_ids.reshape(batch, -1).gather(1, picked_level * token_ids.shape[2] + node_rank)
    node_score = scores.reshape(batch, -1).gather(1, picked)

    def pad(x: torch.Tensor, fill: float) -> torch.Tensor:
        return torch.where(keep, x, fill)

    def with_root(x: torch.Tensor, root: float) -> torch.Tensor:
        return torch.cat([torch.full_like(x[:, :1], root), x], dim=1)

    return DraftTree(
        token_ids=pad(token, -1),
        parents=with_root(pad(parent, -1), -1),
        depths=with_root(pad(picked_level + 1, -1), 0),
        num_nodes=keep.sum(dim=1),
        scores=with_root(pad(node_score, float("-inf")), 0.0),
        ranks=with_root(pad(node_rank, -1), -1),
        max_depth=max_depth,
    )


def follow_tree(tree: DraftTree, target_tokens: torch.Tensor) -> TreeWalk:
    """The greedy/sampled walk for a whole batch by pointer jumping (ceil(log2(D+1)) gather rounds).

    A node is on the walk iff every node on its root path carries the token the target chose at that
    node's parent. Children of a node have distinct tokens, so at most one node per depth qualifies.
    """
    parents = tree.parents
    batch, width = parents.shape
    parent = parents.clamp(min=0)  # root (and padding) point at the root
    tokens = tree.node_token_ids()
    ok = (tokens == target_tokens.gather(1, parent)) & (parents >= 0)
    ok[:, 0] = True
    for _ in range(tree.max_depth.bit_length()):  # 2**rounds >= D + 1 path nodes
        ok = ok & ok.gather(1, parent)
        parent = parent.gather(1, parent)
    depth = tree.max_depth
    node = torch.arange(width, device=parents.device).expand(batch, width)
    column = torch.where(ok, tree.depths, depth + 1)
    accepted = torch.full((batch, depth + 2), -1, dtype=torch.int64, device=parents.device)
    accepted.scatter_(1, column, torch.where(ok, node, -1))
    accepted = accepted[:, : depth + 1]
    accept_lens = ok.sum(dim=1)
    last = accepted.gather(1, (accept_lens - 1).unsqueeze(1))
    return TreeWalk(accepted=accepted, accept_lens=accept_lens, bonus=target_tokens.gather(1, last).squeeze(1))


def _bits(scores: torch.Tensor) -> torch.Tensor:
    """int64 keys ordering float32 scores <= 0 from best (0) to worst (-inf)."""
    return scores.neg().abs().view(torch.int32).to(torch.int64)


def _held(hold_chain: bool | torch.Tensor, batch: int, device: torch.device) -> torch.Tensor | None:
    """The requests that hold the chain, as a BoolTensor [B, 1]; None when none can."""
    if isinstance(hold_chain, torch.Tensor):
        return hold_chain.to(device).view(batch, 1)
    return torch.ones((batch, 1), dtype=torch.bool, device=device) if hold_chain else None


def _held_bits(scores: torch.Tensor, held: torch.Tensor | None, chain: torch.Tensor) -> torch.Tensor:
    """_bits, with the chain's nodes (where `chain` and finite) first for the requests that hold it."""
    if held is None:
        return _bits(scores)
    return torch.where(held & chain & scores.isfinite(), 0, _bits(scores) + held)


@functools.cache
def _candidate_pairs(n: int, k: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Static (parent position i, rank r) pairs with (i+1)(r+1) <= n and r < k, i-major."""
    parent_pos, rank = [], []
    for i in range(n):
        for r in range(min(k, n // (i + 1))):
            parent_pos.append(i)
            rank.append(r)
    return (
        torch.tensor(parent_pos, dtype=torch.int64, device=device),
        torch.tensor(rank, dtype=torch.int64, device=device),
    )

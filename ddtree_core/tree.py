"""DDTree draft trees: the best-first tree over a block drafter's per-position distributions.

A DFlash drafter proposes a whole block in one pass: for block positions 1..L it gives a distribution
over the vocabulary, each conditioned on the context alone. DDTree keeps the top-K tokens of every
position and grows a tree whose node score is the sum of the log-probs along its path; under a budget
of N non-root nodes it keeps the N best prefixes, found by a best-first heap (github liranringel/ddtree,
`build_ddtree_tree`): a popped node pushes its next sibling (same parent, next rank) and its first
child (rank 0, one deeper). Nodes are numbered in pop order; node 0 is the root (the bonus token).

Worked example, K = 2, L = 2, budget 4, log-probs per depth  a -0.1  b -2.5 | c -0.2  d -1.9:

    root ─┬─ a (-0.1) ─┬─ c (-0.3)        pop order a, c, d, b
          │            └─ d (-2.0)        token_ids [a, c, d, b]
          └─ b (-2.5)                     parents   [-1, 0, 1, 1, 0]   depths [0, 1, 2, 2, 1]

Scores are float32, accumulated root-down: score(child) = score(parent) + log_prob(depth, rank).
The top-K list of a position ranks tokens by logit / draft_temperature, equal values smaller token id
first; its log-probs are those scaled logits minus their logsumexp (float32). Every implementation gives
the same token ids; the log-probs agree to float rounding of the logsumexp (bit for bit between the host
reference and the torch path, which compute it with the same torch call on the same device).
Ties, so that every implementation emits the same tree from the same top-K lists:
  - nodes: higher score first; equal scores pop the shallower node first, then (same depth) the node
    whose parent popped earlier, then (same parent) the lower rank.
The liranringel heap breaks equal scores by the rank path alone and sums in float64; the two orders
differ only between nodes at different depths (neither an ancestor of the other) or under different
parents whose scores are equal to the last float32 bit.
NaN: one NaN logit makes its position's logsumexp, so every log-prob of that position, NaN. Trees built
from NaN log-probs are outside this contract (the implementations may build different trees); the walk
still emits only the target's own tokens, so the output stays the target's.

Holding the chain (`hold_chain=True`): the chain is the path of rank-0 tokens from the root, the block
a DFlash drafter proposes, down to its last node of finite score (-inf log-probs mark depths a request
may not use). Held, its nodes pop first, shallowest first, and the rest of the budget
goes to the other nodes in the order above. With budget >= depth the tree contains DFlash's whole
block, so its walk accepts at least as much as DFlash's; budget = depth gives the chain alone. The
chain node is the best of its depth anyway, so holding changes which nodes are kept, never the order
among the others.
"""

from __future__ import annotations

import heapq

import numpy as np
import torch

from ddtree_core import ops
from ddtree_core.ops import budgets_tensor
from ddtree_core.types import TRITON_NODE_LIMIT, DraftTopK, DraftTree

__all__ = [
    "TRITON_NODE_LIMIT",
    "DraftTopK",
    "DraftTree",
    "budgets_tensor",
    "build_tree",
    "build_tree_from_topk",
    "chain_tree",
    "draft_topk",
]


def draft_topk(
    draft_logits: torch.Tensor, k: int, *, draft_temperature: float = 1.0, impl: str | None = None
) -> DraftTopK:
    """Top-k log-probs per block position of `draft_logits` [B, L, V] (or [L, V], read as B = 1)."""
    logits = _as_batched(draft_logits)
    if not 1 <= k <= logits.shape[-1]:
        raise ValueError(f"k must be in [1, vocab={logits.shape[-1]}], got {k}")
    if not draft_temperature > 0:
        raise ValueError(f"draft_temperature must be > 0, got {draft_temperature}")
    impl = ops.resolve(impl, logits.device)
    if impl == "reference":
        return _topk_reference(logits, k, draft_temperature)
    if impl == "triton":  # the group-maxima kernel: faster than the fused one in every H200 cell measured
        from ddtree_core.kernels import topk_radix

        return topk_radix.draft_topk(logits, k, draft_temperature)
    from ddtree_core import batched

    return batched.draft_topk(logits, k, draft_temperature)


def build_tree(
    draft_logits: torch.Tensor,
    budget: int | torch.Tensor,
    *,
    max_depth: int | None = None,
    draft_temperature: float = 1.0,
    hold_chain: bool | torch.Tensor = False,
    impl: str | None = None,
) -> DraftTree:
    """Build the DDTree draft tree of each request.

    draft_logits: [L, V] or [B, L, V], the drafter's logits for block positions 1..L.
    budget: non-root nodes per tree, an int or a LongTensor [B] of per-request budgets (>= 0).
    max_depth: depth limit, 1 <= max_depth <= L (default L).
    draft_temperature: divides the logits before log-softmax (tree scoring only).
    hold_chain: keep the rank-0 chain first (module docstring); a bool, or a BoolTensor [B] per request.
    impl: "reference" | "torch" | "triton" | None (best available, see ops.resolve).
    """
    logits = _as_batched(draft_logits)
    max_budget = _max_budget(budget, logits.shape[0])
    k = max(1, min(max_budget, logits.shape[-1]))
    topk = draft_topk(logits, k, draft_temperature=draft_temperature, impl=impl)
    return build_tree_from_topk(
        topk, budget, max_depth=max_depth, max_budget=max_budget, hold_chain=hold_chain, impl=impl
    )


def build_tree_from_topk(
    topk: DraftTopK,
    budget: int | torch.Tensor,
    *,
    max_depth: int | None = None,
    max_budget: int | None = None,
    hold_chain: bool | torch.Tensor = False,
    impl: str | None = None,
) -> DraftTree:
    """Build trees from precomputed top-K lists (K >= min(budget, V) gives the DDTree tree).

    max_budget: the tree width N when `budget` is a device tensor, so that no host read is needed
    (budgets above it are clamped to it). Without it a tensor budget is read once on the host.
    """
    batch, length, _ = topk.log_probs.shape
    max_depth = length if max_depth is None else int(max_depth)
    if not 1 <= max_depth <= length:
        raise ValueError(f"max_depth must be in [1, {length}], got {max_depth}")
    if max_budget is None:
        max_budget = _max_budget(budget, batch)
    elif max_budget < 0:
        raise ValueError(f"max_budget must be >= 0, got {max_budget}")
    if isinstance(hold_chain, torch.Tensor):
        if hold_chain.dtype != torch.bool or hold_chain.shape != (batch,):
            raise ValueError(
                f"a tensor hold_chain must be a BoolTensor [{batch}], got {hold_chain.dtype} {tuple(hold_chain.shape)}"
            )
    elif not isinstance(hold_chain, bool):
        raise ValueError(f"hold_chain must be a bool or a BoolTensor [B], got {hold_chain!r}")
    chosen = ops.resolve(impl, topk.log_probs.device)
    if chosen == "triton" and impl is None and 1 + max_depth * max_budget >= TRITON_NODE_LIMIT:
        chosen = "torch"  # beyond the kernel's 15-bit node indices; asked for explicitly, it raises
    impl = chosen
    if impl == "reference":
        return _build_reference(topk, budget, max_depth, max_budget, hold_chain)
    if impl == "triton":
        from ddtree_core.kernels import tree_build

        return tree_build.build_tree_from_topk(topk, budget, max_depth, max_budget, hold_chain)
    from ddtree_core import batched

    return batched.build_tree_from_topk(topk, budget, max_depth, max_budget, hold_chain)


def chain_tree(topk: DraftTopK) -> DraftTree:
    """DFlash's block as a tree: the rank-0 token of every position, each node the child of the one before.

    The same DraftTree as `build_tree_from_topk` of the rank-0 lists at budget L (tests hold them equal), in
    a few tensor ops instead of a best-first build: with one candidate per depth the heap pops depth 1, 2, ..,
    L in order, whatever the scores (-inf included), and a node's score is its parent's plus its log-prob,
    summed in float32 from the root down as the heap sums them.

    Example: rank-0 lists [[a -0.1], [c -0.2]] give token_ids [a, c], parents [-1, 0, 1], depths [0, 1, 2],
    scores [0, -0.1, -0.3], ranks [-1, 0, 0].
    """
    batch, length, _ = topk.log_probs.shape
    device = topk.log_probs.device
    first = topk.log_probs[:, :, 0].float()
    scores = torch.zeros(batch, length + 1, dtype=torch.float32, device=device)
    for depth in range(1, length + 1):  # float32 adds in the heap's order (torch.cumsum may sum in float64)
        scores[:, depth] = scores[:, depth - 1] + first[:, depth - 1]
    steps = torch.arange(length + 1, device=device).expand(batch, -1)
    ranks = torch.zeros(batch, length + 1, dtype=torch.int64, device=device)
    ranks[:, 0] = -1
    return DraftTree(
        token_ids=topk.token_ids[:, :, 0].to(torch.int64).clone(),
        parents=steps - 1,
        depths=steps.clone(),
        num_nodes=torch.full((batch,), length, dtype=torch.int64, device=device),
        scores=scores,
        ranks=ranks,
        max_depth=length,
    )


def _max_budget(budget: int | torch.Tensor, batch: int) -> int:
    """Validate budgets and return the largest. A tensor budget costs one host read (its max)."""
    if isinstance(budget, torch.Tensor):
        if budget.dtype.is_floating_point or budget.dim() != 1 or budget.shape[0] != batch:
            raise ValueError(f"a tensor budget must be an integer tensor [{batch}], got {tuple(budget.shape)}")
        values = budget.detach().cpu()
        if (values < 0).any():
            raise ValueError(f"budgets must be >= 0, got {values.tolist()}")
        return int(values.max())
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 0:
        raise ValueError(f"budget must be an int >= 0, got {budget!r}")
    return int(budget)


def _as_batched(draft_logits: torch.Tensor) -> torch.Tensor:
    if draft_logits.dim() == 2:
        return draft_logits.unsqueeze(0)
    if draft_logits.dim() != 3 or draft_logits.shape[1] == 0 or draft_logits.shape[2] == 0:
        raise ValueError(f"draft_logits must be [L, V] or [B, L, V] with L, V > 0, got {tuple(draft_logits.shape)}")
    return draft_logits


def _topk_reference(logits: torch.Tensor, k: int, draft_temperature: float) -> DraftTopK:
    """Stable descending sort on the host: equal scaled logits keep ascending token id order.

    The scaling and the logsumexp run on the logits' device with the same calls as the batched path, so
    that both produce the very same float32 values.
    """
    scaled = logits.detach().float() / draft_temperature
    order = np.argsort(-scaled.cpu().numpy(), axis=-1, kind="stable")[..., :k]
    ids = torch.from_numpy(np.ascontiguousarray(order)).to(device=logits.device, dtype=torch.int64)
    log_probs = scaled.gather(-1, ids) - torch.logsumexp(scaled, dim=-1, keepdim=True)
    return DraftTopK(log_probs=log_probs, token_ids=ids)


def _build_reference(
    topk: DraftTopK, budget: int | torch.Tensor, max_depth: int, max_budget: int, hold_chain: bool | torch.Tensor
) -> DraftTree:
    """The best-first heap, one request at a time on the host: the oracle for every other path."""
    device = topk.log_probs.device
    batch = topk.log_probs.shape[0]
    budgets = budgets_tensor(budget, batch, torch.device("cpu")).clamp(max=max_budget).tolist()
    holds = hold_chain.tolist() if isinstance(hold_chain, torch.Tensor) else [hold_chain] * batch
    width = max_budget + 1
    log_probs = topk.log_probs.detach().cpu().numpy().astype(np.float32)
    token_ids = topk.token_ids.detach().cpu().numpy()
    out = {
        "token_ids": np.full((batch, width - 1), -1, np.int64),
        "parents": np.full((batch, width), -1, np.int64),
        "depths": np.full((batch, width), -1, np.int64),
        "scores": np.full((batch, width), -np.inf, np.float32),
        "ranks": np.full((batch, width), -1, np.int64),
    }
    num_nodes = np.zeros(batch, np.int64)
    for b in range(batch):
        nodes = _heap_nodes(log_probs[b], budgets[b], max_depth, holds[b])
        out["depths"][b, 0], out["scores"][b, 0] = 0, 0.0
        for i, (score, depth, parent, rank) in enumerate(nodes, start=1):
            out["token_ids"][b, i - 1] = token_ids[b, depth - 1, rank]
            out["parents"][b, i] = parent
            out["depths"][b, i] = depth
            out["scores"][b, i] = score
            out["ranks"][b, i] = rank
        num_nodes[b] = len(nodes)
    tensors = {name: torch.from_numpy(value).to(device) for name, value in out.items()}
    return DraftTree(num_nodes=torch.from_numpy(num_nodes).to(device), max_depth=max_depth, **tensors)


def _heap_nodes(
    log_probs: np.ndarray, budget: int, max_depth: int, hold_chain: bool = False
) -> list[tuple[np.float32, int, int, int]]:
    """Pop `budget` nodes; each is (score, depth, parent node index, rank). log_probs: [L, K].

    Held, the chain's nodes (rank 0 under the root or under a chain node, finite score) carry key 0
    ahead of the score, every other node key 1, so that the chain pops first.
    """
    k = log_probs.shape[1]
    zero = np.float32(0.0)
    # Heap entries: (class, -score, depth, parent index, rank, score, parent score); the first five are
    # the key; class 0 = a held chain node.
    first = zero + log_probs[0, 0]
    heap = [(0 if hold_chain and np.isfinite(first) else 1, -float(first), 1, 0, 0, first, zero)]
    nodes: list[tuple[np.float32, int, int, int]] = []
    while heap and len(nodes) < budget:
        cls, _, depth, parent, rank, score, parent_score = heapq.heappop(heap)
        nodes.append((score, depth, parent, rank))
        index = len(nodes)
        if rank + 1 < k:
            sibling = parent_score + log_probs[depth - 1, rank + 1]
            heapq.heappush(heap, (1, -float(sibling), depth, parent, rank + 1, sibling, parent_score))
        if depth < max_depth:
            child = score + log_probs[depth, 0]
            held = cls == 0 and np.isfinite(child)
            heapq.heappush(heap, (0 if held else 1, -float(child), depth + 1, index, 0, child, score))
    return nodes

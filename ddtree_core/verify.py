"""Verification walks: follow the target's own tokens through a draft tree.

The target scores every tree node in one forward pass; `target_tokens[b, i]` is the token the target
chooses after the path root..i (its argmax, or a sample). Starting at the root, the walk moves to the
child whose token equals the target's choice at the current node, and stops when no child matches.
Every token it emits is one the target itself chose at that position, so the output is exactly what
the target alone would produce: argmax gives greedy decoding; a sample drawn from the target's
(temperature / top-p / top-k) distribution at each node gives sampled decoding with the same law,
since the tree decides only how many of the target's draws are used, never which token is drawn.

The emitted tokens of a round are the accepted non-root nodes' tokens followed by the bonus token,
the target's choice at the last accepted node: accept_len (root included) tokens per round.
"""

from __future__ import annotations

import torch

from ddtree_core import ops
from ddtree_core.types import DraftTree, TreeWalk

__all__ = ["TreeWalk", "emitted_tokens", "follow_tree"]


def follow_tree(tree: DraftTree, target_tokens: torch.Tensor, *, impl: str | None = None) -> TreeWalk:
    """Walk each tree along the target's tokens. target_tokens: [B, N+1], the target's token at each node."""
    if target_tokens.shape != tree.parents.shape:
        raise ValueError(
            f"target_tokens must be [B, N+1] = {tuple(tree.parents.shape)}, got {tuple(target_tokens.shape)}"
        )
    impl = ops.resolve(impl, tree.parents.device)
    if impl == "reference":
        return _follow_reference(tree, target_tokens)
    if impl == "triton":
        from ddtree_core.kernels import tree_walk

        return tree_walk.follow_tree(tree, target_tokens)
    from ddtree_core import batched

    return batched.follow_tree(tree, target_tokens)


def emitted_tokens(tree: DraftTree, walk: TreeWalk) -> torch.Tensor:
    """The tokens a round emits, [B, D+1]: accepted non-root tokens, then the bonus; -1 padding."""
    batch, width = walk.accepted.shape
    rows = torch.arange(batch, device=walk.accepted.device).unsqueeze(1)
    node_tokens = tree.node_token_ids()
    path_tokens = node_tokens[rows, walk.accepted[:, 1:].clamp(min=0)]  # [B, D]
    columns = torch.arange(width - 1, device=walk.accepted.device).unsqueeze(0)
    path_tokens = torch.where(columns < walk.accept_lens.unsqueeze(1) - 1, path_tokens, -1)
    out = torch.cat([path_tokens, torch.full_like(path_tokens[:, :1], -1)], dim=1)
    return out.scatter(1, (walk.accept_lens - 1).unsqueeze(1), walk.bonus.unsqueeze(1))


def sample_target_tokens(
    logits: torch.Tensor,
    temperature: float | torch.Tensor = 0.0,
    top_p: float | torch.Tensor = 1.0,
    top_k: int | torch.Tensor = -1,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The target's token at every position of `logits` [..., V]: argmax when temperature == 0, else a
    sample from softmax(logits / temperature) restricted to the top_k tokens (-1 or 0: all) and the
    smallest top_p nucleus. Tensor knobs broadcast over the leading dims (one value per request)."""
    greedy = logits.argmax(dim=-1)
    if not isinstance(temperature, torch.Tensor) and temperature == 0:
        return greedy
    probs = target_probs(logits, temperature, top_p, top_k)
    flat = probs.reshape(-1, probs.shape[-1])
    sampled = torch.multinomial(flat, 1, generator=generator).reshape(greedy.shape)
    if isinstance(temperature, torch.Tensor):
        return torch.where(_expand(temperature, greedy) == 0, greedy, sampled)
    return sampled


def target_probs(
    logits: torch.Tensor,
    temperature: float | torch.Tensor,
    top_p: float | torch.Tensor = 1.0,
    top_k: int | torch.Tensor = -1,
) -> torch.Tensor:
    """The distribution the sampled walk draws from at each position, [..., V] float32."""
    logits = logits.float()
    vocab = logits.shape[-1]
    temp = _expand(torch.as_tensor(temperature, device=logits.device, dtype=torch.float32), logits[..., 0])
    scaled = logits / temp.clamp(min=1e-6).unsqueeze(-1)
    if _is_identity(top_p, top_k):  # no truncation: skip the sort over the vocabulary
        return scaled.softmax(dim=-1)
    sorted_logits, order = scaled.sort(dim=-1, descending=True, stable=True)
    k = _expand(torch.as_tensor(top_k, device=logits.device), logits[..., 0]).long()
    k = torch.where(k <= 0, vocab, k.clamp(max=vocab)).unsqueeze(-1)
    ranks = torch.arange(vocab, device=logits.device)
    sorted_logits = sorted_logits.masked_fill(ranks >= k, float("-inf"))
    sorted_probs = sorted_logits.softmax(dim=-1)
    p = _expand(torch.as_tensor(top_p, device=logits.device, dtype=torch.float32), logits[..., 0]).unsqueeze(-1)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= p, 0.0)  # keep the smallest prefix reaching p
    sorted_probs = sorted_probs / sorted_probs.sum(dim=-1, keepdim=True)
    return torch.zeros_like(sorted_probs).scatter(-1, order, sorted_probs)


def _is_identity(top_p, top_k) -> bool:
    """Whether host-side (non-tensor) top_p / top_k knobs keep the whole vocabulary."""
    return not isinstance(top_p, torch.Tensor) and not isinstance(top_k, torch.Tensor) and top_p >= 1 and top_k <= 0


def _expand(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Broadcast a scalar or per-request [B] knob to the leading shape of `like` ([B, ...] or [...])."""
    value = torch.as_tensor(value, device=like.device)
    if value.dim() == 0:
        return value.expand(like.shape)
    return value.reshape(value.shape + (1,) * (like.dim() - value.dim())).expand(like.shape)


def _follow_reference(tree: DraftTree, target_tokens: torch.Tensor) -> TreeWalk:
    """Host loop over each request's child lists: the oracle for the batched walks."""
    device = tree.parents.device
    parents = tree.parents.cpu().tolist()
    tokens = tree.token_ids.cpu().tolist()
    chosen = target_tokens.cpu().tolist()
    batch, depth = len(parents), tree.max_depth
    accepted = torch.full((batch, depth + 1), -1, dtype=torch.int64)
    accept_lens = torch.zeros(batch, dtype=torch.int64)
    bonus = torch.zeros(batch, dtype=torch.int64)
    for b in range(batch):
        children: dict[tuple[int, int], int] = {}
        for node in range(1, len(parents[b])):
            if parents[b][node] >= 0:
                children[(parents[b][node], tokens[b][node - 1])] = node
        path = [0]
        while (path[-1], chosen[b][path[-1]]) in children:
            path.append(children[(path[-1], chosen[b][path[-1]])])
        accepted[b, : len(path)] = torch.tensor(path)
        accept_lens[b] = len(path)
        bonus[b] = chosen[b][path[-1]]
    return TreeWalk(accepted.to(device), accept_lens.to(device), bonus.to(device))

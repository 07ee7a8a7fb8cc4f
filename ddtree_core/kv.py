"""KV compaction after a verify round: which cache slots to copy where, and which to free.

Verify writes a KV entry for every tree position i (root 0 .. N) into slot `slots[b, i]`. After the
walk only the accepted path matters, and the next round expects it contiguous: the path's k-th node
(`accepted[b, k]`, k < accept_len) must sit in the slot of verify position k. Every other position's
slot is released. Since a parent's index is below its child's, accepted[b, k] >= k: entries only move
down, and position 0 (the root) never moves.

Worked example (tree.py's tree, target accepts root, a, d; accept_len 3; slots [40, 41, 42, 43, 44]):

    position   0   1   2   3   4        src  [40, 41, 43]    move [F, F, T]
    node       r   a   c   d   b        dst  [40, 41, 42]    free [F, F, F, T, T]
    accepted   r   a   d                (copy slot 43 -> 42; release 43 and 44)

A slot can be both a source and a destination (path [0, 2, 3]: 42 -> 41 while 43 -> 42), so a plan
is applied by gathering every source first and scattering afterwards (`apply_plan`).

impl (ops.resolve): "reference" loops on the host; "torch" and "triton" run the batched torch code.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ddtree_core import ops


@dataclass(frozen=True)
class KVCompactionPlan:
    """Per request, where each accepted path entry's KV goes. D + 1 = the walk's width."""

    src: torch.Tensor  # [B, D+1] int64, slot holding the k-th accepted node's KV; -1 for k >= accept_len
    dst: torch.Tensor  # [B, D+1] int64, slot of verify position k; -1 for k >= accept_len
    move: torch.Tensor  # [B, D+1] bool, a copy is needed (k < accept_len and src != dst)
    free: torch.Tensor  # [B, N+1] bool, the slot of verify position i is released (i >= accept_len)


def compaction_plan(
    accepted: torch.Tensor, accept_lens: torch.Tensor, slots: torch.Tensor, *, impl: str | None = None
) -> KVCompactionPlan:
    """The copies and releases that leave each accepted path in its first accept_len verify slots.

    accepted: [B, D+1] accepted node indices root first, -1 padded (TreeWalk.accepted).
    accept_lens: [B] accepted nodes including the root (>= 1).
    slots: [B, N+1] int64 KV slot of each verify position; a negative slot means none and is never freed.
    """
    if accepted.dim() != 2 or slots.dim() != 2 or accepted.shape[0] != slots.shape[0]:
        raise ValueError(f"accepted [B, D+1] and slots [B, N+1] expected, got {accepted.shape}, {slots.shape}")
    if accept_lens.shape != (accepted.shape[0],):
        raise ValueError(f"accept_lens must be [{accepted.shape[0]}], got {tuple(accept_lens.shape)}")
    impl = ops.resolve(impl, accepted.device)
    if impl == "reference":
        return _plan_reference(accepted, accept_lens, slots)
    return _plan_torch(accepted, accept_lens, slots)


def apply_plan(cache: torch.Tensor, plan: KVCompactionPlan) -> torch.Tensor:
    """Carry out the moves of `plan` on `cache` [num_slots, ...] in place and return it.

    All sources are read before any destination is written. Entries without a move copy the
    request's root slot onto itself: no real move targets it and every such copy writes the same
    value, so the scatter stays static-shaped and race-free.
    """
    root = plan.dst[:, :1].expand_as(plan.dst)
    src = torch.where(plan.move, plan.src, root).flatten()
    dst = torch.where(plan.move, plan.dst, root).flatten()
    values = cache.index_select(0, src)
    return cache.index_copy_(0, dst, values)


def _plan_reference(accepted: torch.Tensor, accept_lens: torch.Tensor, slots: torch.Tensor) -> KVCompactionPlan:
    batch, length = accepted.shape
    width = slots.shape[1]
    paths, lens, slot_rows = accepted.tolist(), accept_lens.tolist(), slots.tolist()
    src, dst = [[-1] * length for _ in range(batch)], [[-1] * length for _ in range(batch)]
    move = [[False] * length for _ in range(batch)]
    free = [[False] * width for _ in range(batch)]
    for b in range(batch):
        for k in range(lens[b]):
            src[b][k], dst[b][k] = slot_rows[b][paths[b][k]], slot_rows[b][k]
            move[b][k] = src[b][k] != dst[b][k]
        for position in range(lens[b], width):
            free[b][position] = slot_rows[b][position] >= 0
    as_tensor = lambda rows, dtype: torch.tensor(rows, dtype=dtype, device=accepted.device)
    return KVCompactionPlan(
        src=as_tensor(src, torch.int64).reshape(batch, length),
        dst=as_tensor(dst, torch.int64).reshape(batch, length),
        move=as_tensor(move, torch.bool).reshape(batch, length),
        free=as_tensor(free, torch.bool).reshape(batch, width),
    )


def _plan_torch(accepted: torch.Tensor, accept_lens: torch.Tensor, slots: torch.Tensor) -> KVCompactionPlan:
    batch, length = accepted.shape
    width = slots.shape[1]
    lens = accept_lens.to(torch.int64).unsqueeze(1)
    steps = torch.arange(length, device=accepted.device).unsqueeze(0)
    on_path = steps < lens  # [B, D+1]
    slots = slots.to(torch.int64)
    src = torch.where(on_path, slots.gather(1, accepted.clamp(min=0)), -1)
    # k < accept_len <= N + 1 on the path, so the clamp only touches entries that become -1.
    dst = torch.where(on_path, slots.gather(1, steps.clamp(max=width - 1).expand(batch, length)), -1)
    free = (torch.arange(width, device=slots.device).unsqueeze(0) >= lens) & (slots >= 0)
    return KVCompactionPlan(src=src, dst=dst, move=on_path & (src != dst), free=free)

"""Triton twin of `verify.follow_tree`: one program walks one request's tree.

A node c is a step the target agrees with when token[c] == target_tokens[parent[c]]; children of one
node carry distinct tokens, so each node has at most one such child. The program loads the request's
parents, tokens and the target's token at every node's parent once, marks the agreeing nodes, then
walks from the root: each step is one min-reduction over the row (the agreeing child of the current
node), at most max_depth steps.

    root ─┬─ a ─┬─ c      target_tokens = [a, c, x, x, x]  (x: no child matches)
          │     └─ d      agree          = [., a✓, c✓, d✗, b✗]
          └─ b            walk root -> a -> c; accepted [0, 1, 2], accept_len 3, bonus x
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ddtree_core.kernels.pdl import let_next_start, wait_for_inputs
from ddtree_core.kernels.pdl import options as pdl_options
from ddtree_core.types import DraftTree, TreeWalk


@triton.jit
def walk_path(par_row, tok_row, tgt_row, width, max_depth, W_PAD: tl.constexpr, S_PAD: tl.constexpr):
    """One tree's walk in registers (the rows of one request: parents [W], node tokens [W-1], the target's
    tokens [W]): (accepted [S_PAD], node per path slot, root first, -1 past the path; the path's length,
    root included; its last node). One min-reduction per step finds the current node's agreeing child."""
    col = tl.arange(0, W_PAD)
    parents = tl.load(par_row + col, mask=col < width, other=-1)
    real = (col >= 1) & (parents >= 0)
    tokens = tl.load(tok_row + col - 1, mask=real, other=-1)
    agree = real & (tokens == tl.load(tgt_row + parents, mask=real, other=-1))
    slot = tl.arange(0, S_PAD)
    accepted = tl.where(slot == 0, 0, -1)
    current = tl.program_id(0) * 0  # an int32 tensor, whatever the arguments were specialised to
    length = current + 1
    walking = max_depth > 0
    while walking:
        child = tl.min(tl.where(agree & (parents == current), col, W_PAD), 0)
        found = child < W_PAD
        accepted = tl.where((slot == length) & found, child, accepted)
        current = tl.where(found, child, current)
        length += found.to(tl.int32)
        walking = found & (length <= max_depth)
    return accepted, length, current


@triton.jit(do_not_specialize=["width", "max_depth"])
def _walk_kernel(
    par_ptr,  # [B, W] int64: parent node index; root and padding -1
    tok_ptr,  # [B, W-1] int64: node c's token at column c-1; -1 padding
    tgt_ptr,  # [B, W] int64: the target's token at every node
    acc_out,  # [B, D+1] int64: accepted node indices, root first; -1 padding
    len_out,  # [B] int64: accepted nodes including the root
    bonus_out,  # [B] int64: the target's token at the last accepted node
    s_pb, s_kb, s_gb,  # row strides of par_ptr, tok_ptr, tgt_ptr (elements)
    width,  # int: W = N + 1 nodes per tree
    max_depth,  # int: D, the trees' depth limit
    W_PAD: tl.constexpr,  # next power of two >= W
    D_PAD: tl.constexpr,  # next power of two >= D + 1
    PDL: tl.constexpr = False,  # launched with programmatic dependent launch (pdl.py)
):  # fmt: skip
    wait_for_inputs(PDL)
    pid = tl.program_id(0)
    accepted, n_accepted, current = walk_path(
        par_ptr + pid * s_pb, tok_ptr + pid * s_kb, tgt_ptr + pid * s_gb, width, max_depth, W_PAD, D_PAD
    )
    slot = tl.arange(0, D_PAD)
    tl.store(acc_out + pid * (max_depth + 1) + slot, accepted.to(tl.int64), mask=slot <= max_depth)
    tl.store(len_out + pid, n_accepted.to(tl.int64))
    tl.store(bonus_out + pid, tl.load(tgt_ptr + pid * s_gb + current))
    let_next_start(PDL)


def follow_tree(tree: DraftTree, target_tokens: torch.Tensor) -> TreeWalk:
    """Walk each tree along the target's tokens; target_tokens: [B, N+1] int64. No host sync."""
    parents, tokens = tree.parents.contiguous(), tree.token_ids.contiguous()
    if target_tokens.shape != parents.shape:
        raise ValueError(f"target_tokens must be [B, N+1] = {tuple(parents.shape)}, got {tuple(target_tokens.shape)}")
    target = target_tokens.to(torch.int64).contiguous()
    batch, width = parents.shape
    depth = tree.max_depth
    device = parents.device
    accepted = torch.empty((batch, depth + 1), dtype=torch.int64, device=device)
    accept_lens = torch.empty(batch, dtype=torch.int64, device=device)
    bonus = torch.empty(batch, dtype=torch.int64, device=device)
    if batch > 0:
        w_pad = triton.next_power_of_2(width)
        _walk_kernel[(batch,)](
            parents, tokens, target, accepted, accept_lens, bonus,
            parents.stride(0), tokens.stride(0), target.stride(0), width, depth,
            W_PAD=w_pad, D_PAD=triton.next_power_of_2(depth + 1), num_warps=4 if w_pad >= 512 else 1,
            **pdl_options(device),
        )  # fmt: skip
    return TreeWalk(accepted=accepted, accept_lens=accept_lens, bonus=bonus)

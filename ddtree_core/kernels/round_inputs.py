"""Triton twins of the two input builders of a DDTree decode round in SGLang (ddtree_core/sglang/rounds.py),
one launch each in place of a dozen small torch ops:

- `draft_block_inputs`: the drafter's block [bonus, MASK ...], its positions prefix + 0..block-1, the
  KV slot of every verify column, req_to_token[req, prefix + 0..W-1], and the block's slots (the first
  `block` of them) as a contiguous copy;
- `verify_batch`: the verify tokens [bonus, node tokens], positions prefix + depth, and the tree mask in
  SGLang's FULL_MASK layout: request b's rows follow requests 0..b-1, row i is prefix_b + W bytes,
  the prefix columns all 1, then row i of the ancestor mask (kernels/tree_mask.py's root_paths and
  seen_tile: column c is seen from row r iff c is r's ancestor at distance depth(r) - depth(c); padding
  rows see only themselves).

The mask's length is sized on the host (W * prefix_total + B * W * W, prefix_total >= the device sum
of the prefix lengths); bytes past the last request's rows are 1, as in the torch path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ddtree_core.kernels.tree_mask import root_paths, seen_tile
from ddtree_core.tree import DraftTree

_BATCH_BLOCK = 128  # prefix lengths summed per step for a request's mask offset


@triton.jit(do_not_specialize=["block", "width", "r2t_stride", "r2t_width", "mask_token_id"])
def _draft_block_kernel(
    bonus_ptr,  # [B] int64: the round's root tokens
    prefix_ptr,  # [B] int32/int64: committed lengths
    req_ptr,  # [B] int32/int64: rows of req_to_token
    r2t_ptr,  # [R, C] int32: req_to_token (row-major)
    ids_out,  # [B, block] int64
    pos_out,  # [B, block] int64
    loc_out,  # [B, W] int64
    block_loc_out,  # [B, block] int64: the first `block` columns of loc_out, contiguous
    block, width, r2t_stride, r2t_width, mask_token_id,  # ints
    BLOCK: tl.constexpr,  # power of two >= block
    W_PAD: tl.constexpr,  # power of two >= W
):  # fmt: skip
    b = tl.program_id(0)
    prefix = tl.load(prefix_ptr + b).to(tl.int64)
    row = tl.load(req_ptr + b).to(tl.int64)
    cols = tl.arange(0, W_PAD)
    logical = prefix + cols
    ok = cols < width
    slots = tl.load(r2t_ptr + row * r2t_stride + logical, mask=ok & (logical < r2t_width), other=0)
    tl.store(loc_out + b * width + cols, slots.to(tl.int64), mask=ok)
    bcols = tl.arange(0, BLOCK)
    bok = bcols < block
    bonus = tl.load(bonus_ptr + b).to(tl.int64)
    ids = tl.where(bcols == 0, bonus, tl.full((BLOCK,), mask_token_id, tl.int64))
    tl.store(ids_out + b * block + bcols, ids, mask=bok)
    tl.store(pos_out + b * block + bcols, prefix + bcols, mask=bok)
    block_slots = tl.load(r2t_ptr + row * r2t_stride + prefix + bcols, mask=bok & (prefix + bcols < r2t_width), other=0)
    tl.store(block_loc_out + b * block + bcols, block_slots.to(tl.int64), mask=bok)


def draft_block_inputs(
    bonus: torch.Tensor,
    prefix_lens: torch.Tensor,
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    *,
    block: int,
    width: int,
    mask_token_id: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(block_ids [B, block], positions [B, block], cache_loc [B, W], block_loc [B, block]) int64; see
    rounds.draft_block_inputs."""
    batch, device = bonus.shape[0], bonus.device
    ids = torch.empty((batch, block), dtype=torch.int64, device=device)
    positions = torch.empty((batch, block), dtype=torch.int64, device=device)
    cache_loc = torch.empty((batch, width), dtype=torch.int64, device=device)
    block_loc = torch.empty((batch, block), dtype=torch.int64, device=device)
    if req_to_token.stride(1) != 1:
        raise ValueError("req_to_token must be row-major")
    if batch > 0:
        _draft_block_kernel[(batch,)](
            bonus.contiguous(), prefix_lens.contiguous(), req_pool_indices.contiguous(), req_to_token, ids,
            positions, cache_loc, block_loc, block, width, req_to_token.stride(0), req_to_token.shape[1], mask_token_id,
            BLOCK=triton.next_power_of_2(block), W_PAD=triton.next_power_of_2(width), num_warps=1,
        )  # fmt: skip
    return ids, positions, cache_loc, block_loc


@triton.jit(do_not_specialize=["batch", "width", "max_depth", "total"])
def _verify_kernel(
    par_ptr,  # [B, W] int64: parent node index; root and padding -1
    dep_ptr,  # [B, W] int64: depth; root 0, padding -1
    tok_ptr,  # [B, W-1] int64: node c's token at column c-1; -1 padding
    bonus_ptr,  # [B] int64
    prefix_ptr,  # [B] int64: committed lengths
    tokens_out,  # [B, W] int64
    pos_out,  # [B, W] int64
    mask_out,  # [total] uint8: the FULL_MASK layout of the module docstring
    batch, width, max_depth, total,  # ints
    W_PAD: tl.constexpr,  # power of two >= W
    ROWS: tl.constexpr,  # mask rows per program
    COLS: tl.constexpr,  # tree columns per store
    PCOLS: tl.constexpr,  # prefix columns per store
    CHAIN: tl.constexpr,  # power of two >= max_depth + 1
    BATCH_BLOCK: tl.constexpr,  # prefix lengths summed per step
):  # fmt: skip
    b = tl.program_id(0)
    rows = tl.program_id(1) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < width
    # where request b's rows start: W * (sum of earlier prefixes) + W * W * b
    before = tl.zeros((BATCH_BLOCK,), tl.int64)
    start = b * 0
    while start < b:
        idx = start + tl.arange(0, BATCH_BLOCK)
        before += tl.load(prefix_ptr + idx, mask=idx < b, other=0).to(tl.int64)
        start += BATCH_BLOCK
    prefix = tl.load(prefix_ptr + b).to(tl.int64)
    row_len = prefix + width
    row_base = width * tl.sum(before, 0) + width * width * b + rows.to(tl.int64) * row_len  # [ROWS]
    path = root_paths(par_ptr + b * width, rows, row_ok, width, max_depth, W_PAD, CHAIN)
    row_depth = tl.maximum(tl.load(dep_ptr + b * width + rows, mask=row_ok, other=0), 0).to(tl.int32)
    ones = tl.full((ROWS, PCOLS), 1, tl.uint8)
    c0 = prefix * 0
    while c0 < prefix:  # prefix columns: all visible
        cols = c0 + tl.arange(0, PCOLS)
        tl.store(mask_out + row_base[:, None] + cols[None, :], ones, mask=row_ok[:, None] & (cols < prefix)[None, :])
        c0 += PCOLS
    c0 = prefix * 0
    while c0 < width:  # tree columns: ancestors
        cols = c0 + tl.arange(0, COLS)
        col_ok = cols < width
        seen = seen_tile(path, row_depth, dep_ptr + b * width, cols, col_ok, CHAIN)
        tl.store(mask_out + row_base[:, None] + prefix + cols[None, :], seen.to(tl.uint8),
                 mask=row_ok[:, None] & col_ok[None, :])
        c0 += COLS
    bonus = tl.load(bonus_ptr + b).to(tl.int64)
    node_tok = tl.load(tok_ptr + b * (width - 1) + rows - 1, mask=row_ok & (rows >= 1), other=-1)
    tl.store(tokens_out + b * width + rows, tl.where(node_tok < 0, bonus, node_tok), mask=row_ok)
    tl.store(pos_out + b * width + rows, prefix + row_depth, mask=row_ok)
    if (b == batch - 1) & (tl.program_id(1) == 0):  # the unused tail past the last request: 1
        end = width * (tl.sum(before, 0) + prefix) + width * width * batch
        flat = tl.full((ROWS * COLS,), 1, tl.uint8)
        while end < total:
            offs = end + tl.arange(0, ROWS * COLS)
            tl.store(mask_out + offs, flat, mask=offs < total)
            end += ROWS * COLS


def verify_batch(
    tree: DraftTree, bonus: torch.Tensor, prefix_lens: torch.Tensor, prefix_total: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(tokens [B, W], positions [B, W], custom_mask [W * prefix_total + B * W * W] bool); see
    rounds.verify_batch."""
    parents, depths = tree.parents.contiguous(), tree.depths.contiguous()
    batch, width = parents.shape
    device = parents.device
    total = width * prefix_total + batch * width * width
    tokens = torch.empty((batch, width), dtype=torch.int64, device=device)
    positions = torch.empty((batch, width), dtype=torch.int64, device=device)
    mask = torch.empty(total, dtype=torch.bool, device=device)
    w_pad = triton.next_power_of_2(width)
    rows = min(32, w_pad)
    if batch > 0:
        _verify_kernel[(batch, triton.cdiv(width, rows))](
            parents, depths, tree.token_ids.contiguous(), bonus.contiguous(),
            prefix_lens.to(device=device, dtype=torch.int64).contiguous(), tokens, positions, mask.view(torch.uint8),
            batch, width, tree.max_depth, total,
            W_PAD=w_pad, ROWS=rows, COLS=min(256, max(16, w_pad)), PCOLS=256,
            CHAIN=triton.next_power_of_2(tree.max_depth + 1), BATCH_BLOCK=_BATCH_BLOCK, num_warps=4,
        )  # fmt: skip
    return tokens, positions, mask

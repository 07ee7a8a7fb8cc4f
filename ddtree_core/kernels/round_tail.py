"""Triton twin of `rounds.round_tail`: the tail of a DDTree decode round in one launch, one program per
request. It walks the tree along the target's tokens (`verify.follow_tree`, as tree_walk.py), lays the
path out for SGLang's KV move (`rounds.committed_path`: flat verify indices, and the move's slot pairs
cache_loc[k] <- cache_loc[path node k]) and writes the round's stats row (`rounds.round_stats_rows`).

Along the path the target's token at path node s is the token the round emits at slot s: for s < tau - 1
it is the token of path node s + 1 (the walk took the child agreeing with it), at s = tau - 1 the bonus.
So one gather of target_tokens at the path gives the emitted tokens, and their ranks in the drafter's
top-K lists follow without a second walk. For the tree.py worked example:

    root ─┬─ a ─┬─ c      target_tokens = [a, c, x, x, x]     path slot s:      0  1  2
          │     └─ d      walk root -> a -> c, tau = 3        accepted          0  1  2
          └─ b                                                emitted (target)  a  c  x = bonus

Outputs live in four buffers (the wrapper hands out views):
    paths  [7, B, P] int64, P = D + 1: PATH_FIELDS, one [B, P] plane each
    lens   [3, B] int64: LEN_FIELDS
    commit [B] int32: tau (CommittedPath.commit_lens)
    stats  [B, 5 + L] int32: rounds.STATS_COLUMNS, then the target token's rank at depths 1..L

The expected accept length (sum of exp(score)) is a float32 sum in the kernel's own order: it equals
the torch composition's up to rounding (tests/test_round_tail.py states the tolerance); every other
output is equal bit for bit.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ddtree_core.kernels.tree_walk import walk_path
from ddtree_core.types import STATS_COLUMNS, CommittedPath, DraftTopK, DraftTree, TreeWalk

PATH_FIELDS = ("accept_index", "hidden_rows", "positions", "out_tokens", "kv_dst", "kv_src", "accepted")  # `paths`
LEN_FIELDS = ("accept_lens", "bonus", "new_seq_lens")  # rows of `lens`


@triton.jit(do_not_specialize=["batch", "width", "max_depth", "n_depths", "top_k"])
def _round_tail_kernel(
    par_ptr,  # [B, W] int64: parent node index; root and padding -1
    tok_ptr,  # [B, W-1] int64: node c's token at column c-1; -1 padding
    dep_ptr,  # [B, W] int64: depth; root 0, padding -1
    nodes_ptr,  # [B] int64: non-root nodes of each tree
    score_ptr,  # [B, W] float32: path log-prob; root 0, padding -inf
    tgt_ptr,  # [B, W] int64: the target's token at every node
    topk_ptr,  # [B, L, K] int64: the drafter's top-K token ids at depths 1..L
    prefix_ptr,  # [B] int32 or int64: committed lengths
    loc_ptr,  # [B, W] int64: the KV slot the verify forward writes for each column
    paths_out, lens_out, commit_out, stats_out,  # the output buffers of the module docstring
    batch,  # int: B
    width,  # int: W = N + 1 nodes per tree (all inputs contiguous, so W, L, K give the strides)
    max_depth,  # int: D, the trees' depth limit; P = D + 1 path slots
    n_depths,  # int: L, depths of the top-K lists
    top_k,  # int: K
    W_PAD: tl.constexpr,  # power of two >= W: one request's tree in registers
    S_PAD: tl.constexpr,  # power of two >= max(P, L): the path slots and ranked depths
    K_BLOCK: tl.constexpr,  # top-K entries compared per step
):  # fmt: skip
    pid = tl.program_id(0)
    row = pid * width
    col = tl.arange(0, W_PAD)
    in_row = col < width
    deepest = tl.max(tl.load(dep_ptr + row + col, mask=in_row, other=-1), 0)
    expected = tl.sum(tl.exp(tl.load(score_ptr + row + col, mask=in_row, other=float("-inf"))), 0)
    # The walk (tree_walk.walk_path), then the target's token along the path.
    accepted, tau, current = walk_path(
        par_ptr + row, tok_ptr + pid * (width - 1), tgt_ptr + row, width, max_depth, W_PAD, S_PAD
    )
    slot = tl.arange(0, S_PAD)
    on_path = slot < tau
    emitted = tl.load(tgt_ptr + row + accepted, mask=on_path, other=-1)  # [S_PAD]; -1 past the path

    # Ranks: the first top-K entry equal to the emitted token at depth s + 1, K for a miss, -1 past tau.
    ranked = on_path & (slot < n_depths)
    rank = tl.full([S_PAD], 0, tl.int32) + top_k
    k0 = pid * 0
    while k0 < top_k:  # a while loop: the interpreter cannot range() over a runtime bound
        k = k0 + tl.arange(0, K_BLOCK)
        valid = ranked[:, None] & (k[None, :] < top_k)
        ids = tl.load(topk_ptr + (pid * n_depths + slot[:, None]) * top_k + k[None, :], mask=valid, other=-1)
        hit = valid & (ids == emitted[:, None])
        rank = tl.minimum(rank, tl.min(tl.where(hit, k[None, :], top_k), 1))
        k0 += K_BLOCK
    rank = tl.where(ranked, rank, -1)

    # paths: PATH_FIELDS in order; flat verify index = b * W + node. On the path slot < tau <= W, so the
    # slot loads stay in the row; past it both KV slots are 0, SGLang's dummy slot.
    length = max_depth + 1
    out = pid * length + slot
    keep = slot < length
    plane = batch * length
    flat = (row + tl.maximum(accepted, 0)).to(tl.int64)
    prefix = tl.load(prefix_ptr + pid).to(tl.int64)
    tl.store(paths_out + out, tl.where(on_path, flat, -1), mask=keep)
    tl.store(paths_out + plane + out, flat, mask=keep)
    tl.store(paths_out + 2 * plane + out, prefix + slot, mask=keep)
    tl.store(paths_out + 3 * plane + out, tl.maximum(emitted, 0), mask=keep)
    tl.store(paths_out + 4 * plane + out, tl.load(loc_ptr + row + slot, mask=on_path, other=0), mask=keep)
    tl.store(paths_out + 5 * plane + out, tl.load(loc_ptr + row + accepted, mask=on_path, other=0), mask=keep)
    tl.store(paths_out + 6 * plane + out, accepted.to(tl.int64), mask=keep)
    # lens: accept_lens, bonus (the target's token at the last path node), new_seq_lens.
    tl.store(lens_out + pid, tau.to(tl.int64))
    tl.store(lens_out + batch + pid, tl.load(tgt_ptr + row + current))
    tl.store(lens_out + 2 * batch + pid, prefix + tau)
    tl.store(commit_out + pid, tau)
    # stats: accept_len, num_nodes, depth_reached, top_k, expected accept length's bits, ranks.
    stats = stats_out + pid * (5 + n_depths)
    tl.store(stats, tau)
    tl.store(stats + 1, tl.load(nodes_ptr + pid).to(tl.int32))
    tl.store(stats + 2, deepest.to(tl.int32))
    tl.store(stats + 3, top_k)
    tl.store(stats + 4, expected.to(tl.int32, bitcast=True))
    tl.store(stats + 5 + slot, rank, mask=slot < n_depths)


def round_tail(
    tree: DraftTree, target_tokens: torch.Tensor, topk: DraftTopK, prefix_lens: torch.Tensor, *, cache_loc: torch.Tensor
) -> tuple[TreeWalk, CommittedPath, torch.Tensor]:
    """The walk, committed path and stats rows of a round (see rounds.round_tail). No host sync.

    target_tokens: [B, W] int64; topk: token_ids [B, L, K] int64; prefix_lens: [B] int32 or int64;
    cache_loc: [B, W] int64 verify KV slots.
    """
    batch, width = tree.parents.shape
    for name, tensor in (("target_tokens", target_tokens), ("cache_loc", cache_loc)):
        if tensor.shape != (batch, width):
            raise ValueError(f"{name} must be [B, N+1] = {(batch, width)}, got {tuple(tensor.shape)}")
    n_depths, top_k = topk.token_ids.shape[1:]
    length = tree.max_depth + 1
    device = tree.parents.device
    paths = torch.empty((len(PATH_FIELDS), batch, length), dtype=torch.int64, device=device)
    lens = torch.empty((len(LEN_FIELDS), batch), dtype=torch.int64, device=device)
    commit = torch.empty(batch, dtype=torch.int32, device=device)
    stats = torch.empty((batch, len(STATS_COLUMNS) + n_depths), dtype=torch.int32, device=device)
    if batch > 0:
        w_pad, s_pad, k_block = _pad(width), _pad(max(length, n_depths)), min(_pad(top_k), 128)
        _round_tail_kernel[(batch,)](
            tree.parents.contiguous(), tree.token_ids.contiguous(), tree.depths.contiguous(),
            tree.num_nodes.contiguous(), tree.scores.contiguous(), target_tokens.to(torch.int64).contiguous(),
            topk.token_ids.contiguous(), prefix_lens.contiguous(), cache_loc.to(torch.int64).contiguous(),
            paths, lens, commit, stats,
            batch, width, tree.max_depth, n_depths, top_k,
            W_PAD=w_pad, S_PAD=s_pad, K_BLOCK=k_block,
            num_warps=4 if max(w_pad, s_pad * k_block) >= 2048 else 1,  # the largest block: a row or a rank tile
        )  # fmt: skip
    planes = dict(zip(PATH_FIELDS, paths.unbind(0)))
    accept_lens, bonus, new_seq_lens = lens.unbind(0)
    walk = TreeWalk(accepted=planes.pop("accepted"), accept_lens=accept_lens, bonus=bonus)
    path = CommittedPath(**planes, commit_lens=commit, new_seq_lens=new_seq_lens)
    return walk, path, stats


def _pad(n: int) -> int:
    """The power of two >= n that a block dimension gets (at least 2: no one-element blocks)."""
    return max(2, triton.next_power_of_2(n))

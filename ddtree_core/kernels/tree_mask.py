"""Triton twin of `mask.ancestor_mask` and `encoding.positions`, fused: the verify-step layout of a
batch of trees written straight from parents and depths.

mask[b, i, j] = node j is node i or one of its ancestors (padding rows see only themselves), and
positions[b, i] = root_positions[b] + depth[b, i] (padding: the root's position). For the tree.py
worked example (root at position p):

    root ─┬─ a ─┬─ c        j:  0 1 2 3 4      positions
          │     └─ d    i=0 root 1 . . . .      p
          └─ b          i=1 a    1 1 . . .      p+1
                        i=2 c    1 1 1 . .      p+2
                        i=3 d    1 1 . 1 .      p+2
                        i=4 b    1 . . . 1      p+1

One program writes ROWS full rows of one request's mask (by default one row per program at one request,
`_default_launch`). It loads the request's parents once and
gathers the root paths of its rows in registers (at most max_depth steps, stopping once every path
has reached the root); then column c of row r is set iff c is r's ancestor at distance
depth(r) - depth(c), one gather per mask element. The mask is the only large output (B * (N+1)^2
bytes), written once, COLS columns at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ddtree_core.encoding import TreeShape
from ddtree_core.kernels.pdl import let_next_start, wait_for_inputs
from ddtree_core.kernels.pdl import options as pdl_options


@dataclass(frozen=True)
class TreeMask:
    """What a verify forward needs from the trees besides their tokens."""

    mask: torch.Tensor  # [B, N+1, N+1] bool, mask[b, i, j]: node j is node i or an ancestor of it
    positions: torch.Tensor  # [B, N+1] int64, root_positions[b] + depth; padding -> root_positions[b]


@triton.jit
def root_paths(par_row, rows, row_ok, width, max_depth, W_PAD: tl.constexpr, CHAIN: tl.constexpr):
    """path [ROWS, CHAIN]: path[r, s] = the ancestor of node rows[r] at distance s (-1 past the root and
    for rows not ok), from one tree's parents (par_row: W int64) gathered in registers; at most max_depth
    steps, stopping once every path has reached the root."""
    every = tl.arange(0, W_PAD)
    parents = tl.load(par_row + every, mask=every < width, other=-1).to(tl.int32)
    step = tl.arange(0, CHAIN)
    ancestor = tl.where(row_ok, rows, -1)
    path = tl.where(step[None, :] == 0, ancestor[:, None], -1)
    distance = width * 0
    climbing = (max_depth > 0) & (tl.max(ancestor, 0) >= 0)
    while climbing:
        ancestor = tl.where(ancestor >= 0, tl.gather(parents, tl.maximum(ancestor, 0), 0), -1)
        distance += 1
        path = tl.where(step[None, :] == distance, ancestor[:, None], path)
        climbing = (distance < max_depth) & (tl.max(ancestor, 0) >= 0)
    return path


@triton.jit
def seen_tile(path, row_depth, dep_row, cols, col_ok, CHAIN: tl.constexpr):
    """[ROWS, COLS] bool: column cols[c] (depth from dep_row) is row r's ancestor or r itself, i.e. r's
    ancestor at distance depth(r) - depth(c); row_depth [ROWS] with padding as depth 0."""
    col_depth = tl.maximum(tl.load(dep_row + cols, mask=col_ok, other=0), 0).to(tl.int32)
    up = row_depth[:, None] - col_depth[None, :]
    at_depth = tl.gather(path, tl.minimum(tl.maximum(up, 0), CHAIN - 1), 1)
    return (up >= 0) & (at_depth == cols[None, :])


@triton.jit(do_not_specialize=["width", "max_depth"])
def _mask_kernel(
    par_ptr,  # [B, W] int64: parent node index; root and padding -1
    dep_ptr,  # [B, W] int64: depth; root 0, padding -1
    root_ptr,  # [B] int64: position of each root (read when WITH_POSITIONS)
    mask_out,  # [B, W, W] uint8 (the bytes of a bool tensor)
    pos_out,  # [B, W] int64: positions (written when WITH_POSITIONS)
    s_pb, s_db,  # row strides of par_ptr and dep_ptr (elements)
    width,  # int: W = N + 1 nodes per tree
    max_depth,  # int: the trees' depth limit (bounds every root path)
    W_PAD: tl.constexpr,  # next power of two >= W: one request's parents fit in registers
    ROWS: tl.constexpr,  # mask rows (nodes) per program
    COLS: tl.constexpr,  # mask columns per store
    CHAIN: tl.constexpr,  # next power of two >= max_depth + 1: the longest root path
    WITH_POSITIONS: tl.constexpr,  # also write positions
    PDL: tl.constexpr = False,  # launched with programmatic dependent launch (pdl.py)
):  # fmt: skip
    wait_for_inputs(PDL)
    pid_b = tl.program_id(0)
    rows = tl.program_id(1) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < width
    path = root_paths(par_ptr + pid_b * s_pb, rows, row_ok, width, max_depth, W_PAD, CHAIN)
    row_depth = tl.maximum(tl.load(dep_ptr + pid_b * s_db + rows, mask=row_ok, other=0), 0).to(tl.int32)
    base = mask_out + (pid_b * width + rows[:, None]).to(tl.int64) * width
    c0 = width * 0
    while c0 < width:
        cols = c0 + tl.arange(0, COLS)
        col_ok = cols < width
        seen = seen_tile(path, row_depth, dep_ptr + pid_b * s_db, cols, col_ok, CHAIN)
        tl.store(base + cols[None, :], seen.to(tl.uint8), mask=row_ok[:, None] & col_ok[None, :])
        c0 += COLS
    if WITH_POSITIONS:
        position = tl.load(root_ptr + pid_b) + row_depth
        tl.store(pos_out + pid_b * width + rows, position, mask=row_ok)
    let_next_start(PDL)


def tree_mask(tree: TreeShape, root_positions: torch.Tensor, *, launch: dict | None = None) -> TreeMask:
    """The ancestor mask and the verify positions of every node, in one launch; root_positions [B].
    launch: overrides of the block sizes (LAUNCH_KEYS: ROWS, COLS, num_warps; the speed only)."""
    if root_positions.shape != (tree.parents.shape[0],):
        raise ValueError(f"root_positions must be [{tree.parents.shape[0]}], got {tuple(root_positions.shape)}")
    return _launch(tree, root_positions.to(device=tree.parents.device, dtype=torch.int64), launch)


def ancestor_mask(tree: TreeShape) -> torch.Tensor:
    """mask[b, i, j] = node j is node i or an ancestor of it; [B, N+1, N+1] bool."""
    return _launch(tree, None).mask


LAUNCH_KEYS = ("ROWS", "COLS", "num_warps")  # the overrides `tree_mask(launch=)` takes, powers of two each


def _launch(tree: TreeShape, root_positions: torch.Tensor | None, launch: dict | None = None) -> TreeMask:
    parents, depths = tree.parents.contiguous(), tree.depths.contiguous()
    batch, width = parents.shape
    device = parents.device
    mask = torch.empty((batch, width, width), dtype=torch.bool, device=device)
    positions = torch.empty((batch, width), dtype=torch.int64, device=device)
    w_pad = triton.next_power_of_2(width)
    config = _default_launch(batch, width) | _checked(launch or {})
    if config["ROWS"] < config["num_warps"]:  # Triton 3.6 failed to lower the root paths' gather so (W_PAD 512)
        raise ValueError(f"ROWS ({config['ROWS']}) must be at least num_warps ({config['num_warps']})")
    grid = (batch, triton.cdiv(width, config["ROWS"]))
    if batch > 0:
        _mask_kernel[grid](
            parents, depths, positions if root_positions is None else root_positions, mask.view(torch.uint8),
            positions, parents.stride(0), depths.stride(0), width, tree.max_depth,
            W_PAD=w_pad, CHAIN=triton.next_power_of_2(tree.max_depth + 1), WITH_POSITIONS=root_positions is not None,
            **config, **pdl_options(device),
        )  # fmt: skip
    return TreeMask(mask=mask, positions=positions)


def _default_launch(batch: int, width: int) -> dict:
    """ROWS: the largest power of two up to batch * W / 512 (1 to 32), so that a launch has 512 to 1,024 programs
    where it can; 1 warp for one row, 2 up to 8, else 4; COLS: 256 (at most W's next power of two). One program
    per row lets W programs share the climbs up the root paths that one program of 32 rows makes in turn."""
    rows = min(32, 1 << max(0, (batch * width // 512).bit_length() - 1))
    warps = 1 if rows == 1 else 2 if rows <= 8 else 4
    return {"ROWS": rows, "COLS": min(256, max(16, triton.next_power_of_2(width))), "num_warps": warps}


def _checked(launch: dict) -> dict:
    """`launch`, refused (ValueError) unless its keys are LAUNCH_KEYS with power-of-two values (at most 1,024)."""
    unknown = set(launch) - set(LAUNCH_KEYS)
    if unknown:
        raise ValueError(f"unknown launch keys {sorted(unknown)}; known: {', '.join(LAUNCH_KEYS)}")
    for key, value in launch.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value & (value - 1) or value > 1024:
            raise ValueError(f"{key} must be a power of two in [1, 1024], got {value!r}")
    return launch

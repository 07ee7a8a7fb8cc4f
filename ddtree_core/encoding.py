"""Converters from the canonical parents encoding of a draft tree to the formats engines consume.

One canonical encoding (DraftTree: `parents [B, N+1]`, node 0 the root, parent index < child index,
siblings in increasing rank = increasing node index order); everything else is derived here:

- path tuples, the Medusa/EAGLE exchange format: node i is the tuple of sibling ranks root-down;
- SGLang's first-child/next-sibling arrays (`retrive_*`), which its verify kernels walk without
  recursion;
- positions: the sequence position of every verify token.

`to_retrive` takes impl (ops.resolve): "reference" runs SGLang's build loop on the host; "torch" and
"triton" run the batched torch code (static shapes, no host reads). The path and inverse converters are
host code.

The tree.py worked example (pop order a, c, d, b), in each encoding, for request b of a batch whose
trees have N + 1 = 5 verify positions:

    root ─┬─ a ─┬─ c          parents               [-1,  0,  1,  1,  0]
          │     └─ d          paths                 [(), (0,), (0, 0), (0, 1), (1,)]
          └─ b                retrive_index         [5b, 5b+1, 5b+2, 5b+3, 5b+4]
                              retrive_next_token    [ 1,  2, -1, -1, -1]
                              retrive_next_sibling  [-1,  4,  3, -1, -1]
                              positions (root at p) [ p, p+1, p+2, p+2, p+1]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from ddtree_core import ops


class TreeShape(Protocol):
    """What the converters read from a tree: DraftTree and TreeTopology both provide it."""

    parents: torch.Tensor  # [B, N+1] int64, root and padding -1
    depths: torch.Tensor  # [B, N+1] int64, root 0, padding -1
    num_nodes: torch.Tensor  # [B] int64, non-root nodes
    max_depth: int  # static bound on depths


@dataclass(frozen=True)
class TreeTopology:
    """The structure of a batch of trees without tokens or scores (what the inverse converters recover)."""

    parents: torch.Tensor  # [B, N+1] int64, parent node index; root and padding -1
    depths: torch.Tensor  # [B, N+1] int64, root 0; padding -1
    ranks: torch.Tensor  # [B, N+1] int64, sibling index under the parent (0 first); root/padding -1
    num_nodes: torch.Tensor  # [B] int64, non-root nodes of each tree
    max_depth: int  # deepest node in the batch (0 when every tree is a bare root)


@dataclass(frozen=True)
class RetriveArrays:
    """SGLang's tree layout for `verify_tree_greedy` / `tree_speculative_sampling_target_only`.

    Field names follow the sgl_kernel op schema (`retrive_*`, sic). W = N + 1 verify positions per
    request; column i is node i. Values, as SGLang's `build_tree_kernel_efficient` writes them
    (0.5.15, `sgl-kernel/csrc/speculative/eagle_utils.cu`):

    - retrive_index[b, i] = b * W + i for every column, padding columns included. It is the flat
      verify-position index: the kernels read `target_predict`, `predicts` and write `accept_index`
      through it. SGLang's builders (EAGLE, ngram, DFlash chain) write it for every column; the
      kernels read it only at column 0 and at linked nodes, so a padding column's value is never read.
    - retrive_next_token[b, i] = the first child of node i (smallest node index), -1 for a leaf and
      for a padding column.
    - retrive_next_sibling[b, i] = the next child of the same parent in rank order (next larger node
      index), -1 for the last sibling, the root and a padding column.

    Padding columns are therefore exactly the columns no link reaches: nothing points at them and
    their own links are -1, so the walk never visits them.
    """

    retrive_index: torch.Tensor  # [B, N+1] int64, b * (N+1) + i
    retrive_next_token: torch.Tensor  # [B, N+1] int64, first child; -1 none
    retrive_next_sibling: torch.Tensor  # [B, N+1] int64, next sibling; -1 none


def to_paths(tree: TreeShape) -> list[list[tuple[int, ...]]]:
    """Path tuples per request: `paths[b][i]` is node i's sibling ranks root-down, `paths[b][0] == ()`.

    `paths[b][1:]` is Medusa/EAGLE's choices list (e.g. `[(0,), (0, 0), (0, 1), (1,)]`). Host code.
    """
    parents = tree.parents.detach().cpu().tolist()
    counts = tree.num_nodes.detach().cpu().tolist()
    out = []
    for row, count in zip(parents, counts):
        paths: list[tuple[int, ...]] = [()]
        children = [0] * (count + 1)
        for node in range(1, count + 1):
            parent = row[node]
            paths.append(paths[parent] + (children[parent],))
            children[parent] += 1
        out.append(paths)
    return out


def from_paths(
    paths: Sequence[Sequence[tuple[int, ...]]],
    *,
    width: int | None = None,
    device: torch.device | str = "cpu",
) -> TreeTopology:
    """Inverse of `to_paths`: `paths[b][i]` is node i's path, `paths[b][0] == ()`.

    Every path's prefix must come earlier in its list; ranks are the last element of each path.
    width: N + 1 columns (default: the longest list).
    """
    batch = len(paths)
    width = max((len(p) for p in paths), default=1) if width is None else width
    parents = [[-1] * width for _ in range(batch)]
    depths = [[-1] * width for _ in range(batch)]
    ranks = [[-1] * width for _ in range(batch)]
    for b, request in enumerate(paths):
        if not 1 <= len(request) <= width:
            raise ValueError(f"request {b} has {len(request)} paths; expected 1 (the root) to width {width}")
        index: dict[tuple[int, ...], int] = {}
        for node, path in enumerate(request):
            path = tuple(path)
            if (node == 0) != (path == ()) or path in index:
                raise ValueError(f"request {b}: node {node} path {path} (root must be () at 0, paths unique)")
            if node and path[:-1] not in index:
                raise ValueError(f"request {b}: node {node} path {path} comes before its parent")
            index[path] = node
            depths[b][node] = len(path)
            if node:
                parents[b][node], ranks[b][node] = index[path[:-1]], path[-1]
    return _topology(parents, depths, ranks, [len(p) - 1 for p in paths], device)


def to_retrive(tree: TreeShape, *, impl: str | None = None) -> RetriveArrays:
    """SGLang's first-child/next-sibling arrays of each tree (see RetriveArrays)."""
    impl = ops.resolve(impl, tree.parents.device)
    if impl == "reference":
        return _retrive_reference(tree.parents, tree.num_nodes)
    return _retrive_torch(tree.parents)


def from_retrive(arrays: RetriveArrays) -> TreeTopology:
    """Inverse of `to_retrive` (host code): walk the links from each root."""
    index = arrays.retrive_index.detach().cpu()
    batch, width = index.shape
    expected = torch.arange(batch * width).reshape(batch, width)
    if not torch.equal(index, expected):
        raise ValueError("retrive_index must be b * (N+1) + i")
    first = arrays.retrive_next_token.detach().cpu().tolist()
    sibling = arrays.retrive_next_sibling.detach().cpu().tolist()
    parents = [[-1] * width for _ in range(batch)]
    depths = [[-1] * width for _ in range(batch)]
    ranks = [[-1] * width for _ in range(batch)]
    counts = []
    for b in range(batch):
        depths[b][0], stack, seen = 0, [0], 1
        while stack:
            parent = stack.pop()
            child, rank = first[b][parent], 0
            while child != -1:
                if depths[b][child] != -1 or child <= parent:
                    raise ValueError(f"request {b}: node {child} linked twice or before its parent")
                parents[b][child], depths[b][child], ranks[b][child] = parent, depths[b][parent] + 1, rank
                stack.append(child)
                child, rank, seen = sibling[b][child], rank + 1, seen + 1
        if -1 in depths[b][:seen]:
            raise ValueError(f"request {b}: the linked nodes are not 0..{seen - 1}")
        counts.append(seen - 1)
    return _topology(parents, depths, ranks, counts, arrays.retrive_index.device)


def positions(tree: TreeShape, root_positions: torch.Tensor) -> torch.Tensor:
    """Sequence position of every verify token, [B, N+1] int64: root_positions[b] + depth.

    root_positions: [B], the position of each root (the request's current length). Padding columns
    get the root's position. Flatten for SGLang's `positions [B * (N+1)]`.
    """
    return root_positions.to(torch.int64).unsqueeze(1) + tree.depths.clamp(min=0)


def _topology(parents, depths, ranks, counts, device) -> TreeTopology:
    """Host lists -> TreeTopology on `device` (built on the CPU, where max_depth is read)."""
    as_tensor = lambda rows: torch.tensor(rows, dtype=torch.int64).reshape(len(counts), -1)
    depth_tensor = as_tensor(depths)
    max_depth = max(int(depth_tensor.max()), 0) if depth_tensor.numel() else 0
    return TreeTopology(
        parents=as_tensor(parents).to(device),
        depths=depth_tensor.to(device),
        ranks=as_tensor(ranks).to(device),
        num_nodes=torch.tensor(counts, dtype=torch.int64).to(device),
        max_depth=max_depth,
    )


def _retrive_reference(parents: torch.Tensor, num_nodes: torch.Tensor) -> RetriveArrays:
    """SGLang's build loop, one request at a time: insert nodes last to first at the head of their
    parent's child list, so each list ends in increasing node index order."""
    batch, width = parents.shape
    rows = parents.detach().cpu().tolist()
    counts = num_nodes.detach().cpu().tolist()
    first = [[-1] * width for _ in range(batch)]
    sibling = [[-1] * width for _ in range(batch)]
    for b in range(batch):
        for node in range(counts[b], 0, -1):
            parent = rows[b][node]
            sibling[b][node] = first[b][parent]
            first[b][parent] = node
    as_tensor = lambda value: torch.tensor(value, dtype=torch.int64, device=parents.device)
    return RetriveArrays(
        retrive_index=torch.arange(batch * width, device=parents.device).reshape(batch, width),
        retrive_next_token=as_tensor(first).reshape(batch, width),
        retrive_next_sibling=as_tensor(sibling).reshape(batch, width),
    )


def _retrive_torch(parents: torch.Tensor) -> RetriveArrays:
    """Sort nodes by (parent, index): each parent's children become a contiguous run in index order;
    a run's head is the parent's first child and each entry links to the next one in its run."""
    batch, width = parents.shape
    nodes = torch.arange(width, device=parents.device).expand(batch, width)
    is_child = parents >= 0  # the root and padding have parent -1
    keys = torch.where(is_child, parents * width + nodes, width * width + nodes)
    sorted_keys, order = keys.sort(dim=1)
    sorted_child = sorted_keys < width * width
    sorted_parent = torch.where(sorted_child, sorted_keys // width, -1)
    same_run = sorted_child[:, 1:] & (sorted_parent[:, 1:] == sorted_parent[:, :-1])  # [B, W-1]
    no_link = torch.full_like(order[:, :1], -1)
    following = torch.where(same_run, order[:, 1:], -1)
    next_sibling = torch.empty_like(order).scatter_(1, order, torch.cat([following, no_link], dim=1))
    starts_run = sorted_child & ~torch.cat([torch.zeros_like(same_run[:, :1]), same_run], dim=1)
    # Heads scatter to their parent's column; the rest go to a dump column W that is cut off.
    target = torch.where(starts_run, sorted_parent, width)
    next_token = torch.full((batch, width + 1), -1, dtype=torch.int64, device=parents.device)
    next_token.scatter_(1, target, order)
    return RetriveArrays(
        retrive_index=torch.arange(batch * width, device=parents.device).reshape(batch, width),
        retrive_next_token=next_token[:, :width],
        retrive_next_sibling=next_sibling,
    )

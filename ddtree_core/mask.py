"""Tree-attention masks: which verify positions each verify token may attend to.

A verify token sees the whole prefix (the request's committed tokens) and, inside the tree, itself
and its ancestors; a padding column sees only itself. For the tree.py worked example (W = N+1 = 5):

    root ─┬─ a ─┬─ c            j:  0 1 2 3 4
          │     └─ d        i=0 root 1 . . . .
          └─ b              i=1 a    1 1 . . .
                            i=2 c    1 1 1 . .
                            i=3 d    1 1 . 1 .
                            i=4 b    1 . . . 1

Three layouts:
- dense `ancestor_mask` [B, W, W] bool;
- bits packed along the last dim, FlashInfer's `packbits(..., bitorder="little")`: byte j // 8,
  bit j % 8 (`pack_bits` / `unpack_bits`; packing one request's flattened verify mask gives FlashInfer's
  `segment_packbits` bytes for that request);
- SGLang's FULL_MASK custom mask (`flat_verify_mask`): per request the [W, prefix_len + W] rows of
  `request_verify_mask`, flattened row-major, concatenated in batch order: request b starts at
  W * sum(prefix_lens[:b]) + b * W * W (`build_tree_kernel_efficient`, tree_mask_mode FULL_MASK).

impl (ops.resolve): "reference" walks parents on the host (numpy for the bits); "torch" and "triton"
run the batched torch code here (static shapes, no host reads, CUDA-graph capturable); "triton"
runs kernels/tree_mask.py for `ancestor_mask` and the torch code for the rest.
"""

from __future__ import annotations

import numpy as np
import torch

from ddtree_core import ops
from ddtree_core.encoding import TreeShape


def ancestor_mask(tree: TreeShape, *, impl: str | None = None) -> torch.Tensor:
    """mask[b, i, j] = node j is node i or an ancestor of it; [B, N+1, N+1] bool. Padding rows see
    only themselves."""
    impl = ops.resolve(impl, tree.parents.device)
    if impl == "reference":
        return _ancestor_reference(tree.parents)
    if impl == "triton":
        from ddtree_core.kernels import tree_mask

        return tree_mask.ancestor_mask(tree)
    return _ancestor_torch(tree.parents, tree.max_depth)


def pack_bits(mask: torch.Tensor, *, impl: str | None = None) -> torch.Tensor:
    """Pack a bool mask [..., L] into uint8 [..., ceil(L / 8)]: element j is bit j % 8 of byte j // 8;
    bits past L are 0."""
    impl = ops.resolve(impl, mask.device)
    if impl == "reference":
        packed = np.packbits(mask.detach().cpu().numpy().astype(bool), axis=-1, bitorder="little")
        return torch.from_numpy(packed).to(mask.device)
    length = mask.shape[-1]
    padded = torch.nn.functional.pad(mask.to(torch.uint8), (0, -length % 8))
    groups = padded.reshape(*mask.shape[:-1], -1, 8).to(torch.int32)
    return (groups << _bit_shifts(mask.device)).sum(dim=-1).to(torch.uint8)


def unpack_bits(packed: torch.Tensor, length: int, *, impl: str | None = None) -> torch.Tensor:
    """Inverse of `pack_bits`: uint8 [..., ceil(length / 8)] -> bool [..., length]."""
    if packed.dtype != torch.uint8 or packed.shape[-1] != -(-length // 8):
        raise ValueError(f"expected uint8 [..., {-(-length // 8)}], got {packed.dtype} {tuple(packed.shape)}")
    impl = ops.resolve(impl, packed.device)
    if impl == "reference":
        bits = np.unpackbits(packed.detach().cpu().numpy(), axis=-1, count=length, bitorder="little")
        return torch.from_numpy(bits.astype(bool)).to(packed.device)
    bits = (packed.to(torch.int32).unsqueeze(-1) >> _bit_shifts(packed.device)) & 1
    return bits.reshape(*packed.shape[:-1], -1)[..., :length].bool()


def request_verify_mask(tree_mask: torch.Tensor, prefix_len: int) -> torch.Tensor:
    """One request's verify rows [W, prefix_len + W]: the prefix all visible, then its ancestor mask
    `tree_mask` [W, W]."""
    prefix = torch.ones(tree_mask.shape[0], prefix_len, dtype=torch.bool, device=tree_mask.device)
    return torch.cat([prefix, tree_mask.bool()], dim=1)


def flat_verify_mask(
    tree: TreeShape, prefix_lens: torch.Tensor, prefix_total: int, *, impl: str | None = None
) -> torch.Tensor:
    """SGLang's FULL_MASK custom mask, bool [W * prefix_total + B * W * W].

    prefix_lens: [B] committed tokens per request (SGLang's seq_lens); prefix_total: their sum on the
    host (SGLang's seq_lens_sum), which sizes the output so that no device value is read.
    """
    impl = ops.resolve(impl, tree.parents.device)
    if impl == "reference":
        lens = prefix_lens.detach().cpu().tolist()
        if sum(lens) != prefix_total:
            raise ValueError(f"prefix_total {prefix_total} != sum(prefix_lens) {sum(lens)}")
        masks = _ancestor_reference(tree.parents)
        rows = [request_verify_mask(masks[b], length).flatten() for b, length in enumerate(lens)]
        return torch.cat(rows) if rows else masks.new_zeros(0)
    return scatter_verify_mask(ancestor_mask(tree, impl=impl), prefix_lens, prefix_total)


def _bit_shifts(device: torch.device) -> torch.Tensor:
    return torch.arange(8, dtype=torch.int32, device=device)


def _ancestor_reference(parents: torch.Tensor) -> torch.Tensor:
    """Walk each node's parent chain on the host."""
    batch, width = parents.shape
    rows = parents.detach().cpu().tolist()
    mask = torch.zeros(batch, width, width, dtype=torch.bool)
    for b in range(batch):
        for node in range(width):
            ancestor = node
            while ancestor != -1:
                mask[b, node, ancestor] = True
                ancestor = rows[b][ancestor]
    return mask.to(parents.device)


def _ancestor_torch(parents: torch.Tensor, max_depth: int) -> torch.Tensor:
    """max_depth gathers collect each node's ancestors at distance 0..max_depth (a missing ancestor is
    replaced by the node itself); one scatter writes them as columns."""
    batch, width = parents.shape
    nodes = torch.arange(width, device=parents.device).expand(batch, width)
    columns = [nodes]
    ancestor = parents
    for _ in range(max_depth):
        columns.append(torch.where(ancestor >= 0, ancestor, nodes))
        ancestor = torch.where(ancestor >= 0, parents.gather(1, ancestor.clamp(min=0)), -1)
    chains = torch.stack(columns, dim=-1)  # [B, W, max_depth + 1]
    mask = torch.zeros(batch, width, width, dtype=torch.bool, device=parents.device)
    return mask.scatter_(2, chains, True)


def scatter_verify_mask(masks: torch.Tensor, prefix_lens: torch.Tensor, prefix_total: int) -> torch.Tensor:
    """flat_verify_mask from ancestor masks [B, W, W] already built: start from all-visible and scatter each
    request's tree block into its rows (no host read; prefix_total sizes the output)."""
    batch, width, _ = masks.shape
    lens = prefix_lens.to(device=masks.device, dtype=torch.int64)
    starts = width * (torch.cumsum(lens, 0) - lens) + width * width * torch.arange(batch, device=masks.device)
    rows = torch.arange(width, device=masks.device)
    row_starts = starts[:, None] + rows[None, :] * (lens[:, None] + width) + lens[:, None]  # [B, W]
    index = row_starts[:, :, None] + rows[None, None, :]  # [B, W, W]
    out = torch.ones(width * prefix_total + batch * width * width, dtype=torch.bool, device=masks.device)
    return out.scatter_(0, index.flatten(), masks.flatten())

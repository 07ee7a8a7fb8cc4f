"""The accepted path's KV into place: for every KV buffer, row kv_src[b, k] -> row kv_dst[b, k] for the
path slots k < commit_lens[b] whose rows differ, in one launch (rounds.CommittedPath holds the pairs).

SGLang's pool copy (`move_kv_cache`) takes any pair list and keeps every pair of a call in registers
at once, so it pays for a round's B * P pairs (P = tree depth + 1) even where most are padding or
identities. Here one
program copies one byte tile of one buffer for one request, walking that request's pairs in path
order and skipping padding and identities.

Path order makes the in-place copy safe: path node indices rise along the path (a child is popped
after its parent), so kv_src[b, k] = slot of node path[k] with path[k] >= k, and the slot a pair
writes, kv_dst[b, k] = slot of column k, is read only by pairs j <= k (those with path[j] = k).
Walking k upward, each row is read before it is overwritten. Requests own disjoint slots.

Buffers are given as a table of base addresses and row sizes in bytes (SGLang's MHA pool keeps
`data_ptrs` and `data_strides` for its own copy kernel): row r of buffer i starts at
data_ptrs[i] + r * row_bytes[i].
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["pairs"])
def _move_kernel(
    ptr_table,  # [N] uint64/int64: base address of every buffer
    row_bytes_ptr,  # [N] int64: bytes per row (slot) of every buffer
    dst_ptr,  # [B, P] int64: destination slot of every path slot
    src_ptr,  # [B, P] int64: source slot
    lens_ptr,  # [B] int32/int64: path slots in use
    pairs,  # int: P
    TILE: tl.constexpr,  # bytes per program
):  # fmt: skip
    b = tl.program_id(0)
    buffer = tl.program_id(1)
    base = tl.load(ptr_table + buffer).to(tl.pointer_type(tl.uint8))
    row = tl.load(row_bytes_ptr + buffer)
    offs = tl.program_id(2) * TILE + tl.arange(0, TILE)
    inside = offs < row
    used = tl.load(lens_ptr + b)
    k = used * 0
    while k < used:
        dst = tl.load(dst_ptr + b * pairs + k)
        src = tl.load(src_ptr + b * pairs + k)
        if dst != src:
            values = tl.load(base + src * row + offs, mask=inside)
            tl.store(base + dst * row + offs, values, mask=inside)
        k += 1


def move_path_kv(
    ptr_table: torch.Tensor, row_bytes: torch.Tensor, max_row_bytes: int, kv_dst, kv_src, commit_lens
) -> None:
    """Copy, in every buffer, row kv_src[b, k] to row kv_dst[b, k] for k < commit_lens[b] (see the module
    docstring). ptr_table / row_bytes: [N] per buffer; max_row_bytes: their largest row, on the host."""
    batch, pairs = kv_dst.shape
    if batch == 0 or ptr_table.numel() == 0:
        return
    tile = min(1024, triton.next_power_of_2(max_row_bytes))
    grid = (batch, ptr_table.numel(), triton.cdiv(max_row_bytes, tile))
    _move_kernel[grid](
        ptr_table, row_bytes, kv_dst.contiguous(), kv_src.contiguous(), commit_lens, pairs, TILE=tile, num_warps=4
    )


def self_check(device: torch.device | str) -> str | None:
    """Run the kernel once on scratch buffers of `device` against a gather-then-scatter copy; the reason it
    must not serve there, or None."""
    generator = torch.Generator().manual_seed(0)
    buffers = [torch.randint(0, 255, (64, size), generator=generator, dtype=torch.uint8) for size in (24, 1100)]
    dst = torch.tensor([[5, 6, 7, 0], [20, 21, 0, 0]])
    src = torch.tensor([[5, 9, 12, 0], [20, 30, 0, 0]])
    lens = torch.tensor([3, 2], dtype=torch.int32)
    expected = []
    for buffer in buffers:
        moved = buffer.clone()
        keep = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
        moved[dst[keep]] = buffer[src[keep]]
        expected.append(moved)
    on_device = [b.to(device) for b in buffers]
    table = torch.tensor([b.data_ptr() for b in on_device], dtype=torch.int64, device=device)
    row_bytes = torch.tensor([b.shape[1] for b in buffers], device=device)
    try:
        move_path_kv(table, row_bytes, 1100, dst.to(device), src.to(device), lens.to(device))
    except Exception as error:  # a kernel that does not compile here
        return f"kv_move kernel failed: {type(error).__name__}: {error}"
    if not all(torch.equal(got.cpu(), want) for got, want in zip(on_device, expected)):
        return "kv_move kernel disagrees with a gather-scatter copy"
    return None

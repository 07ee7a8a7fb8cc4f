"""Scratch: which part of the tile emission costs (not part of the repository)."""
import torch, triton, triton.language as tl
from ddtree_core.kernels import topk_radix as tr
from ddtree_core.kernels.topk import _order_key, _entry
from ddbench.kernel_bench import graph_seconds

@triton.jit
def emit_variant(logits_ptr, row_stride, vocab, scale, group_ptr, n_groups, seg_ptr, count_ptr, floor_ptr, n_tiles,
                 TILE: tl.constexpr, G: tl.constexpr, EMIT: tl.constexpr, CAP: tl.constexpr,
                 FLOOR: tl.constexpr, STORE: tl.constexpr, CUMSUM: tl.constexpr, KEYS: tl.constexpr):
    row = tl.program_id(0)
    tile = tl.program_id(1)
    GT: tl.constexpr = TILE // G
    start = tile * TILE
    offs = tl.arange(0, TILE)
    valid = start + offs < vocab
    raw = tl.load(logits_ptr + row.to(tl.int64) * row_stride + start + offs, mask=valid, other=0.0)
    g = tile * GT + tl.arange(0, GT)
    group_max = tl.load(group_ptr + row.to(tl.int64) * n_groups + g, mask=g < n_groups, other=-2147483648)
    if FLOOR == 1:
        reach = tl.sum((group_max[None, :] >= group_max[:, None]).to(tl.int32), 1)
        floor = tl.max(tl.where(reach >= EMIT, group_max, -2147483648), 0)
    elif FLOOR == 2:  # sort
        srt = tl.sort(group_max, descending=True)
        floor = tl.max(tl.where(tl.arange(0, GT) == EMIT - 1, srt, -2147483648), 0)
    else:
        floor = tl.max(group_max, 0) - 100000000
    if KEYS:
        key = _order_key(raw.to(tl.float32) * scale)
    else:
        key = raw.to(tl.int16, bitcast=True).to(tl.int32) << 16
    live = (valid & (key >= floor)).to(tl.int32)
    slot = row.to(tl.int64) * n_tiles + tile
    if CUMSUM:
        place = tl.cumsum(live, 0) - 1
    else:
        place = offs % CAP
    if STORE:
        tl.store(seg_ptr + slot * CAP + place, _entry(key, start + offs), mask=(live == 1) & (place < CAP))
    tl.store(count_ptr + slot, tl.sum(live, 0))
    tl.store(floor_ptr + slot, floor)

for batch in (1, 8):
    torch.manual_seed(0)
    logits = torch.randn(batch, 16, 152064, device="cuda").bfloat16() * 4
    rows = logits.view(-1, 152064); R, V = rows.shape
    G, TILE = 32, 2048
    n_groups = triton.cdiv(V, G); n_tiles = triton.cdiv(V, TILE)
    groups = tr.group_maxima(logits, 256, 1.0)
    seg = torch.empty(R, n_tiles, 64, dtype=torch.int64, device="cuda")
    counts = torch.empty(R, n_tiles, dtype=torch.int32, device="cuda"); floors = torch.empty_like(counts)
    for name, kw in [("full", dict(FLOOR=1, STORE=1, CUMSUM=1, KEYS=1)), ("sortfloor", dict(FLOOR=2, STORE=1, CUMSUM=1, KEYS=1)),
                     ("nofloor", dict(FLOOR=0, STORE=1, CUMSUM=1, KEYS=1)), ("nostore", dict(FLOOR=1, STORE=0, CUMSUM=1, KEYS=1)),
                     ("nocumsum", dict(FLOOR=1, STORE=1, CUMSUM=0, KEYS=1)), ("count_only", dict(FLOOR=0, STORE=0, CUMSUM=0, KEYS=0)),
                     ("floor_only", dict(FLOOR=1, STORE=0, CUMSUM=0, KEYS=0))]:
        for warps in (1, 4):
            fn = lambda: emit_variant[(R, n_tiles)](rows, V, V, 1.0, groups, n_groups, seg, counts, floors, n_tiles,
                                                    TILE=TILE, G=G, EMIT=14, CAP=64, num_warps=warps, **kw)
            fn(); torch.cuda.synchronize()
            us = graph_seconds(fn, 0.05) * 1e6
            print(f"batch {batch} {name} warps {warps}: {us:.1f} us", flush=True)

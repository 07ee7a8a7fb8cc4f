"""Triton twin of `batched.draft_topk`: the top-K of every row of draft logits in one read of them.

Contract (tree.py): tokens ranked by logit / draft_temperature in float32, equal values smaller token id
first, K of them best first; log-probs are those values minus the row's logsumexp. A value is ranked
by an int32 key that orders like the float (-0.0 equal to 0.0, NaN below -inf, as the reference's
stable sort puts it last); a kept token is the int64 entry key << 32 | (2**31 - 1 - id), so entries
order like (value desc, id asc) and no two are equal.

Kernel 1, one program per (row, vocabulary chunk), streams its chunk tile by tile (the next tile is
loaded while this one is scanned) and keeps, in a scratch list in id order, every token that can
still be among the chunk's K best:
  - a token joins the list when its key reaches `floor`; a tile whose largest key is below the floor
    only pays for the scan (key, tile max, exp-sum for the logsumexp);
  - when a tile would add more than `soft` tokens (the first tile), the floor first rises to a key
    that K of the tile's tokens reach, read off the maxima of G > K groups of the tile;
  - when the list grows past `soft` it shrinks to its K best (radix selection on the keys, equal
    keys in list order, i.e. smaller id first) and the floor becomes the K-th key + 1: those K
    tokens beat every later token with a smaller or equal key.
Kernel 2 (only for rows split in several chunks), one program per row, selects the K best of the
chunks' K-lists (chunk after chunk, so still in id order) and merges their (max, exp-sum) pairs.
Either kernel then ranks the K winners (tl.sort of their entries, or counting for K <= 64) and
writes them best first with log-prob = value - logsumexp.

Worked example, K = 2, one chunk, tile 4, soft 4, logits of ids 0..7: 1 3 3 0 | 2 3 5 1:
    tile 0: floor = NaN key, all 4 join            list 1 3 3 0 (ids 0 1 2 3)
    tile 1: all 4 join, 8 > soft: shrink           list 3 5 (ids 1 6), floor = key(3) + 1
    ranked: id 6 (5.0), id 1 (3.0); ids 2 and 5, also 3.0, lose to id 1.

Exactness: a token leaves the list only when K others beat it, the list stays in id order (tiles are
appended in order, shrinks compact in order) and the selection keeps equal keys in list order, so
the K-list equals the reference's for every input, ties, -inf and NaN included. Log-probs differ
from the reference only by the rounding of the logsumexp (another summation order; on the GPU an
exp2-based exp), see tests/test_kernels_topk.py for the tolerance.

Scaling: the reference computes logits.float() / draft_temperature on the logits' device, which
torch does as a float32 division on the CPU and as a multiply by the float32 reciprocal on CUDA; the
kernel does the same, so that values are bit-equal and ties stay ties.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from ddtree_core.kernels.clock import stamp
from ddtree_core.kernels.radix import max_min_min, pick_digit
from ddtree_core.types import DraftTopK

MAX_K = 1024  # larger k takes the torch path (batched.draft_topk), which gives the same result
_BLOCK = 512  # list entries per block of kernel 1's selection passes
_MERGE_LIMIT = 4096  # at most this many candidates (chunks * K) per row for kernel 2
_PAD = tl.constexpr(-9223372036854775808)  # the entry of no token: below every real entry
_NAN_KEY = tl.constexpr(-2147483647)  # key of NaN (one above the padding key -2**31)
_NINF_KEY = tl.constexpr(-2139095040)  # key of -inf
_I32_MAX = tl.constexpr(2147483647)
_FLT_MAX = tl.constexpr(3.4028234663852886e38)


@triton.jit
def _order_key(x):
    """int32 key ordered like the float32 x: -0.0 and 0.0 share key 0, NaN gets _NAN_KEY."""
    bits = x.to(tl.int32, bitcast=True)
    sign = bits >> 31  # 0 or -1
    key = (bits ^ (sign & 0x7FFFFFFF)) - sign  # negative x: -(bits & 0x7FFFFFFF)
    return tl.where(x == x, key, _NAN_KEY)


@triton.jit
def _key_value(key):
    """The float32 a key stands for (0.0 for key 0)."""
    bits = tl.where(key >= 0, key, (-key) | -2147483648)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _entry(key, ids):
    """int64 entries ordered like (key desc, id asc): key << 32 | (2**31 - 1 - id)."""
    return (key.to(tl.int64) << 32) | (ids ^ _I32_MAX).to(tl.int64)


@triton.jit
def _bit_length(x):
    """Bits needed to write the int64 x in [0, 2**32] (float rounding may add one, never removes one)."""
    exponent = (x.to(tl.float32).to(tl.int32, bitcast=True) >> 23) - 126
    return tl.where(x > 0, exponent, 0).to(tl.int64)


@triton.jit
def _block_bounds(key, valid, first, hi, lo, lowest):
    """Fold a block of keys into (max, min, lowest set bit of any key ^ first)."""
    diff = (key ^ first).to(tl.int64) & 0xFFFFFFFF
    kept = tl.where(valid, key, first)
    block_hi, block_lo, block_lowest = max_min_min(kept, kept, tl.where(valid & (diff > 0), diff & -diff, 4294967296))
    return tl.maximum(hi, block_hi), tl.minimum(lo, block_lo), tl.minimum(lowest, block_lowest)


@triton.jit
def _block_hist(key, valid, top, zeros, base, width, shift, BINS: tl.constexpr):
    """Histogram, by digit (rel >> shift), of the keys whose rel = (top - key) >> zeros lies in the
    bucket [base, base + 2**width)."""
    rel = ((top - key.to(tl.int64)) >> zeros) - base
    inside = valid & (rel >= 0) & ((rel >> width) == 0)
    return tl.histogram((rel >> shift).to(tl.int32), BINS, mask=inside)


@triton.jit
def _load_keys(ptr, offs, mask, KEYS: tl.constexpr):
    """int32 keys of a block: the keys themselves (KEYS), else those of int64 entries (entry >> 32)."""
    if KEYS:
        return tl.load(ptr + offs, mask=mask, other=0)
    else:
        return (tl.load(ptr + offs, mask=mask, other=0) >> 32).to(tl.int32)


@triton.jit
def _select_top(entry_ptr, n, need, BLOCK: tl.constexpr, LOG_BINS: tl.constexpr, KEYS: tl.constexpr = False):
    """Radix selection of the `need` best of n > need entries at entry_ptr by key, equal keys in list order
    (KEYS: the entries are int32 keys, else int64 entries keyed by their top half).

    Returns int64 (top, bottom) and int32 left: the selection is every key > top and the first `left`
    keys (list order) with bottom < key <= top. Digits come from top - key, shifted right by the
    trailing zero bits that all keys share (16 for bf16 logits at temperature 1); a pass histograms
    the current bucket, and the search stops once the bucket is taken whole or holds one key value.
    The first block stays in registers across the passes; later blocks are reloaded, each one's load
    issued before the block ahead of it is counted (the loads' latency, not the counting, set a
    pass's time).
    """
    BINS: tl.constexpr = 1 << LOG_BINS
    offs = tl.arange(0, BLOCK)
    valid0 = offs < n
    key0 = _load_keys(entry_ptr, offs, valid0, KEYS)
    first = _load_keys(entry_ptr, 0, n > 0, KEYS)  # a key of the list: the bounds' start
    hi, lo, lowest = _block_bounds(key0, valid0, first, first, first, first.to(tl.int64) * 0 + 4294967296)
    b0 = n * 0 + BLOCK
    key = _load_keys(entry_ptr + b0, offs, b0 + offs < n, KEYS)
    while b0 < n:
        ahead = _load_keys(entry_ptr + b0 + BLOCK, offs, b0 + BLOCK + offs < n, KEYS)
        hi, lo, lowest = _block_bounds(key, b0 + offs < n, first, hi, lo, lowest)
        key = ahead
        b0 += BLOCK
    zeros = _bit_length(lowest) - 1  # every top - key is a multiple of 2**zeros
    top = hi.to(tl.int64)
    width = _bit_length((top - lo.to(tl.int64)) >> zeros)
    base = top * 0
    left = need
    searching = n > need
    while searching:
        shift = tl.maximum(width - LOG_BINS, 0)
        hist = _block_hist(key0, valid0, top, zeros, base, width, shift, BINS)
        b0 = n * 0 + BLOCK
        key = _load_keys(entry_ptr + b0, offs, b0 + offs < n, KEYS)
        while b0 < n:
            ahead = _load_keys(entry_ptr + b0 + BLOCK, offs, b0 + BLOCK + offs < n, KEYS)
            hist += _block_hist(key, b0 + offs < n, top, zeros, base, width, shift, BINS)
            key = ahead
            b0 += BLOCK
        chosen, below, in_chosen = pick_digit(hist, left, BINS)
        left -= below
        base += chosen.to(tl.int64) << shift
        width = shift
        searching = (in_chosen != left) & (shift > 0)
    return top - (base << zeros), top - ((base + (base * 0 + 1 << width)) << zeros), left


@triton.jit
def _compact_top(entry_ptr, n, top, bottom, left, dst_ptr, BLOCK: tl.constexpr, KEYS: tl.constexpr = False):
    """Copy what `_select_top` chose, in list order, to dst (which may be the source); returns
    (count, smallest key copied). KEYS: the list holds int32 keys, and what is copied is each chosen
    key's place in it. A block's copies land before its end, so the next block's load may be issued
    first."""
    offs = tl.arange(0, BLOCK)
    n_sel = n * 0
    n_tie = n * 0
    kth = n * 0 + _I32_MAX
    b0 = n * 0
    pad = _NAN_KEY - 1 if KEYS else _PAD
    ahead = tl.load(entry_ptr + offs, mask=offs < n, other=pad)
    while b0 < n:
        m = b0 + offs < n
        entry = ahead
        ahead = tl.load(entry_ptr + b0 + BLOCK + offs, mask=b0 + BLOCK + offs < n, other=pad)
        key = entry if KEYS else entry >> 32
        tie = (m & (key > bottom) & (key <= top)).to(tl.int32)
        sel = m & ((key > top) | ((tie == 1) & (n_tie + tl.cumsum(tie, 0) - tie < left)))
        pos = n_sel + tl.cumsum(sel.to(tl.int32), 0) - 1
        tl.debug_barrier()  # every load of this block happens before any store into it
        tl.store(dst_ptr + pos, b0 + offs if KEYS else entry, mask=sel)
        kth = tl.minimum(kth, tl.min(tl.where(sel, key, _I32_MAX), 0).to(tl.int32))
        n_sel += tl.sum(sel.to(tl.int32), 0)
        n_tie += tl.sum(tie, 0)
        b0 += BLOCK
    return n_sel, kth


@triton.jit
def _keep_top(entry_ptr, n, need, BLOCK: tl.constexpr, LOG_BINS: tl.constexpr, KEYS: tl.constexpr = False):
    """`_select_top` of n > need entries, then `_compact_top` of the choice in place: returns (need, the
    smallest key kept); KEYS as for both."""
    top, bottom, left = _select_top(entry_ptr, n, need, BLOCK, LOG_BINS, KEYS)
    return _compact_top(entry_ptr, n, top, bottom, left, entry_ptr, BLOCK, KEYS)


@triton.jit
def _shrink(entry_ptr, n, k, floor, BLOCK: tl.constexpr, LOG_BINS: tl.constexpr):
    """Cut the list to its k best in place; returns (k, the raised floor)."""
    tl.debug_barrier()  # the appended entries are visible to every thread
    n, kth = _keep_top(entry_ptr, n, k, BLOCK, LOG_BINS)
    tl.debug_barrier()
    return n, tl.maximum(floor, kth + 1)


@triton.jit
def _group_floor(key, need, TILE: tl.constexpr, G: tl.constexpr, LOG_BINS: tl.constexpr):
    """A key that at least `need` < G keys of the tile reach: the bucket of the need-th largest of
    the G group maxima after three radix passes (a bound for filtering, not an exact selection)."""
    BINS: tl.constexpr = 1 << LOG_BINS
    gmax = tl.max(tl.reshape(key, [G, TILE // G]), axis=1).to(tl.int64)
    hi = tl.max(gmax, 0)
    width = _bit_length(hi - tl.min(gmax, 0))
    base = hi * 0
    left = need
    for _ in tl.static_range(3):
        shift = tl.maximum(width - LOG_BINS, 0)
        rel = hi - gmax - base
        hist = tl.histogram((rel >> shift).to(tl.int32), BINS, mask=(rel >= 0) & ((rel >> width) == 0))
        chosen, below, _ = pick_digit(hist, left, BINS)
        left -= below
        base += chosen.to(tl.int64) << shift
        width = shift
    return tl.maximum(hi - base - (base * 0 + 1 << width) + 1, _NAN_KEY).to(tl.int32)


@triton.jit
def _scan_tile(
    raw, ids, valid, floor, n, m, s, scale, buf, k, soft,
    TILE: tl.constexpr, G: tl.constexpr, BLOCK: tl.constexpr, LOG_BINS: tl.constexpr,
    DIVIDE: tl.constexpr, MASKED: tl.constexpr,
):  # fmt: skip
    """One tile: scale, key, fold into the running (max m, exp-sum s), append what reaches the floor."""
    x = raw.to(tl.float32)
    if DIVIDE:
        x = x / scale
    else:
        x = x * scale
    key = _order_key(x)
    if MASKED:
        key = tl.where(valid, key, _NAN_KEY - 1)  # masked lanes hold -inf, which adds 0 to s
    tile_max = tl.max(key, 0)
    new_m = tl.maximum(m, _key_value(tl.maximum(tile_max, _NINF_KEY)))
    s = s * tl.exp(m - new_m) + tl.sum(tl.exp(x - new_m), 0)
    m = new_m
    if tile_max >= floor:
        live = key >= floor
        count = tl.sum(live.to(tl.int32), 0)
        if (count > soft) & (k < G):
            floor = tl.maximum(floor, _group_floor(key, k, TILE, G, LOG_BINS))
            live = key >= floor
            count = tl.sum(live.to(tl.int32), 0)
        tl.store(buf + n + tl.cumsum(live.to(tl.int32), 0) - 1, _entry(key, ids), mask=live)
        n += count
        if n > soft:
            n, floor = _shrink(buf, n, k, floor, BLOCK, LOG_BINS)
    return floor, n, m, s


@triton.jit
def _logsumexp(m, s):
    """m + log(s), where m is the max; +inf when the row holds +inf (as torch.logsumexp)."""
    return tl.where(m == float("inf"), m, m + tl.log(s))


@triton.jit
def _write_ranked(entry_ptr, k, lse, lp_out, ids_out, KP: tl.constexpr):
    """Write the k entries at entry_ptr best first: by counting the entries that beat each one
    (a [KP, KP] compare, KP <= 64), else by tl.sort."""
    p = tl.arange(0, KP)
    entry = tl.load(entry_ptr + p, mask=p < k, other=_PAD)
    if KP <= 64:
        slot = tl.sum((entry[:, None] > entry[None, :]).to(tl.int32), 0)
    else:
        entry = tl.sort(entry, descending=True)
        slot = p
    ids = (entry & 0xFFFFFFFF).to(tl.int32) ^ _I32_MAX
    tl.store(ids_out + slot, ids.to(tl.int64), mask=p < k)
    tl.store(lp_out + slot, _key_value((entry >> 32).to(tl.int32)) - lse, mask=p < k)


@triton.jit(do_not_specialize=["vocab", "k", "soft"])
def _chunk_kernel(
    logits_ptr,  # [R, V] bf16/fp16/fp32, unit stride along V
    row_stride,  # elements between rows
    vocab,  # V
    chunk_len,  # logits per chunk (a multiple of TILE); program (r, c) scans [c * chunk_len, ...)
    scale,  # float32: draft_temperature (DIVIDE) or its float32 reciprocal
    k,  # K <= V
    soft,  # the list shrinks to K when longer than this (>= 2K)
    buf_ptr,  # [R * chunks, soft + TILE] int64 scratch: the kept entries of each program
    cand_ptr,  # [R, chunks * K] int64: each chunk's K best entries in id order, padded (not FINISH)
    stat_ptr,  # [R, chunks, 2] float32: each chunk's (max, sum of exp(x - max)) (not FINISH)
    lp_out,  # [R, K] float32: log-probs, best first (FINISH)
    ids_out,  # [R, K] int64: token ids, best first (FINISH)
    TILE: tl.constexpr,  # logits per tile (a power of two)
    G: tl.constexpr,  # group maxima behind the first floor: min(TILE, next_pow2(2K))
    BLOCK: tl.constexpr,  # list entries per block of the selection passes
    LOG_BINS: tl.constexpr,  # radix digit bits
    KP: tl.constexpr,  # next_pow2(K)
    DIVIDE: tl.constexpr,  # scale by division (torch on the CPU), else by the reciprocal (CUDA)
    FINISH: tl.constexpr,  # one chunk per row: this kernel writes the outputs
):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    program = row * tl.num_programs(1) + chunk
    start = chunk * chunk_len
    length = tl.minimum(chunk_len, vocab - start)
    src = logits_ptr + row.to(tl.int64) * row_stride + start
    buf = buf_ptr + program.to(tl.int64) * (soft + TILE)
    offs = tl.arange(0, TILE)
    floor = row * 0 + _NAN_KEY
    n = row * 0
    s = (row * 0).to(tl.float32)
    m = s - _FLT_MAX  # a finite start: exp(x - m) is 0, not NaN, for x = -inf
    full = length // TILE
    raw = tl.load(src + offs, mask=offs < length, other=0.0)
    t = row * 0
    while t < full:
        ahead = tl.load(src + tl.minimum(t + 1, full - 1) * TILE + offs)  # the next tile, in flight meanwhile
        floor, n, m, s = _scan_tile(
            raw, start + t * TILE + offs, offs < TILE, floor, n, m, s, scale, buf, k, soft,
            TILE, G, BLOCK, LOG_BINS, DIVIDE, False,
        )  # fmt: skip
        raw = ahead
        t += 1
    tail = full * TILE
    if tail < length:
        raw = tl.load(src + tail + offs, mask=tail + offs < length, other=float("-inf"))
        floor, n, m, s = _scan_tile(
            raw, start + tail + offs, tail + offs < length, floor, n, m, s, scale, buf, k, soft,
            TILE, G, BLOCK, LOG_BINS, DIVIDE, True,
        )  # fmt: skip
    tl.debug_barrier()
    top = row.to(tl.int64) * 0 + _NAN_KEY - 1  # below every key: keep all when the list holds <= K
    bottom = top
    left = row * 0
    if n > k:
        top, bottom, left = _select_top(buf, n, k, BLOCK, LOG_BINS)
    if FINISH:
        _compact_top(buf, n, top, bottom, left, buf, BLOCK)
        tl.debug_barrier()
        _write_ranked(buf, k, _logsumexp(m, s), lp_out + row * k, ids_out + row * k, KP)
    else:
        dst = cand_ptr + program.to(tl.int64) * k
        kept, _ = _compact_top(buf, n, top, bottom, left, dst, BLOCK)
        p0 = kept
        while p0 < k:  # a chunk shorter than K pads its list
            tl.store(dst + p0 + tl.arange(0, BLOCK), _PAD, mask=p0 + tl.arange(0, BLOCK) < k)
            p0 += BLOCK
        tl.store(stat_ptr + program * 2, m)
        tl.store(stat_ptr + program * 2 + 1, s)


@triton.jit(do_not_specialize=["chunks", "k"])
def _merge_kernel(
    cand_ptr,  # [R, chunks * K] int64 (see _chunk_kernel); selected in place
    stat_ptr,  # [R, chunks, 2] float32
    chunks,  # chunks per row (>= 2)
    k,  # K
    lp_out,  # [R, K] float32: log-probs, best first
    ids_out,  # [R, K] int64: token ids, best first
    CP: tl.constexpr,  # next_pow2(chunks)
    BLOCK: tl.constexpr,  # candidates per block of the selection passes
    LOG_BINS: tl.constexpr,  # radix digit bits
    KP: tl.constexpr,  # next_pow2(K)
):
    row = tl.program_id(0)
    lse = _chunks_logsumexp(stat_ptr + row * chunks * 2, chunks, CP)
    total = chunks * k
    cand = cand_ptr + row.to(tl.int64) * total
    _write_best(cand, total, k, lse, lp_out + row * k, ids_out + row * k, BLOCK, LOG_BINS, KP)


@triton.jit
def _chunks_logsumexp(stat_ptr, chunks, CP: tl.constexpr):
    """A row's logsumexp from its chunks' (max, exp-sum) pairs at stat_ptr [chunks, 2]."""
    c = tl.arange(0, CP)
    chunk_max = tl.load(stat_ptr + c * 2, mask=c < chunks, other=-_FLT_MAX)
    chunk_sum = tl.load(stat_ptr + c * 2 + 1, mask=c < chunks, other=0.0)
    m = tl.max(chunk_max, 0)
    return _logsumexp(m, tl.sum(chunk_sum * tl.exp(chunk_max - m), 0))


@triton.jit
def _write_best(
    cand, n, k, lse, lp_row, ids_row, BLOCK: tl.constexpr, LOG_BINS: tl.constexpr, KP: tl.constexpr,
    clock_row=None, SLOT: tl.constexpr = -1,
):  # fmt: skip
    """The k best of the n >= k entries at cand (selected in place), written best first. SLOT >= 0: stamp
    clock_row[SLOT] between the selection and the ranks (clock.stamp)."""
    if n > k:
        _keep_top(cand, n, k, BLOCK, LOG_BINS)
        tl.debug_barrier()
    stamp(clock_row, SLOT, SLOT >= 0)
    _write_ranked(cand, k, lse, lp_row, ids_row, KP)


def draft_topk(
    logits: torch.Tensor,
    k: int,
    draft_temperature: float,
    *,
    tile: int | None = None,
    chunks: int | None = None,
    warps: int = 4,
) -> DraftTopK:
    """Top-k of `logits` [B, L, V] per row, equal to `tree.draft_topk(impl="reference")` (ids exactly).

    tile: logits per tile (a power of two >= 4); chunks: vocabulary chunks per row; warps: per program of
    the scan kernel. They change only the speed; the defaults (`_plan`) follow the H200 sweep of
    `python -m ddbench.topk_tune`. No host sync; CUDA-graph capturable.
    """
    batch, length, vocab = logits.shape
    check_k(k, vocab)
    if tile is not None and (tile < 4 or tile & (tile - 1)):
        raise ValueError(f"tile must be a power of two >= 4, got {tile}")
    if k > MAX_K:
        from ddtree_core import batched

        return batched.draft_topk(logits, k, draft_temperature)
    rows, log_probs, token_ids = rows_and_outputs(logits, k)
    if rows.shape[0] > 0:
        _launch(rows, k, draft_temperature, tile, chunks, warps, log_probs, token_ids)
    return DraftTopK(log_probs=log_probs.view(batch, length, k), token_ids=token_ids.view(batch, length, k))


def check_k(k: int, vocab: int) -> None:
    """ValueError unless 1 <= k <= vocab < 2**31 - 1 (int32 token ids and order keys)."""
    if not 1 <= k <= vocab or vocab >= 2**31 - 1:
        raise ValueError(f"need 1 <= k <= vocab < 2**31 - 1, got k={k}, vocab={vocab}")


def rows_and_outputs(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits [..., V] as rows [R, V] a kernel can read (bf16, fp16 or fp32, unit stride along V), and the
    empty outputs [R, k]: log-probs float32, token ids int64."""
    rows = logits.reshape(-1, logits.shape[-1])
    if rows.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        rows = rows.float()
    if rows.stride(1) != 1:
        rows = rows.contiguous()
    log_probs = torch.empty((rows.shape[0], k), dtype=torch.float32, device=rows.device)
    token_ids = torch.empty((rows.shape[0], k), dtype=torch.int64, device=rows.device)
    return rows, log_probs, token_ids


def _launch(rows, k, draft_temperature, tile, chunks, warps, log_probs, token_ids) -> None:
    num_rows, vocab = rows.shape
    device = rows.device
    auto_tile, auto_chunks = _plan(num_rows, vocab, k, device)
    tile = auto_tile if tile is None else tile
    chunks = _num_chunks(num_rows, vocab, k, tile, auto_chunks) if chunks is None else max(1, min(chunks, vocab))
    chunk_len = triton.cdiv(triton.cdiv(vocab, chunks), tile) * tile
    chunks = triton.cdiv(vocab, chunk_len)
    soft = max(2 * k, min(256, tile // 2))
    buf = torch.empty((num_rows * chunks, soft + tile), dtype=torch.int64, device=device)
    cand = torch.empty((num_rows, chunks * k if chunks > 1 else 1), dtype=torch.int64, device=device)
    stats = torch.empty((num_rows, chunks, 2), dtype=torch.float32, device=device)
    divide = device.type == "cpu"
    scale = float(np.float32(draft_temperature)) if divide else float(np.float32(1) / np.float32(draft_temperature))
    kp = triton.next_power_of_2(k)
    _chunk_kernel[(num_rows, chunks)](
        rows, rows.stride(0), vocab, chunk_len, scale, k, soft, buf, cand, stats, log_probs, token_ids,
        TILE=tile, G=min(tile, triton.next_power_of_2(2 * k)), BLOCK=min(tile, _BLOCK), LOG_BINS=6, KP=kp,
        DIVIDE=divide, FINISH=chunks == 1, num_warps=warps,
    )  # fmt: skip
    if chunks > 1:
        block = min(4096, triton.next_power_of_2(chunks * k))
        _merge_kernel[(num_rows,)](
            cand, stats, chunks, k, log_probs, token_ids,
            CP=triton.next_power_of_2(chunks), BLOCK=block, LOG_BINS=6, KP=kp, num_warps=8,
        )  # fmt: skip


def _plan(num_rows: int, vocab: int, k: int, device: torch.device) -> tuple[int, int]:
    """Default (tile, wanted chunks): about two programs per SM, tiles of 2048, or 1024 once the rows
    alone give four programs per SM. From the H200 sweep (results/kernels/h200-2026-11-29b/topk/, vocab
    152k, K 64): at 15, 120 and 960 rows this picks (2048, 15), (2048, 3), (1024, 1) next to the fastest
    measured (2048, 16) 30 us, (2048, 2) 110 us, (1024, 1) 670 us, where the earlier default (four
    programs per SM, tiles of 4096) took 45, 146 and 853 us."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1
    tile = 1024 if num_rows >= 4 * sms else 2048
    return tile, triton.cdiv(2 * sms, num_rows)


def _num_chunks(num_rows: int, vocab: int, k: int, tile: int, wanted: int) -> int:
    """`wanted` chunks per row, each at least two tiles long, at most _MERGE_LIMIT candidates per row."""
    return max(1, min(wanted, triton.cdiv(vocab, 2 * tile), _MERGE_LIMIT // k))

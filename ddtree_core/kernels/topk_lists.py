"""Order keys, list entries and K-lists: the pieces of the Triton top-K (topk_radix.py) that rank tokens.

A value (logit / draft_temperature, float32) is ranked by an int32 key that orders like the float: -0.0
equal to 0.0, NaN below -inf (as the reference's stable sort puts it last), -inf at _NINF_KEY. A kept
token is the int64 entry key << 32 | (2**31 - 1 - id), so entries order like (value desc, id asc) and no
two are equal; _PAD, below every real entry, marks no token. On these:
  - `_keep_top` / `_shrink`: cut a scratch list of entries to its K best by radix selection on the keys
    (equal keys in list order, i.e. smaller id first when the list is in id order), compacting in order;
  - `_write_ranked` / `_write_best`: rank K winners (tl.sort of their entries, or counting for K <= 64) and
    write them best first with log-prob = value - logsumexp (`_logsumexp`, `_chunks_logsumexp` merge
    (max, exp-sum) pairs);
  - `check_k` / `rows_and_outputs`: the host side's argument check and output buffers.

Worked example: values 3.0 (id 1), 5.0 (id 6), 3.0 (id 2). Keys order 5.0 > 3.0 = 3.0; entries
key(5.0) << 32 | (2**31 - 7) > key(3.0) << 32 | (2**31 - 2) > key(3.0) << 32 | (2**31 - 3), so the
ranking is id 6, id 1, id 2: equal values, smaller id first, as the reference orders them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ddtree_core.kernels.clock import stamp
from ddtree_core.kernels.radix import max_min_min, pick_digit

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

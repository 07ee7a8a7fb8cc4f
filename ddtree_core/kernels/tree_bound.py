"""Keys, selections and bounds that the two tree builds share (tree_levels.py, tree_tails.py).

A node's key is the int32 bits(-score), which orders like -score for scores <= 0 (`_score_key`, `_node_key`).
Holding the chain (tree.py), a request's keys are 0 on the pairs (0, 0) of finite score, the chain, and
bits(-score) + 1 elsewhere, as in batched.py; keys stay below INT32_MAX and a child's key is still
never smaller than its parent's, so both builds take them unchanged.
Both builds keep nodes in one pool per request (`_pool_store`: key, pk = parent entry << 16 | rank, score, depth)
and cut candidates with the same bound: a histogram of every kept key by its top bits gives the bucket where the
kept count reaches b (`_crossing`), split FINE_BITS further by the keys' next bits (`_fine_bound`, `_kept_bound`);
at least b kept nodes have keys below it, so no key at or beyond it can be among the b smallest. Long lists are
selected without sorting (`_select_bucket`, a radix selection by histograms, then `_compact_selected`), short ones
sorted as (key, low) pairs (`_sort_pairs`) or ranked by counted compares (`_rank`).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ddtree_core.kernels.radix import min_max, pick_digit

_I32_MAX = tl.constexpr(2147483647)


@triton.jit
def _score_key(score):
    """int32 key of float32 scores <= 0: the bits of |score|, ordered like -score (-0.0 -> 0)."""
    return (-score).to(tl.int32, bitcast=True) & 0x7FFFFFFF


@triton.jit
def _node_key(score, chain, held):
    """A node's key (the module docstring): 0 on the held chain while finite, else bits(-score) + held."""
    return tl.where(chain & (held != 0) & (score > float("-inf")), 0, _score_key(score) + held)


@triton.jit
def _bit_length(x):
    """Bits needed to write x >= 0 (float rounding may add one, never removes one), at most 31."""
    exponent = (x.to(tl.float32).to(tl.int32, bitcast=True) >> 23) - 126
    return tl.minimum(tl.where(x > 0, exponent, 0), 31)


@triton.jit
def _select_bucket(key_ptr, n, need, CHUNK: tl.constexpr, LOG_BINS: tl.constexpr):
    """Radix selection of the `need` smallest of n >= need keys (int32 >= 0) at key_ptr.

    Returns (lower, upper, left): exactly need - left keys are < lower, at least `left` keys lie in
    [lower, upper), and the first `left` of those, in array order, complete the `need` smallest.
    Each pass histograms the keys of the current bucket by their next LOG_BINS bits; it stops as
    soon as the chosen bucket is taken whole or holds a single key value.
    """
    BINS: tl.constexpr = 1 << LOG_BINS
    offs = tl.arange(0, CHUNK)
    lo = n * 0 + _I32_MAX
    hi = n * 0
    c0 = n * 0
    while c0 < n:
        m = c0 + offs < n
        key = tl.load(key_ptr + c0 + offs, mask=m, other=0)
        block_lo, block_hi = min_max(tl.where(m, key, _I32_MAX), tl.where(m, key, 0))
        lo = tl.minimum(lo, block_lo)
        hi = tl.maximum(hi, block_hi)
        c0 += CHUNK
    base = lo
    width = _bit_length(hi - lo)  # the bucket [base, base + 2**width) holds every key
    left = need
    searching = n > need
    while searching:
        shift = tl.maximum(width - LOG_BINS, 0)
        hist = tl.zeros([BINS], tl.int32)
        c0 = n * 0
        while c0 < n:
            m = c0 + offs < n
            rel = tl.load(key_ptr + c0 + offs, mask=m, other=-1) - base
            inside = m & (rel >= 0) & ((rel >> width) == 0)
            hist += tl.histogram(rel >> shift, BINS, mask=inside)
            c0 += CHUNK
        chosen, below, in_chosen = pick_digit(hist, left, BINS)
        left -= below
        base += chosen << shift
        width = shift
        searching = (in_chosen != left) & (shift > 0)
    one = base.to(tl.int64) * 0 + 1
    upper = tl.minimum(base.to(tl.int64) + (one << width.to(tl.int64)), _I32_MAX).to(tl.int32)
    return base, upper, left


@triton.jit
def _compact_selected(
    src_key, src_pk, src_score, n, lower, upper, left, dst_key, dst_pk, dst_score,
    FROM_POOL: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    """Copy the entries that `_select_bucket` chose, in order, to dst; returns how many.

    FROM_POOL: the source is pool[1:], and the payload written is the pool index (j + 1).
    """
    offs = tl.arange(0, CHUNK)
    n_sel = n * 0
    n_tie = n * 0
    c0 = n * 0
    while c0 < n:
        j = c0 + offs
        m = j < n
        key = tl.load(src_key + j, mask=m, other=_I32_MAX)
        tie = (m & (key >= lower) & (key < upper)).to(tl.int32)
        sel = m & ((key < lower) | ((tie == 1) & (n_tie + tl.cumsum(tie, 0) - tie < left)))
        pos = n_sel + tl.cumsum(sel.to(tl.int32), 0) - 1
        tl.store(dst_key + pos, key, mask=sel)
        if FROM_POOL:
            tl.store(dst_pk + pos, j + 1, mask=sel)
        else:
            tl.store(dst_pk + pos, tl.load(src_pk + j, mask=sel, other=0), mask=sel)
            tl.store(dst_score + pos, tl.load(src_score + j, mask=sel, other=0.0), mask=sel)
        n_sel += tl.sum(sel.to(tl.int32), 0)
        n_tie += tl.sum(tie, 0)
        c0 += CHUNK
    return n_sel


@triton.jit
def _compact_below(src_key, src_pk, n, bound, dst_key, dst_pk, cap, FROM_POOL: tl.constexpr, CHUNK: tl.constexpr):
    """Copy the n entries of src whose key is < bound, in order, as (key, pk) to dst, at most cap of them; returns
    how many there are (stored or not). FROM_POOL: src_key is pool[1:], and the pk written is the pool index
    (j + 1). `_compact_selected` with an empty tie range, but capped (dst holds fewer entries than src can)
    and without its ties' running count."""
    offs = tl.arange(0, CHUNK)
    n_sel = n * 0
    c0 = n * 0
    while c0 < n:
        j = c0 + offs
        key = tl.load(src_key + j, mask=j < n, other=_I32_MAX)
        sel = (j < n) & (key < bound)
        pos = n_sel + tl.cumsum(sel.to(tl.int32), 0) - 1
        tl.store(dst_key + pos, key, mask=sel & (pos < cap))
        if FROM_POOL:
            tl.store(dst_pk + pos, j + 1, mask=sel & (pos < cap))
        else:
            tl.store(dst_pk + pos, tl.load(src_pk + j, mask=sel & (pos < cap), other=0), mask=sel & (pos < cap))
        n_sel += tl.sum(sel.to(tl.int32), 0)
        c0 += CHUNK
    return n_sel


@triton.jit
def _rank(key, low, src_key, src_low, n, PCH: tl.constexpr, QCH: tl.constexpr):
    """For each (key, low) [PCH], how many of the n entries of src have a smaller (key, low)."""
    mine = (key.to(tl.int64) << 32) | low.to(tl.int64)
    q_offs = tl.arange(0, QCH)
    rank = tl.zeros([PCH], tl.int32)
    q0 = n * 0
    while q0 < n:
        qm = q0 + q_offs < n
        theirs_key = tl.load(src_key + q0 + q_offs, mask=qm, other=_I32_MAX).to(tl.int64)
        theirs = (theirs_key << 32) | tl.load(src_low + q0 + q_offs, mask=qm, other=_I32_MAX).to(tl.int64)
        rank += tl.sum((theirs[:, None] < mine[None, :]).to(tl.int32), 0)
        q0 += QCH
    return rank


@triton.jit
def _sort_pairs(key, low):
    """(key, low) [PCH] int32 >= 0 sorted ascending as pairs (tl.sort of key << 32 | low)."""
    entry = tl.sort((key.to(tl.int64) << 32) | low.to(tl.int64))
    return (entry >> 32).to(tl.int32), (entry & 0xFFFFFFFF).to(tl.int32)


@triton.jit
def _pool_store(slot, key, pk, score, depth, mask, pool_key, pool_pk, pool_score, pool_depth):
    """Pool entries at `slot`: key, pk = parent entry << 16 | rank, score, depth."""
    tl.store(pool_key + slot, key, mask=mask)
    tl.store(pool_pk + slot, pk, mask=mask)
    tl.store(pool_score + slot, score, mask=mask)
    tl.store(pool_depth + slot, depth, mask=mask)


@triton.jit
def _crossing(hist, b, HIST_BINS: tl.constexpr):
    """Of a kept-key histogram: the first bucket where the count reaches b, the keys in the buckets before it,
    and whether it bounds anything (the last bucket ends at 2**31, past int32: no bound there)."""
    crossing = tl.sum((tl.cumsum(hist, 0) < b).to(tl.int32), 0)
    below = tl.sum(tl.where(tl.arange(0, HIST_BINS) < crossing, hist, 0), 0)
    return crossing, below, crossing < HIST_BINS - 1


@triton.jit
def _split_bound(fine, crossing, below, bounded, b, HIST_SHIFT: tl.constexpr, FINE_BITS: tl.constexpr):
    """The bound inside bucket `crossing`: the end of its fine bucket (fine, counted by `_fine_hist`) where the
    count of keys, `below` the bucket plus the fine ones up to it, reaches b (INT32_MAX unless bounded)."""
    sub = tl.sum((tl.cumsum(fine, 0) < b - below).to(tl.int32), 0)
    return tl.where(bounded, (crossing << HIST_SHIFT) + ((sub + 1) << (HIST_SHIFT - FINE_BITS)), _I32_MAX)


@triton.jit
def _key_bound(hist, b, HIST_BINS: tl.constexpr, HIST_SHIFT: tl.constexpr):
    """Step 4: the smallest key that at least b kept keys beat outright (INT32_MAX if none)."""
    crossing, _, bounded = _crossing(hist, b, HIST_BINS)
    return tl.where(bounded, (crossing + 1) << HIST_SHIFT, _I32_MAX)


@triton.jit
def _fine_bound(
    hist, fine, fine_bucket, b, pool_key, pool_n, n_kept,
    PCH: tl.constexpr, HIST_BINS: tl.constexpr, HIST_SHIFT: tl.constexpr, FINE_BITS: tl.constexpr,
):  # fmt: skip
    """Step 4 with the bucket where the kept count reaches b split FINE_BITS further: returns (bound, fine,
    its bucket). fine [2**FINE_BITS] counts the kept keys of that bucket by their next bits; when the
    bucket is the one fine already counts, only the level just appended (pool[pool_n:][:n_kept]) is added,
    else every kept key (pool[1:]) is counted again. The kept keys below the bound are the coarse
    buckets' before it plus the fine ones up to the fine bucket where the count reaches b, so at least b kept
    keys are smaller than any key at or beyond it, as step 4 asks; it is never looser than `_key_bound`."""
    crossing, below, bounded = _crossing(hist, b, HIST_BINS)
    fine, fine_bucket = _kept_fine(fine, fine_bucket, crossing, bounded, pool_key, pool_n, n_kept, PCH, HIST_SHIFT,
                                   FINE_BITS)  # fmt: skip
    return _split_bound(fine, crossing, below, bounded, b, HIST_SHIFT, FINE_BITS), fine, fine_bucket


@triton.jit
def _kept_fine(
    fine, fine_bucket, crossing, bounded, pool_key, pool_n, n_kept,
    PCH: tl.constexpr, HIST_SHIFT: tl.constexpr, FINE_BITS: tl.constexpr,
):  # fmt: skip
    """The kept keys of bucket `crossing` by their next FINE_BITS bits, and that bucket (-1 unless bounded): when it
    is the bucket fine already counts (fine_bucket), only the level just appended (pool[pool_n:][:n_kept]) is added,
    else every kept key (pool[1:]) is counted again."""
    same = crossing == fine_bucket
    fine = tl.where(same, fine, 0)
    first = tl.where(same, pool_n, 1)
    end = tl.where(bounded, pool_n + n_kept, first)
    fine = _fine_hist(fine, pool_key, first, end, crossing, PCH, HIST_SHIFT, FINE_BITS)
    return fine, tl.where(bounded, crossing, -1)


@triton.jit
def _kept_bound(
    hist, fine, fine_bucket, b, pool_key, pool_n, n_kept,
    PCH: tl.constexpr, HIST_BINS: tl.constexpr, HIST_SHIFT: tl.constexpr, FINE_BITS: tl.constexpr,
):  # fmt: skip
    """Step 4 over the kept keys: `_fine_bound`'s (bound, fine, fine_bucket), or `_key_bound`'s without FINE_BITS."""
    if FINE_BITS > 0:
        bound, fine, fine_bucket = _fine_bound(
            hist, fine, fine_bucket, b, pool_key, pool_n, n_kept, PCH, HIST_BINS, HIST_SHIFT, FINE_BITS
        )
    else:
        bound = _key_bound(hist, b, HIST_BINS, HIST_SHIFT)
    return bound, fine, fine_bucket


@triton.jit
def _fine_hist(
    fine, key_ptr, first, end, crossing, BLOCK: tl.constexpr, HIST_SHIFT: tl.constexpr, FINE_BITS: tl.constexpr
):  # fmt: skip
    """fine plus the keys key_ptr[first:end] of coarse bucket `crossing`, counted by their next FINE_BITS bits."""
    offs = tl.arange(0, BLOCK)
    p0 = first
    while p0 < end:
        key = tl.load(key_ptr + p0 + offs, mask=p0 + offs < end, other=0)
        fine += _fine_count(key, p0 + offs < end, crossing, HIST_SHIFT, FINE_BITS)
        p0 += BLOCK
    return fine


@triton.jit
def _fine_count(key, mask, crossing, HIST_SHIFT: tl.constexpr, FINE_BITS: tl.constexpr):
    """The keys under mask that lie in coarse bucket `crossing`, counted by their next FINE_BITS bits."""
    FINE_BINS: tl.constexpr = 1 << FINE_BITS
    inside = mask & ((key >> HIST_SHIFT) == crossing)
    return tl.histogram((key >> (HIST_SHIFT - FINE_BITS)) & (FINE_BINS - 1), FINE_BINS, mask=inside)

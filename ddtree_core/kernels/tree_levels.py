"""The level build of the Triton tree build (tree_build.py): one program builds one request's tree by levels.

The level build runs the level-synchronous selection of batched.py (its docstring proves it equal to the
best-first heap, ties included), with two changes that suit one streaming multiprocessor: it selects
from long lists without sorting (histogram passes, where one program's tl.sort or tl.topk of thousands of keys
is slow) and sorts only short ones (the kept nodes, at most 1,024; a level's survivors or the final pool when they
fit a small block), and it skips work that cannot matter. For the level below the kept
nodes of depth d, with b the request's budget:

  1. expand: candidate pairs (i, r), i = position of a kept depth-d node in its level, r < K a rank,
     with (i+1)(r+1) <= b (a static i-major table); score = score_i + log_prob[d, r] in float32;
     key = bits(-score), which orders like -score for scores <= 0. A candidate is dropped when its
     key reaches `bound`: at least b nodes already kept have strictly smaller keys (see 4).
  2. select: the survivors are compacted into a scratch list in (i, r) order; if more than b
     survive, a radix selection over their keys (histograms, no sort) keeps the b smallest, equal
     keys in list order, which is the level order (key, i, r); with at most SCH = min(1024, 2 * PCH)
     survivors (SORT_SURVIVORS, on by default), one tl.sort of (key, pair) orders them instead and the
     first b are appended (`_append_sorted`), which is steps 2 and 3 at once.
  3. order: the kept candidates are ordered by (key, i, r): by tl.sort of key << 32 | (i, r) up to
     b = 1,024 (SORT_RANKS, the scores recomputed from the sorted pairs), else each one's position is
     the number of kept candidates with a smaller (key, i, r), counted by broadcast compares (b * b);
     when the kept keys never decrease in (i, r) order (level 0 always: the root's children follow
     the best-first lists) the list is in order already. The level is appended, in that order, to a
     pool of all kept nodes (depth-major, so pool order is (depth, position)).
  4. bound: a histogram of every kept key by its top bits (256 or 2048 buckets) gives the bucket where the kept
     count reaches b; keys beyond it are beaten by b kept nodes, and so are their children (a child's key is
     never smaller than its parent's), so the bound also cuts the parents of the next level to a prefix of this
     one: up to the last node whose best child (the next depth's best log-prob added) still lies below the bound
     (`_live_parents`; none: the levels end here). FINE_BITS (6 by default; 0: off) splits that bucket by the
     keys' next bits (`_fine_bound`): a tighter bound, for one more pass over the kept keys whenever the bucket
     moves, so that fewer candidates survive to the next level.
Level 0, the root's children, takes none of these passes (with FINE_BITS on and min(K, b) <= PCH): its
pairs (0, r) are the first min(K, b) ranks of depth 1, none cut (no bound yet) and already in level order, so they go
straight from the lists to the pool (`_append_first`: one load of the log-probs instead of the expand's stores, the
order check's and the append's loads), and step 4 and the next level's parents come from the keys and scores it holds
in registers (`_first_bound`), not from two passes over the pool.
After the last level (or the first that keeps nothing) the b smallest pool keys, ties in pool order,
are selected and ranked the same way: rank + 1 is the node index in pop order; a pool of at most FCH
(min(512, 4 * PCH) by default; 0: never) is sorted once instead (`_rank_sorted`). A larger pool (CUT, on by
default) is first cut to its keys below the last level's bound (`_compact_below`), which hold the b smallest
(at least b kept keys lie below it); when at most FCH remain (with FINE_BITS' bound, about b), they are
sorted once the same way. Keys are tree_bound.py's (held chain included); steps 1-4 take them as they are.

Worked example (tree.py's: K = 2, budget 4, log-probs a -0.1 b -2.5 | c -0.2 d -1.9):

    level 1: pairs (0,0) a -0.1, (0,1) b -2.5                        kept [a, b]
    level 2: pairs (0,0) a.c -0.3, (0,1) a.d -2.0, (1,0) b.c -2.7,   kept [a.c, a.d, b.c, b.d]
             (1,1) b.d -4.4   ((i+1)(r+1) <= 4 admits all four)
    pool [root, a, b, a.c, a.d, b.c, b.d]; its 4 smallest keys: a, a.c, a.d, b -> nodes 1, 2, 3, 4

Cost per level: one pass over the candidates (about b ln b), a few histogram passes only when more
than b survive, and a sort of b keys (or b * b compares); levels that the bound empties cost nothing, so a
flat tree (uniform drafts) stops after a level or two.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ddtree_core.kernels.clock import stamp as _stamp
from ddtree_core.kernels.tree_bound import (
    _I32_MAX,
    _compact_below,
    _compact_selected,
    _crossing,
    _fine_count,
    _kept_bound,
    _node_key,
    _pool_store,
    _rank,
    _select_bucket,
    _sort_pairs,
    _split_bound,
)


@triton.jit
def _expand_level(
    lp_row, s_ll, s_lk, pairs_ptr, n_cand, d, b, held, bound, start_par, pool_score, cand_key, cand_pk, cand_score,
    CHUNK: tl.constexpr,
):  # fmt: skip
    """Step 1: score the static table's first n_cand candidate pairs of the level below depth d, keep those under
    `bound`, compact them in (i, r) order. Returns how many survive."""
    offs = tl.arange(0, CHUNK)
    n_valid = n_cand * 0
    c0 = n_cand * 0
    while c0 < n_cand:
        j = c0 + offs
        pair = tl.load(pairs_ptr + j, mask=j < n_cand, other=0)
        i = pair >> 16
        r = pair & 0xFFFF
        valid = (j < n_cand) & ((i + 1) * (r + 1) <= b)
        parent_score = tl.load(pool_score + start_par + i, mask=valid, other=0.0)
        score = parent_score + tl.load(lp_row + d * s_ll + r * s_lk, mask=valid, other=0.0)
        key = _node_key(score, (i == 0) & (r == 0), held)
        valid = valid & (key < bound)
        pos = n_valid + tl.cumsum(valid.to(tl.int32), 0) - 1
        tl.store(cand_key + pos, key, mask=valid)
        tl.store(cand_pk + pos, ((start_par + i) << 16) | r, mask=valid)
        tl.store(cand_score + pos, score, mask=valid)
        n_valid += tl.sum(valid.to(tl.int32), 0)
        c0 += CHUNK
    return n_valid


@triton.jit
def _append_level(
    src_key, src_pk, src_score, n, in_order, depth, pool_n, pool_key, pool_pk, pool_score, pool_depth, hist,
    lp_level, s_lk,
    PCH: tl.constexpr, QCH: tl.constexpr, HIST_BINS: tl.constexpr, HIST_SHIFT: tl.constexpr,
    SORT_RANKS: tl.constexpr,
):  # fmt: skip
    """Step 3: write the n kept candidates to pool[pool_n:] in level order; returns the histogram of
    all kept keys with theirs added. in_order: the list is in level order already (no ranks). SORT_RANKS
    (n <= PCH): order the list by tl.sort of (key, pk) instead of counting ranks, and recompute each
    score as the expand did (parent's score + lp_level[r]), since the sort carries no payload."""
    offs = tl.arange(0, PCH)
    p0 = n * 0
    while p0 < n:
        pm = p0 + offs < n
        key = tl.load(src_key + p0 + offs, mask=pm, other=_I32_MAX)
        pk = tl.load(src_pk + p0 + offs, mask=pm, other=0)
        slot = pool_n + p0 + offs
        if in_order:
            score = tl.load(src_score + p0 + offs, mask=pm, other=0.0)
        elif SORT_RANKS:
            key, pk = _sort_pairs(key, tl.where(pm, pk, _I32_MAX))
            score = _pair_score(pk, pm, pool_score, lp_level, s_lk)
        else:
            slot = pool_n + _rank(key, pk, src_key, src_pk, n, PCH, QCH)
            score = tl.load(src_score + p0 + offs, mask=pm, other=0.0)
        hist = _pool_write(slot, key, pk, score, depth, pm, pool_key, pool_pk, pool_score, pool_depth, hist,
                           HIST_BINS, HIST_SHIFT)  # fmt: skip
        p0 += PCH
    return hist


@triton.jit
def _append_first(
    lp_row, s_lk, n, held, pool_key, pool_pk, pool_score, pool_depth, hist,
    PCH: tl.constexpr, HIST_BINS: tl.constexpr, HIST_SHIFT: tl.constexpr,
):  # fmt: skip
    """Level 0 of the level build, steps 1-3 at once, for n = min(K, b) <= PCH: the root's children (0, r), r < n, are
    every pair of the table's first row, none beyond a bound (there is none yet) and no more than b, and their keys
    never decrease (the lists are best first; the held chain's (0, 0) has key 0), so the level is the pairs in rank
    order: written straight to pool[1:][:n] with the expand's scores (the root's 0.0 + log_prob) and keys. Returns the
    histogram with their keys added, and the level's keys and scores [PCH] (past n: INT32_MAX and 0.0)."""
    r = tl.arange(0, PCH)
    m = r < n
    score = 0.0 + tl.load(lp_row + r * s_lk, mask=m, other=0.0)
    key = _node_key(score, r == 0, held)
    hist = _pool_write(1 + r, key, r, score, 1, m, pool_key, pool_pk, pool_score, pool_depth, hist, HIST_BINS,
                       HIST_SHIFT)  # fmt: skip
    return hist, tl.where(m, key, _I32_MAX), score


@triton.jit
def _first_bound(
    hist, key, score, n, b, lp_best, held,
    PCH: tl.constexpr, HIST_BINS: tl.constexpr, HIST_SHIFT: tl.constexpr, FINE_BITS: tl.constexpr,
):  # fmt: skip
    """Step 4 and the next level's parents after level 0 (`_append_first`'s keys and scores, n of them): what
    `_fine_bound` and `_live_parents` compute from the pool, whose kept keys (pool[1:]) are this level's alone, here
    from registers. Returns (bound, fine, its bucket, parents)."""
    crossing, below, bounded = _crossing(hist, b, HIST_BINS)
    fine = tl.zeros([1 << FINE_BITS], tl.int32)
    return _held_bound(fine, crossing, below, bounded, b, key, score, n, lp_best, held, PCH, HIST_SHIFT, FINE_BITS)


@triton.jit
def _held_bound(
    fine, crossing, below, bounded, b, key, score, n, lp_best, held,
    BLOCK: tl.constexpr, HIST_SHIFT: tl.constexpr, FINE_BITS: tl.constexpr,
):  # fmt: skip
    """`_first_bound`'s second half, for a level held in registers (its n kept nodes' keys and scores [BLOCK], in
    level order; fine: the earlier levels' keys of bucket `crossing`): its keys added to fine, the bound split there,
    and `_live_parents`' count of the next level's parents. Returns (bound, fine, its bucket, parents)."""
    r = tl.arange(0, BLOCK)
    fine += _fine_count(key, (r < n) & bounded, crossing, HIST_SHIFT, FINE_BITS)
    bound = _split_bound(fine, crossing, below, bounded, b, HIST_SHIFT, FINE_BITS)
    child = _node_key(score + lp_best, r == 0, held)
    parents = tl.max(tl.where((r < n) & (key < bound) & (child < bound), r + 1, 0), 0)
    return bound, fine, tl.where(bounded, crossing, -1), parents


@triton.jit
def _pair_score(pk, mask, pool_score, lp_level, s_lk):
    """The score of pairs pk = parent pool index << 16 | rank, as the expand computes it (the parent's
    score + lp_level[rank], float32)."""
    parent_score = tl.load(pool_score + (pk >> 16), mask=mask, other=0.0)
    return parent_score + tl.load(lp_level + (pk & 0xFFFF) * s_lk, mask=mask, other=0.0)


@triton.jit
def _pool_write(
    slot, key, pk, score, depth, mask, pool_key, pool_pk, pool_score, pool_depth, hist,
    HIST_BINS: tl.constexpr, HIST_SHIFT: tl.constexpr,
):  # fmt: skip
    """Write kept nodes to the pool at `slot`; returns the kept-key histogram with their keys added."""
    _pool_store(slot, key, pk, score, pk * 0 + depth, mask, pool_key, pool_pk, pool_score, pool_depth)
    return hist + tl.histogram(key >> HIST_SHIFT, HIST_BINS, mask=mask)


@triton.jit
def _append_sorted(
    src_key, src_pk, n, n_kept, depth, pool_n, pool_key, pool_pk, pool_score, pool_depth, hist, lp_level, s_lk,
    SCH: tl.constexpr, HIST_BINS: tl.constexpr, HIST_SHIFT: tl.constexpr,
):  # fmt: skip
    """Steps 2 and 3 in one sort, for n <= SCH survivors in (i, r) order: tl.sort of (key, pk) puts them in
    level order (pk orders like (i, r)), so its first n_kept are the n_kept smallest with equal keys in list
    order, which `_select_bucket` keeps; they are appended as `_append_level` appends (scores recomputed
    from the pairs). Returns the histogram with their keys added."""
    offs = tl.arange(0, SCH)
    m = offs < n
    key = tl.load(src_key + offs, mask=m, other=_I32_MAX)
    pk = tl.load(src_pk + offs, mask=m, other=_I32_MAX)
    key, pk = _sort_pairs(key, pk)
    keep = offs < n_kept
    score = _pair_score(pk, keep, pool_score, lp_level, s_lk)
    hist = _pool_write(pool_n + offs, key, pk, score, depth, keep, pool_key, pool_pk, pool_score, pool_depth, hist,
                       HIST_BINS, HIST_SHIFT)  # fmt: skip
    return hist


@triton.jit
def _ascending(key_ptr, n, CHUNK: tl.constexpr):
    """Whether the n keys at key_ptr never decrease."""
    offs = tl.arange(0, CHUNK)
    drops = n * 0
    c0 = n * 0
    while c0 < n - 1:
        j = c0 + offs
        m = j < n - 1
        later = tl.load(key_ptr + j + 1, mask=m, other=0)
        drops += tl.sum((m & (later < tl.load(key_ptr + j, mask=m, other=0))).to(tl.int32), 0)
        c0 += CHUNK
    return drops == 0


@triton.jit
def _live_parents(key_ptr, score_ptr, n, bound, lp_best, held, PCH: tl.constexpr):
    """The parents of the next level: one more than the last of the level's n kept nodes (key_ptr, score_ptr: the
    level in the pool, in level order) whose key and whose best child's key lie below `bound` (0 if none). The
    best child's key is the expand's for pair (i, 0): score + lp_best, the next depth's best log-prob, chain
    included. A later node's children all lie at or beyond the bound (each child's log-prob is at most
    lp_best, and float addition is monotone), so the expand would drop every pair of theirs."""
    offs = tl.arange(0, PCH)
    last = n * 0
    p0 = n * 0
    while p0 < n:
        i = p0 + offs
        m = i < n
        key = tl.load(key_ptr + i, mask=m, other=_I32_MAX)
        score = tl.load(score_ptr + i, mask=m, other=0.0) + lp_best
        child = _node_key(score, i == 0, held)
        last = tl.maximum(last, tl.max(tl.where(m & (key < bound) & (child < bound), i + 1, 0), 0))
        p0 += PCH
    return last


@triton.jit
def _appended_bound(
    hist, fine, fine_bucket, b, pool_key, pool_score, pool_n, n_kept, lp_row, s_ll, d, max_depth, held,
    PCH: tl.constexpr, HIST_BINS: tl.constexpr, HIST_SHIFT: tl.constexpr, FINE_BITS: tl.constexpr,
):  # fmt: skip
    """Step 4 and the next level's parents after level d was appended (pool[pool_n:][:n_kept]), read from the pool:
    returns (bound, fine, its bucket, parents)."""
    bound, fine, fine_bucket = _kept_bound(hist, fine, fine_bucket, b, pool_key, pool_n, n_kept, PCH, HIST_BINS,
                                           HIST_SHIFT, FINE_BITS)  # fmt: skip
    lp_best = tl.load(lp_row + (d + 1) * s_ll, mask=d + 1 < max_depth, other=0.0)
    n_parents = _live_parents(pool_key + pool_n, pool_score + pool_n, n_kept, bound, lp_best, held, PCH)
    return bound, fine, fine_bucket, n_parents


@triton.jit
def _select_and_rank(
    pool_key, pool_pk, pool_score, total, n_nodes, b, comp_key, cand_pk, comp_score, node_of, inv, clock_row, slot,
    CHUNK: tl.constexpr, LOG_BINS: tl.constexpr, PCH: tl.constexpr, QCH: tl.constexpr, SORT_RANKS: tl.constexpr,
    PROFILE: tl.constexpr,
):  # fmt: skip
    """The final nodes: the b smallest of the `total` pool keys (pool[1:]), ties in pool order, selected by radix
    and compacted, then ranked (tl.sort when SORT_RANKS, else counted); node_of[pool index] = rank + 1 and
    inv[rank] = pool index."""
    lower = total * 0 + _I32_MAX
    upper = total * 0 + _I32_MAX
    left = total * 0
    if total > b:
        lower, upper, left = _select_bucket(pool_key + 1, total, b, CHUNK, LOG_BINS)
    _compact_selected(
        pool_key + 1, pool_pk, pool_score, total, lower, upper, left, comp_key, cand_pk, comp_score,
        True, CHUNK,
    )  # fmt: skip
    tl.debug_barrier()
    _stamp(clock_row, slot, PROFILE)
    offs = tl.arange(0, PCH)
    p0 = n_nodes * 0
    while p0 < n_nodes:
        pm = p0 + offs < n_nodes
        key = tl.load(comp_key + p0 + offs, mask=pm, other=_I32_MAX)
        idx = tl.load(cand_pk + p0 + offs, mask=pm, other=0)
        if SORT_RANKS:  # n_nodes <= PCH: one block
            key, idx = _sort_pairs(key, tl.where(pm, idx, _I32_MAX))
            rank = p0 + offs
        else:
            rank = _rank(key, idx, comp_key, cand_pk, n_nodes, PCH, QCH)
        tl.store(node_of + idx, rank + 1, mask=pm)
        tl.store(inv + rank, idx, mask=pm)
        p0 += PCH


@triton.jit
def _rank_sorted(key, idx, n_nodes, node_of, inv, FCH: tl.constexpr):
    """The final nodes from FCH (key, pool index) pairs that hold them (the rest padded with INT32_MAX): one sort
    puts them in pop order, so its first n_nodes are the b smallest keys with ties in pool order (what the radix
    selection keeps) and their places are their ranks; node_of and inv as `_select_and_rank` writes them."""
    key, idx = _sort_pairs(key, idx)
    offs = tl.arange(0, FCH)
    keep = offs < n_nodes
    tl.store(node_of + idx, offs + 1, mask=keep)
    tl.store(inv + offs, idx, mask=keep)


@triton.jit
def _level_build(
    lp_row, s_ll, s_lk, pairs_ptr, row_end_ptr, b, held, k_ranks, max_depth, n_slots,
    cand_key, cand_pk, cand_score, comp_key, comp_pk, comp_score, pool_key, pool_pk, pool_score, pool_depth, node_of,
    inv, clock_row,
    CHUNK: tl.constexpr, PCH: tl.constexpr, QCH: tl.constexpr, LOG_BINS: tl.constexpr, HIST_BINS: tl.constexpr,
    HIST_SHIFT: tl.constexpr, SORT_RANKS: tl.constexpr, FINE_BITS: tl.constexpr, SORT_SURVIVORS: tl.constexpr,
    SCH: tl.constexpr, FCH: tl.constexpr, CUT: tl.constexpr, PROFILE: tl.constexpr,
):  # fmt: skip
    """Steps 1-4 level by level from the root (the module docstring), then the final selection: writes node_of and
    inv for the request's nodes and returns how many there are."""
    zero = b * 0
    hist = tl.zeros([HIST_BINS], tl.int32)
    fine = tl.zeros([1 << FINE_BITS], tl.int32)  # unused when FINE_BITS = 0
    fine_bucket = zero - 1
    bound = zero + _I32_MAX
    d = zero
    n_parents = (b > 0).to(tl.int32)
    start_par = zero  # pool index of the parents' level
    pool_n = zero + 1  # next free pool entry
    if FINE_BITS > 0:  # level 0, the root's children, as they are (_append_first, _first_bound)
        n_first = tl.minimum(k_ranks, b)
        if (n_parents > 0) & (max_depth > 0) & (n_first <= PCH):
            hist, key, score = _append_first(lp_row, s_lk, n_first, held, pool_key, pool_pk, pool_score, pool_depth,
                                             hist, PCH, HIST_BINS, HIST_SHIFT)  # fmt: skip
            _stamp(clock_row, 2, PROFILE)
            _stamp(clock_row, 3, PROFILE)
            lp_best = tl.load(lp_row + s_ll, mask=max_depth > 1, other=0.0)
            bound, fine, fine_bucket, n_parents = _first_bound(hist, key, score, n_first, b, lp_best, held, PCH,
                                                               HIST_BINS, HIST_SHIFT, FINE_BITS)  # fmt: skip
            tl.debug_barrier()
            _stamp(clock_row, 4, PROFILE)
            _stamp(clock_row, 5, PROFILE)
            pool_n += n_first  # the level's parents start at pool entry 1 (start_par)
            start_par = zero + 1
            d += 1
    while (d < max_depth) & (n_parents > 0):
        n_cand = tl.load(row_end_ptr + n_parents - 1)
        n_valid = _expand_level(
            lp_row, s_ll, s_lk, pairs_ptr, n_cand, d, b, held, bound, start_par, pool_score, cand_key, cand_pk,
            cand_score, CHUNK,
        )  # fmt: skip
        tl.debug_barrier()
        _stamp(clock_row, 2 + 4 * d, PROFILE)
        n_kept = tl.minimum(n_valid, b)
        # A list in (i, r) order whose keys never decrease is in level order as it stands: no ranks needed
        # (always at level 0, whose candidates (0, r) follow the best-first lists; so with one parent).
        in_order = _ascending(cand_key, n_valid, CHUNK)
        if SORT_SURVIVORS & (n_valid > b) & (n_valid <= SCH):
            _stamp(clock_row, 3 + 4 * d, PROFILE)
            hist = _append_sorted(
                cand_key, cand_pk, n_valid, n_kept, d + 1, pool_n, pool_key, pool_pk, pool_score, pool_depth, hist,
                lp_row + d * s_ll, s_lk, SCH, HIST_BINS, HIST_SHIFT,
            )  # fmt: skip
        elif n_valid > b:
            lower, upper, left = _select_bucket(cand_key, n_valid, b, CHUNK, LOG_BINS)
            _compact_selected(
                cand_key, cand_pk, cand_score, n_valid, lower, upper, left, comp_key, comp_pk, comp_score,
                False, CHUNK,
            )  # fmt: skip
            tl.debug_barrier()
            _stamp(clock_row, 3 + 4 * d, PROFILE)
            hist = _append_level(
                comp_key, comp_pk, comp_score, n_kept, in_order, d + 1, pool_n, pool_key, pool_pk, pool_score,
                pool_depth, hist, lp_row + d * s_ll, s_lk, PCH, QCH, HIST_BINS, HIST_SHIFT, SORT_RANKS,
            )  # fmt: skip
        else:
            _stamp(clock_row, 3 + 4 * d, PROFILE)
            hist = _append_level(
                cand_key, cand_pk, cand_score, n_kept, in_order, d + 1, pool_n, pool_key, pool_pk, pool_score,
                pool_depth, hist, lp_row + d * s_ll, s_lk, PCH, QCH, HIST_BINS, HIST_SHIFT, SORT_RANKS,
            )  # fmt: skip
        tl.debug_barrier()
        _stamp(clock_row, 4 + 4 * d, PROFILE)
        bound, fine, fine_bucket, n_parents = _appended_bound(
            hist, fine, fine_bucket, b, pool_key, pool_score, pool_n, n_kept, lp_row, s_ll, d, max_depth, held, PCH,
            HIST_BINS, HIST_SHIFT, FINE_BITS,
        )  # fmt: skip
        _stamp(clock_row, 5 + 4 * d, PROFILE)
        start_par = pool_n
        pool_n += n_kept
        d += 1

    total = pool_n - 1
    n_nodes = tl.minimum(total, b)
    FB: tl.constexpr = FCH if FCH > 0 else 1  # the sort's block (FCH = 0 never sorts, but compiles the call)
    fb = tl.arange(0, FB)
    cut = total + 1  # the nodes below the last bound, once counted (CUT): more than the pool, none counted
    if CUT & (FCH > 0) & (total > FCH):  # every final node lies below the bound (b kept keys do)
        cut = _compact_below(pool_key + 1, pool_pk, total, bound, cand_key, cand_pk, tl.minimum(n_slots, FCH), True,
                             CHUNK)  # fmt: skip
        tl.debug_barrier()
    if (FCH > 0) & (total <= FCH):
        _stamp(clock_row, 2 + 4 * max_depth, PROFILE)
        pooled = fb < total
        key = tl.load(pool_key + 1 + fb, mask=pooled, other=_I32_MAX)
        _rank_sorted(key, tl.where(pooled, fb + 1, _I32_MAX), n_nodes, node_of, inv, FB)
    elif cut <= tl.minimum(n_slots, FCH):
        _stamp(clock_row, 2 + 4 * max_depth, PROFILE)
        below = fb < cut
        key = tl.load(cand_key + fb, mask=below, other=_I32_MAX)
        _rank_sorted(key, tl.load(cand_pk + fb, mask=below, other=_I32_MAX), n_nodes, node_of, inv, FB)
    else:
        _select_and_rank(pool_key, pool_pk, pool_score, total, n_nodes, b, comp_key, cand_pk, comp_score, node_of, inv,
                         clock_row, 2 + 4 * max_depth, CHUNK, LOG_BINS, PCH, QCH, SORT_RANKS, PROFILE)  # fmt: skip
    return n_nodes

"""Triton twin of `tree.build_tree_from_topk`: one program builds one request's draft tree.

The program runs the level-synchronous selection of batched.py (its docstring proves it equal to the
best-first heap, ties included), with two changes that suit one streaming multiprocessor: it selects
from long lists without sorting (one program's tl.sort or tl.topk of 2048 keys took 13-33 us on an H200)
and sorts only short ones (the kept nodes, at most 1,024; a level's survivors or the final pool when they
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
in registers (`_first_bound`), not from two passes over the pool. On an H200 (results/kernels/h200-2026-12-01h,
call 1) it took the build kernel from 23.4 to 22.1 us and the round from 50.6 to 49.3 us at batch 1, budget 256
(default drafts); compiled for sm_90a at budget 256 the kernel takes 255 registers against 203, without spills
(ptxas resource usage, h200-2026-12-01d; one program of 8 warps per SM either way).
Holding the chain (tree.py), a request's keys are 0 on the pairs (0, 0) of finite score, the chain, and
bits(-score) + 1 elsewhere, as in batched.py; keys stay below INT32_MAX and a child's key is still
never smaller than its parent's, so steps 1-4 are unchanged.
After the last level (or the first that keeps nothing) the b smallest pool keys, ties in pool order,
are selected and ranked the same way: rank + 1 is the node index in pop order; a pool of at most FCH
(min(512, 4 * PCH) by default; 0: never) is sorted once instead (`_rank_sorted`). A larger pool (CUT, on by
default) is first cut to its keys below the last level's bound (`_compact_below`), which hold the b smallest
(at least b kept keys lie below it); when at most FCH remain (with FINE_BITS' bound, about b), they are
sorted once the same way. On an H200 (results/kernels/h200-2026-11-30h, batch 1, budget 256, a pool above
FCH = 512) the cut took the final selection from 7.3 us (radix passes over the pool, then a sort of 256) to 4.9
(one compaction, a sort of 512), the build from 26.8 to 25.5 us. (Tried there and dropped: cutting exactly b,
the b-th key's fine bucket ranked by a [64, 64] compare so that a sort of 256 would do, 6.2 us; an expand
that counted its pairs and checked the order of its survivors in registers (a running-maximum scan) instead
of two loads and a pass, 0.5-1.1 us slower a level.)
On an H200 (results/kernels/h200-2026-11-30i) the parents cut to those whose best child can survive
(`_live_parents`) took the build from 24.3 to 20.9 us at batch 1, budget 256 (its fourth level, which had kept
nothing, is no longer expanded; level 1's expand 2.3 -> 1.2 us), from 29.3 to 26.2 at batch 8, budget 256.
On an H200 (results/kernels/h200-2026-11-30f) the three sorts and the finer bound took the build of the
kernel benchmark's drafts from 33.3 to 26.9 us at batch 1, budget 256, and from 34.0 to 22.1 at batch 64,
budget 64: level 1's radix selection (8.9 and 4.1 us a program) gives way to one sort of its survivors,
the final selection of 64 nodes from 6.7 to 1.7 us, for a bound that costs 1.1-1.7 us a level instead of
0.5.

Worked example (tree.py's: K = 2, budget 4, log-probs a -0.1 b -2.5 | c -0.2 d -1.9):

    level 1: pairs (0,0) a -0.1, (0,1) b -2.5                        kept [a, b]
    level 2: pairs (0,0) a.c -0.3, (0,1) a.d -2.0, (1,0) b.c -2.7,   kept [a.c, a.d, b.c, b.d]
             (1,1) b.d -4.4   ((i+1)(r+1) <= 4 admits all four)
    pool [root, a, b, a.c, a.d, b.c, b.d]; its 4 smallest keys: a, a.c, a.d, b -> nodes 1, 2, 3, 4

Cost per level: one pass over the candidates (about b ln b), a few histogram passes only when more
than b survive, and a sort of b keys (or b * b compares); levels that the bound empties cost nothing, so a
flat tree (uniform drafts) stops after a level or two.

The build by deviations (TAILS, a launch key, on by default up to budget 256; `_tail_build`). A deep tree is mostly
chains of rank-0 steps: every node is a head (the root, or a child of rank >= 1) followed by t >= 0 steps of rank 0,
and in CPU draws like the kernel benchmark's drafts (randn x 4 and x 12; one request at budget 256, four at 64;
results/kernels/h200-2026-12-01b) no tree node has more than two heads below the root, while the
level build takes one level per depth (11 at batch 1, budget 256 on the chain-like drafts). So TAILS takes levels of
deviations: level 0 is the chain; level k + 1 is every child of rank >= 1 of a level-k node below the bound (a
prefix of each parent's ranks, `_tail_heads`), each with its chain of rank 0 down to where the key reaches the
bound (`_tail_chains`; keys never decrease down a path). A level of more parents than the heads' tile holds (TB / 16)
first lists those whose rank-1 child lies below the bound, and steps over them only. Every node of key below the
bound is found once (its ancestors have smaller or equal keys, so they were found, and were parents, before it).
The bound starts at the tighter of two (each below b distinct real nodes): the depth-1 node of rank b - 1's key + 1,
and step 4's bound over the chain and its one-deviation nodes of rank < FR (16 by default) with their chains
(`_deviation_keys`: FD x FR x FD keys, 4,096 for FD = 16; any FR gives a valid bound, a smaller one a looser one);
after each level it is step 4's over every node found. The final nodes are then the b first of all nodes below the
bound in pop order, (key, depth, position in the level), a position being the level's order by (key, parent's
position, rank): one sort by (key, depth, entry) when no two of the first b + 1 share key and depth, else passes
that order each (key, depth) group by (the parent's place in the last order, rank) until the order stands still
(`_pop_order`; bf16 drafts tie often). A group of rank-0 nodes whose parents share one group is in its parents'
order, so its members are placed by their anchors (the first ancestor up such groups) and a pass fixes them as soon
as their anchors are fixed; groups of at most GS members are ordered by counts, larger ones by a sort. Scores are
the level build's float32 sums, one depth at a time. The level build takes over when the drafts are wide (the
chain's deepest node scores below the depth-1 node of rank b - 1) or when the nodes below the bound outgrow the pool
or the final sort. On an H200 (results/kernels/h200-2026-12-01c, call 1) TAILS built the chain-like drafts (randn x
12) in 53.2 us against 76.3 at batch 1, budget 256, and in 34.3 against 41.2 at batch 64, budget 64; the default
drafts (x 4) went to the level build, 21.5 against 20.2 and 10.4 against 10.6. (Before the listed parents, the
anchors and the counted passes, h200-2026-12-01b: 70.1 and 36.2 us.) It is on by default since
results/kernels/h200-2026-12-01d (call 2, rounds): with the top-K's scan no longer pushing the build out of the L2
(topk_radix.py), TAILS' rounds at batch 64, budget 64 cost what the level build's do on the default drafts (165.2
against 165.0 us), and on chain-like ones, a confident drafter's (DFlash's acceptance length is 6-8 on blocks of
16), it takes the round from 209.4 to 194.9 us there and from 105.5 to 83.9 at batch 1, budget 256; its price is
about 2 us at batch 1 on the default drafts (48.1 against 50.2 at budget 256): 1 us in level 0's stamps, which
hold the wide-drafts test (h200-2026-12-01c call 1), though not in its loads' latency (h200-2026-12-01d call 3), and
no spills (ptxas resource usage); about 1 us of it is the level build compiled inside the larger kernel (a called
`_tail_build`, h200-2026-12-01e call 1: 49.3 against 50.3 us, dropped since the call cost TAILS 6-12 us at batch 64).
At batches 8 and 32 (h200-2026-12-01e call 4) TAILS costs the default drafts 0.5-3.6 us and saves chain-like ones
15-42. Above budget 256 it is untimed, so off.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ddtree_core.kernels.clock import check_clock
from ddtree_core.kernels.clock import phase_times as clock_times
from ddtree_core.kernels.clock import stamp as _stamp
from ddtree_core.kernels.pdl import let_next_start, wait_for_inputs
from ddtree_core.kernels.pdl import options as pdl_options
from ddtree_core.kernels.radix import min_max, pick_digit
from ddtree_core.types import TRITON_NODE_LIMIT, DraftTopK, DraftTree

_I32_MAX = tl.constexpr(2147483647)
GS = tl.constexpr(16)  # TAILS' pop order: tie groups of at most GS members are ordered by counts, not sorts
_PACK_LIMIT = TRITON_NODE_LIMIT  # pool indices and budgets must fit 15 bits: pk = parent_pool_index << 16 | rank


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
def _pool_store(slot, key, pk, score, depth, mask, pool_key, pool_pk, pool_score, pool_depth):
    """Pool entries at `slot`: key, pk = parent entry << 16 | rank, score, depth."""
    tl.store(pool_key + slot, key, mask=mask)
    tl.store(pool_pk + slot, pk, mask=mask)
    tl.store(pool_score + slot, score, mask=mask)
    tl.store(pool_depth + slot, depth, mask=mask)


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
def _write_tree(
    n_nodes, inv, node_of, pool_pk, pool_score, pool_depth, ids_row, s_il, s_ik,
    tok_out, par_out, dep_out, score_out, rank_out, width, WCH: tl.constexpr,
):  # fmt: skip
    """Write the N+1 columns of one request: root, the n_nodes nodes in pop order, padding."""
    offs = tl.arange(0, WCH)
    c0 = width * 0
    while c0 < width:
        col = c0 + offs
        cm = col < width
        real = cm & (col >= 1) & (col <= n_nodes)
        idx = tl.load(inv + col - 1, mask=real, other=0)
        pk = tl.load(pool_pk + idx, mask=real, other=0)
        rank = pk & 0xFFFF
        depth = tl.load(pool_depth + idx, mask=real, other=0)
        parent = tl.load(node_of + (pk >> 16), mask=real, other=0)  # node_of[0] = 0: the root
        token = tl.load(ids_row + (depth - 1) * s_il + rank * s_ik, mask=real, other=-1)
        score = tl.load(pool_score + idx, mask=real, other=0.0)
        root = col == 0
        tl.store(par_out + col, tl.where(real, parent, -1).to(tl.int64), mask=cm)
        tl.store(dep_out + col, tl.where(real, depth, tl.where(root, 0, -1)).to(tl.int64), mask=cm)
        tl.store(score_out + col, tl.where(real, score, tl.where(root, 0.0, float("-inf"))), mask=cm)
        tl.store(rank_out + col, tl.where(real, rank, -1).to(tl.int64), mask=cm)
        tl.store(tok_out + col - 1, tl.where(real, token, -1), mask=cm & (col >= 1))
        c0 += WCH


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
def _deviation_keys(
    lp_row, s_ll, s_lk, pool_score, max_depth, kr, held, FD: tl.constexpr, FR: tl.constexpr,
):  # fmt: skip
    """The keys [FD * FR, FD] of every one-deviation node of rank < FR, and which exist: row t * FR + r holds the chain
    to depth t (pool entry t; the root at 0), then rank r in [1, min(FR, kr)) at depth t + 1, column j its node of
    depth t + 1 + j (ranks 0 after the deviation). Distinct real nodes, none on the chain, scored as the expand
    scores them (the parent's score + the log-prob, float32, one depth at a time)."""
    rows = tl.arange(0, FD * FR)
    t = rows // FR
    r = rows % FR
    head = (t < max_depth) & (r >= 1) & (r < kr)
    score = tl.load(pool_score + t, mask=t < max_depth, other=0.0)
    score = score + tl.load(lp_row + t * s_ll + r * s_lk, mask=head, other=0.0)
    cols = tl.arange(0, FD)[None, :]
    scores = tl.zeros([FD * FR, FD], tl.float32)
    for j in tl.static_range(FD):
        scores = tl.where(cols == j, score[:, None], scores)
        score = score + tl.load(lp_row + (t + 1 + j) * s_ll, mask=t + 1 + j < max_depth, other=0.0)
    exists = head[:, None] & (t[:, None] + 1 + cols <= max_depth)
    return tl.reshape(_score_key(scores) + held, [FD * FR * FD]), tl.reshape(exists, [FD * FR * FD])


@triton.jit
def _tail_heads(
    lp_row, s_ll, s_lk, first, end, n, bound, kr, held, max_depth, pool_key, pool_pk, pool_score, pool_depth,
    pool_size, listed, TB: tl.constexpr, RB: tl.constexpr, LB: tl.constexpr,
):  # fmt: skip
    """Append to pool[n:] every child of rank >= 1 of the nodes pool[first:end] whose key lies below `bound` (a
    parent at or past it, or at max_depth, has none); returns the new n (past pool_size: more than the pool holds,
    only the first ones stored). A parent's children below the bound are a prefix of its ranks (its depth's
    log-probs are sorted best first), taken RB ranks a step until one stops short. More parents than the tile holds
    (TB // RB) are first listed (at `listed`, LB a block) down to those whose rank-1 child lies below the bound: in the
    deeper levels most have none, and the tiles then step over the live ones only."""
    PB: tl.constexpr = TB // RB
    offs = tl.arange(0, TB)
    i = offs // RB
    c = offs % RB
    block = tl.arange(0, LB)
    many = end - first > PB
    p0 = first
    while p0 < end:
        if many:  # list the live parents of pool[p0 : p0 + LB]
            j = p0 + block
            jm = j < end
            depth = tl.load(pool_depth + j, mask=jm, other=0)
            live = jm & (tl.load(pool_key + j, mask=jm, other=_I32_MAX) < bound) & (depth < max_depth) & (kr > 1)
            score = tl.load(pool_score + j, mask=live, other=0.0) + tl.load(lp_row + depth * s_ll + s_lk, mask=live,
                                                                             other=0.0)  # fmt: skip
            live = live & (_score_key(score) + held < bound)
            tl.store(listed + tl.cumsum(live.to(tl.int32), 0) - 1, j, mask=live)
            n_listed = tl.sum(live.to(tl.int32), 0)
            tl.debug_barrier()
        else:
            n_listed = tl.minimum(end - p0, LB)
        q0 = n * 0
        while q0 < n_listed:
            pm = q0 + i < n_listed
            if many:
                p = tl.load(listed + q0 + i, mask=pm, other=0)
            else:
                p = p0 + q0 + i
            depth = tl.load(pool_depth + p, mask=pm, other=0)
            parent_score = tl.load(pool_score + p, mask=pm, other=0.0)
            live = pm & (tl.load(pool_key + p, mask=pm, other=_I32_MAX) < bound) & (depth < max_depth)
            r0 = n * 0 + 1
            more = tl.sum(live.to(tl.int32), 0) > 0
            while more:
                r = r0 + c
                valid = live & (r < kr)
                score = parent_score + tl.load(lp_row + depth * s_ll + r * s_lk, mask=valid, other=0.0)
                valid = valid & (_score_key(score) + held < bound)
                pos = n + tl.cumsum(valid.to(tl.int32), 0) - 1
                kept = valid & (pos < pool_size)
                _pool_store(pos, _score_key(score) + held, (p << 16) | r, score, depth + 1, kept, pool_key, pool_pk,
                            pool_score, pool_depth)  # fmt: skip
                n += tl.sum(valid.to(tl.int32), 0)
                more = tl.sum((valid & (c == RB - 1)).to(tl.int32), 0) > 0
                r0 += RB
            q0 += PB
        tl.debug_barrier()  # the list is read before the next block overwrites it
        p0 += LB
    return n


@triton.jit
def _tail_chains(
    lp_row, s_ll, first, end, n, bound, held, max_depth, pool_key, pool_pk, pool_score, pool_depth, pool_size,
    TB: tl.constexpr, FD: tl.constexpr,
):  # fmt: skip
    """Append to pool[n:] the rank-0 descendants of the heads pool[first:end] whose key lies below `bound`: for each
    head, a chain down to max_depth cut where its key reaches the bound (keys never decrease down a chain), its nodes
    consecutive; returns the new n (past pool_size as `_tail_heads`)."""
    HB: tl.constexpr = TB // FD
    heads = tl.arange(0, HB)
    cols = tl.arange(0, FD)[None, :]  # the chain's j-th node: depth of the head + 1 + j
    q0 = first
    while q0 < end:
        e = q0 + heads
        hm = e < end
        depth = tl.load(pool_depth + e, mask=hm, other=0)
        score = tl.load(pool_score + e, mask=hm, other=0.0)
        scores = tl.zeros([HB, FD], tl.float32)
        for j in tl.static_range(FD):
            score = score + tl.load(lp_row + (depth + j) * s_ll, mask=hm & (depth + j < max_depth), other=0.0)
            scores = tl.where(cols == j, score[:, None], scores)
        key = _score_key(scores) + held
        alive = hm[:, None] & (depth[:, None] + 1 + cols <= max_depth) & (key < bound)
        alive = tl.reshape(alive, [TB])
        pos = n + tl.cumsum(alive.to(tl.int32), 0) - 1
        kept = alive & (pos < pool_size)
        j = tl.reshape(cols + heads[:, None] * 0, [TB])
        parent = tl.where(j == 0, tl.reshape(e[:, None] + cols * 0, [TB]), pos - 1)
        _pool_store(pos, tl.reshape(key, [TB]), parent << 16, tl.reshape(scores, [TB]),
                    tl.reshape(depth[:, None] + 1 + cols, [TB]), kept, pool_key, pool_pk, pool_score, pool_depth)
        n += tl.sum(alive.to(tl.int32), 0)
        q0 += HB
    return n


@triton.jit
def _tie_anchors(entry, group, start, last, m, later, max_depth, cand_key, cand_pk, pool_key, pool_pk, node_of,
                 FS: tl.constexpr):  # fmt: skip
    """For `_pop_order`'s tie passes, the nodes in positions offs (entry; their (key, depth) groups, whose first and
    last members start and last mark): writes pool_key[entry] = the parent << 16 | rank, or, for the members of a
    group of rank-0 nodes whose parents share one group (it follows its parents' order), their anchor << 16, the
    first ancestor up such groups (pointer doubling); returns each member's group's first position and size.
    Uses cand_key and cand_pk (the positions' keys and depths, read before) as scratch."""
    offs = tl.arange(0, FS)
    pk = tl.load(pool_pk + entry, mask=m, other=0)
    parent = tl.load(node_of + (pk >> 16), mask=m, other=0) - 1  # its position (the root: -1)
    tl.debug_barrier()
    tl.store(cand_key + offs, group, mask=m)
    tl.debug_barrier()
    parent_group = tl.load(cand_key + parent, mask=m & (parent >= 0), other=-1)
    tl.store(cand_pk + offs, parent_group, mask=m)
    tl.debug_barrier()
    split = ~start & (tl.load(cand_pk + offs - 1, mask=later, other=-1) != parent_group)  # two parent groups
    step_out = m & (((pk & 0xFFFF) != 0) | (parent < 0) | split)  # keeps its group from its parents' order
    outs = tl.cumsum(step_out.to(tl.int32), 0)
    tl.debug_barrier()
    tl.store(cand_key + group, outs, mask=m & last)
    tl.store(cand_pk + group, outs - step_out.to(tl.int32), mask=m & start)
    tl.debug_barrier()
    follows = m & (tl.load(cand_key + group, mask=m, other=0) == tl.load(cand_pk + group, mask=m, other=1))
    tl.debug_barrier()
    tl.store(cand_key + group, offs, mask=m & start)
    tl.store(cand_pk + group, offs, mask=m & last)
    tl.debug_barrier()
    base = tl.load(cand_key + group, mask=m, other=0)  # the group's first position
    size = tl.load(cand_pk + group, mask=m, other=-1) - base + 1
    anchor = tl.where(follows, parent, offs)
    reach = 1
    while reach < max_depth:  # anchor: the first ancestor up groups that follow their parents' (or itself)
        tl.debug_barrier()
        tl.store(cand_key + offs, anchor, mask=m)
        tl.debug_barrier()
        anchor = tl.load(cand_key + anchor, mask=m, other=0)
        reach *= 2
    tl.debug_barrier()
    tl.store(cand_pk + offs, entry, mask=m)
    tl.debug_barrier()
    anchor = tl.load(cand_pk + anchor, mask=m, other=0)
    tl.store(pool_key + entry, tl.where(follows, anchor << 16, pk), mask=m)
    tl.debug_barrier()
    return base, size


@triton.jit
def _pop_order(
    cand_key, cand_pk, count, b, max_depth, pool_key, pool_pk, pool_depth, node_of, inv, FS: tl.constexpr,
):  # fmt: skip
    """The final nodes of the build by deviations from the `count` <= FS (key, pool entry) pairs at cand_key, cand_pk
    (every node below the last bound, in any order): the b first in pop order, (key, depth, position in its level),
    a node's position being its level's order by (key, position of its parent, rank). One sort by (key, depth,
    entry) gives it unless two of the first b + 1 share key and depth; then the sort by (that pair's group, the
    parent's place in the last order, rank) repeats until the order stands still, and the order it stops at is the
    pop order (by induction on depth: the depth-1 nodes' parent is the root). A group whose members all have rank 0
    and parents in one group (the chains below tied heads: bf16 drafts tie often) is in its parents' order, so each
    of its members is placed by its anchor instead, the first ancestor up such groups (found by pointer doubling);
    a pass then fixes every group whose anchors' places are fixed, not just one more depth. The anchors and ranks go
    to pool_key (free once the candidates are listed). Writes node_of[entry] = place + 1 and inv[place] = entry;
    returns how many nodes the tree has."""
    zero = count * 0
    offs = tl.arange(0, FS)
    m = offs < count
    key = tl.load(cand_key + offs, mask=m, other=_I32_MAX)
    entry = tl.load(cand_pk + offs, mask=m, other=0)
    key, low = _sort_pairs(key, tl.where(m, (tl.load(pool_depth + entry, mask=m, other=0) << 16) | entry, _I32_MAX))
    entry = low & 0xFFFF
    tl.debug_barrier()
    tl.store(cand_key + offs, key, mask=m)
    tl.store(cand_pk + offs, low >> 16, mask=m)
    tl.store(node_of + entry, offs + 1, mask=m)
    tl.debug_barrier()
    later = (offs >= 1) & m
    start = (offs == 0) | (tl.load(cand_key + offs - 1, mask=later, other=-1) != key)
    start = start | (tl.load(cand_pk + offs - 1, mask=later, other=-1) != (low >> 16))
    if tl.sum((~start & (offs < tl.minimum(count, b + 1))).to(tl.int32), 0) > 0:
        more = offs + 1 < count
        last = ~more | (tl.load(cand_key + offs + 1, mask=more, other=-1) != key)
        last = last | (tl.load(cand_pk + offs + 1, mask=more, other=-1) != (low >> 16))
        group = tl.cumsum(start.to(tl.int32), 0) - 1
        base, size = _tie_anchors(entry, group, start, last, m, later, max_depth, cand_key, cand_pk, pool_key,
                                  pool_pk, node_of, FS)  # fmt: skip
        most = tl.max(size, 0)
        few = most <= GS  # every group small: a pass counts, per member, the members before it
        moved = count
        passes = zero
        while (moved > 0) & (passes <= max_depth):
            up = tl.load(pool_key + entry, mask=m, other=0)  # (the parent, or the anchor) << 16 | rank (anchor: 0)
            place = tl.load(node_of + (up >> 16), mask=m, other=0)  # the root's is 0
            if few:  # (place, rank) is distinct within a group (anchors of distinct members are distinct)
                key = (place << 16) | (up & 0xFFFF)
                tl.store(cand_key + offs, key, mask=m)
                tl.debug_barrier()
                before = offs * 0
                j = zero
                while j < most:
                    other = tl.load(cand_key + base + j, mask=m & (j < size), other=_I32_MAX)
                    before += (other < key).to(tl.int32)
                    j += 1
                tl.store(cand_pk + base + before, entry, mask=m)
                tl.debug_barrier()
                now = tl.load(cand_pk + offs, mask=m, other=0)
            else:
                order = (group.to(tl.int64) << 48) | (place.to(tl.int64) << 30) | ((up & 0xFFFF).to(tl.int64) << 15)
                order = tl.sort(tl.where(m, order | entry.to(tl.int64), 0x7FFFFFFFFFFFFFFF))
                now = (order & 0x7FFF).to(tl.int32)
            moved = tl.sum((m & (now != entry)).to(tl.int32), 0)
            entry = now
            tl.debug_barrier()
            tl.store(node_of + entry, offs + 1, mask=m)
            tl.debug_barrier()
            passes += 1
    n_nodes = tl.minimum(count, b)
    tl.store(inv + offs, entry, mask=offs < n_nodes)
    return n_nodes


@triton.jit
def _tail_levels(
    lp_row, s_ll, s_lk, b, held, k_ranks, max_depth, pool_size, cap, pool_key, pool_pk, pool_score, pool_depth,
    cand_key, cand_pk, node_of, inv, clock_row, chain_key,
    FD: tl.constexpr, TB: tl.constexpr, HIST_BINS: tl.constexpr, HIST_SHIFT: tl.constexpr, FINE_BITS: tl.constexpr,
    FS: tl.constexpr, FR: tl.constexpr, CHUNK: tl.constexpr, PROFILE: tl.constexpr,
):  # fmt: skip
    """`_tail_build` past the chain (in the pool, its keys chain_key [FD]): the start bound, the levels of deviations,
    the pop order; returns the number of nodes, or -1 when the nodes below the bound outgrow the pool or cap."""
    zero = b * 0
    RB: tl.constexpr = 16  # ranks a step of `_tail_heads`
    chain = tl.arange(0, FD)
    kr = tl.minimum(k_ranks, b)  # a node of rank r has r siblings before it: ranks >= b are never kept
    # the start bound: the tighter of the depth-1 nodes' (b of them when the lists hold b ranks) and the one over
    # the chain and its one-deviation nodes (`_deviation_keys`), each below b distinct real nodes
    depth1 = _node_key(tl.load(lp_row + (b - 1) * s_lk, mask=b <= k_ranks, other=0.0), b == 1, held)
    bound = tl.where(b <= k_ranks, depth1 + 1, _I32_MAX)
    key, exists = _deviation_keys(lp_row, s_ll, s_lk, pool_score, max_depth, kr, held, FD, FR)
    hist = tl.histogram(key >> HIST_SHIFT, HIST_BINS, mask=exists)
    hist += tl.histogram(chain_key >> HIST_SHIFT, HIST_BINS, mask=chain < max_depth)
    crossing, below, bounded = _crossing(hist, b, HIST_BINS)
    if FINE_BITS > 0:
        fine = _fine_count(key, exists, crossing, HIST_SHIFT, FINE_BITS)
        fine += _fine_count(chain_key, chain < max_depth, crossing, HIST_SHIFT, FINE_BITS)
        start = _split_bound(fine, crossing, below, bounded, b, HIST_SHIFT, FINE_BITS)
    else:
        start = _key_bound(hist, b, HIST_BINS, HIST_SHIFT)
    bound = tl.minimum(bound, start)
    _stamp(clock_row, 2, PROFILE)
    # levels of deviations: the heads below the bound (children of rank >= 1), then their chains of rank 0
    hist = tl.histogram(chain_key >> HIST_SHIFT, HIST_BINS, mask=chain < max_depth)
    fine = tl.zeros([1 << FINE_BITS], tl.int32)
    fine_bucket = zero - 1
    first = zero
    end = max_depth  # level 0's parents: the root and the chain above max_depth
    n = max_depth + 1
    while (end > first) & (n <= pool_size):
        heads = n
        n = _tail_heads(lp_row, s_ll, s_lk, first, end, n, bound, kr, held, max_depth, pool_key, pool_pk, pool_score,
                        pool_depth, pool_size, cand_pk, TB, RB, FS)  # fmt: skip
        tl.debug_barrier()
        if n <= pool_size:
            n = _tail_chains(lp_row, s_ll, heads, n, n, bound, held, max_depth, pool_key, pool_pk, pool_score,
                             pool_depth, pool_size, TB, FD)  # fmt: skip
        tl.debug_barrier()
        if n <= pool_size:  # the bound over every node so far (`_kept_bound`, the level being pool[heads:n])
            offs = tl.arange(0, CHUNK)
            c0 = heads
            while c0 < n:
                m = c0 + offs < n
                hist += tl.histogram(tl.load(pool_key + c0 + offs, mask=m, other=0) >> HIST_SHIFT, HIST_BINS, mask=m)
                c0 += CHUNK
            level, fine, fine_bucket = _kept_bound(hist, fine, fine_bucket, b, pool_key, heads, n - heads, CHUNK,
                                                   HIST_BINS, HIST_SHIFT, FINE_BITS)  # fmt: skip
            bound = tl.minimum(bound, level)
        first = heads
        end = n
    _stamp(clock_row, 3, PROFILE)
    n_nodes = zero - 1
    if n <= pool_size:
        count = _compact_below(pool_key + 1, pool_pk, n - 1, bound, cand_key, cand_pk, cap, True, CHUNK)
        tl.debug_barrier()
        _stamp(clock_row, 4, PROFILE)
        if count <= cap:
            n_nodes = _pop_order(cand_key, cand_pk, count, b, max_depth, pool_key, pool_pk, pool_depth, node_of, inv,
                                 FS)  # fmt: skip
    _stamp(clock_row, 5, PROFILE)
    if PROFILE:  # the stamps read as one level (`phase_times`), then the final selection (nothing more)
        tl.store(clock_row + 9, zero.to(tl.int64), mask=max_depth > 1)
        _stamp(clock_row, 2 + 4 * max_depth, PROFILE)
    return n_nodes


@triton.jit
def _tail_build(
    lp_row, s_ll, s_lk, b, held, k_ranks, max_depth, pool_size, cap, pool_key, pool_pk, pool_score, pool_depth,
    cand_key, cand_pk, node_of, inv, clock_row,
    FD: tl.constexpr, TB: tl.constexpr, HIST_BINS: tl.constexpr, HIST_SHIFT: tl.constexpr, FINE_BITS: tl.constexpr,
    FS: tl.constexpr, FR: tl.constexpr, CHUNK: tl.constexpr, PROFILE: tl.constexpr,
):  # fmt: skip
    """TAILS: the tree by deviations (see the module docstring); writes node_of and inv and returns the number of
    nodes, or -1 (nothing written to the tree yet) when the level build must take over: on wide drafts, where the
    chain's deepest node scores below the b-th best depth-1 node, or when the nodes below the bound outgrow the pool
    or the final sort (cap entries)."""
    zero = b * 0
    chain = tl.arange(0, FD)  # the chain: pool entry d + 1 is its node of depth d + 1, parent entry d
    live = chain < max_depth
    score = tl.zeros([FD], tl.float32)
    for d in tl.static_range(FD):  # score[c] adds the best log-probs of depths 1..c + 1 in order (then zeros: exact)
        score = score + tl.where(chain >= d, tl.load(lp_row + d * s_ll, mask=d < max_depth, other=0.0), 0.0)
    deepest = tl.sum(tl.where(chain == max_depth - 1, score, 0.0), 0)
    wide = (b <= k_ranks) & (deepest < tl.load(lp_row + (b - 1) * s_lk, mask=b <= k_ranks, other=0.0))
    n_nodes = zero - 1
    if wide == 0:  # (wide drafts leave the pool untouched, for the level build)
        tl.store(pool_key, zero)  # the root (its score is set): key 0, depth 0
        tl.store(pool_depth, zero)
        chain_key = _node_key(score, live, held)
        _pool_store(1 + chain, chain_key, chain << 16, score, chain + 1, live, pool_key, pool_pk, pool_score,
                    pool_depth)  # fmt: skip
        tl.debug_barrier()
        n_nodes = _tail_levels(
            lp_row, s_ll, s_lk, b, held, k_ranks, max_depth, pool_size, cap, pool_key, pool_pk, pool_score, pool_depth,
            cand_key, cand_pk, node_of, inv, clock_row, chain_key, FD, TB, HIST_BINS, HIST_SHIFT, FINE_BITS, FS, FR,
            CHUNK, PROFILE,
        )  # fmt: skip
    return n_nodes


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


@triton.jit(do_not_specialize=["budget", "max_depth", "n_max", "n_slots", "pool_size"])
def _build_kernel(
    lp_ptr,  # [B, L, K] float32: log-probs of each depth's top-K tokens, best first
    ids_ptr,  # [B, L, K] int64: their token ids
    budget_ptr,  # [B] int64: per-request budgets (read when PER_REQUEST_BUDGET)
    budget,  # int: the budget of every request (when not PER_REQUEST_BUDGET)
    hold_ptr,  # [B] bool: the requests that hold the chain (read when HOLD == 2)
    pairs_ptr,  # [P] int32: candidate pairs i << 16 | r, i-major
    row_end_ptr,  # [n_max] int32: row_end[i] = number of pairs with parent position <= i
    ws_int_ptr,  # [B, 2 n_slots + 2 n_max + 4 pool_size] int32 scratch
    ws_flt_ptr,  # [B, n_slots + n_max + pool_size] float32 scratch
    tok_out,  # [B, n_max] int64: node i's token at column i-1; -1 padding
    par_out,  # [B, n_max + 1] int64: parent node index; root and padding -1
    dep_out,  # [B, n_max + 1] int64: depth; root 0, padding -1
    cnt_out,  # [B] int64: nodes of each tree
    score_out,  # [B, n_max + 1] float32: path log-prob; root 0, padding -inf
    rank_out,  # [B, n_max + 1] int64: rank of the node's token at its depth; root and padding -1
    clock_ptr,  # [B, clock_slots(max_depth)] int64: phase stamps (read when PROFILE)
    path_ptr,  # [B] int32: 1 where TAILS built the tree, else 0 (written when PATHS)
    s_lb, s_ll, s_lk,  # strides of lp_ptr (elements)
    s_ib, s_il, s_ik,  # strides of ids_ptr (elements)
    max_depth,  # int: levels to build, 1 <= max_depth <= L
    n_max,  # int: N, the largest budget (tree width N + 1)
    n_slots,  # int: entries of each candidate list: at least P, and FS when TAILS
    pool_size,  # int: 1 + max_depth * n_max, the most nodes the levels can keep (root included)
    PER_REQUEST_BUDGET: tl.constexpr,  # budgets come from budget_ptr
    HOLD: tl.constexpr,  # hold the chain: 0 no request, 1 every request, 2 those set in hold_ptr
    CHUNK: tl.constexpr,  # candidates per block of the expand / select / compact passes
    PCH: tl.constexpr,  # kept entries ranked per block
    QCH: tl.constexpr,  # entries compared per step of a rank block (a [QCH, PCH] tile)
    WCH: tl.constexpr,  # output columns per block
    LOG_BINS: tl.constexpr,  # radix-selection digit bits
    HIST_BINS: tl.constexpr,  # buckets of the kept-key histogram (256: keys >> 23; 2048: keys >> 20)
    HIST_SHIFT: tl.constexpr,  # key bits below a bucket
    SORT_RANKS: tl.constexpr = False,  # order levels and the final nodes by tl.sort, not rank counts (N <= PCH)
    FINE_BITS: tl.constexpr = 0,  # split the bound's bucket by this many more key bits (_fine_bound; 0: off)
    SORT_SURVIVORS: tl.constexpr = False,  # a level with b < survivors <= SCH: one sort, no selection
    # (_launch_config turns FINE_BITS, SORT_SURVIVORS and FCH on; these defaults are the plain build)
    SCH: tl.constexpr = 16,  # survivors sorted at once when SORT_SURVIVORS (a power of two)
    FCH: tl.constexpr = 0,  # a pool of at most FCH nodes is selected and ranked by one sort (0: never)
    CUT: tl.constexpr = False,  # a larger pool: its nodes below the last bound, when at most FCH, by that sort
    TAILS: tl.constexpr = False,  # first try the build by deviations (_tail_build), the level build if it gives up
    FD: tl.constexpr = 16,  # TAILS: a power of two >= max_depth
    TB: tl.constexpr = 1024,  # TAILS: entries of a tile of heads (a multiple of 16 and of FD)
    FS: tl.constexpr = 512,  # TAILS: the final sort's block
    FR: tl.constexpr = 16,  # TAILS: the start bound's one-deviation nodes have ranks below FR (_deviation_keys)
    PROFILE: tl.constexpr = False,  # stamp the phases into clock_ptr (CUDA only; see clock_slots)
    PATHS: tl.constexpr = False,  # write path_ptr
    PDL: tl.constexpr = False,  # launched with programmatic dependent launch (pdl.py)
):  # fmt: skip
    wait_for_inputs(PDL)
    pid = tl.program_id(0)
    zero = pid * 0
    clock_row = clock_ptr + pid * (4 * max_depth + 6)
    _stamp(clock_row, 0, PROFILE, True)
    _stamp(clock_row, 1, PROFILE)
    if PER_REQUEST_BUDGET:
        b = tl.minimum(tl.load(budget_ptr + pid), n_max).to(tl.int32)
    else:
        b = zero + budget
    b = tl.maximum(tl.minimum(b, n_max), 0)
    if HOLD == 2:
        held = tl.load(hold_ptr + pid).to(tl.int32)
    else:
        held = zero + HOLD
    lp_row = lp_ptr + pid * s_lb
    ws_int = ws_int_ptr + pid * (2 * n_slots + 2 * n_max + 4 * pool_size)
    ws_flt = ws_flt_ptr + pid * (n_slots + n_max + pool_size)
    cand_key, cand_pk, cand_score = ws_int, ws_int + n_slots, ws_flt
    comp_key, comp_pk, comp_score = ws_int + 2 * n_slots, ws_int + 2 * n_slots + n_max, ws_flt + n_slots
    pool_key = ws_int + 2 * n_slots + 2 * n_max
    pool_pk, pool_depth, node_of = pool_key + pool_size, pool_key + 2 * pool_size, pool_key + 3 * pool_size
    pool_score = ws_flt + n_slots + n_max
    inv = comp_pk  # free once the final nodes are ranked into node_of

    tl.store(pool_score, 0.0)  # the root: pool entry 0, node 0
    tl.store(node_of, zero)
    tl.debug_barrier()

    k_ranks = tl.load(row_end_ptr)  # parent 0's pairs: min(K, N) ranks
    n_nodes = zero - 1  # the tails' build gave up (or did not run)
    if TAILS:
        if b > 0:
            n_nodes = _tail_build(
                lp_row, s_ll, s_lk, b, held, k_ranks, max_depth, pool_size, tl.minimum(n_slots, FS), pool_key,
                pool_pk, pool_score, pool_depth, cand_key, cand_pk, node_of, inv, clock_row, FD, TB, HIST_BINS,
                HIST_SHIFT, FINE_BITS, FS, FR, CHUNK, PROFILE,
            )  # fmt: skip
    if PATHS:
        tl.store(path_ptr + pid, (n_nodes >= 0).to(tl.int32))
    if n_nodes < 0:
        n_nodes = _level_build(
            lp_row, s_ll, s_lk, pairs_ptr, row_end_ptr, b, held, k_ranks, max_depth, n_slots, cand_key, cand_pk,
            cand_score, comp_key, comp_pk, comp_score, pool_key, pool_pk, pool_score, pool_depth, node_of, inv,
            clock_row, CHUNK, PCH, QCH, LOG_BINS, HIST_BINS, HIST_SHIFT, SORT_RANKS, FINE_BITS, SORT_SURVIVORS, SCH,
            FCH, CUT, PROFILE,
        )  # fmt: skip
    tl.debug_barrier()
    _stamp(clock_row, 3 + 4 * max_depth, PROFILE)
    width = n_max + 1
    _write_tree(
        n_nodes, inv, node_of, pool_pk, pool_score, pool_depth, ids_ptr + pid * s_ib, s_il, s_ik,
        tok_out + pid * n_max, par_out + pid * width, dep_out + pid * width, score_out + pid * width,
        rank_out + pid * width, width, WCH,
    )  # fmt: skip
    tl.store(cnt_out + pid, n_nodes.to(tl.int64))
    _stamp(clock_row, 4 + 4 * max_depth, PROFILE)
    _stamp(clock_row, 5 + 4 * max_depth, PROFILE, True)
    let_next_start(PDL)


def clock_slots(max_depth: int) -> int:
    """Stamps per request of a profiled build (`build_tree_from_topk(clock=)`), int64 each: 0 the global
    timer (ns) at the start, 1 the SM's cycle counter there; for each level d < max_depth, cycles at
    2 + 4d after the expand, 3 + 4d after the selection, 4 + 4d after the append, 5 + 4d after the bound;
    then cycles at F = 2 + 4 max_depth after the final selection, F + 1 after its ranks, F + 2 after the
    write, and the global timer at F + 3 (a pool sorted at once, FCH, stamps F before its sort: the
    sort counts as the ranks). Levels the build never reached keep what the buffer held. A tree the build by
    deviations makes (TAILS) stamps 2 after the chain and the start bound, 3 after its levels, 4 after the
    compaction below the bound, 5 after the pop order, clears 9 and stamps F: `phase_times` reads one level."""
    return 4 * max_depth + 6


def build_tree_from_topk(
    topk: DraftTopK,
    budget: int | torch.Tensor,
    max_depth: int,
    max_budget: int,
    hold_chain: bool | torch.Tensor = False,
    *,
    launch: dict | None = None,
    clock: torch.Tensor | None = None,
    paths: torch.Tensor | None = None,
) -> DraftTree:
    """The DDTree trees of a batch, equal field by field to the reference heap.

    budget: an int, or a LongTensor [B] on the top-K's device (clamped to [0, max_budget]).
    hold_chain: a bool, or a BoolTensor [B] on the top-K's device.
    launch: overrides of `_launch_config` (the speed only; LAUNCH_KEYS names them).
    clock: an int64 CUDA tensor [B, clock_slots(max_depth)] that receives each program's phase stamps
    (ddbench.build_tune's phases.csv; `phase_times` reads them).
    paths: an int32 tensor [B] on the top-K's device that receives 1 where the build by deviations (TAILS) made the
    tree, 0 where the level build did.
    Needs log-probs <= 0 sorted best first per depth (draft_topk's output). No host sync.
    """
    log_probs, token_ids = topk.log_probs, topk.token_ids
    _check_inputs(log_probs, token_ids, budget, max_depth, max_budget)
    batch, _, k = log_probs.shape
    device = log_probs.device
    if max_budget == 0:
        return DraftTree.root_only(batch, max_depth, device)
    n = max_budget
    pairs, row_end = _pair_table(n, k, device)
    pool_size = 1 + max_depth * n
    per_request = isinstance(budget, torch.Tensor)
    config = _launch_config(n, pairs.numel(), per_request, launch, max_depth)
    slots = max(pairs.numel(), config["FS"] if config["TAILS"] else 0)  # the candidate lists (P, or the final sort's)
    ws_int = torch.empty((batch, 2 * slots + 2 * n + 4 * pool_size), dtype=torch.int32, device=device)
    ws_flt = torch.empty((batch, slots + n + pool_size), dtype=torch.float32, device=device)
    tree = _alloc_tree(batch, n, max_depth, device)
    budgets = budget.to(device=device, dtype=torch.int64) if per_request else tree.num_nodes
    per_request_hold = isinstance(hold_chain, torch.Tensor)
    holds = hold_chain.to(device) if per_request_hold else tree.num_nodes  # unread unless HOLD == 2
    if batch == 0:
        return tree
    if clock is not None:
        check_clock(clock, batch, clock_slots(max_depth))
    if paths is not None and (paths.shape != (batch,) or paths.dtype != torch.int32 or paths.device != device):
        raise ValueError(f"paths must be an int32 tensor [{batch}] on {device}")
    _build_kernel[(batch,)](
        log_probs, token_ids, budgets, 0 if per_request else int(budget), holds, pairs, row_end, ws_int, ws_flt,
        tree.token_ids, tree.parents, tree.depths, tree.num_nodes, tree.scores, tree.ranks,
        tree.num_nodes if clock is None else clock, tree.num_nodes if paths is None else paths,
        *log_probs.stride(), *token_ids.stride(), max_depth, n, slots, pool_size,
        HOLD=2 if per_request_hold else int(hold_chain), PROFILE=clock is not None, PATHS=paths is not None,
        **config, **pdl_options(device),
    )  # fmt: skip
    return tree


PHASES = ("expand", "select", "append", "bound")  # per level, in stamp order


def phase_times(clock: torch.Tensor, max_depth: int) -> dict[str, float]:
    """Mean microseconds per request of each phase of a profiled build (see clock_slots): 'level{d}.{phase}'
    for the levels every request reached, 'final.select', 'final.rank', 'final.write', and 'total' (the
    global timer). Cycles become time at the rate the global timer measured across each program."""
    final = 2 + 4 * max_depth
    reached = clock[:, 5 : 6 + 4 * (max_depth - 1) : 4] >= clock[:, 1:2]  # each level's last stamp was written
    levels = int(reached.all(dim=0).long().cumprod(0).sum())  # the levels every request reached
    names = [f"level{d}.{phase}" for d in range(levels) for phase in PHASES]
    names += ["final.select", "final.rank", "final.write"]
    columns = [0, 1, *range(2, 2 + 4 * levels), final, final + 1, final + 2, final + 3]
    # the final selection starts after the last level every request reached: it absorbs later levels
    return clock_times(clock[:, columns], names)


LAUNCH_KEYS = (
    "num_warps",
    "LOG_BINS",
    "HIST_BINS",
    "QCH",
    "CHUNK",
    "SORT_RANKS",
    "FINE_BITS",
    "SORT_SURVIVORS",
    "FCH",
    "CUT",
    "TAILS",
    "TB",
    "FS",
    "FR",
)  # the overrides `build_tree_from_topk(launch=)` takes


def _launch_config(n: int, n_pairs: int, per_request: bool, launch: dict | None = None, max_depth: int = 16) -> dict:
    """Block sizes (powers of two) and warps for a width-N build, with `launch`'s overrides.

    Any HIST_BINS (a power of two, 2..65536) gives the same trees: a coarser kept-key histogram only
    loosens the bound of step 4, so more candidates survive to the exact selection. The default, 256
    buckets up to N = 256 and 2048 above, is the fastest of 256 / 2048 / 16384 in every H200 cell of
    results/kernels/h200-2026-11-30/build (at N = 256, batch 1: 36 against 61 us; at N = 1024: 259 against 676).
    6-bit radix digits were at least as fast as 8 in all 8 cells of results/kernels/h200-2026-11-30b/build
    (0.3-11 % faster; 186 against 210 us at batch 1, budget 256 on chain-like drafts).
    Levels and final nodes are ordered by tl.sort (SORT_RANKS) up to N = 1024, by counted ranks above: the
    sort was as fast at budget 16 and faster at 64..1024 in all 16 cells of results/kernels/h200-2026-11-30c
    (batch 1, budget 256: 22.9 against 29.5 us; budget 1024: 124 against 202; chain-like: 132 against 175).
    FINE_BITS 8, SORT_SURVIVORS and FCH = min(512, 4 * PCH), against none of them, on the kernel benchmark's
    drafts (results/kernels/h200-2026-11-30f): 26.9 against 33.3 us at batch 1, budget 256 (FCH 0 / 256 /
    1,024 there: 26.8 / 26.7 / 28.9; FINE_BITS 4 / 6: 27.8 / 25.8); 22.1 against 34.0 at batch 64, budget 64
    (FCH 0 / 128: 24.8 / 24.2; FINE_BITS 6, in another run: 19.9 against 21.7). FINE_BITS 6 since
    results/kernels/h200-2026-11-30h (batch 1, budget 256: 24.6 against 25.5 us, and 24.7 against 25.7 in
    another call, with CUT); CUT on there (25.5 against 26.8 us with FINE_BITS 8 in one call; with 6, 24.7 in
    call 2 against 25.7 with CUT=0 in call 4).
    TAILS is on up to budget 256: in rounds at vocab 152,064 (results/kernels/h200-2026-12-01d call 2, batches 1 and
    64; h200-2026-12-01e call 4, batches 8 and 32) it takes the chain-like drafts (randn x 12) from 105.5 to 83.9 us
    at batch 1, budget 256, 158.0 to 116.1 at 8 x 256, 265.1 to 230.8 at 32 x 256 and 209.4 to 194.9 at 64 x 64, and
    costs the default drafts 0.2-7.7 us (48.1 against 50.2 at batch 1, budget 256; 275.9 against 283.6 at 64 x 256).
    Above 256 it is untimed (its compile for budget 1024 took 3 min 48 s on a CPU), so off. TB (its tiles of heads,
    at least 16 and FD), FS (its final sort; the candidate lists grow to FS) and FR (its start bound's ranks; 16, the
    only value timed: the chain and the start bound took 7.8 us of the 53.5 at batch 1, budget 256 on chain-like
    drafts in results/kernels/h200-2026-12-01c, call 2) shape it.
    """
    launch = _checked(launch) if launch else {}
    hist_bins = launch.pop("HIST_BINS", 256 if n <= 256 else 2048)
    pch = min(1024, max(16, triton.next_power_of_2(n)))
    if launch.get("SORT_RANKS") and n > pch:
        raise ValueError(f"SORT_RANKS needs N <= 1024 (one block of ranks), got N = {n}")
    config = {
        "PER_REQUEST_BUDGET": per_request,
        "CHUNK": min(1024, max(16, triton.next_power_of_2(n_pairs))),
        "PCH": pch,
        "QCH": min(pch, max(8, 8192 // pch)),
        "WCH": min(1024, max(16, triton.next_power_of_2(n + 1))),
        "LOG_BINS": 6,
        "HIST_BINS": hist_bins,
        "HIST_SHIFT": 31 - (hist_bins.bit_length() - 1),  # keys < 2**31: bucket = key >> HIST_SHIFT
        "num_warps": 4 if n <= 128 else 8,
        "SORT_RANKS": n <= pch,
        "FINE_BITS": 6,
        "SORT_SURVIVORS": True,
        "SCH": min(1024, 2 * pch),
        "FCH": min(512, 4 * pch),
        "CUT": True,
        "TAILS": n <= 256,  # on up to the largest budget timed (results/kernels/h200-2026-12-01d)
        "FD": triton.next_power_of_2(max_depth),
        "TB": 1024,
        "FS": min(1024, 2 * pch),
        "FR": 16,
    } | launch
    config["TB"] = max(config["TB"], config["FD"], 16)  # a tile holds a row of 16 ranks, or of FD depths
    config["TAILS"] = config["TAILS"] and max_depth <= 64  # deeper: thin tiles of heads
    return config


def _checked(launch: dict) -> dict:
    """A copy of `launch`, refused (ValueError) unless every key is a LAUNCH_KEYS one with a valid value."""
    unknown = set(launch) - set(LAUNCH_KEYS)
    if unknown:
        raise ValueError(f"unknown launch keys {sorted(unknown)}; known: {', '.join(LAUNCH_KEYS)}")
    limits = {"HIST_BINS": 65536, "QCH": 16384, "CHUNK": 16384, "TB": 16384, "FS": 4096, "FR": 16}
    for key in ("SORT_RANKS", "SORT_SURVIVORS", "CUT", "TAILS"):
        if not isinstance(launch.get(key, False), bool):
            raise ValueError(f"{key} must be a bool, got {launch[key]!r}")
    fine_bits = launch.get("FINE_BITS", 0)
    if isinstance(fine_bits, bool) or not isinstance(fine_bits, int) or not 0 <= fine_bits <= 8:
        raise ValueError(f"FINE_BITS must be an int in [0, 8], got {fine_bits!r}")
    fch = launch.get("FCH", 0)
    if isinstance(fch, bool) or not isinstance(fch, int) or fch < 0 or fch & (fch - 1) or fch > 4096:
        raise ValueError(f"FCH must be 0 or a power of two up to 4096, got {fch!r}")
    for key, most in limits.items():
        value = launch.get(key, 16)
        if isinstance(value, bool) or not isinstance(value, int) or value < 2 or value & (value - 1) or value > most:
            raise ValueError(f"{key} must be a power of two in [2, {most}], got {value!r}")
    return dict(launch)


def _check_inputs(
    log_probs: torch.Tensor,
    token_ids: torch.Tensor,
    budget: int | torch.Tensor,
    max_depth: int,
    max_budget: int,
) -> None:
    if log_probs.dim() != 3 or log_probs.dtype != torch.float32:
        raise ValueError(f"log_probs must be float32 [B, L, K], got {log_probs.dtype} {tuple(log_probs.shape)}")
    if token_ids.shape != log_probs.shape or token_ids.dtype != torch.int64 or token_ids.device != log_probs.device:
        raise ValueError("token_ids must be int64 with the shape and device of log_probs")
    if not 1 <= max_depth <= log_probs.shape[1]:
        raise ValueError(f"max_depth must be in [1, {log_probs.shape[1]}], got {max_depth}")
    if max_budget < 0 or 1 + max_depth * max_budget >= _PACK_LIMIT:
        raise ValueError(f"impl='triton' needs 1 + max_depth * max_budget < {_PACK_LIMIT}, got {max_budget}")
    if isinstance(budget, torch.Tensor) and (budget.dim() != 1 or budget.shape[0] != log_probs.shape[0]):
        raise ValueError(f"a tensor budget must be [{log_probs.shape[0]}], got {tuple(budget.shape)}")


_PAIR_TABLES: dict[tuple[int, int, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}


def _pair_table(n: int, k: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The static candidate pairs of width N and top-K width k, cached per device.

    Built with device ops only, so a first call inside a CUDA-graph capture records the build in the
    graph instead of caching a table that capture never filled.
    """
    key = (n, k, device)
    if key in _PAIR_TABLES:
        return _PAIR_TABLES[key]
    width = min(k, n)
    rows = torch.arange(n, device=device)
    lengths = torch.clamp(n // (rows + 1), max=width)
    row_end = torch.cumsum(lengths, 0)
    size = sum(min(width, n // (i + 1)) for i in range(n))
    j = torch.arange(size, device=device)
    row = torch.searchsorted(row_end, j, right=True)
    pairs = (row << 16) | (j - row_end[row] + lengths[row])
    table = (pairs.to(torch.int32), row_end.to(torch.int32))
    if not (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
        _PAIR_TABLES[key] = table
    return table


def _alloc_tree(batch: int, n: int, max_depth: int, device: torch.device) -> DraftTree:
    def empty(width: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.empty((batch, width), dtype=dtype, device=device)

    return DraftTree(
        token_ids=empty(n),
        parents=empty(n + 1),
        depths=empty(n + 1),
        num_nodes=torch.empty(batch, dtype=torch.int64, device=device),
        scores=empty(n + 1, torch.float32),
        ranks=empty(n + 1),
        max_depth=max_depth,
    )

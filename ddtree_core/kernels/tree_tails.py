"""The build by deviations of the Triton tree build (tree_build.py), tried before the level build (tree_levels.py).

The build by deviations (TAILS, a launch key, on by default up to budget 256; `_tail_build`). A deep tree is mostly
chains of rank-0 steps: every node is a head (the root, or a child of rank >= 1) followed by t >= 0 steps of rank 0,
and on chain-like drafts a node has few heads above it (a few levels of deviations), while the level build takes one
level per depth. So TAILS takes levels of deviations: level 0 is the chain; level k + 1 is every child of rank >= 1
of a level-k node below the bound (a prefix of each parent's ranks, `_tail_heads`), each with its chain of rank 0
down to where the key reaches the bound (`_tail_chains`; keys never decrease down a path). A level of more parents
than the heads' tile holds (TB / 16) first lists those whose rank-1 child lies below the bound, and steps over them
only. Every node of key below the bound is found once (its ancestors have smaller or equal keys, so they were found,
and were parents, before it). The bound starts at the tighter of two (each below b distinct real nodes): the depth-1
node of rank b - 1's key + 1, and the kept-key bound (tree_bound.py; the level build's step 4) over the chain and
its one-deviation nodes of rank < FR (16 by default) with their chains (`_deviation_keys`: FD x FR x FD keys, 4,096
for FD = 16; any FR gives a valid bound, a smaller one a looser one); after each level it is that bound over every
node found. The final nodes are then the b first of all nodes below the bound in pop order, (key, depth, position in
the level), a position being the level's order by (key, parent's position, rank): one sort by (key, depth, entry)
when no two of the first b + 1 share key and depth, else passes that order each (key, depth) group by (the parent's
place in the last order, rank) until the order stands still (`_pop_order`; bf16 drafts tie often). A group of rank-0
nodes whose parents share one group is in its parents' order, so its members are placed by their anchors (the first
ancestor up such groups) and a pass fixes them as soon as their anchors are fixed; groups of at most GS members are
ordered by counts, larger ones by a sort. Scores are the level build's float32 sums, one depth at a time. The level
build takes over when the drafts are wide (the chain's deepest node scores below the depth-1 node of rank b - 1) or
when the nodes below the bound outgrow the pool or the final sort. Above budget 256 TAILS is off by default.

Worked example (tree.py's: K = 2, budget 4, log-probs a -0.1 b -2.5 | c -0.2 d -1.9; keys order like -score):

    level 0, the chain:  a -0.1, a.c -0.3
    start bound:         over the chain and its one-deviation nodes a.d -2.0, b -2.5, b.c -2.7: 4 keys reach
                         b's, so the bound lies between b's key and b.c's
    level 1:             heads below it b (the root's rank 1), a.d (a's rank 1); b's chain b.c lies beyond it
    pop order (key, depth, position): a, a.c, a.d, b -> nodes 1, 2, 3, 4 (the level build's tree)
"""

from __future__ import annotations

import triton
import triton.language as tl

from ddtree_core.kernels.clock import stamp as _stamp
from ddtree_core.kernels.tree_bound import (
    _I32_MAX,
    _compact_below,
    _crossing,
    _fine_count,
    _kept_bound,
    _key_bound,
    _node_key,
    _pool_store,
    _score_key,
    _sort_pairs,
    _split_bound,
)

GS = tl.constexpr(16)  # the pop order: tie groups of at most GS members are ordered by counts, not sorts


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
        _pool_store(
            pos, tl.reshape(key, [TB]), parent << 16, tl.reshape(scores, [TB]),
            tl.reshape(depth[:, None] + 1 + cols, [TB]), kept, pool_key, pool_pk, pool_score, pool_depth,
        )  # fmt: skip
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
    """TAILS: the tree by deviations (the module docstring); writes node_of and inv and returns the number of
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

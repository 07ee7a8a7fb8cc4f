"""Triton top-K of draft logits for many long rows: group maxima first, then a small exact selection.

The twin of `batched.draft_topk` (same contract, same outputs), built for large batches (rows x vocabulary
of 10**8 and more), where keeping a per-row list as the logits stream by costs several reads' worth of
time. The logits are read once in full and then only where the winners can be.

Contract (tree.py): tokens ranked by logit / draft_temperature in float32, equal values smaller token id
first, K of them best first; log-probs are those values minus the row's logsumexp. Values are ranked by
topk_lists.py's int32 order key (-0.0 equal to 0.0, NaN below -inf); a token is the int64 entry
key << 32 | (2**31 - 1 - id), so entries order like (value desc, id asc).

Kernel 1, one program per (row, vocabulary chunk), streams its chunk and writes, for every group of G
consecutive tokens, the group's largest key (int32, in group order: a group's index is its place) and,
per chunk, the (max, exp-sum) pair of the logsumexp. It keeps no other state (no list, no branch on the
values): a straight read of the logits. After its tiles it reads its group keys back once and writes, for
every super-group of S consecutive groups, the largest of them. Its loads of the logits are marked
evict_first: at 64 requests the stream (311 MB) is six times the L2 and, unmarked, pushed out what the kernels
after it read (the build's code and scratch).
Kernel 2, one program per row:
  - selects the K best groups by (group max desc, group index asc) and writes their indices in group
    order over the front of the keys, finding tau, the smallest chosen group max: with more than K
    super-groups, a radix selection (topk._select_top) of the K best super-groups, then of the K best
    among their K * S groups; else one radix selection over all V / G group keys;
  - reads the chosen groups again (K * G tokens, in id order) and keeps the tokens whose key reaches
    the floor, at first tau, in a list that shrinks to its K best when it outgrows `soft`
    (topk._shrink, which raises the floor);
  - selects the K best of the list, merges the chunks' (max, exp-sum) pairs and writes the K winners
    best first (topk._write_ranked).
Kernel 3 (`_emit_kernel`, between them, on by default only for few rows and K >= 128: `_emit_pays`), one
program per (row, tile), gives each tile a floor, the EMIT-th best of its group keys (two sorts of them), and
its candidates, every token that reaches the floor, read back from the groups whose key reaches it. Kernel 2
then first tries their union (`_union_best`): it takes the K best of the candidates, and keeps them when every
tile's floor lies at or below the K-th best's key (a token left out lies below its tile's floor, so strictly
below the K-th); else, or when a tile had more candidates than its slots or the union fewer than K, it takes
the groups' way above. With EMIT about K / tiles + 5 sqrt(K / tiles) (`_emit_need`) the union settles nearly
every row of iid logits, and the row's selection is one radix selection over about (EMIT + 1) x tiles
candidates instead of two over group keys, a read-back, and one over the tokens read back.
G near sqrt(V / K) balances two costs of kernel 2: V / G group keys to select from, K * G tokens to
read back (G = 64 for V = 152064 and K = 64); S near sqrt(V / G / K) balances the next two: V / G / S
super-group keys, K * S group keys (S = 8 there).

The K best super-groups hold the K best groups for the reason the K best groups hold the K best tokens
(below, one level up: a super-group's key is its best group's, and super-groups, like groups, are
contiguous and ordered by index).

Why the K best groups hold the K best tokens: let token e of group h not be among the chosen groups.
Every chosen group j beats h: its max is larger than h's, or equal with j < h. Its best token beats e:
it is larger than e, or equal to e's value and (group j lies before group h) of a smaller id. These
are K distinct tokens, so e is not among the K best. Each chosen group's best token reaches tau, so
the K-th best value does too, and dropping tokens below tau keeps every winner.

Worked example, K = 2, G = 2, logits of ids 0..7: 1 3 | 3 0 | 2 3 | 5 1:
    group maxima 3 3 3 5: the best two are group 3 (5) and group 0 (3, index 0 before 1 and 2); tau = 3
    read back ids 0 1 6 7, keep keys >= tau: id 1 (3.0), id 6 (5.0)
    ranked: id 6 (5.0), id 1 (3.0); ids 2 and 5, also 3.0, lose to id 1 as in the reference.

Exactness: ids equal the reference's for every input, ties, -inf and NaN included (the argument above;
the list keeps id order, as topk_lists.py's selection helpers need). Kernel 1 takes a group's maximum as a
float maximum that ignores NaN (maxnum on the GPU, numpy's nanmax under the interpreter; padding lanes
are NaN), which is NaN only for a group of NaN: the key of that maximum is the group's largest key.
Log-probs differ from the reference only by the rounding of the logsumexp (on the GPU its exps are
ex2.approx.ftz; tests/test_kernels_topk_radix.py states the tolerance).

Scaling: as the reference (logits.float() / draft_temperature: a float32 division on the CPU, a multiply by
the float32 reciprocal on CUDA), in both kernels, so that values are bit-equal and ties stay ties.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
import triton
import triton.language as tl

from ddtree_core.kernels.clock import check_clock, phase_times, stamp
from ddtree_core.kernels.pdl import interpreted, let_next_start, wait_for_inputs
from ddtree_core.kernels.pdl import options as pdl_options
from ddtree_core.kernels.topk_lists import (
    _FLT_MAX,
    _NINF_KEY,
    _chunks_logsumexp,
    _entry,
    _keep_top,
    _key_value,
    _order_key,
    _shrink,
    _write_best,
    _write_ranked,
    check_k,
    rows_and_outputs,
)
from ddtree_core.types import DraftTopK

SELECT_PHASES = ("logsumexp", "compact", "union", "supers", "groups", "gather", "select", "rank")  # in stamp order
SELECT_SLOTS = len(SELECT_PHASES) + 3  # the stamps of one row (clock.phase_times)
_SELECT_SLOTS = tl.constexpr(SELECT_SLOTS)
MAX_K = 1024  # larger k takes the torch path (batched.draft_topk), which gives the same result
_TILE = 2048  # default logits per tile of kernel 1
_BLOCK = 1024  # at most this many tokens read back, or group keys held, per step of kernel 2
_GATHER_FEW = 8192  # tokens read back per step while there are fewer than 4 rows per SM
_PAD_KEY = tl.constexpr(-2147483648)  # key of no token (padding lanes): below NaN's key
_TOP_ENTRY = tl.constexpr(9223372036854775807)  # above every entry: a masked lane of a minimum
_STREAM = tl.constexpr("evict_first")  # the scan's loads of the logits: read once, the first lines the L2 gives up


@triton.jit
def _scale(x, scale, DIVIDE: tl.constexpr):
    """x / draft_temperature as torch computes it on the device (see Scaling)."""
    if DIVIDE:
        return x / scale
    else:
        return x * scale


@triton.jit
def _exp(y, FAST: tl.constexpr):
    """exp(y); FAST (CUDA): one ex2.approx.ftz, whose denormal results flush to 0 (nothing in an exp-sum
    that holds exp(0) = 1)."""
    if FAST:
        return tl.inline_asm_elementwise(
            "ex2.approx.ftz.f32 $0, $1;", "=f,f", [y * 1.4426950408889634], dtype=tl.float32, is_pure=True, pack=1
        )
    else:
        return tl.exp(y)


@triton.jit
def _scan_tile(
    raw, valid, m, s, scale,
    GT: tl.constexpr, G: tl.constexpr, DIVIDE: tl.constexpr, FAST: tl.constexpr, MASKED: tl.constexpr,
):  # fmt: skip
    """One tile of GT * G logits (masked lanes NaN): the group maxima [GT] as keys of scaled values, and
    the running (max m, exp-sum s) of each group slot [GT] (per slot: no step reduces across warps).

    tl.max of floats ignores NaN (NaN only for a group of NaN) and scaling by a positive number is
    monotone (NaN stays NaN, -0.0 and 0.0 stay equal), so the key of the scaled float maximum is the
    largest key of the group's scaled values: only the maxima are scaled and keyed."""
    x = tl.reshape(raw, [GT, G]).to(tl.float32)
    group_max = _order_key(_scale(tl.max(x, 1), scale, DIVIDE))
    new_m = tl.maximum(m, _key_value(tl.maximum(group_max, _NINF_KEY)))
    term = _exp(_scale(x, scale, DIVIDE) - new_m[:, None], FAST)
    if MASKED:
        term = tl.where(tl.reshape(valid, [GT, G]), term, 0.0)
    s = s * _exp(m - new_m, FAST) + tl.sum(term, 1)
    return group_max, new_m, s


@triton.jit(do_not_specialize=["vocab", "n_groups", "n_tiles"])
def _emit_kernel(
    logits_ptr,  # [R, V] as for _scan_kernel
    row_stride,  # elements between rows
    vocab,  # V
    scale,  # as for _scan_kernel
    group_ptr,  # [R, n_groups] int32: _scan_kernel's group keys
    n_groups,  # cdiv(V, G)
    seg_ptr,  # [R, n_tiles, CAP] int64 out: each tile's candidates, in id order
    count_ptr,  # [R, n_tiles] int32 out: each tile's candidate count (beyond CAP: not all stored)
    floor_ptr,  # [R, n_tiles] int32 out: each tile's floor (its candidates: every token that reaches it)
    n_tiles,  # cdiv(V, TILE)
    TILE: tl.constexpr,  # logits per tile (a power of two, a multiple of G)
    G: tl.constexpr,  # tokens per group
    EMIT: tl.constexpr,  # the floor's rank among the tile's group keys
    NG: tl.constexpr,  # next_pow2(EMIT): the most groups read back
    CAP: tl.constexpr,  # candidate slots per tile
    DIVIDE: tl.constexpr,  # as for _scan_kernel
    PDL: tl.constexpr = False,  # as for _scan_kernel
):
    """One (row, tile): the tile's floor and its candidates, every token whose key reaches the floor.

    The floor is the EMIT-th largest of the tile's group keys (a short last tile: the worst of its groups when
    it has fewer), one above it when more than NG groups reach it (ties): a floor only decides which tokens
    are candidates, and `_union_best` checks that it lies low enough. The candidates all lie in the groups
    whose key reaches the floor, at most NG of them, read back as [NG, G] in group order (so the candidates
    come in id order): two sorts of the tile's group keys, no per-token work on the rest of the tile."""
    wait_for_inputs(PDL)
    row = tl.program_id(0)
    tile = tl.program_id(1)
    GT: tl.constexpr = TILE // G
    local = tl.arange(0, GT)
    inside = tile * GT + local < n_groups
    group_max = tl.load(group_ptr + row.to(tl.int64) * n_groups + tile * GT + local, mask=inside, other=_PAD_KEY)
    need = tl.minimum(n_groups - tile * GT, EMIT)
    floor = tl.max(tl.where(local == need - 1, tl.sort(group_max, descending=True), _PAD_KEY), 0)
    floor += (tl.sum((group_max >= floor).to(tl.int32), 0) > NG).to(tl.int32)
    flag = inside & (group_max >= floor)
    order = tl.sort(tl.where(flag, local, local + GT))  # the flagged groups first, in group order
    first = tl.sum(tl.where(tl.arange(0, GT // NG)[:, None] == 0, tl.reshape(order, [GT // NG, NG]), 0), 0)
    ids = (tile * GT + first)[:, None] * G + tl.arange(0, G)[None, :]
    valid = (first < GT)[:, None] & (ids < vocab)
    raw = tl.load(logits_ptr + row.to(tl.int64) * row_stride + ids, mask=valid, other=0.0)
    key = _order_key(_scale(raw.to(tl.float32), scale, DIVIDE))
    live = tl.reshape((valid & (key >= floor)).to(tl.int32), [NG * G])
    place = tl.cumsum(live, 0) - 1
    slot = row.to(tl.int64) * n_tiles + tile
    tl.store(seg_ptr + slot * CAP + place, tl.reshape(_entry(key, ids), [NG * G]), mask=(live == 1) & (place < CAP))
    tl.store(count_ptr + slot, tl.sum(live, 0))
    tl.store(floor_ptr + slot, floor)
    let_next_start(PDL)


@triton.jit
def _super_keys(groups, n, supers, S: tl.constexpr, SB: tl.constexpr):
    """supers[j] = the largest of the group keys groups[j * S : (j + 1) * S] that lie below n, SB per step."""
    offs = tl.arange(0, SB)
    j0 = n * 0
    while j0 * S < n:
        j = j0 + offs
        group = j[:, None] * S + tl.arange(0, S)[None, :]
        key = tl.load(groups + group, mask=group < n, other=_PAD_KEY)
        tl.store(supers + j, tl.max(key, 1), mask=j * S < n)
        j0 += SB


@triton.jit(do_not_specialize=["vocab", "n_groups"])
def _scan_kernel(
    logits_ptr,  # [R, V] bf16/fp16/fp32, unit stride along V
    row_stride,  # elements between rows
    vocab,  # V
    chunk_len,  # logits per chunk (a multiple of TILE); program (r, c) scans [c * chunk_len, ...)
    scale,  # float32: draft_temperature (DIVIDE) or its float32 reciprocal
    group_ptr,  # [R, n_groups] int32 out: every group's largest key, in group order
    n_groups,  # cdiv(V, G)
    super_ptr,  # [R, n_supers] int32 out (S > 1): every super-group's largest key, in order
    n_supers,  # cdiv(n_groups, S)
    stat_ptr,  # [R, chunks, 2] float32 out: each chunk's (max, sum of exp(x - max))
    TILE: tl.constexpr,  # logits per tile (a power of two, a multiple of G * S: chunks hold whole super-groups)
    G: tl.constexpr,  # tokens per group (a power of two)
    S: tl.constexpr,  # groups per super-group (a power of two; 1: none)
    DIVIDE: tl.constexpr,  # scale by division (torch on the CPU), else by the reciprocal (CUDA)
    FAST: tl.constexpr,  # exp by ex2.approx.ftz (CUDA), else tl.exp
    SB: tl.constexpr = 128,  # super-group keys per step of the chunk's super-group pass
    PDL: tl.constexpr = False,  # launched with programmatic dependent launch (pdl.py)
):
    """Kernel 1's work for one (row, chunk): the chunk's group and super-group keys and its (max, exp-sum)
    pair."""
    wait_for_inputs(PDL)
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    GT: tl.constexpr = TILE // G
    start = chunk * chunk_len
    length = tl.minimum(chunk_len, vocab - start)
    src = logits_ptr + row.to(tl.int64) * row_stride + start
    first_group = start // G
    dst = group_ptr + row.to(tl.int64) * n_groups + first_group
    offs = tl.arange(0, TILE)
    slots = tl.arange(0, GT)
    s = tl.zeros([GT], dtype=tl.float32)
    m = s - _FLT_MAX  # a finite start: exp(x - m) is 0, not NaN, for x = -inf
    full = length // TILE
    raw = tl.load(src + offs, mask=offs < length, other=0.0, eviction_policy=_STREAM)
    t = row * 0
    while t < full:
        # the next tile, in flight meanwhile
        ahead = tl.load(src + tl.minimum(t + 1, full - 1) * TILE + offs, eviction_policy=_STREAM)
        group_max, m, s = _scan_tile(raw, offs < TILE, m, s, scale, GT, G, DIVIDE, FAST, False)
        tl.store(dst + t * GT + slots, group_max)
        raw = ahead
        t += 1
    tail = full * TILE
    if tail < length:
        raw = tl.load(src + tail + offs, mask=tail + offs < length, other=float("nan"), eviction_policy=_STREAM)
        group_max, m, s = _scan_tile(raw, tail + offs < length, m, s, scale, GT, G, DIVIDE, FAST, True)
        slot = full * GT + slots
        tl.store(dst + slot, group_max, mask=slot * G < length)
    if S > 1:  # the chunk's super-group keys from its group keys, read back once (a chunk holds whole super-groups)
        tl.debug_barrier()  # the group keys stored above are visible to every thread of the program
        _super_keys(dst, tl.cdiv(length, G), super_ptr + row.to(tl.int64) * n_supers + first_group // S, S, SB)
    program = row * tl.num_programs(1) + chunk
    chunk_max = tl.max(m, 0)
    tl.store(stat_ptr + program * 2, chunk_max)
    tl.store(stat_ptr + program * 2 + 1, tl.sum(s * tl.exp(m - chunk_max), 0))
    let_next_start(PDL)


@triton.jit(do_not_specialize=["vocab", "n_groups", "chunks", "k", "soft", "cand_stride", "n_tiles"])
def _select_kernel(
    logits_ptr,  # [R, V] as for _scan_kernel
    row_stride,  # elements between rows
    vocab,  # V
    scale,  # as for _scan_kernel
    group_ptr,  # [R, n_groups] int32: _scan_kernel's group keys; the chosen K's indices go to the front
    n_groups,  # cdiv(V, G)
    super_ptr,  # [R, n_supers] int32: _scan_kernel's super-group keys (S > 1); the chosen K's go to the front
    n_supers,  # cdiv(n_groups, S)
    list_ptr,  # [R, K * S] int32 scratch (S > 1): the group keys of the chosen super-groups
    stat_ptr,  # [R, chunks, 2] float32: _scan_kernel's chunk pairs
    chunks,  # chunks per row
    k,  # K <= V
    soft,  # the token list shrinks to K when longer than this (>= 2K)
    cand_ptr,  # [R, cand_stride] int64 scratch: the kept tokens' entries, in id order
    cand_stride,  # soft + GATHER, or n_tiles * CAP if larger (EMIT)
    lp_out,  # [R, K] float32: log-probs, best first
    ids_out,  # [R, K] int64: token ids, best first
    clock_ptr,  # [R, SELECT_SLOTS] int64: phase stamps (written when PROFILE)
    seg_ptr,  # [R, n_tiles, CAP] int64 (EMIT): _emit_kernel's tile candidates
    count_ptr,  # [R, n_tiles] int32 (EMIT): their counts
    floor_ptr,  # [R, n_tiles] int32 (EMIT): the tiles' floors
    n_tiles,  # tiles per row (EMIT)
    settled_ptr,  # [R] int32 out (EMIT): 1 where the union settled the row, 0 where the groups did
    G: tl.constexpr,  # tokens per group
    S: tl.constexpr,  # groups per super-group (1: none)
    GATHER: tl.constexpr,  # tokens read back per step (a power of two)
    CP: tl.constexpr,  # next_pow2(chunks)
    GBLOCK: tl.constexpr,  # group entries per block of the group selection (the first block stays in registers)
    SBLOCK: tl.constexpr,  # super-group keys per block of the super-group selection
    LBLOCK: tl.constexpr,  # group keys per block of the selection among the chosen super-groups' groups
    CBLOCK: tl.constexpr,  # token entries per block of the token selection (next_pow2(soft))
    LOG_BINS: tl.constexpr,  # radix digit bits
    KP: tl.constexpr,  # next_pow2(K)
    DIVIDE: tl.constexpr,  # as for _scan_kernel
    TILED: tl.constexpr = False,  # read back [GATHER / G, G] tiles of whole groups (_gather_tiles; GATHER >= G)
    PROFILE: tl.constexpr = False,  # stamp the phases into clock_ptr (CUDA only; see SELECT_PHASES)
    EMIT: tl.constexpr = False,  # first try the union of the tiles' candidates (_union_best)
    CAP: tl.constexpr = 1,  # candidate slots per tile (EMIT)
    TP: tl.constexpr = 1,  # next_pow2(n_tiles) (EMIT)
    TB: tl.constexpr = 1,  # tiles per step of the union's compaction (EMIT)
    UBLOCK: tl.constexpr = 1,  # entries per block of the union's selection (EMIT)
    PDL: tl.constexpr = False,  # as for _scan_kernel
):
    """Kernel 2's work for one row (see the module docstring)."""
    wait_for_inputs(PDL)
    row = tl.program_id(0)
    clock_row = clock_ptr + row * _SELECT_SLOTS
    stamp(clock_row, 0, PROFILE, True)
    stamp(clock_row, 1, PROFILE)
    lse = _chunks_logsumexp(stat_ptr + row * chunks * 2, chunks, CP)
    stamp(clock_row, 2, PROFILE)
    cand = cand_ptr + row.to(tl.int64) * cand_stride
    done = 0
    if EMIT:
        tiles = row.to(tl.int64) * n_tiles
        done = _union_best(seg_ptr + tiles * CAP, count_ptr + tiles, floor_ptr + tiles, n_tiles, k, cand, lse,
                           lp_out + row * k, ids_out + row * k, CAP, TP, TB, UBLOCK, LOG_BINS, KP, clock_row,
                           PROFILE)  # fmt: skip
        tl.store(settled_ptr + row, done)
    else:
        stamp(clock_row, 3, PROFILE)
    if done == 0:  # the groups' way: the K best groups, their tokens read back, the K best of those
        stamp(clock_row, 4, PROFILE)
        groups = group_ptr + row.to(tl.int64) * n_groups
        floor = row * 0 + _PAD_KEY  # with at most K groups every token is a candidate
        chose = n_groups > k
        if chose:
            if (S > 1) & (n_supers > k):
                floor = _choose_by_supers(groups, n_groups, super_ptr + row.to(tl.int64) * n_supers, n_supers,
                                          list_ptr + row.to(tl.int64) * k * S, k, S, SBLOCK, LBLOCK, LOG_BINS,
                                          clock_row, PROFILE)  # fmt: skip
            else:
                stamp(clock_row, 5, PROFILE)  # no super-groups
                _, floor = _keep_top(groups, n_groups, k, GBLOCK, LOG_BINS, KEYS=True)  # floor = tau
            tl.debug_barrier()
        else:
            stamp(clock_row, 5, PROFILE)
        stamp(clock_row, 6, PROFILE)
        total = tl.minimum(n_groups, k) * G  # tokens of the chosen groups
        src = logits_ptr + row.to(tl.int64) * row_stride
        n = row * 0
        if TILED:  # [GATHER / G chosen groups, G tokens] per step
            n = _gather_tiles(src, vocab, scale, groups, chose, total // G, floor, cand, n, k, soft, G, GATHER // G,
                              CBLOCK, LOG_BINS, DIVIDE)  # fmt: skip
        else:
            offs = tl.arange(0, GATHER)
            b0 = row * 0
            while b0 < total:
                inside = b0 + offs < total
                slot = (b0 + offs) // G  # the slot-th chosen group (every group when none were chosen)
                group = tl.where(chose, tl.load(groups + slot, mask=inside & chose, other=0), slot)
                ids = group * G + (b0 + offs) % G
                valid = inside & (ids < vocab)
                key = _order_key(_scale(tl.load(src + ids, mask=valid, other=0.0).to(tl.float32), scale, DIVIDE))
                live = valid & (key >= floor)
                tl.store(cand + n + tl.cumsum(live.to(tl.int32), 0) - 1, _entry(key, ids), mask=live)
                n += tl.sum(live.to(tl.int32), 0)
                if n > soft:
                    n, floor = _shrink(cand, n, k, floor, CBLOCK, LOG_BINS)
                b0 += GATHER
        tl.debug_barrier()
        stamp(clock_row, 7, PROFILE)
        _write_best(cand, n, k, lse, lp_out + row * k, ids_out + row * k, CBLOCK, LOG_BINS, KP,  # one block
                    clock_row, 8 if PROFILE else -1)  # fmt: skip
    stamp(clock_row, 9, PROFILE)
    stamp(clock_row, 10, PROFILE, True)
    let_next_start(PDL)


@triton.jit
def _union_best(
    seg, counts, floors, n_tiles, k, cand, lse, lp_row, ids_row, CAP: tl.constexpr, TP: tl.constexpr,
    TB: tl.constexpr, UBLOCK: tl.constexpr, LOG_BINS: tl.constexpr, KP: tl.constexpr, clock_row,
    PROFILE: tl.constexpr,
):  # fmt: skip
    """The row's K best from its tiles' candidates, when they are sure to hold them: returns 1 after writing
    them (best first), 0 (nothing written) when a tile stored fewer candidates than it had (more than CAP),
    when there are fewer than K, or when a tile's floor lies above the K-th best candidate's key. Stamps the
    "compact" phase (clock_row, PROFILE) once the candidates are in `cand`; when it writes them, the "union"
    phase (and the groups' phases, empty) before its ranking, which is the "rank" phase.

    The candidates, compacted into `cand` tile after tile (so in id order), are every token that reaches its
    tile's floor; a token left out lies below its tile's floor, so below every floor's maximum. When that
    maximum is at most the K-th best candidate's key, every token left out lies strictly below the K-th best
    candidate, and the candidates' K best (equal keys in id order) are the row's."""
    t = tl.arange(0, TP)
    count = tl.load(counts + t, mask=t < n_tiles, other=0)
    highest = tl.max(tl.load(floors + t, mask=t < n_tiles, other=_PAD_KEY), 0)
    total = tl.sum(count, 0)
    done = ((tl.max(count, 0) <= CAP) & (total >= k)).to(tl.int32)
    if done == 1:
        rows = tl.arange(0, TB)
        cols = tl.arange(0, CAP)
        placed = total * 0
        t0 = total * 0
        while t0 < n_tiles:
            tile = t0 + rows
            n = tl.load(counts + tile, mask=tile < n_tiles, other=0)
            first = placed + tl.cumsum(n, 0) - n
            inside = cols[None, :] < n[:, None]
            entry = tl.load(seg + tile[:, None] * CAP + cols[None, :], mask=inside, other=0)
            tl.store(cand + first[:, None] + cols[None, :], entry, mask=inside)
            placed += tl.sum(n, 0)
            t0 += TB
        tl.debug_barrier()
    stamp(clock_row, 3, PROFILE)
    if done == 1:
        if total > k:
            _, kth = _keep_top(cand, total, k, UBLOCK, LOG_BINS)
            tl.debug_barrier()
        else:
            p = tl.arange(0, KP)
            kth = tl.min(tl.load(cand + p, mask=p < k, other=_TOP_ENTRY) >> 32, 0).to(tl.int32)
        done = (highest <= kth).to(tl.int32)
        if done == 1:
            for slot in tl.static_range(4, 9):  # the "union" phase ends; the groups' phases take no time
                stamp(clock_row, slot, PROFILE)
            _write_ranked(cand, k, lse, lp_row, ids_row, KP)
    return done


@triton.jit
def _gather_tiles(
    src, vocab, scale, groups, chose, n_chosen, floor, cand, n, k, soft, G: tl.constexpr, GR: tl.constexpr,
    CBLOCK: tl.constexpr, LOG_BINS: tl.constexpr, DIVIDE: tl.constexpr,
):  # fmt: skip
    """Kernel 2's read-back as [GR, G] tiles: GR chosen groups per step (every group when none were chosen),
    each group's index loaded once and its G tokens as one contiguous row. The kept tokens are appended in
    id order as the flat read-back appends them (a row's place from the rows before it, then within the
    row), so the list is the same; returns its length."""
    rows = tl.arange(0, GR)
    cols = tl.arange(0, G)
    r0 = n_chosen * 0
    while r0 < n_chosen:
        slot = r0 + rows
        inside = slot < n_chosen
        group = tl.where(chose, tl.load(groups + slot, mask=inside & chose, other=0), slot)
        ids = group[:, None] * G + cols[None, :]
        valid = inside[:, None] & (ids < vocab)
        key = _order_key(_scale(tl.load(src + ids, mask=valid, other=0.0).to(tl.float32), scale, DIVIDE))
        live = (valid & (key >= floor)).to(tl.int32)
        count = tl.sum(live, 1)
        place = n + (tl.cumsum(count, 0) - count)[:, None] + tl.cumsum(live, 1) - 1
        tl.store(cand + place, _entry(key, ids), mask=live == 1)
        n += tl.sum(count, 0)
        if n > soft:
            n, floor = _shrink(cand, n, k, floor, CBLOCK, LOG_BINS)
        r0 += GR
    return n


@triton.jit
def _choose_by_supers(
    groups, n_groups, supers, n_supers, keys, k, S: tl.constexpr, SBLOCK: tl.constexpr, LBLOCK: tl.constexpr,
    LOG_BINS: tl.constexpr, clock_row, PROFILE: tl.constexpr,
):  # fmt: skip
    """The K best groups by way of the K best super-groups (n_supers > K), which hold them (the module
    docstring's argument, one level up): their indices, in group order, over the front of `groups`;
    returns tau, the smallest chosen group key. `keys` [K * S] is scratch. Stamps the "supers" phase
    (clock_row, PROFILE) once the K best super-groups are chosen."""
    _keep_top(supers, n_supers, k, SBLOCK, LOG_BINS, KEYS=True)  # their indices, in order
    tl.debug_barrier()
    stamp(clock_row, 5, PROFILE)  # the selection's "supers" phase
    offs = tl.arange(0, LBLOCK)
    last = tl.load(supers + k - 1)  # only the last super-group can be partial, and its groups come last
    n = k * S - tl.maximum((last + 1) * S - n_groups, 0)  # the chosen super-groups' groups, in group order
    j0 = n * 0
    while j0 < n:
        j = j0 + offs
        group = tl.load(supers + j // S, mask=j < n, other=0) * S + j % S
        tl.store(keys + j, tl.load(groups + group, mask=j < n, other=0), mask=j < n)
        j0 += LBLOCK
    tl.debug_barrier()
    _, tau = _keep_top(keys, n, k, LBLOCK, LOG_BINS, KEYS=True)  # n >= K (one group per super): places j
    tl.debug_barrier()
    j0 = n * 0
    while j0 < k:
        j = j0 + offs
        place = tl.load(keys + j, mask=j < k, other=0)
        group = tl.load(supers + place // S, mask=j < k, other=0) * S + place % S
        tl.store(groups + j, group, mask=j < k)
        j0 += LBLOCK
    return tau


def draft_topk(
    logits: torch.Tensor,
    k: int,
    draft_temperature: float,
    *,
    tile: int | None = None,
    chunks: int | None = None,
    group: int | None = None,
    super_group: int | None = None,
    warps: int = 4,
    select_warps: int | None = None,
    block: int | None = None,
    gather: int | None = None,
    log_bins: int = 6,
    scan_registers: int | None = None,
    select_registers: int | None = None,
    tiled: bool = False,
    emit: int | None = None,
    emit_warps: int = 1,
    union_tiles: int | None = None,
    clock: torch.Tensor | None = None,
    settled: torch.Tensor | None = None,
) -> DraftTopK:
    """Top-k of `logits` [..., V] per row, equal to `tree.draft_topk(impl="reference")` (ids exactly).

    tile: logits per tile of the scan (a power of two, at least `group` * `super_group`); chunks: vocabulary
    chunks per row of the scan; group: tokens per group (a power of two >= 2); super_group: groups per
    super-group (a power of two; 1: no super-groups), through which kernel 2 chooses the K best groups when
    there are more than K super-groups; warps / select_warps: per program of kernel
    1 / 2; block: the most group keys kernel 2 holds per step (a power of two; a block that holds all of a
    row's groups keeps them in registers across the radix passes); gather: the tokens read back per step (a
    power of two); log_bins: the radix digit of kernel 2's selections (1..8 bits); scan_registers /
    select_registers: a cap on each thread's registers in kernel 1 / 2 (Triton's maxnreg, 24..255), which
    lets an SM hold more programs at once for some spilled registers (by ptxas for sm_90a, the default
    launch at 64 requests and K = 64: the scan needs 123 and the 4-warp selection 119, so an SM holds 4
    of either; capped at 64, 8 of them, with 88 / 172 bytes spilled); tiled: read the chosen groups back as
    [groups, G] tiles (each group's index loaded once, its tokens as one row; at least one group per step)
    instead of a flat run of tokens; emit: > 0, a third kernel (`_emit_kernel`) keeps each tile's tokens that
    reach the emit-th best of its group maxima, and the selection first tries the union of those
    (`_union_best`), falling back to the groups when it cannot be sure of it (None: `_emit_need` where
    `_emit_pays`, else 0; 0: off); emit_warps: per program of that kernel (a power of two); union_tiles: the tiles
    whose candidates the union gathers per step (a power of two; None: as many as fill 2,048 slots).
    They change only the speed (defaults, None: `_plan`). Outputs are [..., K]. No host sync; CUDA-graph
    capturable.
    clock: an int64 CUDA tensor [rows, SELECT_SLOTS] that receives kernel 2's phase stamps, one
    row per logits row (`select_phase_times` reads them; `ddbench kernels tune topk`'s phases.csv).
    settled: an int32 tensor [rows] on the logits' device that receives, with emit, 1 for each row the tiles'
    candidates settled and 0 for each the groups did (`ddbench kernels tune topk`'s `settled` column).
    """
    *lead, vocab = logits.shape
    check_k(k, vocab)
    for name, value in (("tile", tile), ("group", group), ("block", block), ("gather", gather)):
        if value is not None and (value < 2 or value & (value - 1)):
            raise ValueError(f"{name} must be a power of two >= 2, got {value}")
    if super_group is not None and (super_group < 1 or super_group & (super_group - 1)):
        raise ValueError(f"super_group must be a power of two >= 1, got {super_group}")
    if not 1 <= log_bins <= 8:
        raise ValueError(f"log_bins must be in [1, 8], got {log_bins}")
    for name, value in (("scan_registers", scan_registers), ("select_registers", select_registers)):
        if value is not None and not 24 <= value <= 255:
            raise ValueError(f"{name} must be in [24, 255], got {value}")
    if tile is not None and group is not None and tile < group * (super_group or 1):
        raise ValueError(f"tile ({tile}) must be at least group x super_group ({group} x {super_group or 1})")
    if emit is not None and emit < 0:
        raise ValueError(f"emit must be >= 0 (0: off), got {emit}")
    for name, value in (("emit_warps", emit_warps), ("union_tiles", union_tiles or 1)):
        if value < 1 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two, got {value}")
    if k > MAX_K:
        from ddtree_core import batched

        return batched.draft_topk(logits, k, draft_temperature)
    rows, log_probs, token_ids = rows_and_outputs(logits, k)
    if rows.shape[0] > 0:
        *plan, auto_warps, auto_gather = _plan(rows, k, tile, chunks, group, super_group)
        tile_groups = plan[0] // plan[3]
        if emit is None:
            emit = _auto_emit(rows, k, plan[0], plan[3])
        if emit > tile_groups:
            raise ValueError(f"emit ({emit}) must be at most the groups of a tile ({tile_groups})")
        launch = _Launch(warps, select_warps or auto_warps, block or _BLOCK, gather or auto_gather, log_bins,
                         scan_registers, select_registers, tiled, emit, emit_warps, union_tiles)  # fmt: skip
        if clock is not None:
            check_clock(clock, rows.shape[0], SELECT_SLOTS)
        if settled is not None and (settled.shape != (rows.shape[0],) or settled.dtype != torch.int32
                                    or settled.device != rows.device or not emit):  # fmt: skip
            raise ValueError(f"settled must be an int32 tensor [{rows.shape[0]}] on {rows.device}, with emit > 0; "
                             f"got {settled.dtype} {tuple(settled.shape)} on {settled.device}, emit {emit}")
        _launch(rows, k, draft_temperature, plan, launch, log_probs, token_ids, clock=clock, settled=settled)
    return DraftTopK(log_probs=log_probs.view(*lead, k), token_ids=token_ids.view(*lead, k))


def _plan(
    rows: torch.Tensor, k: int, tile: int | None, chunks: int | None, group: int | None, super_group: int | None = None
) -> tuple:
    """(tile, chunk_len, chunks, group, super_group, select_warps, gather): the given values, else group = the
    power of two nearest sqrt(V / K) in [8, 256] (at most the tile), super_group the power of two nearest
    sqrt(groups / K) (at most the tile's groups), tiles of 2048 (fewer for a short row), chunks
    enough for about 16 scan programs per SM, each at least one tile long; while there are fewer than 4
    rows per SM, 8 warps per selection program and all of the chosen groups read back in one step (up to
    8,192 tokens), beyond that 4 warps and 1,024 tokens per step. Example: vocab 152,064, K = 64, 16 rows
    on 132 SMs: tiles of 2,048, 75 chunks of one tile, group 64, super group 8, 8 warps, 8,192 tokens per step."""
    num_rows, vocab = rows.shape
    if group is None:
        group = min(2 ** min(8, max(3, round(math.log2(math.sqrt(vocab / k))))), tile or _TILE)
    if tile is None:
        tile = max(group * (super_group or 1), min(_TILE, triton.next_power_of_2(vocab)))
    if chunks is None:
        chunks = triton.cdiv(16 * _sms(rows.device), num_rows)
    chunks = max(1, min(chunks, triton.cdiv(vocab, tile)))
    chunk_len = triton.cdiv(triton.cdiv(vocab, chunks), tile) * tile
    if super_group is None:
        super_group = 2 ** max(0, round(math.log2(math.sqrt(triton.cdiv(vocab, group) / k))))
        super_group = min(super_group, tile // group)
    few = _few_rows(rows)
    chunks = triton.cdiv(vocab, chunk_len)
    return tile, chunk_len, chunks, group, super_group, 8 if few else 4, _GATHER_FEW if few else _BLOCK


def default_emit(logits: torch.Tensor, k: int) -> int:
    """The floor rank (`emit`) that `draft_topk(logits, k, ...)` takes by default: 0 where the tiles'
    candidates are off."""
    rows = logits.reshape(-1, logits.shape[-1])
    if k > MAX_K or rows.shape[0] == 0:
        return 0
    tile, _, _, group, *_ = _plan(rows, k, None, None, None)
    return _auto_emit(rows, k, tile, group)


def _auto_emit(rows: torch.Tensor, k: int, tile: int, group: int) -> int:
    """emit=None's floor rank for a launch's tile and group: `_emit_need` where `_emit_pays`, else 0."""
    n_tiles = triton.cdiv(rows.shape[1], tile)
    return _emit_need(k, n_tiles, tile // group) if _emit_pays(rows, k, n_tiles) else 0


def _sms(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (1 on the CPU)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def _few_rows(rows: torch.Tensor) -> bool:
    """Fewer than 4 rows per SM: the per-row selection programs leave most of the GPU idle."""
    return rows.shape[0] < 4 * _sms(rows.device)


def _emit_pays(rows: torch.Tensor, k: int, n_tiles: int) -> bool:
    """Whether the default launch takes the tiles' candidates first: for K >= 192 with at most 24 emit programs
    (rows x tiles) per SM, for K >= 128 with at most 12: with more programs the emit kernel costs more than
    the union saves the selection. Example: vocab 152,064 in 75 tiles of 2,048 on 132 SMs is 0.57 programs
    per SM a row, so K = 256 takes the tiles' candidates first up to 42 rows, K = 128 up to 21."""
    programs_per_sm = rows.shape[0] * n_tiles / _sms(rows.device)
    return (k >= 192 and programs_per_sm <= 24) or (k >= 128 and programs_per_sm <= 12)


def _emit_need(k: int, tiles: int, tile_groups: int) -> int:
    """The rank, among a tile's group maxima, of its floor: lam + 5 sqrt(lam), lam = K / tiles the K best's
    mean per tile (in [1, tile_groups]). A tile that holds more of the K best than this fails the union (the
    selection falls back to the groups): for iid logits the count per tile is near Poisson(lam), 5 standard
    deviations above the mean."""
    lam = k / tiles
    return max(1, min(tile_groups, math.ceil(lam + 5 * math.sqrt(lam))))


def group_maxima(logits: torch.Tensor, k: int, draft_temperature: float) -> torch.Tensor:
    """Kernel 1 alone, launched as `draft_topk` launches it: each group's largest key [rows, ceil(V / G)]
    (int32, topk_lists.py's order key). `ddbench kernels tune topk` times it to split a call's time between the
    two kernels."""
    vocab = logits.shape[-1]
    check_k(k, vocab)
    rows, log_probs, token_ids = rows_and_outputs(logits, k)
    *plan, _, _ = _plan(rows, k, None, None, None)
    return _launch(rows, k, draft_temperature, plan, _Launch(), log_probs, token_ids, select=False)


class _Launch(NamedTuple):
    """The speed-only launch settings of `draft_topk` (its defaults: group_maxima's scan)."""

    warps: int = 4  # per scan program
    select_warps: int = 8  # per selection program
    block: int = _BLOCK  # group keys per step of the selection
    gather: int = _BLOCK  # tokens read back per step
    log_bins: int = 6  # radix digit bits
    scan_registers: int | None = None  # per-thread register cap of kernel 1 (maxnreg; None: the compiler's)
    select_registers: int | None = None  # the same for kernel 2
    tiled: bool = False  # read back [groups, G] tiles (_gather_tiles)
    emit: int = 0  # the tiles' candidates first: each tile's floor, the emit-th best of its group keys (0: off)
    emit_warps: int = 1  # per program of the tiles' candidates (_emit_kernel)
    union_tiles: int | None = None  # tiles gathered per step of the union (None: 2,048 slots' worth)


def select_phase_times(clock: torch.Tensor) -> dict[str, float]:
    """Mean microseconds per row of kernel 2's phases (SELECT_PHASES) and 'total', from a profiled call."""
    return phase_times(clock, SELECT_PHASES)


def _launch(
    rows, k, draft_temperature, plan, launch: _Launch, log_probs, token_ids, select=True, clock=None, settled=None
):
    tile, chunk_len, chunks, group, span = plan
    warps, select_warps, block, gather, log_bins, scan_registers, select_registers, tiled, emit, emit_warps, _ = launch
    num_rows, vocab = rows.shape
    device = rows.device
    n_groups = triton.cdiv(vocab, group)
    n_supers = triton.cdiv(n_groups, span)
    soft = max(2 * k, 256)
    gather = min(gather, triton.next_power_of_2(min(k, n_groups) * group))
    if tiled:
        gather = max(gather, group)  # whole groups per step
    groups = torch.empty((num_rows, n_groups), dtype=torch.int32, device=device)
    supers = torch.empty((num_rows, n_supers if span > 1 else 1), dtype=torch.int32, device=device)  # 1: unused
    stats = torch.empty((num_rows, chunks, 2), dtype=torch.float32, device=device)
    n_tiles = triton.cdiv(vocab, tile)
    cap = triton.next_power_of_2(max(32, 3 * emit)) if emit else 1  # candidate slots per tile
    seg = torch.empty((num_rows, n_tiles, cap) if emit else (1,), dtype=torch.int64, device=device)
    counts = torch.empty((num_rows, n_tiles) if emit else (1,), dtype=torch.int32, device=device)
    floors = torch.empty_like(counts)
    divide = device.type == "cpu"
    scale = float(np.float32(draft_temperature)) if divide else float(np.float32(1) / np.float32(draft_temperature))
    _scan_kernel[(num_rows, chunks)](
        rows, rows.stride(0), vocab, chunk_len, scale, groups, n_groups, supers, n_supers, stats,
        TILE=tile, G=group, S=span, DIVIDE=divide, FAST=not divide and not interpreted(), num_warps=warps,
        **_register_cap(scan_registers), **pdl_options(device),
    )  # fmt: skip
    if not select:
        return groups
    if emit:
        _emit_kernel[(num_rows, n_tiles)](
            rows, rows.stride(0), vocab, scale, groups, n_groups, seg, counts, floors, n_tiles,
            TILE=tile, G=group, EMIT=emit, NG=triton.next_power_of_2(emit), CAP=cap, DIVIDE=divide,
            num_warps=emit_warps, **pdl_options(device),
        )  # fmt: skip
    cand_stride = max(soft + gather, n_tiles * cap if emit else 0)
    tiles_pad = triton.next_power_of_2(n_tiles)
    cand = torch.empty((num_rows, cand_stride), dtype=torch.int64, device=device)
    listed = torch.empty((num_rows, k * span if span > 1 else 1), dtype=torch.int32, device=device)
    _select_kernel[(num_rows,)](
        rows, rows.stride(0), vocab, scale, groups, n_groups, supers, n_supers, listed, stats, chunks, k, soft, cand,
        cand_stride, log_probs, token_ids, token_ids if clock is None else clock, seg, counts, floors, n_tiles,
        counts if settled is None else settled, G=group, S=span, GATHER=gather,
        CP=triton.next_power_of_2(chunks), GBLOCK=min(block, triton.next_power_of_2(n_groups)),
        SBLOCK=min(block, triton.next_power_of_2(n_supers)), LBLOCK=min(block, triton.next_power_of_2(k * span)),
        CBLOCK=triton.next_power_of_2(soft), LOG_BINS=log_bins,
        KP=triton.next_power_of_2(k), DIVIDE=divide, TILED=bool(tiled), PROFILE=clock is not None,
        EMIT=bool(emit), CAP=cap, TP=tiles_pad, TB=min(tiles_pad, launch.union_tiles or 2048 // cap),
        UBLOCK=min(2048, triton.next_power_of_2(n_tiles * cap)), num_warps=select_warps,
        **_register_cap(select_registers), **pdl_options(device),
    )  # fmt: skip
    return groups


def _register_cap(registers: int | None) -> dict:
    """The launch option that caps a thread's registers (none: the compiler chooses)."""
    return {} if registers is None else {"maxnreg": registers}

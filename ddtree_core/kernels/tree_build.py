"""Triton twin of `tree.build_tree_from_topk`: one program builds one request's draft tree.

A program first tries the build by deviations (TAILS, tree_tails.py: the chain, then levels of deviations from
it, each with its chains of rank 0), and where that gives up (wide drafts, or more nodes below its bound than
its pool or final sort hold) runs the level build (tree_levels.py: the level-synchronous selection of
batched.py, level by level from the root); both write the pool's final nodes in pop order (`_write_tree`). The
keys, selections and bounds they share are tree_bound.py's. `_launch_config` chooses the block sizes and which
of them run (LAUNCH_KEYS: the overrides `build_tree_from_topk(launch=)` takes).

Worked example (tree.py's: K = 2, budget 4, log-probs a -0.1 b -2.5 | c -0.2 d -1.9): the tree is a, a.c, a.d,
b (nodes 1-4; tree_levels.py and tree_tails.py walk it through each build).
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
from ddtree_core.kernels.tree_levels import _level_build
from ddtree_core.kernels.tree_tails import _tail_build
from ddtree_core.types import TRITON_NODE_LIMIT, DraftTopK, DraftTree

_PACK_LIMIT = TRITON_NODE_LIMIT  # pool indices and budgets must fit 15 bits: pk = parent_pool_index << 16 | rank


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
    (`ddbench kernels tune build`'s phases.csv; `phase_times` reads them).
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
    loosens the bound, so more candidates survive to the exact selection; the default is 256 buckets up to
    N = 256, 2048 above. Radix digits are LOG_BINS = 6 bits. Levels and final nodes are ordered by tl.sort
    (SORT_RANKS) up to N = 1024, by counted ranks above. The level build (tree_levels.py) splits the bound's
    bucket FINE_BITS = 6 bits further, sorts a level's survivors once when at most SCH (SORT_SURVIVORS) and the
    final pool, or its part below the last bound (CUT), when at most FCH = min(512, 4 * PCH). The build by
    deviations (TAILS, tree_tails.py) is tried first up to budget 256 and depth 64; TB (its tiles of heads, at
    least 16 and FD), FS (its final sort; the candidate lists grow to FS) and FR (its start bound's ranks) shape it.
    The measurements behind each default (on an H200) are in HISTORY.md beside the kernels' results.
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
        "TAILS": n <= 256,  # on up to the largest budget timed
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

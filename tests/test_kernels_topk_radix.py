"""The group-maxima Triton top-k (ddtree_core/kernels/topk_radix.py) against the host reference.

Token ids must be identical; log-probs agree to LOG_PROB_TOL, |difference| <= 8e-6 + 1e-6 * |log-prob|,
about four float32 ulps of a logsumexp up to 32 (the logsumexp sums per group slot and chunk; on the GPU
with ex2.approx.ftz). Small groups, tiles and explicit chunk counts make small vocabularies run every path:
the selection of K groups (more groups than K) and taking all groups (at most K), shrinks of the token list
(equal rows fill the chosen groups), partial last groups, tiles and chunks, NaN-only groups, ranking by
counting (K <= 64) and by tl.sort.
"""

import dataclasses
from unittest import mock

import pytest
import torch

pytest.importorskip("triton")

from trees import capture_cuda_graph, needs_cuda  # noqa: E402

from ddtree_core import DraftTopK, batched, build_tree  # noqa: E402
from ddtree_core.kernels import topk_radix  # noqa: E402
from ddtree_core.tree import draft_topk  # noqa: E402

# numpy (the interpreter) warns on log(0), inf - inf and all-NaN maxima; the GPU gives the same -inf/NaN
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:All-NaN slice:RuntimeWarning"),
]


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
LOG_PROB_TOL = {"rtol": 1e-6, "atol": 8e-6, "equal_nan": True}


def make_logits(kind: str, shape: tuple[int, int, int], generator: torch.Generator) -> torch.Tensor:
    """Draft logits of one flavour; bf16/fp16 kinds keep their dtype (the kernel reads it directly)."""
    logits = torch.randn(shape, generator=generator) * 3
    if kind == "bf16":
        return (logits * 1.5).bfloat16()  # 8 significant bits: many exact ties
    if kind == "fp16":
        return logits.half()
    if kind == "fp64":
        return logits.double() / 7  # read as float32, as the reference does
    if kind == "ties":
        return torch.randint(-3, 1, shape, generator=generator).float()
    if kind == "inf":
        logits[torch.rand(shape, generator=generator) < 0.7] = float("-inf")
        logits[..., 0] = 0.0
    if kind == "sharp":
        logits[..., 5:9] += 12.0
    if kind == "signed_zeros":
        logits = torch.where(torch.rand(shape, generator=generator) < 0.5, -0.0, 0.0)
        logits[..., ::7] = -1.0
    if kind == "nan":
        logits[torch.rand(shape, generator=generator) < 0.1] = float("nan")
    if kind == "all_inf":
        logits[0, 0] = float("-inf")  # a row with no finite logit: log-probs NaN (as torch.logsumexp gives)
    return logits


def assert_topk_equal(out, ref):
    assert out.token_ids.dtype == torch.int64 and out.log_probs.dtype == torch.float32
    assert torch.equal(out.token_ids, ref.token_ids), (out.token_ids != ref.token_ids).nonzero()[:5].tolist()
    torch.testing.assert_close(out.log_probs, ref.log_probs, **LOG_PROB_TOL)


def radix_logits(kind: str, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """make_logits' kinds, plus rows that are constant, ascending (the winners in the last groups
    and chunk), highest at both ends (valley), mostly -inf (K reaches the tied -inf) and all NaN."""
    vocab = shape[-1]
    if kind == "equal":
        return torch.full(shape, 0.25)
    if kind == "ascending":
        return (torch.arange(vocab) / 8.0).expand(shape).contiguous()
    if kind == "valley":  # largest at both ends: a row's last (partial) groups next to the next row's first
        return ((torch.arange(vocab) - vocab / 2).abs() / 8.0).expand(shape).contiguous()
    if kind == "mostly_ninf":
        logits = torch.full(shape, float("-inf"))
        logits[..., 1::97] = torch.randn(logits[..., 1::97].shape, generator=generator)
        return logits
    if kind == "all_nan":
        return torch.full(shape, float("nan"))
    return make_logits(kind, shape, generator)


def test_worked_example_from_the_module_docstring():
    logits = torch.tensor([[[1.0, 3.0, 3.0, 0.0, 2.0, 3.0, 5.0, 1.0]]], device=DEVICE)
    out = topk_radix.draft_topk(logits, 2, 1.0, group=2, tile=4, chunks=1)
    assert out.token_ids.tolist() == [[[6, 1]]]
    expected = torch.tensor([5.0, 3.0], device=DEVICE) - torch.logsumexp(logits[0, 0], 0)
    torch.testing.assert_close(out.log_probs[0, 0], expected, rtol=1e-6, atol=8e-6)


CASES = [
    # kind, shape, k, draft_temperature, tile, chunks, group
    ("randn", (2, 3, 300), 5, 1.0, 64, 1, 8),
    ("randn", (1, 2, 1000), 20, 0.7, 64, 3, 8),
    ("bf16", (2, 2, 1000), 17, 1.0, 64, 3, 16),
    ("bf16", (1, 2, 700), 300, 1.3, 64, 2, 2),  # ranked by tl.sort
    ("fp16", (1, 2, 500), 64, 1.0, 32, 4, 4),
    ("ties", (1, 3, 500), 40, 1.0, 64, 2, 8),
    ("equal", (1, 2, 3000), 64, 1.0, 256, 2, 8),  # 512 equal tokens read back: the list shrinks
    ("inf", (2, 2, 400), 30, 1.0, 64, 3, 4),
    ("mostly_ninf", (1, 2, 600), 20, 1.0, 64, 2, 4),  # K reaches the tied -inf
    ("sharp", (1, 4, 600), 8, 0.5, 64, 1, 16),  # the winners crowd two groups
    ("ascending", (1, 2, 2000), 50, 1.0, 128, 3, 8),
    ("signed_zeros", (1, 2, 300), 50, 1.0, 32, 2, 2),
    ("nan", (1, 2, 300), 20, 1.0, 32, 2, 2),  # groups of NaN
    ("nan", (1, 2, 300), 290, 1.0, 64, 2, 2),  # k reaches the NaNs, which rank last; all groups
    ("all_nan", (1, 1, 300), 5, 1.0, 64, 2, 8),
    ("all_inf", (1, 2, 100), 7, 1.0, 16, 2, 4),
    ("bf16", (1, 2, 100), 100, 1.0, 16, 3, 2),  # k = V
    ("randn", (1, 1, 50), 1, 1.0, 16, 2, 4),  # k = 1
    ("ties", (1, 1, 1500), 1024, 1.0, 256, 1, 2),  # k = MAX_K
    ("fp64", (1, 2, 200), 10, 1.0, 64, 2, 8),
    ("bf16", (1, 2, 5000), 40, 0.9, None, None, None),  # the default plan
    ("bf16", (1, 1, 152064), 64, 1.0, None, None, None),  # the benchmark vocabulary, default plan
]
SLOW_CASES = [
    ("bf16", (1, 16, 152064), 64, 1.0, None, None, None),
    ("randn", (4, 16, 32000), 256, 0.8, 2048, None, None),
    ("bf16", (2, 2, 152064), 1024, 1.0, 2048, 2, None),
    ("equal", (1, 2, 152064), 64, 1.0, None, None, 256),
]


def _case_id(case) -> str:
    kind, shape, k, temp, tile, chunks, group = case
    return f"{kind}-{'x'.join(map(str, shape))}-k{k}-T{temp}-tile{tile}-c{chunks}-g{group}"


@pytest.mark.parametrize("case", CASES + [pytest.param(c, marks=pytest.mark.slow) for c in SLOW_CASES], ids=_case_id)
def test_topk_equals_reference(case):
    kind, shape, k, temperature, tile, chunks, group = case
    logits = radix_logits(kind, shape, torch.Generator().manual_seed(shape[-1] + k)).to(DEVICE)
    ref = draft_topk(logits, k, draft_temperature=temperature, impl="reference")
    out = topk_radix.draft_topk(logits, k, temperature, tile=tile, chunks=chunks, group=group)
    assert_topk_equal(out, ref)


@pytest.mark.parametrize("kind", ["bf16", "ties", "equal", "nan"])
@pytest.mark.parametrize("block, log_bins", [(8, 1), (64, 4), (4096, 8)])
def test_selection_block_and_digit_change_only_the_speed(kind, block, log_bins):
    """Blocks smaller than the groups (reloaded each radix pass) or holding them all, 1- to 8-bit digits."""
    logits = radix_logits(kind, (1, 2, 1500), torch.Generator().manual_seed(block + log_bins)).to(DEVICE)
    out = topk_radix.draft_topk(logits, 37, 1.0, group=8, tile=256, chunks=2, block=block, log_bins=log_bins)
    assert_topk_equal(out, draft_topk(logits, 37, impl="reference"))


@pytest.mark.parametrize("kind", ["bf16", "ties", "equal", "nan", "ascending", "valley", "sharp"])
@pytest.mark.parametrize("super_group, k", [(1, 7), (2, 20), (8, 7), (8, 1), (32, 7)])
def test_super_groups_change_only_the_speed(kind, super_group, k):
    """The K best groups chosen through the K best super-groups (2, 8: 94 or 24 of them, the last partial,
    chosen when the winners come last: "ascending", "valley", whose next row starts higher) or directly (1:
    none; 32: 6 super-groups, not more than K)."""
    logits = radix_logits(kind, (1, 2, 1500), torch.Generator().manual_seed(super_group + k)).to(DEVICE)
    out = topk_radix.draft_topk(logits, k, 1.0, group=8, tile=256, chunks=2, super_group=super_group, block=16)
    assert_topk_equal(out, draft_topk(logits, k, impl="reference"))


def test_default_super_group_is_the_power_of_two_nearest_sqrt_groups_over_k():
    """At the benchmark cells: K = 64, groups of 64 (2,376 groups): 8; K = 256, groups of 32 (4,752): 4."""
    rows = torch.empty(16, 152064)
    assert [topk_radix._plan(rows, k, None, None, None)[3:5] for k in (64, 256)] == [(64, 8), (32, 4)]


def test_register_caps_change_only_the_speed():
    """Capped registers (spilled on the GPU; the interpreter takes the cap and ignores it) keep the lists."""
    logits = radix_logits("ties", (1, 2, 1500), torch.Generator().manual_seed(24)).to(DEVICE)
    out = topk_radix.draft_topk(logits, 37, 1.0, group=8, tile=256, chunks=2, scan_registers=32, select_registers=40)
    assert_topk_equal(out, draft_topk(logits, 37, impl="reference"))


@pytest.mark.parametrize("gather", [8, 64, 4096])
def test_read_back_step_changes_only_the_speed(gather):
    logits = radix_logits("ties", (1, 2, 1500), torch.Generator().manual_seed(gather)).to(DEVICE)
    out = topk_radix.draft_topk(logits, 37, 1.0, group=8, tile=256, chunks=2, block=64, gather=gather)
    assert_topk_equal(out, draft_topk(logits, 37, impl="reference"))


@pytest.mark.parametrize("kind", ["bf16", "ties", "equal", "valley", "mostly_ninf"])
@pytest.mark.parametrize("k, gather, super_group", [(37, 8, 1), (37, 64, 8), (7, 4096, 2), (200, 256, 1)])
def test_tiled_read_back_changes_only_the_speed(kind, k, gather, super_group):
    """The chosen groups read back as [groups, G] tiles: one group per step (gather 8 = G), several, all at
    once, every group (K = 200 > 188 groups); "equal" rows shrink the list between steps."""
    logits = radix_logits(kind, (1, 2, 1500), torch.Generator().manual_seed(k + gather)).to(DEVICE)
    out = topk_radix.draft_topk(logits, k, 1.0, group=8, tile=256, chunks=2, gather=gather, super_group=super_group,
                                block=64, tiled=True)  # fmt: skip
    assert_topk_equal(out, draft_topk(logits, k, impl="reference"))


def default_need(k: int, vocab: int, tile: int, group: int) -> int:
    """The floor rank a launch with emit=None takes where the tiles' candidates pay (`_emit_need`)."""
    return topk_radix._emit_need(k, -(-vocab // tile), tile // group)


@pytest.mark.parametrize("kind", ["bf16", "ties", "nan", "valley", "all_nan"])
@pytest.mark.parametrize("k, emit", [(37, None), (37, 1), (37, 32)])
def test_tile_candidates_change_only_the_speed(kind, k, emit):
    """The union of the tiles' candidates first: settled (bf16 and nan rows at the default floor rank, 19 of a
    tile's 32 groups), or given up for the groups because a floor lies above the K-th best (emit 1: each tile's
    floor is its best group's key) or because a tile has more candidates than its 64 slots (emit 32: the floor
    is its worst group's key; ties, valley and all-NaN rows also at the default)."""
    logits = radix_logits(kind, (1, 2, 1500), torch.Generator().manual_seed(k)).to(DEVICE)
    settled = torch.full((2,), -1, dtype=torch.int32, device=DEVICE)
    need = default_need(k, 1500, 256, 8) if emit is None else emit
    out = topk_radix.draft_topk(logits, k, 1.0, group=8, tile=256, chunks=2, emit=need, settled=settled)
    assert_topk_equal(out, draft_topk(logits, k, impl="reference"))
    expected = 1 if emit is None and kind in ("bf16", "nan") else 0
    assert settled.tolist() == [expected] * 2


@pytest.mark.parametrize("k, tile, group", [(100, 512, 8), (16, 256, 8)])
def test_tile_candidates_settle_ranked_by_sort_and_by_counting(k, tile, group):
    """K = 100 ranked by tl.sort, K = 16 by counting; the last tile partial (5000 = 9 x 512 + 392); the union
    gathered in one step, and 2 or 4 tiles a step (3 to 10 steps, the last of 10 tiles by 4 partial)."""
    logits = radix_logits("bf16", (1, 2, 5000), torch.Generator().manual_seed(k)).to(DEVICE)
    need = default_need(k, 5000, tile, group)
    for union_tiles in (None, 2, 4):
        settled = torch.zeros(2, dtype=torch.int32, device=DEVICE)
        out = topk_radix.draft_topk(logits, k, 1.0, group=group, tile=tile, chunks=3, emit=need, settled=settled,
                                    union_tiles=union_tiles)  # fmt: skip
        assert_topk_equal(out, draft_topk(logits, k, impl="reference"))
        assert settled.tolist() == [1, 1]


def test_tile_candidates_by_default_for_large_k_and_few_emit_programs():
    """On the CPU (one "SM"): K >= 192 and at most 24 (rows x tiles), or K >= 128 and at most 12."""
    rows = torch.empty(2, 3000)
    cases = ((192, 12), (191, 12), (192, 13), (128, 6), (128, 7), (127, 6))
    assert [topk_radix._emit_pays(rows, k, tiles) for k, tiles in cases] == [True, False, False, True, False, False]


def test_default_emit_is_the_launch_of_draft_topk_and_the_benchmark_reports_its_settled_share():
    from ddbench.kernels.kernel_bench import settled_share

    logits = radix_logits("bf16", (1, 4, 3000), torch.Generator().manual_seed(9)).to(DEVICE)
    assert topk_radix.default_emit(logits, 127) == 0 and settled_share(logits, 127) is None
    emit = topk_radix.default_emit(logits, 128)  # 2 tiles of 2,048, groups of 8: lam = 64, 64 + 40
    assert emit == 104
    with mock.patch.object(topk_radix, "_launch", wraps=topk_radix._launch) as launch:
        out = topk_radix.draft_topk(logits, 128, 1.0)
    assert launch.call_args.args[4].emit == emit
    assert_topk_equal(out, draft_topk(logits, 128, impl="reference"))
    assert settled_share(logits, 128) == 1.0


def test_default_tile_floor_rank_is_five_deviations_above_the_mean_per_tile():
    """lam = K / tiles: K = 256 over 19 tiles of 8,192 -> 32; K = 64 over 75 of 2,048 -> 6; capped at the
    groups of a tile."""
    assert [
        topk_radix._emit_need(256, 19, 256),
        topk_radix._emit_need(64, 75, 64),
        topk_radix._emit_need(300, 1, 8),
    ] == [32, 6, 8]


def test_a_clock_must_be_an_int64_cuda_tensor_of_one_row_per_logits_row():
    logits = torch.zeros(1, 2, 50, device=DEVICE)
    for clock in (torch.zeros(2, 6, dtype=torch.int64, device=DEVICE), torch.zeros(2, 7, device=DEVICE)):
        with pytest.raises(ValueError, match="clock"):
            topk_radix.draft_topk(logits, 3, 1.0, clock=clock)


@pytest.mark.gpu
@needs_cuda
def test_profiled_selection_keeps_the_lists_and_stamps_every_phase():
    logits = make_logits("bf16", (2, 16, 152064), torch.Generator().manual_seed(7)).bfloat16().cuda()
    clock = torch.zeros(32, len(topk_radix.SELECT_PHASES) + 3, dtype=torch.int64, device="cuda")
    assert_topk_equal(topk_radix.draft_topk(logits, 256, 1.0, clock=clock), draft_topk(logits, 256, impl="reference"))
    times = topk_radix.select_phase_times(clock)
    assert set(times) == {*topk_radix.SELECT_PHASES, "total"}
    assert all(us >= 0 for us in times.values()) and 0 < times["total"] < 1e4


@pytest.mark.skipif(torch.cuda.is_available(), reason="patches a jit function, which only the interpreter calls")
def test_equal_rows_shrink_the_token_list():
    logits = radix_logits("equal", (1, 1, 3000), torch.Generator())
    with mock.patch.object(topk_radix, "_shrink", wraps=topk_radix._shrink) as shrink:
        out = topk_radix.draft_topk(logits, 64, 1.0, group=8, tile=256, chunks=2)
    assert shrink.call_count == 1  # 64 groups of 8 equal tokens: 512 > soft = 256
    assert out.token_ids.tolist() == [[list(range(64))]]


def test_leading_dims_and_strided_inputs():
    wide = make_logits("bf16", (2, 3, 520), torch.Generator().manual_seed(2)).to(DEVICE)
    strided = wide.transpose(1, 2).contiguous().transpose(1, 2)  # stride 3 along V: the rows are copied
    for logits in (wide[0, 0, :500], wide[:, :, :500], wide[..., ::2], strided):  # [V], rows 520 apart, ...
        out = topk_radix.draft_topk(logits, 33, 1.0, group=8, tile=64, chunks=2)
        assert out.token_ids.shape == logits.shape[:-1] + (33,)
        ref = draft_topk(logits.reshape(1, -1, logits.shape[-1]), 33, impl="reference")
        flat = DraftTopK(out.log_probs.view(ref.log_probs.shape), out.token_ids.view(ref.token_ids.shape))
        assert_topk_equal(flat, ref)


def test_dispatch_reaches_the_kernel_with_default_plan():
    logits = make_logits("bf16", (1, 6, 3000), torch.Generator().manual_seed(0))[0].to(DEVICE)  # [L, V]
    with mock.patch.object(topk_radix, "_launch", wraps=topk_radix._launch) as launch:
        out = draft_topk(logits, 40, draft_temperature=0.9, impl="triton")
    assert launch.call_count == 1
    assert launch.call_args.args[3][3] == 8  # the group: sqrt(3000 / 40) ~ 8.7
    assert_topk_equal(out, draft_topk(logits, 40, draft_temperature=0.9, impl="reference"))


def test_selection_warps_and_read_back_follow_rows_per_sm():
    """8 warps and 8,192 tokens read back per step below 4 rows per SM, 4 and 1,024 from there (on the CPU:
    one "SM")."""
    plans = [topk_radix._plan(torch.empty(rows, 64), 4, None, None, None)[-2:] for rows in (3, 4)]
    assert plans == [(8, 8192), (4, 1024)]


def test_k_above_max_k_takes_the_torch_path():
    logits = make_logits("ties", (1, 1, topk_radix.MAX_K + 40), torch.Generator().manual_seed(1)).to(DEVICE)
    with mock.patch.object(batched, "draft_topk", wraps=batched.draft_topk) as torch_path:
        out = topk_radix.draft_topk(logits, topk_radix.MAX_K + 1, 1.0)
    assert torch_path.call_count == 1
    assert_topk_equal(out, draft_topk(logits, topk_radix.MAX_K + 1, impl="reference"))


def test_empty_batch_and_bad_arguments():
    out = topk_radix.draft_topk(torch.zeros(0, 4, 50, device=DEVICE), 3, 1.0)
    assert out.token_ids.shape == out.log_probs.shape == (0, 4, 3)
    logits = torch.zeros(1, 2, 50, device=DEVICE)
    for bad in ({"tile": 48}, {"group": 1}, {"group": 12}, {"tile": 8, "group": 16}, {"block": 100}, {"gather": 3},
                {"log_bins": 0}, {"log_bins": 9}, {"scan_registers": 16}, {"select_registers": 256},
                {"super_group": 3}, {"super_group": 0}, {"tile": 32, "group": 8, "super_group": 8}, {"emit": -1},
                {"tile": 32, "group": 8, "emit": 5},
                {"emit": 0, "settled": torch.zeros(2, dtype=torch.int32, device=DEVICE)},
                {"emit": 1, "settled": torch.zeros(3, dtype=torch.int32, device=DEVICE)},
                {"emit": 1, "settled": torch.zeros(2, device=DEVICE)}):  # fmt: skip
        with pytest.raises(ValueError, match="tile|group|block|gather|log_bins|registers|emit|settled"):
            topk_radix.draft_topk(logits, 3, 1.0, **bad)
    with pytest.raises(ValueError, match="k"):
        topk_radix.draft_topk(logits, 51, 1.0)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize(
    "kind, batch, k, temperature", [("bf16", 64, 64, 1.0), ("bf16", 8, 256, 0.7), ("nan", 4, 64, 1.0)]
)
def test_benchmark_shapes_on_cuda(kind, batch, k, temperature):
    """1024 rows of vocabulary 152064 with the default plan, and with every group held in registers
    (block 8192, 8-bit digits); 0.7 checks the reciprocal scaling of CUDA, "nan" that the GPU's float
    maximum of a group ignores NaN as the interpreter's does."""
    logits = make_logits(kind, (batch, 16, 152064), torch.Generator().manual_seed(batch)).bfloat16().cuda()
    ref = draft_topk(logits, k, draft_temperature=temperature, impl="reference")
    assert_topk_equal(topk_radix.draft_topk(logits, k, temperature), ref)
    assert_topk_equal(topk_radix.draft_topk(logits, k, temperature, block=8192, log_bins=8), ref)
    assert_topk_equal(topk_radix.draft_topk(logits, k, temperature, select_warps=4, gather=8192), ref)
    settled = torch.zeros(batch * 16, dtype=torch.int32, device="cuda")
    for tile in (2048, 8192):  # the tiles' candidates, at the default floor rank
        emit = default_need(k, 152064, tile, topk_radix._plan(logits.view(-1, 152064), k, tile, None, None)[3])
        assert_topk_equal(topk_radix.draft_topk(logits, k, temperature, tile=tile, emit=emit, settled=settled), ref)
        assert settled.float().mean() > 0.9


@pytest.mark.gpu
@needs_cuda
def test_captures_in_a_cuda_graph_without_syncs():
    logits = make_logits("bf16", (4, 16, 32000), torch.Generator().manual_seed(3)).cuda()
    graph, out = capture_cuda_graph(lambda: topk_radix.draft_topk(logits, 64, 1.0))
    for seed in (4, 5):
        logits.copy_(make_logits("bf16", (4, 16, 32000), torch.Generator().manual_seed(seed)).cuda())
        graph.replay()
        torch.cuda.synchronize()
        assert_topk_equal(out, draft_topk(logits, 64, impl="reference"))


def test_group_maxima_is_the_scan_of_draft_topk():
    """Kernel 1 alone (ddbench.kernels.topk_tune's split of the time): each group's largest key, in group order,
    the last group partial (203 = 25 x 8 + 3)."""
    from ddbench.kernels.topk_tune import group_max_keys

    logits = make_logits("bf16", (2, 3, 203), torch.Generator().manual_seed(6)).to(DEVICE)
    keys = topk_radix.group_maxima(logits, 5, 1.0)
    assert keys.shape == (6, 26) and keys.dtype == torch.int32
    assert torch.equal(keys.long(), group_max_keys(logits, 5).to(keys.device))


@pytest.mark.parametrize("kind, temperature", [("randn", 1.0), ("sharp", 0.8)])
def test_build_tree_end_to_end(kind, temperature):
    """Random float32 logits have no two paths whose scores tie to within the logsumexp's rounding,
    so the trees are identical; scores (sums of up to L log-probs) agree to L times LOG_PROB_TOL."""
    logits = make_logits(kind, (2, 8, 2000), torch.Generator().manual_seed(5)).to(DEVICE)
    budget = torch.tensor([48, 17], device=DEVICE)
    out = build_tree(logits, budget, draft_temperature=temperature, impl="triton")
    ref = build_tree(logits, budget, draft_temperature=temperature, impl="reference")
    for field in dataclasses.fields(ref):
        x, y = getattr(out, field.name), getattr(ref, field.name)
        if field.name == "scores":
            torch.testing.assert_close(x, y, rtol=8e-6, atol=8 * LOG_PROB_TOL["atol"])
        elif isinstance(y, torch.Tensor):
            assert torch.equal(x, y), field.name
        else:
            assert x == y, field.name

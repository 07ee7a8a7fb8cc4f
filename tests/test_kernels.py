"""The Triton kernels against their references, field by field, bit for bit.

On a machine without CUDA the kernels run under the Triton interpreter (TRITON_INTERPRET=1, set by
conftest.py before any kernel module is imported); cases too slow for it are marked slow.
"""

import dataclasses
import random

import pytest
import torch

pytest.importorskip("triton")

from trees import assert_same

from ddtree_core import encoding, mask, verify  # noqa: E402
from ddtree_core.tree import DraftTopK, build_tree, build_tree_from_topk, draft_topk  # noqa: E402

SLOW = pytest.mark.slow  # long cases: `-m slow`
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def make_logits(kind: str, batch: int, length: int, vocab: int, generator: torch.Generator) -> torch.Tensor:
    """Draft logits of one flavour: plain, bf16-rounded (many ties), integer (exact ties), with -inf."""
    logits = torch.randn(batch, length, vocab, generator=generator)
    if kind == "bf16":
        return (logits * 4).bfloat16().float()
    if kind == "ties":
        return torch.randint(-3, 1, (batch, length, vocab), generator=generator).float()
    if kind == "inf":
        logits[torch.rand(batch, length, vocab, generator=generator) < 0.5] = float("-inf")
        logits[..., 0] = 0.0  # every row keeps a finite logit
        return logits
    if kind == "peaked":
        logits[..., :2] += 8.0  # deep, narrow trees
        return logits
    return logits


def reference_and_triton(topk: DraftTopK, budget, max_depth=None, max_budget=None):
    ref = build_tree_from_topk(topk, budget, max_depth=max_depth, max_budget=max_budget, impl="reference")
    out = build_tree_from_topk(topk, budget, max_depth=max_depth, max_budget=max_budget, impl="triton")
    return out, ref


def test_worked_example_from_tree_docstring():
    log_probs = torch.tensor([[[-0.1, -2.5], [-0.2, -1.9]]], device=DEVICE)
    token_ids = torch.tensor([[[10, 11], [20, 21]]], device=DEVICE)  # a b | c d
    tree = build_tree_from_topk(DraftTopK(log_probs, token_ids), 4, impl="triton")
    assert tree.token_ids.tolist() == [[10, 20, 21, 11]]  # a, c, d, b
    assert tree.parents.tolist() == [[-1, 0, 1, 1, 0]]
    assert tree.depths.tolist() == [[0, 1, 2, 2, 1]]
    assert tree.ranks.tolist() == [[-1, 0, 0, 1, 1]]
    assert tree.num_nodes.tolist() == [4]
    expected = torch.tensor([0.0, -0.1, -0.1, -0.1, -2.5]) + torch.tensor([0.0, 0.0, -0.2, -1.9, 0.0])
    assert torch.equal(tree.scores.cpu().view(torch.int32), expected.unsqueeze(0).view(torch.int32))


CASES = [
    # kind, batch, length, vocab, budgets, max_depth
    ("randn", 1, 1, 2, [1], 1),
    ("randn", 1, 2, 2, [2], 2),
    ("bf16", 2, 16, 50, [7, 3], 16),
    ("ties", 3, 8, 40, [15, 0, 15], 8),
    ("inf", 2, 5, 30, [16, 9], 5),
    ("peaked", 2, 16, 100, [64, 17], 16),
    ("bf16", 4, 16, 1000, [64, 1, 0, 33], 12),
    ("ties", 1, 16, 300, [255], 16),
    ("bf16", 1, 16, 32000, [255], 16),
    ("randn", 1, 16, 152064, [16], 16),
    ("bf16", 1, 16, 3000, [1500], 16),  # N > 1024: ranks counted, not sorted
]
SLOW_CASES = [
    ("bf16", 1, 16, 2000, [1024], 16),
    ("peaked", 2, 16, 3000, [1024, 700], 16),
    ("ties", 1, 16, 1500, [1024], 16),
    ("bf16", 2, 16, 152064, [1024, 256], 16),
    ("inf", 3, 16, 5000, [256, 255, 1], 16),
]


def _case_id(case):
    kind, batch, length, vocab, budgets, depth = case
    return f"{kind}-b{batch}-L{length}-V{vocab}-N{max(budgets)}-D{depth}"


@pytest.mark.parametrize("case", CASES + [pytest.param(c, marks=pytest.mark.slow) for c in SLOW_CASES], ids=_case_id)
def test_build_equals_reference(case):
    kind, batch, length, vocab, budgets, max_depth = case
    generator = torch.Generator().manual_seed(len(budgets) * 1000 + vocab)
    logits = make_logits(kind, batch, length, vocab, generator).to(DEVICE)
    topk = draft_topk(logits, max(1, min(max(budgets), vocab)), impl="reference")
    out, ref = reference_and_triton(topk, torch.tensor(budgets, device=DEVICE), max_depth=max_depth)
    assert_same(out, ref)


def test_build_random_small_trees():
    """Many small random trees, every logit flavour, K above and below the budget; the default launch (TAILS up to
    budget 256) and the level build alone."""
    from ddtree_core.kernels import tree_build

    rng = random.Random(0)
    generator = torch.Generator().manual_seed(0)
    for _ in range(25):
        batch, length, vocab = (
            rng.choice([1, 2, 3]),
            rng.choice([1, 2, 3, 5, 16]),
            rng.choice([2, 3, 5, 16, 40]),
        )
        max_budget = rng.choice([1, 2, 3, 7, 15, 16, 33, 64])
        kind = rng.choice(["randn", "bf16", "ties", "inf", "peaked"])
        logits = make_logits(kind, batch, length, vocab, generator).to(DEVICE)
        k = rng.randint(1, vocab) if rng.random() < 0.3 else max(1, min(max_budget, vocab))
        budgets = torch.tensor([rng.randint(0, max_budget) for _ in range(batch)], device=DEVICE)
        budgets[rng.randrange(batch)] = max_budget
        depth = rng.randint(1, length)
        topk = draft_topk(logits, k, impl="reference")
        out, ref = reference_and_triton(topk, budgets, max_depth=depth, max_budget=max_budget)
        assert_same(out, ref)
        launch = {"TAILS": False}
        assert_same(tree_build.build_tree_from_topk(topk, budgets, depth, max_budget, launch=launch), ref)


def test_build_with_a_fine_bound_equals_reference():
    """FINE_BITS (the bound's bucket split further) on random multi-level trees, coarse and default
    histograms: the bound tightens level after level and its bucket moves (the fine counts start over);
    with and without SORT_SURVIVORS (a level's survivors sorted once when at most 2b), the final nodes
    sorted (FCH) or selected."""
    from ddtree_core.kernels import tree_build

    rng = random.Random(2)
    generator = torch.Generator().manual_seed(2)
    for _ in range(12):
        batch, length, vocab = rng.choice([1, 2]), rng.choice([3, 5, 16]), rng.choice([5, 16, 40])
        max_budget = rng.choice([7, 16, 33, 64])
        logits = make_logits(rng.choice(["randn", "bf16", "ties", "peaked"]), batch, length, vocab, generator)
        topk = draft_topk(logits.to(DEVICE), min(max_budget, vocab), impl="reference")
        budgets = torch.tensor([rng.randint(1, max_budget) for _ in range(batch)], device=DEVICE)
        launch = {"FINE_BITS": rng.choice([2, 8]), "HIST_BINS": rng.choice([4, 256]),
                  "SORT_SURVIVORS": rng.random() < 0.5, "FCH": rng.choice([0, 8, 16, 64, 1024]),
                  "CUT": rng.random() < 0.7, "TAILS": False}  # fmt: skip
        ref = build_tree_from_topk(topk, budgets, max_budget=max_budget, impl="reference")
        assert_same(tree_build.build_tree_from_topk(topk, budgets, length, max_budget, launch=launch), ref)


def test_build_holding_the_chain_equals_reference():
    """Held trees (every request, or a per-request mask) on every logit flavour, K above and below the budget."""
    rng = random.Random(1)
    generator = torch.Generator().manual_seed(1)
    for _ in range(12):
        batch, length, vocab = rng.choice([1, 3]), rng.choice([1, 2, 5, 16]), rng.choice([2, 5, 40])
        max_budget = rng.choice([1, 3, 15, 16, 40])
        logits = make_logits(rng.choice(["randn", "bf16", "ties", "inf", "peaked"]), batch, length, vocab, generator)
        topk = draft_topk(logits.to(DEVICE), rng.randint(1, vocab) if rng.random() < 0.3 else min(max_budget, vocab),
                          impl="reference")  # fmt: skip
        budgets = torch.tensor([rng.randint(0, max_budget) for _ in range(batch)], device=DEVICE)
        depth = rng.randint(1, length)
        if rng.random() < 0.4:  # a request's depth limit: -inf past it (the chain stops there)
            cut = rng.randint(1, length)
            topk = DraftTopK(topk.log_probs.index_fill(1, torch.arange(cut, length, device=DEVICE), float("-inf")),
                             topk.token_ids)  # fmt: skip
        for hold in (True, torch.tensor([rng.random() < 0.5 for _ in range(batch)], device=DEVICE)):
            ref = build_tree_from_topk(topk, budgets, max_depth=depth, max_budget=max_budget, hold_chain=hold,
                                       impl="reference")  # fmt: skip
            out = build_tree_from_topk(topk, budgets, max_depth=depth, max_budget=max_budget, hold_chain=hold,
                                       impl="triton")  # fmt: skip
            assert_same(out, ref)


@pytest.mark.parametrize(
    "launch",
    [
        {"HIST_BINS": 2},
        {"HIST_BINS": 64, "LOG_BINS": 4},
        {"num_warps": 1},
        {"QCH": 2, "CHUNK": 16},
        {"SORT_RANKS": False, "FCH": 0},
        {"SORT_RANKS": False, "QCH": 2, "FCH": 0},
        {"FINE_BITS": 0, "SORT_SURVIVORS": False, "FCH": 0},
        {"FINE_BITS": 0},
        {"FINE_BITS": 3, "HIST_BINS": 2},
        {"FINE_BITS": 1, "HIST_BINS": 64, "QCH": 2, "CHUNK": 16},
        {"SORT_SURVIVORS": False},
        {"FCH": 0},
        {"FCH": 16},
        {"FCH": 16, "CUT": False},
        {"FCH": 16, "FINE_BITS": 1},
        {"FCH": 32, "FINE_BITS": 0, "HIST_BINS": 2},
        {"FCH": 512},
    ],
)
def test_build_launch_overrides_keep_the_trees(launch):
    """Launch overrides of the level build (TAILS off) change the speed only: a 2-bucket histogram (the loosest
    bound, and its top bucket ends at 2**31), other radix digits, one warp, small blocks (many loop steps), counted
    ranks (the order above N = 1024) instead of the sort, the bound's bucket split by 0-8 more bits (FINE_BITS), a
    level's survivors selected instead of sorted once (SORT_SURVIVORS off), the final nodes selected and ranked
    (FCH 0), sorted when the pool holds at most 16 (some requests) or 512 (above the default, 256 at N = 40), or
    its part below the last bound does (CUT: the 16 or 32 there; a cut of a 2-bucket or a 1-bit split's bound
    holds too many)."""
    from ddtree_core.kernels import tree_build

    generator = torch.Generator().manual_seed(3)
    for kind, vocab, budgets in (("peaked", 100, [40, 7]), ("ties", 60, [33, 0]), ("inf", 40, [20, 20])):
        topk = draft_topk(make_logits(kind, 2, 8, vocab, generator).to(DEVICE), 40, impl="reference")
        budget = torch.tensor(budgets, device=DEVICE)
        ref = build_tree_from_topk(topk, budget, max_depth=8, max_budget=40, impl="reference")
        for hold in (False, True):
            out = tree_build.build_tree_from_topk(topk, budget, 8, 40, hold, launch={"TAILS": False} | launch)
            if hold:
                ref = build_tree_from_topk(topk, budget, max_depth=8, max_budget=40, hold_chain=True, impl="reference")
            assert_same(out, ref)


def test_build_by_deviations_equals_reference():
    """TAILS (the tree as the chain and rank-0 chains below each deviation) on every logit flavour, held or not, with
    per-request budgets: exact ties (integer logits; bf16) take the passes that order a tie group by its parents'
    places. It builds most requests itself (paths) and hands the rest to the level build with nothing lost: small
    tiles (TB 32, many steps), a 2-bucket histogram (the loosest bounds), a start bound over the deviations of rank 1
    only (FR 2) and a final sort of 16 (count > cap)."""
    from ddtree_core.kernels import tree_build

    rng = random.Random(5)
    generator = torch.Generator().manual_seed(5)
    built = {}
    for launch in ({"TAILS": True}, {"TAILS": True, "TB": 32, "FS": 16, "FINE_BITS": 0, "HIST_BINS": 2, "FR": 2}):
        built[len(launch)] = [0, 0]
        for _ in range(10):
            batch, length, vocab = rng.choice([1, 3]), rng.choice([1, 3, 8, 16]), rng.choice([3, 16, 60, 300])
            max_budget = rng.choice([1, 7, 16, 40, 64])
            kind = rng.choice(["randn", "bf16", "ties", "inf", "peaked", "sharp"])
            if kind == "sharp":  # chain-like: deep trees, few deviations
                logits = torch.randn(batch, length, vocab, generator=generator) * 12
            else:
                logits = make_logits(kind, batch, length, vocab, generator)
            topk = draft_topk(logits.to(DEVICE), min(max_budget, vocab), impl="reference")
            budgets = torch.tensor([rng.randint(0, max_budget) for _ in range(batch)], device=DEVICE)
            budgets[0] = max_budget
            depth = rng.randint(1, length)
            for hold in (False, torch.tensor([rng.random() < 0.5 for _ in range(batch)], device=DEVICE)):
                ref = build_tree_from_topk(topk, budgets, max_depth=depth, max_budget=max_budget, hold_chain=hold,
                                           impl="reference")  # fmt: skip
                paths = torch.zeros(batch, dtype=torch.int32, device=DEVICE)
                out = tree_build.build_tree_from_topk(topk, budgets, depth, max_budget, hold, launch=launch,
                                                      paths=paths)  # fmt: skip
                assert_same(out, ref)
                built[len(launch)][0] += int(paths.sum())
                built[len(launch)][1] += batch - int(paths.sum())
    assert min(built[1]) > 0, built  # some by deviations, some handed over (wide drafts among them)
    assert min(built[6]) > 0, built


@pytest.mark.slow
@pytest.mark.parametrize("scale, dtype, vocab, budgets", [(12, torch.float32, 2000, [1024]),
                                                          (4.5, torch.bfloat16, 3000, [1024, 700])])  # fmt: skip
def test_build_by_deviations_at_budget_1024(scale, dtype, vocab, budgets):
    """TAILS where the default launch leaves it off (above budget 256): chain-like drafts and bf16 ties."""
    from ddtree_core.kernels import tree_build

    generator = torch.Generator().manual_seed(7)
    logits = (torch.randn(len(budgets), 16, vocab, generator=generator) * scale).to(dtype)
    topk = draft_topk(logits.to(DEVICE), 1024, impl="reference")
    budget = torch.tensor(budgets, device=DEVICE)
    paths = torch.zeros(len(budgets), dtype=torch.int32, device=DEVICE)
    out = tree_build.build_tree_from_topk(topk, budget, 16, 1024, launch={"TAILS": True}, paths=paths)
    assert_same(out, build_tree_from_topk(topk, budget, max_budget=1024, impl="reference"))
    assert paths.any()  # TAILS built at least one of them


def test_default_launch_builds_by_deviations_up_to_budget_256():
    from ddtree_core.kernels import tree_build

    assert [tree_build._launch_config(n, 1, False)["TAILS"] for n in (1, 64, 256, 257, 1024)] == [1, 1, 1, 0, 0]
    assert not tree_build._launch_config(64, 1, False, max_depth=65)["TAILS"]  # deeper: thin tiles of heads
    assert not tree_build._launch_config(64, 1, False, {"TAILS": False})["TAILS"]


def test_build_by_deviations_orders_tie_groups_by_their_parents():
    """Integer log-probs: many nodes share key and depth, and their order is their parents' (then their ranks'). The
    tails build must make these trees itself and match the reference. One sort by (key, depth, entry) fails the
    first lists; one more pass by the parents' places fails the second (budget 14), whose depth-3 ties follow
    depth-2 ties that the first pass has only just ordered. At budget 3 the first lists are wide (the chain's
    deepest node, -3, scores below the third depth-1 node, -2): the level build takes them.
    In the third lists the rank-0 children of p1 = (0, 1), -1.4999999, and p2 = (1, 0), -1.5, round to one score,
    -65.5; p1 pops first, so its child is the one kept at budget 8. Their parents lie in two groups: p2's anchor (the
    depth-1 node (1), placed before p1) must not stand in for p2. The fourth lists make groups of 20 and 40 members,
    ordered by sorts (more than GS members), the depth-2 one by parent (each parent's ranks 0 and 1 adjacent)."""
    from ddtree_core.kernels import tree_build

    first = [[-1.0, -1.0, -2.0], [-1.0, -1.0, -2.0], [-1.0, -1.0, -2.0]]
    second = [[-1.0, -1.0, -2.0], [0.0, 0.0, -1.0], [0.0, -1.0, -1.0], [0.0, -2.0, -2.0]]
    third = [[0.0, -1.0], [-0.5, -1.4999999], [-64.0, -70.0]]  # -1.4999999: the float32 just above -1.5
    fourth = [[-1.0] * 20, [-1.0] * 2 + [-5.0] * 18, [-1.0] * 2 + [-5.0] * 18]
    cases = [(first, 3, 0), (first, 5, 1), (first, 9, 1), (first, 12, 1), (second, 14, 1), (third, 8, 1)]
    for rows, budget, by_tails in cases + [(fourth, 50, 1)]:
        log_probs = torch.tensor([rows], device=DEVICE)
        topk = DraftTopK(log_probs, torch.arange(log_probs.numel(), device=DEVICE).reshape(log_probs.shape))
        ref = build_tree_from_topk(topk, budget, max_budget=budget, impl="reference")
        paths = torch.zeros(1, dtype=torch.int32, device=DEVICE)
        out = tree_build.build_tree_from_topk(topk, budget, len(rows), budget, launch={"TAILS": True}, paths=paths)
        assert_same(out, ref)
        assert paths.tolist() == [by_tails]


def test_build_rejects_bad_launch():
    from ddtree_core.kernels import tree_build

    topk = draft_topk(torch.randn(1, 2, 8, device=DEVICE), 4, impl="reference")
    with pytest.raises(ValueError, match="unknown launch keys"):
        tree_build.build_tree_from_topk(topk, 4, 2, 4, launch={"PCH": 64})
    with pytest.raises(ValueError, match="HIST_BINS"):
        tree_build.build_tree_from_topk(topk, 4, 2, 4, launch={"HIST_BINS": 48})
    with pytest.raises(ValueError, match="QCH"):
        tree_build.build_tree_from_topk(topk, 4, 2, 4, launch={"QCH": 0})
    with pytest.raises(ValueError, match="SORT_RANKS must be a bool"):
        tree_build.build_tree_from_topk(topk, 4, 2, 4, launch={"SORT_RANKS": 1})
    with pytest.raises(ValueError, match="SORT_RANKS needs N <= 1024"):
        tree_build._launch_config(2048, 9000, False, {"SORT_RANKS": True})
    for key, bad in (("TB", 3), ("TB", 32768), ("FS", 1), ("FS", 8192), ("FR", 1), ("FR", 12), ("FR", 32)):
        with pytest.raises(ValueError, match=key):
            tree_build.build_tree_from_topk(topk, 4, 2, 4, launch={key: bad})
    with pytest.raises(ValueError, match="TAILS must be a bool"):
        tree_build.build_tree_from_topk(topk, 4, 2, 4, launch={"TAILS": 1})
    with pytest.raises(ValueError, match="paths must be an int32 tensor"):
        tree_build.build_tree_from_topk(topk, 4, 2, 4, paths=torch.zeros(1, dtype=torch.int64, device=DEVICE))
    for bad in (9, -1, True, 2.0):
        with pytest.raises(ValueError, match="FINE_BITS"):
            tree_build.build_tree_from_topk(topk, 4, 2, 4, launch={"FINE_BITS": bad})
    with pytest.raises(ValueError, match="SORT_SURVIVORS must be a bool"):
        tree_build.build_tree_from_topk(topk, 4, 2, 4, launch={"SORT_SURVIVORS": 1})
    for bad in (3, -2, 8192, True):
        with pytest.raises(ValueError, match="FCH"):
            tree_build.build_tree_from_topk(topk, 4, 2, 4, launch={"FCH": bad})


def test_phase_times_from_stamps():
    """Two requests, max depth 2, both through level 0 only (level 1's slots hold the buffer's zeros); the
    cycle counter runs at 2 cycles per ns (the global timer spans 100 ns where the cycles span 200)."""
    from ddtree_core.kernels import tree_build

    row = [1000, 500, 520, 540, 580, 600, 0, 0, 0, 0, 640, 660, 700, 1100]  # F = 10
    clock = torch.tensor([row, [r + 4 if 0 < i < 13 and r else r for i, r in enumerate(row)]])
    assert clock.shape[1] == tree_build.clock_slots(2)
    times = tree_build.phase_times(clock, 2)
    assert times == pytest.approx({"level0.expand": 0.01, "level0.select": 0.01, "level0.append": 0.02,
                                   "level0.bound": 0.01, "final.select": 0.02, "final.rank": 0.01,
                                   "final.write": 0.02, "total": 0.1})  # fmt: skip


def test_clock_phase_times():
    """Three phases stamped at cycles 100, 130, 190, 200 by a program whose global timer spans 200 ns while
    its cycle counter spans 100 cycles (2 ns a cycle)."""
    from ddtree_core.kernels import clock

    stamps = torch.tensor([[5000, 100, 130, 190, 200, 5200]])
    assert clock.phase_times(stamps, ["a", "b", "c"]) == pytest.approx({"a": 0.06, "b": 0.12, "c": 0.02, "total": 0.2})
    with pytest.raises(ValueError, match="slots"):
        clock.phase_times(stamps, ["a", "b"])


def test_build_rejects_a_clock_off_cuda_or_misshapen():
    from ddtree_core.kernels import tree_build

    topk = draft_topk(torch.randn(1, 2, 8, device=DEVICE), 4, impl="reference")
    for clock in (torch.zeros(1, 4, dtype=torch.int64, device=DEVICE), torch.zeros(1, 14, device=DEVICE)):
        with pytest.raises(ValueError, match="clock"):
            tree_build.build_tree_from_topk(topk, 4, 2, 4, clock=clock)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_profiled_build_keeps_the_tree_and_stamps_every_phase():
    from ddtree_core.kernels import tree_build

    generator = torch.Generator().manual_seed(5)
    topk = draft_topk(make_logits("bf16", 3, 8, 3000, generator).cuda(), 64, impl="reference")
    clock = torch.zeros(3, tree_build.clock_slots(8), dtype=torch.int64, device="cuda")
    out = tree_build.build_tree_from_topk(topk, 64, 8, 64, clock=clock)
    assert_same(out, build_tree_from_topk(topk, 64, max_depth=8, impl="reference"))
    times = tree_build.phase_times(clock, 8)
    assert "level0.expand" in times and "final.write" in times
    assert all(us >= 0 for us in times.values()) and 0 < times["total"] < 1e4
    assert sum(us for name, us in times.items() if name != "total") <= times["total"] + 1.0  # timer ticks


def test_int_budget_and_clamped_tensor_budget():
    generator = torch.Generator().manual_seed(1)
    topk = draft_topk(make_logits("bf16", 3, 6, 60, generator).to(DEVICE), 20, impl="reference")
    assert_same(*reference_and_triton(topk, 20))
    budgets = torch.tensor([50, 3, 0], device=DEVICE)  # 50 is clamped to max_budget
    assert_same(*reference_and_triton(topk, budgets, max_budget=20))


def test_zero_width_and_empty_batch():
    generator = torch.Generator().manual_seed(2)
    topk = draft_topk(make_logits("randn", 2, 4, 10, generator).to(DEVICE), 3, impl="reference")
    assert_same(*reference_and_triton(topk, 0))
    assert_same(*reference_and_triton(topk, torch.zeros(2, dtype=torch.int64, device=DEVICE), max_budget=5))
    empty = DraftTopK(topk.log_probs[:0], topk.token_ids[:0])
    assert_same(*reference_and_triton(empty, torch.zeros(0, dtype=torch.int64, device=DEVICE), max_budget=5))


def test_build_tree_dispatch_reaches_the_kernel():
    generator = torch.Generator().manual_seed(3)
    logits = make_logits("bf16", 2, 16, 500, generator).to(DEVICE)
    # The kernel's logsumexp may differ from torch's in the last bit: compare from the same top-K lists.
    topk = draft_topk(logits, 48, impl="triton")
    assert torch.equal(topk.token_ids, draft_topk(logits, 48, impl="reference").token_ids)
    assert_same(build_tree(logits, 48, impl="triton"), build_tree_from_topk(topk, 48, impl="reference"))


def test_build_rejects_bad_inputs():
    from ddtree_core.kernels import tree_build

    log_probs = torch.zeros(1, 2, 3, device=DEVICE)
    ids = torch.zeros(1, 2, 3, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="float32"):
        tree_build.build_tree_from_topk(DraftTopK(log_probs.double(), ids), 2, 2, 2)
    with pytest.raises(ValueError, match="int64"):
        tree_build.build_tree_from_topk(DraftTopK(log_probs, ids.int()), 2, 2, 2)
    with pytest.raises(ValueError, match="max_depth"):
        tree_build.build_tree_from_topk(DraftTopK(log_probs, ids), 2, 3, 2)
    with pytest.raises(ValueError, match="max_budget"):
        tree_build.build_tree_from_topk(DraftTopK(log_probs, ids), 2, 2, 1 << 15)


def _walkable_target(tree, vocab: int, follow: float, generator: torch.Generator) -> torch.Tensor:
    """Random target tokens where, with probability `follow`, a node's token is one of its children's."""
    target = torch.randint(0, vocab, tree.parents.shape, generator=generator)
    parents, tokens = tree.parents.cpu(), tree.node_token_ids().cpu()
    for b in range(parents.shape[0]):
        for node in range(parents.shape[1] - 1, 0, -1):
            if parents[b, node] >= 0 and torch.rand(1, generator=generator).item() < follow:
                target[b, parents[b, node]] = tokens[b, node]
    return target.to(tree.parents.device)


@pytest.mark.parametrize("budgets, vocab", [([4], 2), ([64, 10, 0], 50), ([300, 1], 1000), ([255, 255], 3)])
def test_walk_equals_reference(budgets, vocab):
    generator = torch.Generator().manual_seed(sum(budgets))
    logits = make_logits("bf16", len(budgets), 16, vocab, generator).to(DEVICE)
    tree = build_tree(logits, torch.tensor(budgets, device=DEVICE), impl="reference")
    for follow in (0.0, 0.5, 0.9, 1.0):
        target = _walkable_target(tree, vocab, follow, generator)
        out = verify.follow_tree(tree, target, impl="triton")
        assert_same(out, verify.follow_tree(tree, target, impl="reference"))


def test_walk_worked_example():
    log_probs = torch.tensor([[[-0.1, -2.5], [-0.2, -1.9]]], device=DEVICE)
    token_ids = torch.tensor([[[10, 11], [20, 21]]], device=DEVICE)  # a b | c d
    tree = build_tree_from_topk(DraftTopK(log_probs, token_ids), 4, impl="reference")
    target = torch.tensor([[10, 20, 7, 7, 7]], device=DEVICE)  # root -> a -> c, then 7 matches nothing
    walk = verify.follow_tree(tree, target, impl="triton")
    assert walk.accepted.tolist() == [[0, 1, 2]]
    assert walk.accept_lens.tolist() == [3]
    assert walk.bonus.tolist() == [7]


def test_mask_worked_example():
    from ddtree_core.kernels import tree_mask

    log_probs = torch.tensor([[[-0.1, -2.5], [-0.2, -1.9]]], device=DEVICE)
    token_ids = torch.tensor([[[10, 11], [20, 21]]], device=DEVICE)
    tree = build_tree_from_topk(DraftTopK(log_probs, token_ids), 4, impl="reference")
    out = tree_mask.tree_mask(tree, torch.tensor([100], device=DEVICE))
    expected = [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 0, 0, 1]]
    assert out.mask.int().tolist() == [expected]
    assert out.positions.tolist() == [[100, 101, 102, 102, 101]]


@pytest.mark.parametrize(
    "budgets, max_depth",
    [([1], 1), ([7, 0, 3], 4), ([64, 17], 16), pytest.param([1024, 300], 16, marks=pytest.mark.slow)],
)
def test_mask_equals_reference(budgets, max_depth):
    from ddtree_core.kernels import tree_mask

    generator = torch.Generator().manual_seed(max_depth)
    logits = make_logits("peaked", len(budgets), max_depth, 200, generator).to(DEVICE)
    tree = build_tree(logits, torch.tensor(budgets, device=DEVICE), impl="reference")
    roots = torch.randint(0, 4096, (len(budgets),), generator=generator).to(DEVICE)
    out = tree_mask.tree_mask(tree, roots)
    assert torch.equal(out.mask, mask.ancestor_mask(tree, impl="reference"))
    assert torch.equal(out.positions, encoding.positions(tree, roots))
    assert torch.equal(tree_mask.ancestor_mask(tree), out.mask)


@pytest.mark.parametrize("launch", [{"ROWS": 1, "COLS": 16, "num_warps": 1}, {"ROWS": 8, "COLS": 64}, {"ROWS": 128}])
def test_mask_launch_overrides_keep_the_mask(launch):
    """Rows per program (one to more than the tree), columns per store and warps change the speed only."""
    from ddtree_core.kernels import tree_mask

    generator = torch.Generator().manual_seed(5)
    logits = make_logits("peaked", 2, 6, 100, generator).to(DEVICE)
    tree = build_tree(logits, torch.tensor([40, 9], device=DEVICE), impl="reference")
    roots = torch.tensor([3, 70], device=DEVICE)
    out = tree_mask.tree_mask(tree, roots, launch=launch)
    assert torch.equal(out.mask, mask.ancestor_mask(tree, impl="reference"))
    assert torch.equal(out.positions, encoding.positions(tree, roots))
    for bad in ({"ROWS": 3}, {"rows": 8}, {"num_warps": True}, {"ROWS": 2, "num_warps": 4}):
        with pytest.raises(ValueError, match="ROWS|unknown|num_warps"):
            tree_mask.tree_mask(tree, roots, launch=bad)


def test_pdl_is_off_where_it_cannot_run():
    """Programmatic dependent launch: never on a CPU or under the interpreter (no PTX runs there), and
    configure(False) turns it off on CUDA too; off, the kernels' PDL flag is False and no launch_pdl is passed.
    DDTREE_PDL=0 is the entry points' way to say so (from_environ); the kernels read no environment."""
    from ddtree_core.kernels import pdl

    assert pdl.from_environ({}) and pdl.from_environ({"DDTREE_PDL": "1"}) and not pdl.from_environ({"DDTREE_PDL": "0"})
    assert pdl.options(torch.device("cpu")) == {"PDL": False}
    try:
        pdl.configure(False)
        assert pdl.options(torch.device("cpu")) == {"PDL": False}
        if torch.cuda.is_available():
            assert pdl.options(torch.device("cuda")) == {"PDL": False}
            pdl.configure(True)
            on = torch.cuda.get_device_capability()[0] >= 9
            assert pdl.options(torch.device("cuda")) == ({"PDL": True, "launch_pdl": True} if on else {"PDL": False})
    finally:
        pdl.configure(True)


def test_kernels_read_no_environment():
    """Configuration reaches the kernels as arguments or pdl.configure, never from os.environ (Triton's own
    TRITON_INTERPRET fallback for Triton < 3.4 aside)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "ddtree_core" / "kernels"
    readers = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"):
                line = path.read_text().splitlines()[node.lineno - 1]
                if "TRITON_INTERPRET" not in line:
                    readers.append(f"{path.name}:{node.lineno}")
    assert not readers, f"kernels read the environment at {readers}"


def test_kernel_bench_smoke(tmp_path):
    import csv
    import json

    from ddbench.kernels import kernel_bench

    config = kernel_bench.smoke_config(DEVICE, seed=0)
    results = kernel_bench.run(config, tmp_path, echo=lambda line: None)
    rows = list(csv.DictReader(open(tmp_path / "cells.csv")))
    assert len(rows) == len(results) == len(config.batches) * len(config.budgets) * len(config.vocabs) * 3
    assert {r.impl for r in results} == {"reference", "torch", "triton"}
    assert [r.note for r in results if r.note] == []
    for cell in {(r.batch, r.budget, r.vocab) for r in results}:
        shapes = {(r.mean_nodes, r.mean_depth) for r in results if (r.batch, r.budget, r.vocab) == cell}
        assert len(shapes) == 1, (cell, shapes)  # every impl built the same trees
    # a sharper drafter gives deeper trees of the same size
    sharp = kernel_bench.run(dataclasses.replace(config, impls=("torch",), logit_scale=30.0), tmp_path / "sharp",
                             echo=lambda line: None)  # fmt: skip
    flat = {(r.batch, r.budget, r.vocab): r.mean_depth for r in results if r.impl == "torch"}
    assert all(r.logit_scale == 30.0 and r.mean_depth >= flat[(r.batch, r.budget, r.vocab)] for r in sharp)
    assert any(r.mean_depth > flat[(r.batch, r.budget, r.vocab)] for r in sharp)
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["environment"]["packages"]["torch"] and len(record["cells"]) == len(rows)
    if DEVICE == "cuda":
        assert all(r.graph_captured and r.sync_free for r in results if r.impl != "reference")
    else:
        assert not (tmp_path / "kernels.csv").exists()  # --profile times CUDA kernels only


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs CUDA")
def test_kernel_bench_profile_names_every_kernel_of_the_triton_round(tmp_path):
    import csv

    from ddbench.kernels import kernel_bench

    config = dataclasses.replace(kernel_bench.smoke_config(DEVICE, seed=0), impls=("triton",), profile=True)
    kernel_bench.run(config, tmp_path, echo=lambda line: None)
    rows = list(csv.DictReader(open(tmp_path / "kernels.csv")))
    for cell in {(r["batch"], r["budget"]) for r in rows}:
        mine = {r["kernel"]: (float(r["launches"]), float(r["us"])) for r in rows if (r["batch"], r["budget"]) == cell}
        assert {"_scan_kernel", "_select_kernel", "_build_kernel", "_mask_kernel", "_walk_kernel"} <= set(mine)
        assert all(launches >= 1 and us > 0 for launches, us in mine.values())
        assert mine["all"][1] == pytest.approx(sum(us for name, (_, us) in mine.items() if name != "all"), abs=0.1)

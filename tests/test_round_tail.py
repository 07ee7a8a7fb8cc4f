"""rounds.round_tail: the fused Triton kernel (kernels/round_tail.py) equals the composition it replaces,
follow_tree -> committed_path -> round_stats_rows, on hand-drawn and random rounds.

Integer outputs are compared bit for bit. The expected accept length (stats column 4, a float32 sum of
exp(score) over the W columns) is compared within the rounding of such a sum: two summation orders of W
positive terms differ by at most about (W - 1) eps relatively, and exp by an ulp or two.

On a machine without CUDA the kernel runs under the Triton interpreter (conftest.py).
"""

import dataclasses

import pytest
import torch

pytest.importorskip("triton")

from trees import (  # noqa: E402
    RecordOps,
    assert_same,
    guided_targets,
    needs_cuda,
    replay_in_cuda_graph,
    worked_example_topk,
)

from ddtree_core import DraftTopK, DraftTree, build_tree_from_topk, draft_topk  # noqa: E402
from ddtree_core.sglang.rounds import STATS_COLUMNS, round_tail  # noqa: E402

EXPECTED = STATS_COLUMNS.index("expected_accept_len_bits")
MISS_TOKEN = 10_000  # no tree or top-K list holds it (vocabularies below are smaller)


def exact_columns(stats):
    """The stats columns compared bit for bit: all but the expected accept length."""
    return [c for c in range(stats.shape[1]) if c != EXPECTED]


def assert_tail_equal(fused, composed, width):
    """Walk and path equal bit for bit; stats too, but for the expected accept length of W = `width` terms."""
    (walk, path, stats), (ref_walk, ref_path, ref_stats) = fused, composed
    assert_same(walk, ref_walk)
    assert_same(path, ref_path)
    assert stats.dtype == ref_stats.dtype == torch.int32 and stats.shape == ref_stats.shape
    assert torch.equal(stats[:, exact_columns(stats)], ref_stats[:, exact_columns(stats)]), (stats, ref_stats)
    as_float = lambda rows: rows[:, EXPECTED].view(torch.float32)
    torch.testing.assert_close(as_float(stats), as_float(ref_stats), rtol=(width + 2) * 2**-23, atol=0)


def both(tree, target, topk, prefix, slots):
    """The fused tail and the composed one (torch impl), after checking torch against the reference."""
    composed = round_tail(tree, target, topk, prefix, cache_loc=slots, impl="torch")
    reference = round_tail(tree, target, topk, prefix, cache_loc=slots, impl="reference")
    assert_same(composed[0], reference[0])
    assert_same(composed[1], reference[1])
    assert torch.equal(composed[2], reference[2])
    return round_tail(tree, target, topk, prefix, cache_loc=slots, impl="triton"), composed


def distinct_slots(batch, width, generator):
    """[B, W] int64 KV slots, all distinct and none 0 (SGLang's dummy slot), as a KV allocator hands out."""
    return (torch.randperm(1 << 20, generator=generator)[: batch * width] + 1).view(batch, width)


def worked_round(batch):
    # root ─┬─ 10 ─┬─ 12     nodes 1=10, 2=12, 3=13, 4=11, then one padding column (W = 6)
    #       │      └─ 13     top-K lists: depth 1 [10, 11], depth 2 [12, 13]
    #       └─ 11
    topk = worked_example_topk()
    topk = DraftTopK(topk.log_probs.expand(batch, -1, -1), topk.token_ids.expand(batch, -1, -1))
    return topk, build_tree_from_topk(topk, 4, max_budget=5, impl="reference")


def test_worked_example_hand_drawn():
    topk, tree = worked_round(batch=3)
    target = torch.tensor([[10, 13, 7, 7, 7, 7], [99, 0, 0, 0, 0, 0], [11, 0, 0, 0, 12, 0]])
    slots = 100 + torch.arange(3 * 6).view(3, 6)  # request b's column c writes KV slot 100 + 6b + c
    fused, composed = both(tree, target, topk, torch.tensor([3, 10, 0]), slots)
    assert_tail_equal(fused, composed, tree.width)
    walk, path, stats = fused
    # root→10→13, bonus 7 | no child matches, bonus 99 | root→11, bonus 12 (in the depth-2 list, rank 0)
    assert walk.accepted.tolist() == [[0, 1, 3], [0, -1, -1], [0, 4, -1]]
    assert walk.accept_lens.tolist() == [3, 1, 2] and walk.bonus.tolist() == [7, 99, 12]
    assert path.accept_index.tolist() == [[0, 1, 3], [6, -1, -1], [12, 16, -1]]
    assert path.hidden_rows.tolist() == [[0, 1, 3], [6, 6, 6], [12, 16, 12]]
    assert path.positions.tolist() == [[3, 4, 5], [10, 11, 12], [0, 1, 2]]
    assert path.out_tokens.tolist() == [[10, 13, 7], [99, 0, 0], [11, 12, 0]]
    # KV move: verify slot k <- the slot of path node k (node 3 -> slot 2 of request 0, node 4 -> slot 1
    # of request 2); identity pairs stay, padding pairs are 0 -> 0
    assert path.kv_dst.tolist() == [[100, 101, 102], [106, 0, 0], [112, 113, 0]]
    assert path.kv_src.tolist() == [[100, 101, 103], [106, 0, 0], [112, 116, 0]]
    assert path.commit_lens.tolist() == [3, 1, 2] and path.new_seq_lens.tolist() == [6, 11, 2]
    # accept_len, num_nodes, depth_reached, top_k; ranks at depths 1, 2 (K = 2: a miss; -1: past the walk)
    assert stats[:, exact_columns(stats)].tolist() == [[3, 4, 2, 2, 0, 1], [1, 4, 2, 2, 2, -1], [2, 4, 2, 2, 1, 0]]
    forecast = 1 + sum(torch.tensor([-0.1, -0.3, -2.0, -2.5]).exp().tolist())
    assert stats[:, EXPECTED].view(torch.float32).tolist() == pytest.approx([forecast] * 3, rel=1e-6)


def test_root_only_trees():
    tree = DraftTree.root_only(batch=2, max_depth=3, device="cpu")
    topk = DraftTopK(torch.zeros(2, 3, 4), torch.tensor([5, 6, 7, 8]).expand(2, 3, 4))
    prefix, slots = torch.tensor([4, 0], dtype=torch.int32), torch.tensor([[50], [60]])
    fused, composed = both(tree, torch.tensor([[7], [9]]), topk, prefix, slots)
    assert_tail_equal(fused, composed, tree.width)
    walk, path, stats = fused
    assert walk.accepted.tolist() == [[0, -1, -1, -1]] * 2 and walk.bonus.tolist() == [7, 9]
    # W = 1 < P = 4: only the root's slot is a pair
    assert path.kv_dst.tolist() == path.kv_src.tolist() == [[50, 0, 0, 0], [60, 0, 0, 0]]
    assert path.out_tokens.tolist() == [[7, 0, 0, 0], [9, 0, 0, 0]] and path.new_seq_lens.tolist() == [5, 1]
    assert stats[:, exact_columns(stats)].tolist() == [[1, 0, 0, 4, 2, -1, -1], [1, 0, 0, 4, 4, -1, -1]]


def random_round(seed, batch, depth, k, budgets, tree_depth=None, vocab=300, sampled=False):
    """Top-K lists [batch, depth, k] of random logits, the reference trees of `budgets` (width: the
    largest budget + 1, or more), guided target tokens (random vocabulary tokens when `sampled`), prefix
    lens, distinct verify KV slots."""
    generator = torch.Generator().manual_seed(seed)
    scale = torch.linspace(1.0, 8.0, batch).view(-1, 1, 1)
    topk = draft_topk(torch.randn(batch, depth, vocab, generator=generator) * scale, k, impl="reference")
    width = max(budgets) + 1 + seed % 3
    tree = build_tree_from_topk(
        topk, torch.tensor(budgets), max_depth=tree_depth or depth, max_budget=width - 1, impl="reference"
    )
    target = guided_targets(tree, generator, vocab if sampled else None, stray=0.2 if sampled else 0.02)
    prefix = torch.randint(0, 5000, (batch,), generator=generator)
    slots = distinct_slots(batch, tree.width, generator)
    return topk, tree, target, prefix.to(torch.int32 if seed % 2 else torch.int64), slots


def random_cases(count):
    """Seeded draws over batch 1..8, depths 1..15, K 1..256, budgets 0..256 (some requests root-only)."""
    generator = torch.Generator().manual_seed(1234)
    draw = lambda lo, hi: int(torch.randint(lo, hi + 1, (), generator=generator))
    cases = []
    for seed in range(count):
        batch, depth, k = draw(1, 8), draw(1, 15), draw(1, 256)
        budgets = [draw(0, 256) if draw(0, 3) else 0 for _ in range(batch)]
        budgets[0] = max(budgets[0], 1)
        cases.append(pytest.param(seed, batch, depth, k, budgets, draw(1, depth), bool(seed % 2), id=f"case{seed}"))
    return cases


EDGES = [  # seed, batch, depth, K, budgets, tree depth, sampled
    pytest.param(0, 1, 1, 1, [1], 1, False, id="b1-d1-k1"),
    pytest.param(1, 1, 15, 1, [15], 15, False, id="chain-k1"),
    pytest.param(2, 8, 15, 256, [256, 0, 1, 64, 255, 0, 17, 256], 15, False, id="b8-d15-k256"),
    pytest.param(3, 4, 15, 256, [256, 200, 3, 0], 15, True, id="sampled-k256"),
    pytest.param(4, 3, 15, 5, [100, 40, 9], 4, True, id="tree-shallower-than-lists"),
    pytest.param(5, 5, 6, 200, [0, 0, 0, 0, 0], 6, False, id="all-root-only"),
]


@pytest.mark.parametrize("seed, batch, depth, k, budgets, tree_depth, sampled", EDGES + random_cases(12))
def test_fused_equals_composed_on_random_rounds(seed, batch, depth, k, budgets, tree_depth, sampled):
    topk, tree, target, prefix, slots = random_round(seed, batch, depth, k, budgets, tree_depth, sampled=sampled)
    fused, composed = both(tree, target, topk, prefix, slots)
    assert_tail_equal(fused, composed, tree.width)
    path, on_path = fused[1], fused[0].accepted >= 0
    assert bool(on_path.any(1).all()) and bool((path.kv_dst[~on_path] == 0).all())
    assert bool((path.kv_src[~on_path] == 0).all()) and bool((path.kv_src[on_path] > 0).all())


def test_a_miss_at_every_depth():
    """Request b follows the drafter's favourite token for b steps, then the target picks a token no list
    holds: tau = b + 1, ranks 0 up to depth b, a miss (K) at depth b + 1, -1 past it."""
    depth, k, batch = 15, 8, 16
    logits = torch.randn(batch, depth, 50, generator=torch.Generator().manual_seed(7))
    logits[..., 3] += 20.0  # token 3 leads every list: the tree holds the chain 3, 3, 3, ...
    topk = draft_topk(logits, k, impl="reference")
    tree = build_tree_from_topk(topk, 40, impl="reference")
    stops = torch.arange(batch).unsqueeze(1)
    target = torch.where(tree.depths < stops, 3, MISS_TOKEN)
    slots = distinct_slots(batch, tree.width, torch.Generator().manual_seed(8))
    fused, composed = both(tree, target, topk, torch.zeros(batch, dtype=torch.int64), slots)
    assert_tail_equal(fused, composed, tree.width)
    walk, _, stats = fused
    assert walk.accept_lens.tolist() == list(range(1, batch + 1))
    ranks = stats[:, len(STATS_COLUMNS) :].tolist()
    for b in range(batch):
        assert ranks[b] == ([0] * b + [k] + [-1] * depth)[:depth], b


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_shape_mismatch_is_an_error(impl):
    topk, tree = worked_round(batch=1)
    good, short = torch.zeros(1, 6, dtype=torch.int64), torch.zeros(1, 5, dtype=torch.int64)
    with pytest.raises(ValueError, match="target_tokens"):
        round_tail(tree, short, topk, torch.zeros(1), cache_loc=good, impl=impl)
    with pytest.raises(ValueError, match="cache_loc"):
        round_tail(tree, good, topk, torch.zeros(1), cache_loc=short, impl=impl)


def test_fused_path_is_one_launch_and_allocations(monkeypatch):
    """The fused call's torch work is allocating its outputs and viewing them; its compute is one launch.
    (The launch is recorded, not run: the interpreter's own copies would show up as torch ops.)"""
    from ddtree_core.kernels import round_tail as kernel

    launches = []
    monkeypatch.setattr(kernel, "_round_tail_kernel", {(3,): lambda *args, **kwargs: launches.append(args)})
    topk, tree, target, prefix, slots = random_round(0, 3, 6, 16, [20, 0, 7], 6)
    with RecordOps() as ops:
        round_tail(tree, target, topk, prefix, cache_loc=slots, impl="triton")
    assert len(launches) == 1
    assert sorted(ops.names) == ["empty"] * 4 + ["unbind"] * 2, ops.names
    with RecordOps() as ops:
        round_tail(tree, target, topk, prefix, cache_loc=slots, impl="torch")
    assert len(ops.names) > 20  # the composition it replaces: one launch per op on a GPU


def _to(obj, device):
    return dataclasses.replace(
        obj, **{f.name: getattr(obj, f.name).to(device) for f in dataclasses.fields(obj) if f.name != "max_depth"}
    )


@pytest.mark.gpu
@needs_cuda
def test_fused_tail_captures_in_cuda_graph():
    topk, tree, target, prefix, slots = random_round(2, 8, 15, 256, [256, 0, 1, 64, 255, 0, 17, 256], 15, sampled=True)
    composed = round_tail(tree, target, topk, prefix, cache_loc=slots, impl="torch")
    args, slots = (_to(tree, "cuda"), target.cuda(), _to(topk, "cuda"), prefix.cuda()), slots.cuda()
    walk, path, stats = replay_in_cuda_graph(lambda: round_tail(*args, cache_loc=slots, impl="triton"))
    assert_tail_equal((_to(walk, "cpu"), _to(path, "cpu"), stats.cpu()), composed, tree.width)


def test_serving_falls_back_to_torch_when_the_kernel_misbehaves(monkeypatch):
    """The worker's startup check: the fused tail serves only if it agrees with the torch path here."""
    import dataclasses

    from ddtree_core.kernels import round_tail as kernel
    from ddtree_core.sglang import rounds

    assert rounds.checked_tail_impl("cpu", impl="triton") == ("triton", None)
    assert rounds.checked_tail_impl("cpu") == ("torch", None)  # no CUDA: torch is preferred anyway
    real = kernel.round_tail
    disagreeing = ("torch", "round_tail kernel disagrees with the torch path")
    for field in ("out_tokens", "kv_dst", "kv_src"):

        def off_by_one(*args, field=field, **kwargs):
            walk, path, stats = real(*args, **kwargs)
            return walk, dataclasses.replace(path, **{field: getattr(path, field) + 1}), stats

        monkeypatch.setattr(kernel, "round_tail", off_by_one)
        assert rounds.checked_tail_impl("cpu", impl="triton") == disagreeing, field

    def broken(*args, **kwargs):
        raise RuntimeError("no such PTX")

    monkeypatch.setattr(kernel, "round_tail", broken)
    impl, why = rounds.checked_tail_impl("cpu", impl="triton")
    assert impl == "torch" and why == "round_tail kernel failed: RuntimeError: no such PTX"

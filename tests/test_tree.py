"""build_tree / draft_topk: hand-drawn trees, and torch == reference on random and tied logits."""

import math

import pytest
import torch
from trees import IMPLS, assert_same

from ddtree_core import DraftTopK, build_tree, build_tree_from_topk, draft_topk, ops


def topk_of(log_probs, token_ids=None):
    log_probs = torch.tensor(log_probs, dtype=torch.float32).unsqueeze(0)
    if token_ids is None:
        token_ids = torch.arange(log_probs.shape[-1]).expand(log_probs.shape)
    return DraftTopK(log_probs=log_probs, token_ids=torch.as_tensor(token_ids).reshape(log_probs.shape))


@pytest.mark.parametrize("impl", IMPLS)
def test_worked_example(impl):
    # The tree.py docstring example: a=10, b=11 at depth 1; c=12, d=13 at depth 2.
    topk = topk_of([[-0.1, -2.5], [-0.2, -1.9]], [[10, 11], [12, 13]])
    tree = build_tree_from_topk(topk, 4, impl=impl)
    assert tree.token_ids.tolist() == [[10, 12, 13, 11]]
    assert tree.parents.tolist() == [[-1, 0, 1, 1, 0]]
    assert tree.depths.tolist() == [[0, 1, 2, 2, 1]]
    assert tree.ranks.tolist() == [[-1, 0, 0, 1, 1]]
    assert tree.num_nodes.tolist() == [4]
    assert torch.allclose(tree.scores, torch.tensor([[0.0, -0.1, -0.3, -2.0, -2.5]]))


@pytest.mark.parametrize("impl", IMPLS)
def test_budget_truncates_pop_order_and_pads(impl):
    topk = topk_of([[-0.1, -2.5], [-0.2, -1.9]], [[10, 11], [12, 13]])
    tree = build_tree_from_topk(topk, torch.tensor([2]), max_budget=3, impl=impl)
    assert tree.token_ids.tolist() == [[10, 12, -1]]
    assert tree.parents.tolist() == [[-1, 0, 1, -1]]
    assert tree.depths.tolist() == [[0, 1, 2, -1]]
    assert tree.scores[0, 3] == -math.inf


@pytest.mark.parametrize("impl", IMPLS)
def test_max_depth_one_is_a_fan(impl):
    topk = topk_of([[-0.5, -1.0, -3.0], [-0.1, -2.0, -4.0]])
    tree = build_tree_from_topk(topk, 3, max_depth=1, impl=impl)
    assert tree.parents.tolist() == [[-1, 0, 0, 0]]
    assert tree.token_ids.tolist() == [[0, 1, 2]]
    assert tree.max_depth == 1


@pytest.mark.parametrize("impl", IMPLS)
def test_confident_drafter_is_a_chain(impl):
    # log-prob 0 at rank 0 everywhere: every child ties its parent; the parent pops first.
    topk = topk_of([[0.0, -9.0]] * 4)
    tree = build_tree_from_topk(topk, 4, impl=impl)
    assert tree.parents.tolist() == [[-1, 0, 1, 2, 3]]
    assert tree.scores.tolist() == [[0.0] * 5]


@pytest.mark.parametrize("impl", IMPLS)
def test_equal_scores_pop_shallower_then_earlier_parent_then_lower_rank(impl):
    # depth 1: x=-1, y=-1 (tie, rank order); depth 2: p=-1, q=-1.
    # Scores: x -1, y -1, x.p -2, x.q -2, y.p -2, y.q -2. Depth first, then parent x before y, then rank.
    topk = topk_of([[-1.0, -1.0], [-1.0, -1.0]], [[1, 2], [3, 4]])
    tree = build_tree_from_topk(topk, 6, impl=impl)
    assert tree.token_ids.tolist() == [[1, 2, 3, 4, 3, 4]]
    assert tree.parents.tolist() == [[-1, 0, 0, 1, 1, 2, 2]]


@pytest.mark.parametrize("impl", IMPLS)
def test_more_budget_than_nodes(impl):
    topk = topk_of([[-0.1, -3.0]])  # V = 2, L = 1: only two nodes exist
    tree = build_tree_from_topk(topk, 5, impl=impl)
    assert tree.num_nodes.tolist() == [2]
    assert tree.parents.tolist() == [[-1, 0, 0, -1, -1, -1]]


@pytest.mark.parametrize("impl", IMPLS)
def test_zero_budget_is_the_root_alone(impl):
    tree = build_tree(torch.randn(3, 4, 9), 0, impl=impl)
    assert tree.parents.tolist() == [[-1]] * 3
    assert tree.token_ids.shape == (3, 0)
    assert tree.num_nodes.tolist() == [0, 0, 0]


def test_topk_ties_take_smaller_ids_first():
    logits = torch.tensor([[[1.0, 3.0, 3.0, 0.0, 3.0, 2.0]]])
    for impl in IMPLS:
        topk = draft_topk(logits, 2, impl=impl)
        assert topk.token_ids.tolist() == [[[1, 2]]], impl
        topk = draft_topk(logits, 4, impl=impl)
        assert topk.token_ids.tolist() == [[[1, 2, 4, 5]]], impl


def test_draft_temperature_rescales_log_probs():
    logits = torch.randn(1, 2, 7)
    topk = draft_topk(logits, 7, draft_temperature=2.0, impl="torch")
    expected = torch.log_softmax(logits / 2.0, dim=-1).sort(dim=-1, descending=True).values
    assert torch.allclose(topk.log_probs, expected)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("hold_chain", [False, True])
@pytest.mark.parametrize("kind", ["normal", "ties", "sharp"])
def test_a_prefix_is_the_tree_of_the_smaller_budget(impl, hold_chain, kind):
    """DraftTree.prefix(b) of a tree built at N equals the tree built at b (top-K of b, per-request budgets
    capped at b): the plugin builds once at its largest budget and cuts each round to the chosen one."""
    generator = torch.Generator().manual_seed(7)
    logits = make_logits(4, 6, 50, kind, generator)
    budgets = torch.tensor([40, 3, 17, 0])
    big = build_tree(logits, budgets, max_depth=5, hold_chain=hold_chain, impl=impl)
    assert big.width == 41
    for b in (0, 1, 2, 7, 15, 16, 39):
        small = build_tree_from_topk(
            draft_topk(logits, max(1, b)), budgets.clamp(max=b), max_depth=5, max_budget=b, hold_chain=hold_chain,
            impl=impl,
        )  # fmt: skip
        assert_same(big.prefix(b), small)
    assert big.prefix(40) is big and big.prefix(64) is big
    with pytest.raises(ValueError, match="budget >= 0"):
        big.prefix(-1)


def test_bad_arguments():
    logits = torch.randn(2, 4, 9)
    with pytest.raises(ValueError, match="budget"):
        build_tree(logits, -1)
    with pytest.raises(ValueError, match="max_depth"):
        build_tree(logits, 3, max_depth=5)
    with pytest.raises(ValueError, match="draft_temperature"):
        build_tree(logits, 3, draft_temperature=0.0)
    with pytest.raises(ValueError, match="tensor budget"):
        build_tree(logits, torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="unknown implementation"):
        build_tree(logits, 3, impl="cuda")
    with pytest.raises(ValueError, match="draft_logits"):
        build_tree(torch.randn(9), 3)


def test_forced_impl_is_used():
    logits = torch.randn(1, 3, 5)
    with ops.force("reference"):
        assert ops.resolve(None, "cpu") == "reference"
        tree = build_tree(logits, 4)
    assert_same(tree, build_tree(logits, 4, impl="torch"))
    assert ops.resolve(None, "cpu") == "torch"


CASES = [  # (batch, L, vocab, budgets, max_depth, logits kind)
    (1, 16, 32, [1], 16, "normal"),
    (2, 8, 100, [2, 7], 8, "normal"),
    (3, 16, 500, [15, 16, 64], 12, "bf16"),
    (2, 5, 6, [30, 3], 5, "ties"),
    (4, 16, 1000, [255, 0, 64, 128], 16, "bf16"),
    (1, 3, 4, [64], 3, "neginf"),
    (1, 16, 2048, [1024], 16, "sharp"),
    (2, 16, 152064, [256, 64], 16, "bf16"),
]


def make_logits(batch, length, vocab, kind, generator):
    logits = torch.randn(batch, length, vocab, generator=generator)
    if kind == "bf16":
        return (logits * 4).bfloat16().float()
    if kind == "ties":
        return logits.round()
    if kind == "neginf":
        masked = torch.rand(logits.shape, generator=generator) < 0.5
        masked[..., 0] = False  # a row needs one finite logit to be a distribution
        return logits.masked_fill(masked, -math.inf)
    if kind == "sharp":
        return logits * 12
    return logits


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"b{c[0]}-L{c[1]}-V{c[2]}-{c[5]}")
def test_torch_equals_reference(case):
    batch, length, vocab, budgets, max_depth, kind = case
    generator = torch.Generator().manual_seed(sum(budgets) + vocab)
    logits = make_logits(batch, length, vocab, kind, generator)
    budget = torch.tensor(budgets)
    reference = build_tree(logits, budget, max_depth=max_depth, impl="reference")
    assert_same(build_tree(logits, budget, max_depth=max_depth, impl="torch"), reference)
    assert reference.num_nodes.tolist() == [min(b, len_possible(vocab, max_depth, b)) for b in budgets]


def len_possible(vocab, depth, budget):
    k = min(budget, vocab)
    return sum(k**d for d in range(1, depth + 1))


def test_torch_equals_reference_fuzz():
    generator = torch.Generator().manual_seed(1)
    for _ in range(60):
        batch, length, vocab = (int(torch.randint(1, n, (1,), generator=generator)) for n in (4, 17, 80))
        vocab += 1
        kind = ["normal", "bf16", "ties", "neginf", "sharp"][int(torch.randint(0, 5, (1,), generator=generator))]
        logits = make_logits(batch, length, vocab, kind, generator)
        budget = torch.randint(0, 70, (batch,), generator=generator)
        depth = int(torch.randint(1, length + 1, (1,), generator=generator))
        reference = build_tree(logits, budget, max_depth=depth, impl="reference")
        assert_same(build_tree(logits, budget, max_depth=depth, impl="torch"), reference)


def test_tree_invariants():
    tree = build_tree(torch.randn(3, 16, 300), torch.tensor([100, 37, 1]), impl="torch")
    for b in range(3):
        n = int(tree.num_nodes[b])
        parents, depths, scores = tree.parents[b], tree.depths[b], tree.scores[b]
        assert (parents[1 : n + 1] < torch.arange(1, n + 1)).all()  # parents pop first
        assert (depths[1 : n + 1] == depths[parents[1 : n + 1]] + 1).all()
        assert (scores[1 : n + 1] <= scores[parents[1 : n + 1]]).all()
        assert (scores[1 : n + 1].diff() <= 0).all()  # pop order is score order
        for parent in range(n + 1):  # children of a node: ranks 0..c-1, distinct tokens
            children = (parents[: n + 1] == parent).nonzero().flatten()
            assert tree.ranks[b, children].tolist() == list(range(len(children)))
            assert len(set(tree.token_ids[b, children - 1].tolist())) == len(children)


@pytest.mark.parametrize("impl", IMPLS)
def test_holding_the_chain_keeps_it_first(impl):
    # a -0.1, b -0.5 | c -1.0, d -1.2. Best-first at budget 2 keeps a, b; held, the chain a.c pops first.
    topk = topk_of([[-0.1, -0.5], [-1.0, -1.2]], [[10, 11], [12, 13]])
    plain = build_tree_from_topk(topk, 3, impl=impl)
    assert plain.token_ids.tolist() == [[10, 11, 12]]  # a, b, a.c (-1.1)
    assert plain.parents.tolist() == [[-1, 0, 0, 1]]
    held = build_tree_from_topk(topk, 3, hold_chain=True, impl=impl)
    assert held.token_ids.tolist() == [[10, 12, 11]]  # a, a.c, then the best other: b (-0.5)
    assert held.parents.tolist() == [[-1, 0, 1, 0]]
    assert held.depths.tolist() == [[0, 1, 2, 1]]
    assert torch.allclose(held.scores, torch.tensor([[0.0, -0.1, -1.1, -0.5]]))
    chain = build_tree_from_topk(topk, 2, hold_chain=True, impl=impl)  # budget = depth: the chain alone
    assert chain.token_ids.tolist() == [[10, 12]] and chain.parents.tolist() == [[-1, 0, 1]]
    per_request = build_tree_from_topk(
        DraftTopK(topk.log_probs.expand(2, -1, -1), topk.token_ids.expand(2, -1, -1)),
        3, hold_chain=torch.tensor([False, True]), impl=impl,
    )  # fmt: skip
    assert per_request.token_ids.tolist() == [[10, 11, 12], [10, 12, 11]]


def test_held_tree_is_the_chain_plus_the_best_other_nodes():
    """A held tree of budget n >= depth: the chain, then the n - depth best other nodes of the plain
    tree in its order; below the depth, the chain's first n nodes. torch == reference throughout."""
    generator = torch.Generator().manual_seed(3)
    for _ in range(40):
        length, vocab = (int(torch.randint(low, high, (1,), generator=generator)) for low, high in ((1, 9), (2, 40)))
        logits = make_logits(2, length, vocab, "normal", generator) * torch.tensor([1.0, 5.0]).view(2, 1, 1)
        budget = int(torch.randint(0, 40, (1,), generator=generator))
        held = build_tree(logits, budget, hold_chain=True, impl="reference")
        assert_same(build_tree(logits, budget, hold_chain=torch.tensor([True, True]), impl="torch"), held)
        plain = build_tree(logits, 10**4 if vocab**length < 10**4 else 4000, impl="torch")
        for b in range(2):
            paths = tree_paths(held, b)
            chain = [tuple(int(t) for t in logits[b, :d].argmax(-1)) for d in range(1, min(budget, length) + 1)]
            assert paths[: len(chain)] == chain
            others = [p for p in tree_paths(plain, b) if p not in chain]
            assert paths[len(chain) :] == others[: len(paths) - len(chain)]
            assert len(paths) == min(budget, len(chain) + len(others))


def tree_paths(tree, b):
    """The token path of each node of request b, in node order."""
    paths = [()]
    for node in range(1, int(tree.num_nodes[b]) + 1):
        paths.append(paths[int(tree.parents[b, node])] + (int(tree.token_ids[b, node - 1]),))
    return paths[1:]


def test_hold_chain_rejects_bad_values():
    topk = topk_of([[-0.1, -0.5]])
    with pytest.raises(ValueError, match="hold_chain"):
        build_tree_from_topk(topk, 2, hold_chain=torch.tensor([1]))
    with pytest.raises(ValueError, match="hold_chain"):
        build_tree_from_topk(topk, 2, hold_chain=1)


@pytest.mark.parametrize("impl", IMPLS)
def test_held_chain_stops_at_minus_inf(impl):
    # depth 2 masked (-inf, a request's depth limit): the chain is a alone; the other depth-1 nodes follow
    topk = topk_of([[-0.1, -0.5, -3.0], [-math.inf] * 3])
    tree = build_tree_from_topk(topk, 3, hold_chain=True, impl=impl)
    assert tree.depths.tolist() == [[0, 1, 1, 1]]
    assert tree.token_ids.tolist() == [[0, 1, 2]]


def test_torch_topk_ranks_nan_last_as_the_reference():
    """NaN logits rank below -inf and -0.0 ties 0.0, in every position of the top-K (all-NaN rows too)."""
    generator = torch.Generator().manual_seed(4)
    logits = torch.randn(3, 4, 40, generator=generator).round()
    logits[torch.rand(logits.shape, generator=generator) < 0.3] = math.nan
    logits[torch.rand(logits.shape, generator=generator) < 0.2] = -math.inf
    logits[0, 0] = math.nan
    logits[1, 1, :20] = -0.0
    for k in (1, 7, 40):
        reference, batched = draft_topk(logits, k, impl="reference"), draft_topk(logits, k, impl="torch")
        assert torch.equal(batched.token_ids, reference.token_ids), k
        assert torch.equal(batched.log_probs.view(torch.int32), reference.log_probs.view(torch.int32)), k
    assert draft_topk(logits, 4, impl="torch").token_ids[0, 0].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("impl", ["reference", "torch"])
def test_chain_tree_is_the_built_tree_of_the_rank0_lists(impl):
    """chain_tree == build_tree_from_topk of the rank-0 lists at budget L, bit for bit: random drafts of
    every sharpness, a batch, one position, and -inf log-probs (a depth a request may not use)."""
    from ddtree_core.tree import chain_tree

    generator = torch.Generator().manual_seed(7)
    for batch, length, vocab, scale in [(1, 15, 64, 1.0), (3, 7, 32, 8.0), (2, 1, 5, 0.1), (4, 15, 100, 30.0)]:
        logits = torch.randn(batch, length, vocab, generator=generator) * scale
        topk = draft_topk(logits, min(length, vocab), impl=impl)
        chain = DraftTopK(log_probs=topk.log_probs[..., :1], token_ids=topk.token_ids[..., :1])
        assert_same(chain_tree(topk), build_tree_from_topk(chain, length, impl=impl))
    masked = topk.log_probs.clone()
    masked[1, 9:] = -math.inf
    topk = DraftTopK(log_probs=masked, token_ids=topk.token_ids)
    chain = DraftTopK(log_probs=masked[..., :1], token_ids=topk.token_ids[..., :1])
    tree = chain_tree(topk)
    assert_same(tree, build_tree_from_topk(chain, 15, impl=impl))
    assert tree.parents[0].tolist() == list(range(-1, 15)) and torch.isinf(tree.scores[1, 10:]).all()

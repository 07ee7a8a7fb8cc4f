"""Metrics: hand-computed values for every statistic, torch == reference for target ranks."""

import json
import math

import pytest
import torch
from trees import CASES, IMPLS, guided_targets, needs_cuda, worked_example_topk, worked_example_tree

from ddtree_core import build_tree, draft_topk
from ddtree_core.metrics import (
    SUMMARY_KEYS,
    Divergence,
    RoundStats,
    accept_length_histogram,
    acceptance_length,
    acceptance_length_per_response,
    depth_acceptance,
    expected_acceptance_length,
    first_divergence,
    logit_margin,
    rank_histogram,
    round_stats,
    summarize,
    target_token_ranks,
    tree_utilization,
)
from ddtree_core.verify import emitted_tokens, follow_tree


def worked_example():
    return worked_example_topk(), worked_example_tree()


def random_round(budget, depth, seed=0, vocab=300):
    """A random tree, its top-K lists and a walk along `guided_targets`."""
    batch = len(budget) if isinstance(budget, list) else 3
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, depth, vocab, generator=generator) * torch.linspace(1.0, 8.0, batch).view(-1, 1, 1)
    budget = torch.tensor(budget) if isinstance(budget, list) else budget
    tree = build_tree(logits, budget, impl="reference")
    topk = draft_topk(logits, max(1, tree.width - 1), impl="reference")
    target = guided_targets(tree, generator, vocab)
    walk = follow_tree(tree, target, impl="reference")
    return topk, tree, walk


def test_acceptance_length_pooled_and_per_response_differ():
    assert acceptance_length([1, 3, 3]) == pytest.approx(7 / 3)
    assert acceptance_length_per_response([[1, 3], [3], []]) == pytest.approx(2.5)  # (2 + 3) / 2
    assert math.isnan(acceptance_length([]))
    assert math.isnan(acceptance_length_per_response([[], []]))


def test_accept_length_histogram_indexed_by_accepted_drafts():
    assert accept_length_histogram([1, 3, 3, 4]) == (1, 0, 2, 1)
    assert accept_length_histogram([]) == ()


def test_depth_acceptance_counts_only_depths_the_tree_has():
    # Round 3 accepts its whole depth-2 tree: it is not a rejection at depth 3.
    assert depth_acceptance([1, 2, 3, 3], [2, 2, 2, 3]) == pytest.approx((3 / 4, 2 / 3, 0.0))
    first, second = depth_acceptance([1, 1], 2)
    assert first == 0.0 and math.isnan(second)


def test_tree_utilization():
    assert tree_utilization([1, 3, 4], [4, 4, 8]) == pytest.approx(5 / 16)
    assert math.isnan(tree_utilization([1], [0]))


def test_rank_histogram_hits_and_misses_per_depth():
    histogram = rank_histogram([(0, 2), (1,), (0, 4, 0)], [4, 4, 4])
    assert histogram.hits == ((2, 1, 0), (0, 0, 1), (1, 0, 0))
    assert histogram.misses == (0, 1, 0)


@pytest.mark.parametrize("impl", IMPLS)
def test_target_token_ranks_hand_drawn(impl):
    ids = torch.tensor([[[10, 11], [12, 13], [14, 15]]])  # L = 3, K = 2
    # depth 1: 11 is rank 1; depth 2: 99 is not listed (rank K = 2); depth 3 is past the length.
    assert target_token_ranks(ids, torch.tensor([[11, 99, 14, -1]]), torch.tensor([2]), impl=impl).tolist() == [
        [1, 2, -1]
    ]
    # Fewer token columns than depths: the rest is -1.
    assert target_token_ranks(ids, torch.tensor([[10]]), torch.tensor([1]), impl=impl).tolist() == [[0, -1, -1]]


def test_expected_acceptance_length_worked_example():
    _, tree = worked_example()
    expected = 1 + math.exp(-0.1) + math.exp(-0.3) + math.exp(-2.0) + math.exp(-2.5)
    assert expected_acceptance_length(tree).tolist() == pytest.approx([expected], rel=1e-6)


def test_round_stats_from_a_walk_on_the_worked_example():
    topk, tree = worked_example()
    walk = follow_tree(tree, torch.tensor([[10, 13, 7, 7, 7]]), impl="reference")  # accepts 10, 13; bonus 7
    tokens = emitted_tokens(tree, walk)
    assert tokens.tolist() == [[10, 13, 7]]
    ranks = target_token_ranks(topk.token_ids, tokens, walk.accept_lens)
    assert ranks.tolist() == [[0, 1]]  # the bonus sits at depth 3, past the block
    (stats,) = round_stats(tree, walk.accept_lens, ranks, top_k=2)
    assert (stats.accept_len, stats.num_nodes, stats.depth_reached, stats.ranks, stats.top_k) == (
        3,
        4,
        2,
        (0, 1),
        2,
    )
    assert stats.expected_accept_len == pytest.approx(float(expected_acceptance_length(tree)[0]))


@pytest.mark.parametrize(
    "fields",
    [
        dict(accept_len=0, num_nodes=4, depth_reached=2),
        dict(accept_len=3, num_nodes=1, depth_reached=2),
        dict(accept_len=4, num_nodes=8, depth_reached=2),
        dict(accept_len=2, num_nodes=4, depth_reached=2, ranks=(0, 5)),
        dict(accept_len=1, num_nodes=4, depth_reached=2, ranks=(0, 0)),
    ],
    ids=["tau-0", "more-than-nodes", "deeper-than-tree", "rank-past-k", "ranks-past-tau"],
)
def test_round_stats_rejects_impossible_rounds(fields):
    with pytest.raises(ValueError):
        RoundStats(**{"ranks": (), "top_k": 4, "expected_accept_len": 1.0, **fields})


def hand_rounds():
    return [
        [
            RoundStats(accept_len=1, num_nodes=4, depth_reached=2, ranks=(3,), top_k=4, expected_accept_len=1.5),
            RoundStats(accept_len=3, num_nodes=4, depth_reached=2, ranks=(0, 1, 4), top_k=4, expected_accept_len=2.5),
        ],
        [RoundStats(accept_len=3, num_nodes=8, depth_reached=3, ranks=(1, 0, 0), top_k=8, expected_accept_len=3.0)],
        [],
    ]


def test_summarize_hand_computed():
    summary = summarize(hand_rounds())
    assert (summary.num_responses, summary.num_rounds, summary.num_tokens) == (3, 3, 7)
    assert summary.acceptance_length == pytest.approx(7 / 3)
    assert summary.acceptance_length_per_response == pytest.approx(2.5)
    assert summary.accept_length_histogram == (1, 0, 2)
    assert summary.depth_acceptance == pytest.approx((2 / 3, 1.0, 0.0))
    assert summary.rank_histogram == ((1, 1, 0, 1), (1, 1, 0, 0), (1, 0, 0, 0))
    assert summary.rank_misses == (0, 0, 1)  # rank 4 at depth 3 with K = 4
    assert summary.tree_utilization == pytest.approx(4 / 16)
    assert summary.expected_acceptance_length == pytest.approx(7 / 3)
    assert summary.mean_tree_nodes == pytest.approx(16 / 3)
    assert summary.mean_tree_depth == pytest.approx(7 / 3)


def test_to_dict_uses_the_listed_keys_and_is_strict_json():
    for summary in (summarize(hand_rounds()), summarize([])):
        data = summary.to_dict()
        assert tuple(data) == SUMMARY_KEYS
        assert all(key.startswith("ddtree_") for key in data)
        json.dumps(data, allow_nan=False)
    empty = summarize([[]]).to_dict()
    assert empty["ddtree_acceptance_length"] is None and empty["ddtree_num_rounds"] == 0
    assert summarize(hand_rounds()).to_dict()["ddtree_rank_histogram"][2] == [1, 0, 0, 0]


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ([1, 2, 3], [1, 2, 3], None),
        ([1, 2, 3], [1, 5, 3], Divergence(index=1, token_a=2, token_b=5, length_a=3, length_b=3)),
        ([1, 2], [1, 2, 7], Divergence(index=2, token_a=None, token_b=7, length_a=2, length_b=3)),
        ([4], [], Divergence(index=0, token_a=4, token_b=None, length_a=1, length_b=0)),
        (
            torch.tensor([9, 8]),
            torch.tensor([9, 6]),
            Divergence(index=1, token_a=8, token_b=6, length_a=2, length_b=2),
        ),
    ],
    ids=["equal", "mismatch", "prefix", "empty", "tensors"],
)
def test_first_divergence(a, b, expected):
    assert first_divergence(a, b) == expected


def test_logit_margin_tells_a_near_tie_from_a_mismatch():
    logits = torch.tensor([0.0, 5.0, 4.75, 1.0])
    flip = logit_margin(logits, first_divergence([7, 1], [7, 2]))
    assert (flip.top1_token, flip.top2_token, flip.margin) == (1, 2, 0.25)
    assert (flip.logit_a, flip.logit_b) == (5.0, 4.75)
    assert flip.is_near_tie(0.5) and not flip.is_near_tie(0.1)
    mismatch = logit_margin(logits, first_divergence([7, 1], [7, 3]))
    assert mismatch.logit_b == 1.0 and not mismatch.is_near_tie(10.0)
    ended = logit_margin(logits, first_divergence([7], [7, 2]))
    assert ended.logit_a is None and not ended.is_near_tie(10.0)


def test_logit_margin_ties_rank_the_smaller_id_first():
    margin = logit_margin(torch.tensor([1.0, 3.0, 3.0]), first_divergence([2], [1]))
    assert (margin.top1_token, margin.top2_token, margin.margin) == (1, 2, 0.0)
    assert margin.is_near_tie(0.0)


@pytest.mark.parametrize("budget, depth", CASES)
def test_target_token_ranks_torch_matches_reference(budget, depth):
    topk, tree, walk = random_round(budget, depth)
    tokens = emitted_tokens(tree, walk)
    reference = target_token_ranks(topk.token_ids, tokens, walk.accept_lens, impl="reference")
    assert torch.equal(target_token_ranks(topk.token_ids, tokens, walk.accept_lens, impl="torch"), reference)
    # Along the accepted path the target's token is the node's own token, so its rank is the node's rank.
    path_ranks = tree.ranks.gather(1, walk.accepted[:, 1:].clamp(min=0))
    for b, tau in enumerate(walk.accept_lens.tolist()):
        assert reference[b, : tau - 1].tolist() == path_ranks[b, : tau - 1].tolist()
    stats = round_stats(tree, walk.accept_lens, reference, top_k=topk.token_ids.shape[-1])
    assert [s.accept_len for s in stats] == walk.accept_lens.tolist()


def test_torch_path_needs_no_host_values():
    # Meta tensors have no data: any .item(), .tolist(), nonzero or data-dependent shape would raise.
    meta = lambda *shape: torch.empty(*shape, dtype=torch.int64, device="meta")
    assert target_token_ranks(meta(2, 16, 8), meta(2, 17), meta(2), impl="torch").shape == (2, 16)
    assert target_token_ranks(meta(2, 16, 8), meta(2, 5), meta(2), impl="torch").shape == (2, 16)


@pytest.mark.gpu
@needs_cuda
def test_target_token_ranks_captures_in_cuda_graph():
    topk, tree, walk = random_round([0, 7, 256, 40], 16)
    tokens = emitted_tokens(tree, walk)
    expected = target_token_ranks(topk.token_ids, tokens, walk.accept_lens, impl="reference")
    args = (topk.token_ids.cuda(), tokens.cuda(), walk.accept_lens.cuda())
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        target_token_ranks(*args, impl="torch")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ranks = target_token_ranks(*args, impl="torch")
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(ranks.cpu(), expected)

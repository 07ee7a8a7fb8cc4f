"""ddtree_core.policy: the cost table, the expected acceptance of a tree's prefixes, the budget choice."""

import math

import pytest
import torch

from ddtree_core.policy import CostTable, LaggedAuto, choose_budget, expected_accepts, verify_width
from ddtree_core.tree import build_tree

COST = CostTable((16, 64, 256), (6.0, 6.5, 10.0))


def test_cost_table_interpolates_and_extends():
    assert COST(1) == 6.0 and COST(16) == 6.0 and COST(40) == pytest.approx(6.25) and COST(256) == 10.0
    assert COST(1024) == pytest.approx(10.0 + 3.5 / 192 * 768)
    assert CostTable((10,), (2.0,))(40) == 8.0
    with pytest.raises(ValueError, match="increasing"):
        CostTable((64, 16), (1.0, 2.0))
    with pytest.raises(ValueError, match="> 0 ms"):
        CostTable((16,), (0.0,))


def test_cost_table_round_trip(tmp_path):
    COST.to_json(tmp_path / "cost.json", model="m", gpu="H200")
    assert CostTable.from_json(tmp_path / "cost.json") == COST


def test_expected_accepts_are_prefix_sums_of_node_probabilities():
    logits = torch.randn(2, 6, 20, generator=torch.Generator().manual_seed(1)) * 2
    tree = build_tree(logits, 12, impl="reference")
    expected = expected_accepts(tree)
    for row in range(2):
        probs = [math.exp(s) for s in tree.scores[row, 1:].tolist() if s > -math.inf]
        assert probs == sorted(probs, reverse=True)  # pop order is falling probability
        assert expected[row, 0] == 0 and expected[row, -1].item() == pytest.approx(sum(probs), rel=1e-6)
        assert expected[row, 3].item() == pytest.approx(sum(probs[:3]), rel=1e-6)
    # The tree cut to its first b nodes is the budget-b tree: same nodes, same order.
    small = build_tree(logits, 5, impl="reference")
    assert torch.equal(small.token_ids, tree.token_ids[:, :5]) and torch.equal(small.parents, tree.parents[:, :6])


def test_the_docstring_example():
    expected = torch.zeros(1, 256)
    expected[0, 15], expected[0, 63], expected[0, 255] = 2.5, 3.1, 3.4
    assert choose_budget(expected, [15, 63, 255], COST, block_size=16) == 63
    assert choose_budget(expected.expand(16, -1), [15, 63, 255], COST, block_size=16) == 15
    assert verify_width(7, 16) == 16 and verify_width(63, 16) == 64


def test_flat_cost_takes_the_largest_tree_and_proportional_cost_the_smallest():
    expected = torch.linspace(0, 3, 65).unsqueeze(0)  # every node adds expected acceptance
    flat = CostTable((1, 100_000), (5.0, 5.0))
    proportional = CostTable((1, 100_000), (0.01, 1000.0))
    assert choose_budget(expected, [7, 15, 31, 63], flat, block_size=8) == 63
    assert choose_budget(expected, [7, 15, 31, 63], proportional, block_size=8) == 7
    assert choose_budget(torch.zeros(2, 65), [15, 63], flat, block_size=16) == 15  # ties: the smaller
    assert choose_budget(expected, [15, 63], COST, block_size=16, calibration=0.0) == 15  # nothing expected
    with pytest.raises(ValueError, match="exceeds"):
        choose_budget(expected, [65], flat, block_size=8)


def test_lagged_auto_starts_at_the_chain_and_follows_what_rounds_expect():
    """The module docstring's curve: nothing seen -> the smallest budget; rounds that expect 2.5 / 3.1 / 3.4 nodes
    at 15 / 63 / 255 and accept as predicted -> 63 at one request, 15 at sixteen; rounds that accept nothing
    (calibration at its floor, 0.05) -> 15 at one request too."""
    policy = LaggedAuto(COST, (63, 15, 255), block_size=16)
    assert policy.budgets == (15, 63, 255) and policy.choose(1) == 15 and policy.calibration == 1.0
    policy.observe([2.5, 3.1, 3.4], used=15, accepted=2)
    assert policy.means[63] / policy.weight == pytest.approx(3.1)  # one round counts in full
    for _ in range(300):
        policy.observe([2.5, 3.1, 3.4], used=63, accepted=3)
    assert policy.means[63] / policy.weight == pytest.approx(3.1) and policy.calibration == pytest.approx(
        3 / 3.1, rel=1e-3
    )
    assert policy.choose(1) == 63 and policy.choose(16) == 15
    for _ in range(300):
        policy.observe([2.5, 3.1, 3.4], used=63, accepted=0)
    assert policy.calibration == 0.05 and policy.choose(1) == 15
    with pytest.raises(ValueError, match="one per budget"):
        policy.observe([1.0], used=15, accepted=1)


def test_lagged_auto_observes_budgets_it_did_not_take():
    """A round at 15 still prices 63 from the tree built at 63, so the policy can leave the chain."""
    policy = LaggedAuto(COST, (15, 63), block_size=16)
    for _ in range(200):
        policy.observe([2.5, 3.1], used=15, accepted=2)  # realised 2 of 2.5 predicted at the budget taken
    assert policy.calibration == pytest.approx(0.8) and policy.choose(1) == 63


def test_lagged_auto_learns_the_time_outside_the_verify():
    """A small target's rounds: verify 1.4-2.2 ms by the table, rounds of 5.5 ms at one request. With that ~4 ms
    outside the verify the 63-node tree wins at sixteen requests too; a prefill-sized interval is ignored."""
    table = CostTable((16, 64, 256, 1024), (1.41, 1.45, 1.58, 2.21))
    policy = LaggedAuto(table, (15, 63), block_size=16)
    for _ in range(100):
        policy.observe([2.4, 3.0], used=63, accepted=3)
    assert policy.choose(16) == 15  # no time outside the verify known: 16 x 3.4 / 1.58 > 16 x 4.0 / 2.21
    policy.observe_round(16, 15, 500.0)  # a prefill between two rounds
    assert policy.overhead_ms == 0.0
    for _ in range(100):
        policy.observe_round(1, 63, 5.5)
    assert policy.overhead_ms == pytest.approx(5.5 - 1.45, rel=1e-3) and policy.choose(16) == 63

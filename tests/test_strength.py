"""ddbench.model.strength: the round simulation on hand-made drafts (no models)."""

import math

import torch

from ddbench.model import strength


def test_round_matches_follows_the_truth_through_the_tree():
    # root -> 10 -> {12, 13}, root -> 11; node i's token is tokens[i - 1]
    parents, tokens = [-1, 0, 1, 1, 0], [10, 12, 13, 11]
    assert strength.round_matches(parents, tokens, [10, 13, 99]) == 2
    assert strength.round_matches(parents, tokens, [11, 12]) == 1
    assert strength.round_matches(parents, tokens, [12]) == 0
    assert strength.round_matches(parents, tokens, []) == 0


def test_chain_matches_counts_leading_argmax_hits():
    log_probs = torch.log_softmax(torch.tensor([[0.0, 5.0, 0.0], [3.0, 0.0, 0.0], [0.0, 0.0, 1.0]]), dim=-1)
    assert strength.chain_matches(log_probs, [1, 0, 2]) == 3
    assert strength.chain_matches(log_probs, [1, 2, 2]) == 1
    assert strength.chain_matches(log_probs, [1]) == 1  # truth shorter than the block: the end of the output


def one_hot_rows(tokens, vocab=6, hit=6.0):
    rows = torch.zeros(len(tokens), vocab)
    for i, t in enumerate(tokens):
        rows[i, t] = hit
    return torch.log_softmax(rows, dim=-1)


def test_simulate_chain_tree_and_mixture():
    # output 1 2 3 4 5 after a one-token prompt; every round drafts 3 positions
    ids, first = [0, 1, 2, 3, 4, 5], 1
    oracle = one_hot_rows([ids[i + 1] if i + 1 < len(ids) else 0 for i in range(len(ids))])
    drafts = {p: one_hot_rows([ids[p + 1] if p + 1 < len(ids) else 0, 0, 0]) for p in range(first, len(ids) - 1)}
    t = strength.Trajectory("d", 0, ids, first, drafts, oracle)
    # the drafter gets only the first position right: DFlash accepts 1 + 1 a round, cut at the end
    assert strength.simulate(t, 0.0, None) == [2, 2]
    # alpha 1 is the target itself: all 3 positions right, tau 4 then the cut remainder
    assert strength.simulate(t, 1.0, None) == [4]
    # a tree of 6 nodes holds the second-best token at depth 2 under the first: still 2 a round here,
    # since the drafter's second choice at depth 2 is not the truth either
    assert strength.simulate(t, 0.0, 6) == [2, 2]
    mixed = strength.mixed(t, 1, 0.5)
    assert math.isclose(float(mixed.exp().sum(-1)[0]), 1.0, rel_tol=1e-5)
    assert int(mixed[1].argmax()) in (0, ids[3])  # the drafter's 0 and the truth tie at alpha 0.5


def test_same_but_last_allows_only_the_cut_last_round():
    assert strength.same_but_last([2, 1, 3], [1, 1, 1])
    assert strength.same_but_last([2, 1, 1], [1, 1, 1])  # the engine counted the last round whole: 3, not 1
    assert not strength.same_but_last([2, 1, 1], [3, 0, 1])  # more than one round differs
    assert not strength.same_but_last([1, 3, 2], [0, 2, 1])  # the moved round is not the last one (tau 2)
    assert not strength.same_but_last([1, 3, 2], [1, 2, 0])  # the engine's last round is never shorter


def test_gain_at_interpolates_in_dflash_tau():
    rows = [
        {"alpha": 0.0, "method": "dflash", "budget": "", "dataset": "d", "tau": 2.0, "gain": 1.0},
        {"alpha": 0.0, "method": "ddtree", "budget": 63, "dataset": "d", "tau": 3.0, "gain": 1.5},
        {"alpha": 0.5, "method": "dflash", "budget": "", "dataset": "d", "tau": 6.0, "gain": 1.0},
        {"alpha": 0.5, "method": "ddtree", "budget": 63, "dataset": "d", "tau": 7.2, "gain": 1.2},
    ]
    assert math.isclose(strength.gain_at(rows, "d", 63, 4.0), 1.35)
    assert strength.gain_at(rows, "d", 63, 7.0) is None  # outside the simulated range
    published = {"source": "S.", "datasets": {"d": {"dflash": 5.0, "ddtree": {}}, "e": {"dflash": 3.0, "ddtree": {}}}}
    derived = strength.derived_acceptance(published, rows, [63], "sim")
    assert derived["datasets"]["d"]["ddtree"] == {"63": round(5.0 * 1.275, 3)}
    assert derived["datasets"]["e"]["ddtree"] == {}
    assert derived["source"].startswith("S. DDTree tau DERIVED")


def test_held_tree_holds_the_chain_and_the_best_first_tree():
    # three positions; the chain is 1, 1, 1 (argmax), token 2 a strong second at every depth
    log_probs = torch.log_softmax(torch.tensor([[0.0, 3.0, 2.9, 0.0]] * 3), dim=-1)

    def held(budget, truth):
        return strength.tree_matches(log_probs, budget, truth, hold_chain=True)

    assert held(3, [1, 1, 1]) == 3  # budget = L: the chain alone
    assert held(3, [2, 2, 2]) == 0
    # with room for more, the best-first nodes join: 2 at depth 1 is the best node off the chain
    assert held(4, [2, 1, 1]) == 1
    assert held(4, [1, 1, 1]) == 3
    # a plain best-first tree of 3 nodes misses the chain's depth 3, which the union keeps
    plain = strength.build_tree(log_probs[None], 3, max_depth=3, impl="torch")
    assert strength.round_matches(plain.parents[0].tolist(), plain.token_ids[0].tolist(), [1, 1, 1]) < 3

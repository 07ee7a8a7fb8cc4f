"""Tree walks: hand-drawn cases, torch == reference on built posteriors, and losslessness of sampling."""

import dataclasses
import math

import pytest
import torch
from trees import IMPLS, worked_example_tree

from ddtree_core import build_tree
from ddtree_core.verify import emitted_tokens, follow_tree, sample_target_tokens, target_probs


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    "target, accepted, bonus",
    [
        ([10, 13, 7, 7, 7], [0, 1, 3], 7),  # root→10, then 13 (second child), then the target says 7
        ([11, 0, 0, 0, 5], [0, 4, -1], 5),  # root→11 (a leaf at depth 1)
        ([99, 12, 12, 12, 12], [0, -1, -1], 99),  # no child matches: the bonus alone
        ([10, 12, 42, 0, 0], [0, 1, 2], 42),
    ],
)
def test_hand_drawn_walks(impl, target, accepted, bonus):
    tree = worked_example_tree()
    walk = follow_tree(tree, torch.tensor([target]), impl=impl)
    assert walk.accepted.tolist() == [accepted]
    assert walk.accept_lens.tolist() == [sum(a >= 0 for a in accepted)]
    assert walk.bonus.tolist() == [bonus]


def test_emitted_tokens():
    tree = worked_example_tree()
    walk = follow_tree(tree, torch.tensor([[10, 13, 7, 7, 7], [99, 0, 0, 0, 0]]).narrow(0, 0, 1))
    assert emitted_tokens(tree, walk).tolist() == [[10, 13, 7]]
    walk = follow_tree(tree, torch.tensor([[99, 0, 0, 0, 0]]))
    assert emitted_tokens(tree, walk).tolist() == [[99, -1, -1]]


@pytest.mark.parametrize("impl", IMPLS)
def test_bare_root_emits_the_bonus(impl):
    tree = build_tree(torch.randn(2, 4, 9), 0)
    walk = follow_tree(tree, torch.tensor([[3], [5]]), impl=impl)
    assert walk.accepted.tolist() == [[0, -1, -1, -1, -1]] * 2
    assert walk.accept_lens.tolist() == [1, 1]
    assert walk.bonus.tolist() == [3, 5]
    assert emitted_tokens(tree, walk).tolist() == [[3, -1, -1, -1, -1], [5, -1, -1, -1, -1]]


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="target_tokens"):
        follow_tree(worked_example_tree(), torch.zeros(1, 3, dtype=torch.int64))


def posterior_following(tree, generator, follow_prob=0.8):
    """Target tokens that follow a random child with probability follow_prob at every node."""
    batch, width = tree.parents.shape
    target = torch.randint(1000, 2000, (batch, width), generator=generator)  # tokens no node carries
    for b in range(batch):
        for node in range(width):
            children = (tree.parents[b] == node).nonzero().flatten()
            if len(children) and torch.rand(1, generator=generator) < follow_prob:
                child = children[torch.randint(len(children), (1,), generator=generator)]
                target[b, node] = tree.token_ids[b, child - 1]
    return target


@pytest.mark.parametrize("budget", [1, 5, 16, 64, 200])
@pytest.mark.parametrize("max_depth", [1, 4, 16])
def test_torch_walk_equals_reference(budget, max_depth):
    generator = torch.Generator().manual_seed(budget * 100 + max_depth)
    logits = (torch.randn(3, 16, 50, generator=generator) * 3).bfloat16().float()
    tree = build_tree(logits, torch.tensor([budget, max(0, budget // 2), 0]), max_depth=max_depth)
    target = posterior_following(tree, generator)
    reference = follow_tree(tree, target, impl="reference")
    walk = follow_tree(tree, target, impl="torch")
    for field in dataclasses.fields(walk):
        assert torch.equal(getattr(walk, field.name), getattr(reference, field.name)), field.name
    assert (reference.accept_lens >= 1).all()


def test_greedy_target_tokens_are_argmax():
    logits = torch.randn(2, 5, 11)
    assert torch.equal(sample_target_tokens(logits, 0.0), logits.argmax(-1))
    per_request = torch.tensor([0.0, 1.0])
    tokens = sample_target_tokens(logits, per_request, generator=torch.Generator().manual_seed(0))
    assert torch.equal(tokens[0], logits[0].argmax(-1))


def test_target_probs_top_k_top_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert torch.allclose(target_probs(logits, 1.0), torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert torch.allclose(target_probs(logits, 1.0, top_k=2), torch.tensor([0.625, 0.375, 0.0, 0.0]))
    # top_p 0.7: the smallest prefix whose mass reaches 0.7 is {0.5, 0.3}
    assert torch.allclose(target_probs(logits, 1.0, top_p=0.7), torch.tensor([0.625, 0.375, 0.0, 0.0]))
    hot = target_probs(logits, 2.0)
    expected = torch.tensor([0.5, 0.3, 0.15, 0.05]).sqrt()
    assert torch.allclose(hot, expected / expected.sum())


# ---- losslessness of sampled verification ---------------------------------------------------------
# A toy Markov target over V tokens: p(next | previous) = softmax(TARGET[previous]). The drafter proposes
# trees from its own (different) distributions. Sequences produced by speculative rounds must follow the
# target's law exactly; a chi-square test over all V**T sequences of length T checks it.

V, T, L = 4, 3, 3


def speculative_sequences(n, temperature, top_p, top_k, walk, generator):
    target_logits = torch.randn(V, V, generator=generator) * 1.5
    draft_logits = torch.randn(V, L, V, generator=generator) * 2.0  # per root token, per depth
    out = torch.full((n, T), -1)
    last = torch.zeros(n, dtype=torch.int64)  # every sequence starts after token 0
    filled = torch.zeros(n, dtype=torch.int64)
    while (filled < T).any():
        tree = build_tree(draft_logits[last], 6, impl="torch")
        node_tokens = torch.cat([last.unsqueeze(1), tree.token_ids.clamp(min=0)], dim=1)
        tokens = walk(tree, target_logits[node_tokens], temperature, top_p, top_k, generator)
        for b in range(n):
            for token in tokens[b][tokens[b] >= 0].tolist():
                if filled[b] < T:
                    out[b, filled[b]] = token
                    filled[b] += 1
        last = out.gather(1, (filled - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    return out, target_logits


def tree_walk(tree, logits, temperature, top_p, top_k, generator):
    target = sample_target_tokens(logits, temperature, top_p, top_k, generator=generator)
    return emitted_tokens(tree, follow_tree(tree, target))


def trusting_walk(tree, logits, temperature, top_p, top_k, generator):
    """A broken verifier for the negative control: accepts the drafter's first child unconditionally."""
    target = sample_target_tokens(logits, temperature, top_p, top_k, generator=generator)
    first_child = torch.cat([tree.token_ids[:, :1], target[:, 1:]], dim=1)
    return emitted_tokens(tree, follow_tree(tree, first_child))


def chi_square(sequences, target_logits, temperature, top_p, top_k):
    probs = target_probs(target_logits, temperature, top_p, top_k)  # [V, V]: row = previous token
    counts = torch.zeros([V] * T)
    for seq in sequences.tolist():
        counts[tuple(seq)] += 1
    stat, cells = 0.0, 0
    for index in torch.cartesian_prod(*[torch.arange(V)] * T).tolist():
        p, prev = 1.0, 0
        for token in index:
            p, prev = p * float(probs[prev, token]), token
        expected = p * len(sequences)
        if expected > 0:
            stat += (float(counts[tuple(index)]) - expected) ** 2 / expected
            cells += 1
        else:
            assert counts[tuple(index)] == 0, f"sequence {index} has target probability 0"
    return stat, cells - 1


def chi_square_quantile(df, z=3.29):  # Wilson-Hilferty, z = 3.29: one-sided 0.9995
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@pytest.mark.parametrize("temperature, top_p, top_k", [(1.0, 1.0, -1), (0.7, 0.9, 3)])
def test_sampled_tree_walk_follows_the_target_distribution(temperature, top_p, top_k):
    generator = torch.Generator().manual_seed(7)
    sequences, target_logits = speculative_sequences(6000, temperature, top_p, top_k, tree_walk, generator)
    stat, df = chi_square(sequences, target_logits, temperature, top_p, top_k)
    assert stat < chi_square_quantile(df), f"chi2 {stat:.1f} over {df} degrees of freedom"


def test_chi_square_catches_a_lossy_walk():
    generator = torch.Generator().manual_seed(7)
    sequences, target_logits = speculative_sequences(6000, 1.0, 1.0, -1, trusting_walk, generator)
    stat, df = chi_square(sequences, target_logits, 1.0, 1.0, -1)
    assert stat > chi_square_quantile(df)


def test_target_probs_without_truncation_skip_the_sort_and_agree():
    """Host knobs at identity take the plain softmax; tensors at identity take the sorted path: same law."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 50, generator=generator) * 3
    temperature = torch.tensor([0.5, 1.0, 2.0])
    plain = target_probs(logits, temperature)  # top_p=1.0, top_k=-1: the fast path
    sorted_path = target_probs(logits, temperature, top_p=torch.ones(3), top_k=torch.full((3,), -1))
    assert torch.allclose(plain, sorted_path, atol=1e-6)
    assert torch.allclose(plain, (logits / temperature.view(3, 1, 1)).softmax(-1), atol=1e-6)

"""Simulated acceptance: the batched drafts (model.accept) give the rounds of strength's per-position reference."""

import torch

from ddbench.model.accept import block_topk, calibration_table, evaluate, rounds, table
from ddbench.model.strength import greedy_rounds, trajectory
from tests.test_train import VOCAB, tiny_pair


def greedy_answer(target, prompt, length):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(length):
            ids.append(int(target(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids


def test_batched_rounds_equal_the_reference_rounds():
    target, drafter = tiny_pair(seed=3)
    target, drafter = target.float(), drafter.float()
    prompt = [1, 5, 2, 7, 3]
    ids = greedy_answer(target, prompt, 24)
    reference = trajectory("x", 0, prompt, ids[len(prompt) :], target, drafter)
    topk = block_topk(target, drafter, ids, len(prompt), k=VOCAB, chunk=5)
    assert topk.log_probs.shape == (len(ids) - 1 - len(prompt), drafter.block_size - 1, VOCAB)
    for budget in (None, 1, 3, 8):
        want = greedy_rounds(ids, len(prompt), lambda p: reference.drafts[p], budget)
        assert rounds(ids, len(prompt), topk, budget) == want, budget
    assert sum(rounds(ids, len(prompt), topk, 8)) == len(ids) - 1 - len(prompt)


def test_evaluate_counts_tokens_per_dataset_and_all():
    target, drafter = tiny_pair(seed=4)
    prompt = [2, 3, 4]
    answers = [
        {"dataset": "a", "prompt_len": 3, "ids": greedy_answer(target, prompt, 10)},
        {"dataset": "b", "prompt_len": 3, "ids": greedy_answer(target, prompt[:2] + [9], 7)},
    ]
    rows = evaluate(target, drafter, answers, [4])
    by = {(r["dataset"], r["method"]): r for r in rows}
    assert by[("a", "dflash")]["tokens"] == 9 and by[("b", "ddtree")]["tokens"] == 6
    assert by[("all", "ddtree")]["tokens"] == 15
    assert by[("all", "ddtree")]["tau"] >= by[("all", "dflash")]["tau"] >= 1.0
    assert table(rows).splitlines()[0] == "| dataset | DFlash | b4 | best / DFlash |"


def test_predicted_tau_is_the_trees_expected_acceptance():
    target, drafter = tiny_pair(seed=5)
    ids = greedy_answer(target, [4, 1, 6], 12)
    topk = block_topk(target, drafter, ids, 3, k=VOCAB)
    predicted = []
    taus = rounds(ids, 3, topk, 6, predicted)
    assert len(predicted) == len(taus) and all(0 <= p <= 6 for p in predicted)
    assert rounds(ids, 3, topk, None, predicted) and len(predicted) == len(taus)  # the chain predicts nothing
    rows = evaluate(target, drafter, [{"dataset": "a", "prompt_len": 3, "ids": ids}], [6])
    tree = next(r for r in rows if r["dataset"] == "a" and r["method"] == "ddtree")
    assert tree["predicted_tau"] == round(1 + sum(predicted) / len(taus), 3)
    assert calibration_table(rows).splitlines()[2].startswith("| a | ")

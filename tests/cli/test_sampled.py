"""ddbench.check.sampled: the chi-square test accepts a lossless server's samples and rejects a planted failure."""

import random
from collections import Counter

import pytest
from transformers import AutoTokenizer

from ddbench.check.sampled import chi_square, compare
from tests.cli.test_cli_url import Running


def test_chi_square_by_hand():
    a, b = Counter({"x": 30, "y": 10}), Counter({"x": 10, "y": 30})
    result = chi_square(a, b, min_count=1)  # expected 20 in every cell: chi2 = 4 * 100 / 20
    assert result["chi2"] == pytest.approx(20.0) and result["df"] == 1
    assert result["p"] == pytest.approx(7.74e-6, rel=1e-2)
    assert chi_square(a, a)["p"] == pytest.approx(1.0)
    assert chi_square(Counter({"x": 5}), Counter({"x": 7}))["df"] == 0  # one category: nothing to test
    pooled = chi_square(Counter({"x": 50, "r1": 2, "r2": 1}), Counter({"x": 50, "r3": 3}), min_count=10)
    assert pooled["categories"] == 2  # the rare ones merged into one


def test_chi_square_is_uniform_under_the_null_and_powerful_against_a_shift():
    rng = random.Random(0)
    weights = [0.4, 0.3, 0.2, 0.1]

    def sample(w, n):
        return Counter(rng.choices("abcd", weights=w, k=n))

    p_null = [chi_square(sample(weights, 2000), sample(weights, 2000))["p"] for _ in range(200)]
    assert 0.02 <= sum(p < 0.05 for p in p_null) / len(p_null) <= 0.10
    assert chi_square(sample(weights, 2000), sample([0.45, 0.3, 0.15, 0.1], 2000))["p"] < 1e-4


def test_ddtree_samples_follow_the_target_and_a_wrong_temperature_is_caught(tiny_pair):
    """The reference engine's sampled walk against its own AR at T = 1 (one token, 150 draws);
    the same test with the DDTree side at T = 0.3 must reject (the planted failure)."""
    ar, ddtree = Running(tiny_pair, "ar", api_key=None), Running(tiny_pair, "ddtree", api_key=None)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_pair[0]))
    prompts = ("hello there",)
    settings = dict(samples=150, tokens=1, temperature=1.0, alpha=1e-4, batch=1, concurrency=2)
    try:
        fair = compare(ar.url, ddtree.url, tokenizer, prompts, **settings)
        planted = compare(ar.url, ddtree.url, tokenizer, prompts, spec_temperature=0.3, **settings)
    finally:
        ar.stop(), ddtree.stop()
    assert not fair["rejected"], fair
    assert planted["rejected"] and max(r["p"] for r in planted["prompts"]) < 1e-4, planted
    assert ddtree.generated == 2 * 150

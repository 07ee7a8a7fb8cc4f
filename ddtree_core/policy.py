"""Load-aware tree size: the budget with the most expected tokens per millisecond this round.

A round of R running requests at budget b verifies R * W(b) tokens, W(b) = max(b + 1, block_size) (the
plugin's verify width), and takes cost(R * W(b)) ms, a curve measured once per model and GPU (`CostTable`).
Request i then emits tau_i(b) tokens in expectation, so among the budgets a server has CUDA graphs for the
scheduler takes

    b* = argmax_b  sum_i tau_i(b) / cost(R * W(b))        (ties: the smaller budget)

tau_i(b) comes from the tree itself. The best-first tree pops nodes in order of falling path probability,
and a node is accepted exactly when its whole path matches the target, so if the drafter's probabilities
were calibrated the tree of its first b nodes would accept sum_{k <= b} p_k nodes in expectation, plus the
bonus token: tau_i(b) = 1 + c * sum_{k <= b} p_k. One tree built at the largest budget thus prices every
smaller one (`expected_accepts`: prefix sums over the pop order), and c (`calibration`, realised over
predicted accepted nodes over recent rounds) corrects a drafter that is over- or under-confident.

Example: block 16, trees whose first 15 / 63 / 255 nodes expect 2.5 / 3.1 / 3.4 accepted nodes, and a GPU
whose round costs 6.0 ms at 16 tokens, 6.5 ms at 64 and 10 ms at 256 (24 ms at 1024 by the last slope):
- one request: b15 3.5 / 6.0 = 0.58, b63 4.1 / 6.5 = 0.63, b255 4.4 / 10 = 0.44 tokens per ms: b63;
- sixteen: b15 16 * 3.5 / 10 = 5.6, b63 16 * 4.1 / 24 = 2.7: b15, the chain-sized tree.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ddtree_core.types import DraftTree

SHAPE_FIELDS = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
SHAPE_FIELDS += ("num_key_value_heads", "vocab_size")


def shape_identity(config: object) -> dict[str, object]:
    """What a target's verify cost depends on in its (Hugging Face style) config: {field: value or None}."""
    return {field: getattr(config, field, None) for field in SHAPE_FIELDS}


def identity_mismatch(recorded: Mapping[str, object], ours: Mapping[str, object]) -> str | None:
    """The first field of `ours` that a cost table's document `recorded` otherwise (a missing field reads None),
    as "was measured for FIELD X, this process has Y"; None where every field agrees.

    >>> identity_mismatch({"hidden_size": 4096, "dtype": "bfloat16"}, {"hidden_size": 576, "dtype": "bfloat16"})
    'was measured for hidden_size 4096, this process has 576'
    """
    for field, value in ours.items():
        if recorded.get(field) != value:
            return f"was measured for {field} {recorded.get(field)}, this process has {value}"
    return None


@dataclass(frozen=True)
class CostTable:
    """Round time (ms) against tokens verified in the round, measured at a few points (sorted by tokens).

    Between points it interpolates linearly; past the last it extends the last segment's slope (never below
    the last time; one point alone scales in proportion); below the first it is the first time."""

    tokens: tuple[int, ...]
    ms: tuple[float, ...]

    def __post_init__(self):
        if len(self.tokens) != len(self.ms) or not self.tokens:
            raise ValueError("a cost table needs as many times as token counts, at least one")
        if list(self.tokens) != sorted(set(self.tokens)) or self.tokens[0] < 1:
            raise ValueError(f"token counts must be increasing and >= 1, got {self.tokens}")
        if any(not ms > 0 for ms in self.ms):
            raise ValueError(f"round times must be > 0 ms, got {self.ms}")

    def __call__(self, tokens: float) -> float:
        xs, ys = self.tokens, self.ms
        if tokens <= xs[0]:
            return ys[0]
        if tokens >= xs[-1]:
            if len(xs) == 1:
                return ys[0] * tokens / xs[0]
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            return max(ys[-1], ys[-1] + slope * (tokens - xs[-1]))
        i = bisect.bisect_right(xs, tokens)  # xs[i - 1] <= tokens < xs[i]
        return ys[i - 1] + (ys[i] - ys[i - 1]) * (tokens - xs[i - 1]) / (xs[i] - xs[i - 1])

    def to_json(self, path: str | Path, **about) -> None:
        Path(path).write_text(json.dumps({**about, "tokens": list(self.tokens), "ms": list(self.ms)}, indent=1) + "\n")

    @classmethod
    def from_json(cls, path: str | Path) -> CostTable:
        return cls.from_dict(json.loads(Path(path).read_text()))

    @classmethod
    def from_dict(cls, data: dict) -> CostTable:
        """The table of a `to_json` document (its other keys, the `about` ones, are the caller's)."""
        return cls(tuple(int(t) for t in data["tokens"]), tuple(float(m) for m in data["ms"]))


def expected_accepts(tree: DraftTree) -> torch.Tensor:
    """[B, N + 1]: column b is the expected accepted nodes (bonus excluded) of each tree cut to its first b
    nodes in pop order, sum_{k <= b} exp(score_k) (column 0 is 0; padding adds nothing)."""
    probs = torch.where(torch.isfinite(tree.scores), tree.scores.float().exp(), 0.0)
    probs[:, 0] = 0.0  # the root is the bonus token, counted once in tau
    return probs.cumsum(dim=1)


def verify_width(budget: int, block_size: int) -> int:
    """Tokens one request verifies at `budget` (the plugin's width: root + budget, at least the block)."""
    return max(budget + 1, block_size)


def choose_budget(
    expected: torch.Tensor,
    budgets: Sequence[int],
    cost: CostTable,
    block_size: int,
    calibration: float = 1.0,
    overhead_ms: float = 0.0,
) -> int:
    """The budget of `budgets` with the most expected tokens per ms for the R requests of `expected` [R, N + 1]
    (`expected_accepts` of their trees at budget N >= max(budgets)); ties go to the smaller budget.
    `overhead_ms` is the round's time outside the verify (the draft, the tree), the same at every budget."""
    running, columns = expected.shape
    totals = expected.sum(dim=0).tolist()
    for budget in budgets:
        if budget >= columns:
            raise ValueError(f"budget {budget} exceeds the trees' {columns - 1} nodes")
    return best_budget(running, {b: totals[b] for b in budgets}, cost, block_size, calibration, overhead_ms)


def best_budget(
    running: int,
    totals: dict[int, float],
    cost: CostTable,
    block_size: int,
    calibration: float = 1.0,
    overhead_ms: float = 0.0,
) -> int:
    """`choose_budget` from the expected accepted nodes summed over the running requests, per budget."""
    best, best_rate = None, -1.0
    for budget in sorted(totals):
        round_ms = overhead_ms + cost(running * verify_width(budget, block_size))
        rate = (running + calibration * totals[budget]) / round_ms
        if rate > best_rate * (1 + 1e-9):
            best, best_rate = budget, rate
    return best


def auto_budgets(largest: int) -> tuple[int, ...]:
    """The budgets `auto` weighs: powers of two below `largest`, and `largest` (its trees are built at it).

    >>> auto_budgets(64), auto_budgets(15)
    ((1, 2, 4, 8, 16, 32, 64), (1, 2, 4, 8, 15))
    """
    if largest < 1:
        raise ValueError(f"auto needs a largest budget >= 1, got {largest}")
    return tuple(sorted({1 << i for i in range(largest.bit_length()) if 1 << i < largest} | {largest}))


@dataclass
class AutoBudget:
    """`budget=auto` for one engine: each round the budget of `budgets` with the most expected tokens per ms.

    The round builds its tree at max(budgets); `choose` prices every candidate from that tree's prefix sums
    (`expected_accepts`), `cost` (verify ms against tokens) and the measured time outside the verify; `observe`
    then folds the round's outcome into two running means (weight `1 - decay` for the newest round): that
    time, and `calibration`, realised over predicted accepted nodes (kept in [0.05, 2]: a drafter's
    probabilities are over- or under-confident by a factor that holds across budgets within a workload).

    Example (the module docstring's curve, one request, no overhead): `choose` takes b63; after rounds that
    accept a third of what the drafter predicted, calibration nears 0.33 and the smaller trees win.
    """

    cost: CostTable
    budgets: tuple[int, ...]
    block_size: int = 1  # verify width max(b + 1, block_size): 1 where a round verifies b + 1 tokens
    calibration: float = 1.0
    overhead_ms: float = 0.0
    decay: float = 0.9
    seen: int = 0  # rounds whose overhead was observed

    def __post_init__(self):
        if not self.budgets or min(self.budgets) < 0:
            raise ValueError(f"auto needs budgets >= 0, got {self.budgets}")
        self.budgets = tuple(sorted(set(self.budgets)))

    @property
    def largest(self) -> int:
        return self.budgets[-1]

    def choose(self, expected: torch.Tensor) -> int:
        """The budget for this round, from `expected_accepts` [R, N + 1] of trees built at `largest`."""
        return choose_budget(
            expected, self.budgets, self.cost, self.block_size, self.calibration, overhead_ms=self.overhead_ms
        )

    def observe(self, predicted: float, accepted: int, overhead_ms: float | None) -> None:
        """One round's predicted and accepted nodes (bonus excluded) and its time outside the verify (None: not
        a usual round's, e.g. one that also filled the draft cache with the prompt)."""
        if overhead_ms is not None:
            weight = 1.0 if self.seen == 0 else 1.0 - self.decay
            self.overhead_ms += weight * (overhead_ms - self.overhead_ms)
            self.seen += 1
        if predicted > 0:
            ratio = min(2.0, max(0.05, accepted / predicted))
            self.calibration += (1.0 - self.decay) * (ratio - self.calibration)


@dataclass
class LaggedAuto:
    """`budget=auto` where a round's budget must be fixed before its trees exist (the SGLang plugin: the budget
    picks the verify CUDA graph, and the host never waits for the device).

    Each round of R running requests takes the budget of `budgets` with the most expected tokens per ms
    (`best_budget`), pricing budget b with R * mean_b, where mean_b is the running mean, over recent request
    rounds, of the expected accepted nodes at b of trees built at the largest budget (`expected_accepts`
    columns, which the device computes every round and the host reads with the round's results, a round late),
    times `calibration`: realised over predicted accepted nodes at the budgets the rounds took (running sums).
    Until a round is observed every mean is 0 and the smallest budget wins: the chain-sized tree.
    `observe` weighs each request round 1 - decay; the means are divided by the weights' sum, so the first
    round counts in full rather than as 1 - decay of a zero start. `observe_round` learns the round's time
    outside the verify (`overhead_ms`: the draft, host work), a round's wall time less the table's verify time,
    which favours larger trees where that time dominates (a small target).

    Example: budgets (15, 63) on the module docstring's curve: no rounds seen -> 15; after rounds whose trees
    expect 2.5 nodes at 15 and 3.1 at 63 (and accept as predicted), one request -> 63, sixteen -> 15.
    """

    cost: CostTable
    budgets: tuple[int, ...]
    block_size: int
    decay: float = 0.98
    overhead_ms: float = 0.0
    means: dict[int, float] | None = None  # per budget, before dividing by `weight`
    weight: float = 0.0  # the running sum of the observations' weights
    accepted: float = 0.0  # running sums behind the calibration
    predicted: float = 0.0

    def __post_init__(self):
        if not self.budgets or min(self.budgets) < 0:
            raise ValueError(f"auto needs budgets >= 0, got {self.budgets}")
        self.budgets = tuple(sorted(set(self.budgets)))
        if self.means is None:
            self.means = {b: 0.0 for b in self.budgets}

    @property
    def calibration(self) -> float:
        return min(2.0, max(0.05, self.accepted / self.predicted)) if self.predicted > 0 else 1.0

    def choose(self, running: int) -> int:
        """The budget of a round of `running` requests."""
        scale = 1.0 / self.weight if self.weight > 0 else 0.0
        totals = {b: running * mean * scale for b, mean in self.means.items()}
        return best_budget(running, totals, self.cost, self.block_size, self.calibration, self.overhead_ms)

    def observe_round(self, running: int, used: int, round_ms: float) -> None:
        """A whole round's wall time: its part outside the verify joins `overhead_ms` (weight 0.1; never below
        0). A round over 10x what the table and overhead predict (a prefill between two rounds) is ignored."""
        verify_ms = self.cost(running * verify_width(used, self.block_size))
        if not 0 < round_ms <= 10 * (verify_ms + self.overhead_ms):
            return
        self.overhead_ms = max(0.0, self.overhead_ms + 0.1 * (round_ms - verify_ms - self.overhead_ms))

    def observe(self, expected: Sequence[float], used: int, accepted: int) -> None:
        """One request's round: `expected` accepted nodes at each of `budgets` (its tree at the largest), the
        budget the round took and the nodes it accepted (bonus excluded)."""
        if len(expected) != len(self.budgets):
            raise ValueError(f"expected {len(self.budgets)} values (one per budget), got {len(expected)}")
        for budget, value in zip(self.budgets, expected):
            self.means[budget] = self.decay * self.means[budget] + (1.0 - self.decay) * float(value)
        self.weight = self.decay * self.weight + (1.0 - self.decay)
        if used in self.means:
            self.accepted = self.decay * self.accepted + accepted
            self.predicted = self.decay * self.predicted + float(expected[self.budgets.index(used)])

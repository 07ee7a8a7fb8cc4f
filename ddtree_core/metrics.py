"""Acceptance and correctness diagnostics, defined once for the library, the servers and the CLI.

Conventions:
- A round is one draft + verify step of one response. Its accept length tau counts the accepted tree
  nodes including the root, which equals the tokens the round emits: the accepted draft tokens plus
  the bonus token (the target's own token after the last accepted node). So tau >= 1 always includes
  the bonus, and it is counted before any truncation at EOS or max_tokens.
- `acceptance_length`: pooled over rounds, sum(tau) / rounds, every round of every response counted
  once (longer responses weigh more). For one response it is SGLang's spec_accept_length
  (completion_tokens / verify_ct) up to that final truncation.
- `acceptance_length_per_response`: the mean over responses of each response's sum(tau) / rounds,
  every response weighed the same (the DDTree / z-lab benchmark convention). Responses with no rounds
  are skipped.
- `accept_length_histogram[i]`: rounds with tau == i + 1, i.e. i accepted drafts (the indexing of
  SGLang's spec_accept_histogram).
- `depth_acceptance[d - 1]` = P(accept depth d | reached depth d - 1) = #(tau > d) / #(tau >= d) over
  the rounds whose tree has a node at depth d; nan where no round qualifies.
- ranks: at depth d = 1 .. min(tau, L), the rank of the target's token in the drafter's top-K list of
  block position d: the accepted path's tokens, then the bonus at depth tau. Rank K (the list size)
  means the token is not in the list ("k+", a miss); a bonus rank below K is a token the drafter had
  but the tree budget left out.
- `tree_utilization` = sum(tau - 1) / sum(num_nodes): the share of drafted nodes that were accepted.
- `expected_acceptance_length`: per round 1 + sum over non-root nodes of exp(score), the drafter's own
  forecast of tau (exact if the target followed the drafter's distribution); averaged like
  `acceptance_length`, so the two compare directly.

Only `target_token_ranks` and `expected_acceptance_length` run on device tensors (no host reads;
`target_token_ranks` takes impl: "reference" host loops, "torch"/"triton" batched torch); everything
else works on host numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch

from ddtree_core import ops
from ddtree_core.tree import DraftTree

# The keys `AcceptanceSummary.to_dict` emits (HTTP server and SGLang meta_info): "ddtree_" + field name.
SUMMARY_KEYS = (
    "ddtree_num_responses",
    "ddtree_num_rounds",
    "ddtree_num_tokens",
    "ddtree_acceptance_length",
    "ddtree_acceptance_length_per_response",
    "ddtree_accept_length_histogram",
    "ddtree_depth_acceptance",
    "ddtree_rank_histogram",
    "ddtree_rank_misses",
    "ddtree_tree_utilization",
    "ddtree_expected_acceptance_length",
    "ddtree_mean_tree_nodes",
    "ddtree_mean_tree_depth",
)


@dataclass(frozen=True)
class RoundStats:
    """One round of one response."""

    accept_len: int  # tau: accepted nodes including the root = tokens emitted (bonus included)
    num_nodes: int  # non-root nodes of the round's tree
    depth_reached: int  # depth of the tree's deepest node (0 for a bare root)
    ranks: tuple[int, ...]  # target token's rank at depths 1..min(tau, L); top_k = miss
    top_k: int  # K, the size of the drafter's top-K lists this round
    expected_accept_len: float  # 1 + sum of exp(score) over the tree's non-root nodes

    def __post_init__(self):
        if not 1 <= self.accept_len <= min(self.num_nodes, self.depth_reached) + 1:
            raise ValueError(f"accept_len {self.accept_len} outside 1..{min(self.num_nodes, self.depth_reached) + 1}")
        if len(self.ranks) > self.accept_len or not all(0 <= r <= self.top_k for r in self.ranks):
            raise ValueError(f"ranks {self.ranks} must be <= accept_len long with values in 0..{self.top_k}")


@dataclass(frozen=True)
class RankHistogram:
    """Ranks of the target's tokens per depth; row d - 1 is depth d."""

    hits: tuple[tuple[int, ...], ...]  # hits[d - 1][r]: rank r < K; rows padded to the largest rank seen
    misses: tuple[int, ...]  # misses[d - 1]: the token was not in the top-K


@dataclass(frozen=True)
class AcceptanceSummary:
    """Everything `summarize` reports; the module docstring defines each quantity."""

    num_responses: int
    num_rounds: int
    num_tokens: int  # sum of tau
    acceptance_length: float
    acceptance_length_per_response: float
    accept_length_histogram: tuple[int, ...]
    depth_acceptance: tuple[float, ...]
    rank_histogram: tuple[tuple[int, ...], ...]
    rank_misses: tuple[int, ...]
    tree_utilization: float
    expected_acceptance_length: float
    mean_tree_nodes: float
    mean_tree_depth: float

    def to_dict(self) -> dict:
        """JSON-ready values under SUMMARY_KEYS; nan (undefined) becomes None."""
        return {f"ddtree_{f.name}": _json_ready(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class Divergence:
    """Where two token sequences first differ."""

    index: int  # first differing position; the shorter length when one is a prefix of the other
    token_a: int | None  # a[index], None when a ends at index
    token_b: int | None  # b[index], None when b ends at index
    length_a: int
    length_b: int


@dataclass(frozen=True)
class LogitMargin:
    """The target's logits at a divergence: is the flip a near tie or a real mismatch?"""

    divergence: Divergence
    top1_token: int
    top2_token: int
    margin: float  # top-1 logit minus top-2 logit (>= 0)
    logit_a: float | None  # logit of divergence.token_a (None when a ended)
    logit_b: float | None  # logit of divergence.token_b (None when b ended)

    def is_near_tie(self, tolerance: float) -> bool:
        """The two diverging tokens are the target's top two, within `tolerance` logits of each other."""
        tokens = {self.divergence.token_a, self.divergence.token_b}
        return tokens == {self.top1_token, self.top2_token} and self.margin <= tolerance


def acceptance_length(accept_lens: Sequence[int]) -> float:
    """Pooled: sum(tau) / rounds over every round given (nan for none)."""
    return sum(accept_lens) / len(accept_lens) if len(accept_lens) else math.nan


def acceptance_length_per_response(accept_lens: Sequence[Sequence[int]]) -> float:
    """Mean over responses of each response's acceptance_length; responses without rounds skipped."""
    means = [acceptance_length(rounds) for rounds in accept_lens if len(rounds)]
    return sum(means) / len(means) if means else math.nan


def accept_length_histogram(accept_lens: Sequence[int]) -> tuple[int, ...]:
    """counts[i] = rounds with tau == i + 1; length max(tau)."""
    counts = [0] * max(accept_lens, default=0)
    for tau in accept_lens:
        counts[tau - 1] += 1
    return tuple(counts)


def depth_acceptance(accept_lens: Sequence[int], tree_depths: Sequence[int] | int) -> tuple[float, ...]:
    """P(accept depth d | reached depth d - 1) for d = 1..max tree depth.

    tree_depths: each round's deepest tree node (or one depth for every round); a round only counts at
    the depths its tree has.
    """
    if isinstance(tree_depths, int):
        tree_depths = [tree_depths] * len(accept_lens)
    out = []
    for depth in range(1, max(tree_depths, default=0) + 1):
        tried = [tau for tau, deepest in zip(accept_lens, tree_depths) if tau >= depth and deepest >= depth]
        out.append(sum(tau > depth for tau in tried) / len(tried) if tried else math.nan)
    return tuple(out)


def tree_utilization(accept_lens: Sequence[int], num_nodes: Sequence[int]) -> float:
    """sum(tau - 1) / sum(num_nodes) (nan when no node was drafted)."""
    total = sum(num_nodes)
    return sum(tau - 1 for tau in accept_lens) / total if total else math.nan


def rank_histogram(ranks: Sequence[Sequence[int]], top_ks: Sequence[int]) -> RankHistogram:
    """Per depth, how often the target's token had each rank; ranks[r][d - 1] of round r, top_ks[r] its K."""
    depths = max((len(row) for row in ranks), default=0)
    width = max((r + 1 for row, k in zip(ranks, top_ks) for r in row if r < k), default=0)
    hits = [[0] * width for _ in range(depths)]
    misses = [0] * depths
    for row, k in zip(ranks, top_ks):
        for depth, rank in enumerate(row):
            if rank < k:
                hits[depth][rank] += 1
            else:
                misses[depth] += 1
    return RankHistogram(hits=tuple(map(tuple, hits)), misses=tuple(misses))


def expected_acceptance_length(tree: DraftTree) -> torch.Tensor:
    """The drafter's forecast of tau per request, [B] float32: sum of exp(score) over all columns (the
    root's score 0 gives the 1, padding's -inf gives 0)."""
    return tree.scores.exp().sum(dim=1)


def target_token_ranks(
    draft_token_ids: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor, *, impl: str | None = None
) -> torch.Tensor:
    """Rank of the target's token in the drafter's list at each depth, [B, L] int64.

    draft_token_ids: [B, L, K] (DraftTopK.token_ids). tokens: [B, T], the target's token at depth c + 1
    in column c (verify.emitted_tokens gives them). lengths: [B] valid columns (TreeWalk.accept_lens).
    Column d - 1 holds the rank at depth d <= min(length, T, L): 0..K-1, or K for a miss; -1 beyond.
    """
    impl = ops.resolve(impl, draft_token_ids.device)
    if impl == "reference":
        return _ranks_reference(draft_token_ids, tokens, lengths)
    return _ranks_torch(draft_token_ids, tokens, lengths)


def round_stats(tree: DraftTree, accept_lens: torch.Tensor, ranks: torch.Tensor, top_k: int) -> list[RoundStats]:
    """One RoundStats per request of a verified batch (reads the batch on the host once).

    ranks: [B, L] from `target_token_ranks`; top_k: K of the DraftTopK the tree was built from.
    """
    expected = expected_acceptance_length(tree).tolist()
    deepest = tree.depths.max(dim=1).values.tolist()
    rows = ranks.tolist()
    return [
        RoundStats(
            accept_len=tau,
            num_nodes=nodes,
            depth_reached=depth,
            ranks=tuple(r for r in row[:tau] if r >= 0),
            top_k=top_k,
            expected_accept_len=value,
        )
        for tau, nodes, depth, row, value in zip(accept_lens.tolist(), tree.num_nodes.tolist(), deepest, rows, expected)
    ]


def summarize(rounds: Sequence[Sequence[RoundStats]]) -> AcceptanceSummary:
    """All the statistics of the module docstring; rounds[r] lists response r's rounds in order."""
    flat = [stats for response in rounds for stats in response]
    taus = [stats.accept_len for stats in flat]
    nodes = [stats.num_nodes for stats in flat]
    depths = [stats.depth_reached for stats in flat]
    ranks = rank_histogram([stats.ranks for stats in flat], [stats.top_k for stats in flat])
    return AcceptanceSummary(
        num_responses=len(rounds),
        num_rounds=len(flat),
        num_tokens=sum(taus),
        acceptance_length=acceptance_length(taus),
        acceptance_length_per_response=acceptance_length_per_response(
            [[stats.accept_len for stats in response] for response in rounds]
        ),
        accept_length_histogram=accept_length_histogram(taus),
        depth_acceptance=depth_acceptance(taus, depths),
        rank_histogram=ranks.hits,
        rank_misses=ranks.misses,
        tree_utilization=tree_utilization(taus, nodes),
        expected_acceptance_length=_mean([stats.expected_accept_len for stats in flat]),
        mean_tree_nodes=_mean(nodes),
        mean_tree_depth=_mean(depths),
    )


def first_divergence(a: Sequence[int], b: Sequence[int]) -> Divergence | None:
    """The first position where token sequences a and b differ, or None when they are equal."""
    a, b = _as_list(a), _as_list(b)
    index = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    if index == len(a) == len(b):
        return None
    token = lambda seq: seq[index] if index < len(seq) else None
    return Divergence(index=index, token_a=token(a), token_b=token(b), length_a=len(a), length_b=len(b))


def logit_margin(logits: torch.Tensor, divergence: Divergence) -> LogitMargin:
    """The target's top-1 minus top-2 logit at the divergence, and the two diverging tokens' logits.

    logits: [V], the target's logits for the token at `divergence.index` (ties: smaller id first).
    """
    values = logits.detach().float().cpu()
    order = torch.sort(values, descending=True, stable=True).indices[:2].tolist()
    logit = lambda token: None if token is None else float(values[token])
    return LogitMargin(
        divergence=divergence,
        top1_token=order[0],
        top2_token=order[1],
        margin=float(values[order[0]] - values[order[1]]),
        logit_a=logit(divergence.token_a),
        logit_b=logit(divergence.token_b),
    )


def _ranks_reference(draft_token_ids: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    batch, length, k = draft_token_ids.shape
    lists, rows, lens = draft_token_ids.tolist(), tokens.tolist(), lengths.tolist()
    out = [[-1] * length for _ in range(batch)]
    for b in range(batch):
        for depth in range(min(lens[b], tokens.shape[1], length)):
            candidates = lists[b][depth]
            token = rows[b][depth]
            out[b][depth] = candidates.index(token) if token in candidates else k
    return torch.tensor(out, dtype=torch.int64, device=draft_token_ids.device).reshape(batch, length)


def _ranks_torch(draft_token_ids: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    batch, length, k = draft_token_ids.shape
    columns = min(length, tokens.shape[1])
    found = draft_token_ids[:, :columns] == tokens[:, :columns].unsqueeze(-1)  # [B, C, K]
    ranks = torch.where(found.any(dim=-1), found.to(torch.int8).argmax(dim=-1), k)
    depth = torch.arange(columns, device=tokens.device).unsqueeze(0)
    ranks = torch.where(depth < lengths.unsqueeze(1), ranks, -1)
    return torch.nn.functional.pad(ranks, (0, length - columns), value=-1)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if len(values) else math.nan


def _as_list(tokens) -> list[int]:
    return tokens.tolist() if isinstance(tokens, torch.Tensor) else list(tokens)


def _json_ready(value):
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, tuple):
        return [_json_ready(item) for item in value]
    return value

"""Batch-1 decoding loops on an HF-transformers target: AR, DFlash and DDTree.

The loops follow the DDTree reference harness (github liranringel/ddtree, `dflash.py`, `ddtree.py`):

- prefill the prompt, take the target's first token (the first bonus), hand the prompt's target
  features to the drafter;
- each round: draft a block after the bonus token; build a tree over the draft (DDTree: the
  best-first tree under a node budget, with `hold_chain` the drafter's rank-0 chain first; DFlash: the
  argmax chain); verify the whole tree in one target forward, DDTree with an ancestor-only additive
  mask over [past + tree] and positions root + depth, DFlash with the ordinary causal mask; pick the
  target's token at every node (argmax, or a sample with temperature / top-p / top-k); walk the tree
  along those tokens; keep the accepted path's KV entries (compacted to be contiguous) and features;
  emit the accepted tokens and the bonus.

Stage timers are the harness's: draft, tree_build, tree_compile, verify, commit. Decode time starts
after prefill (AR) or after the first draft pass (DFlash, DDTree), as in the harness, whose speedups
exclude prefill; the first draft pass is reported as `draft_prefill`. With `timing=True` each stage is
bracketed by a CUDA synchronize (as the harness's `cuda_time`); without it nothing syncs for timing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import DynamicCache

from ddtree_core import mask as tree_mask
from ddtree_core import metrics, verify
from ddtree_core.policy import AutoBudget, expected_accepts
from ddtree_core.settings import TreeSettings
from ddtree_core.tree import DraftTopK, DraftTree, build_tree_from_topk, chain_tree, draft_topk

METHODS = ("ar", "dflash", "ddtree")
STAGES = ("draft_prefill", "draft", "tree_build", "tree_compile", "verify", "commit")


@dataclass(frozen=True)
class SamplingConfig:
    """How the target's tokens are chosen and when a response ends (SGLang's sampling_params)."""

    max_new_tokens: int = 128  # 0: prefill only, an empty response that finishes by length (as SGLang)
    temperature: float = 0.0  # 0: greedy (argmax)
    top_p: float = 1.0
    top_k: int = -1  # -1 or 0: the whole vocabulary
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None  # seeds a private generator; None uses torch's global RNG

    def __post_init__(self):
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {self.temperature}, {self.top_p}")


@dataclass(frozen=True)
class SpecConfig:
    """The decoding method and its knobs.

    DDTree's four knobs are `tree` (ddtree_core.settings, which checks them): budget, non-root tree nodes per
    round; max_depth, 1 .. block_size - 1 (None: block_size - 1); draft_temperature, which scales the draft
    logits before the tree's log-softmax; hold_chain, trees that hold the drafter's rank-0 chain first
    (ddtree_core.tree); and auto, each round's budget up to `budget` chosen by the engine's AutoBudget.
    Example: SpecConfig("ddtree", TreeSettings(16, 4, 3.0)) builds trees of 16 nodes at most 4 deep."""

    method: str = "ddtree"  # ar | dflash | ddtree
    tree: TreeSettings = TreeSettings(64, None)  # DDTree's knobs; ar and dflash ignore them
    block_size: int | None = None  # None: the drafter's
    tree_impl: str = "reference"  # ddtree_core implementation for tree build, mask and walk

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if not isinstance(self.tree, TreeSettings):
            raise ValueError(f"tree must be a TreeSettings, got {self.tree!r}")


@dataclass(frozen=True)
class TreeTrace:
    """One round's tree and accepted path (the harness's `round_trees`); lists are plain ints."""

    token_ids: tuple[int, ...]  # node i's token at i - 1
    parents: tuple[int, ...]  # root first: -1, then each node's parent
    depths: tuple[int, ...]  # root first: 0
    accepted: tuple[int, ...]  # accepted node indices, root first


@dataclass(frozen=True)
class StageTimes:
    """Seconds per stage, summed over the rounds (present only when timing was asked for)."""

    draft_prefill: float = 0.0  # the first draft pass (prompt context into the draft cache)
    draft: float = 0.0
    tree_build: float = 0.0
    tree_compile: float = 0.0
    verify: float = 0.0
    commit: float = 0.0


@dataclass(frozen=True)
class Generation:
    """One response."""

    prompt_len: int
    tokens: tuple[int, ...]  # generated tokens, prompt excluded, stop token included
    finish_reason: str  # "stop" | "length"
    matched: int | str | None  # the stop token id or stop string that ended it
    rounds: tuple[metrics.RoundStats, ...]  # one per verify round (none for AR)
    ttft: float  # seconds: prefill and the first token
    decode_time: float  # seconds after prefill (AR) or after the first draft pass (DFlash, DDTree)
    total_time: float  # seconds, prefill included
    stage_times: StageTimes | None
    trace: tuple[TreeTrace, ...] | None

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    @property
    def accept_lengths(self) -> tuple[int, ...]:
        return tuple(r.accept_len for r in self.rounds)

    @property
    def time_per_output_token(self) -> float:
        """The harness's TPOT: decode time over all generated tokens."""
        return self.decode_time / max(self.num_tokens, 1)


class Proposer(Protocol):
    """The draft side of a loop (reference.dflash.DFlashProposer; tests may supply their own)."""

    block_size: int
    layer_ids: tuple[int, ...]  # target layers whose outputs `add_context` receives, concatenated

    def add_context(self, features: torch.Tensor) -> None: ...

    def propose(self, tokens: list[int]) -> torch.Tensor: ...


StopCheck = Callable[[Sequence[int]], str | None]


def generate(
    target: torch.nn.Module,
    input_ids: Sequence[int] | torch.Tensor,
    sampling: SamplingConfig | None = None,
    spec: SpecConfig | None = None,
    *,
    proposer: Proposer | None = None,
    timing: bool = False,
    trace: bool = False,
    stop_check: StopCheck | None = None,
    auto: AutoBudget | None = None,
) -> Generation:
    """Generate one response for the prompt `input_ids`.

    proposer: required for dflash/ddtree (reference.dflash.DFlashProposer, fresh per call).
    stop_check: called with the generated tokens after each new token; a returned string ends the
    response ("stop", matched = that string). Used for stop strings.
    auto: DDTree's budget chosen each round (`ddtree_core.policy.AutoBudget`, which this call updates; trees
    are built at its largest budget, then cut to the chosen one); spec.tree.budget is then ignored.
    """
    sampling, spec = sampling or SamplingConfig(), spec or SpecConfig()
    prompt = _as_list(input_ids)
    if not prompt:
        raise ValueError("input_ids must not be empty")
    if spec.method != "ar":
        if proposer is None:
            raise ValueError(f"method {spec.method!r} needs a proposer")
        if spec.block_size is not None and spec.block_size != proposer.block_size:
            raise ValueError(f"spec.block_size {spec.block_size} != the proposer's {proposer.block_size}")
        check_depth(spec, proposer.block_size)
    if auto is not None and spec.method != "ddtree":
        raise ValueError(f"auto budgets are DDTree's, not {spec.method!r}'s")
    run = _Run(target, sampling, spec, proposer, timing, trace, stop_check, auto)
    return run.generate(prompt)


def check_depth(spec: SpecConfig, block_size: int) -> None:
    """A DDTree depth limit must fit in the drafted block (block_size - 1 positions)."""
    if spec.tree.max_depth is not None and spec.tree.max_depth > block_size - 1:
        raise ValueError(f"max_depth {spec.tree.max_depth} exceeds the drafted block ({block_size - 1} positions)")


class _Clock:
    """Wall clock with optional per-stage sums; syncs CUDA around stages only when enabled."""

    def __init__(self, device: torch.device, enabled: bool):
        self.enabled = enabled
        self.sync = enabled and device.type == "cuda"
        self.totals = dict.fromkeys(STAGES, 0.0)

    def now(self) -> float:
        if self.sync:
            torch.cuda.synchronize()
        return time.perf_counter()

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        start = self.now()
        yield
        self.totals[name] += self.now() - start


class _Output:
    """Generated tokens and the first stop condition they meet (length first, as SGLang checks)."""

    def __init__(self, sampling: SamplingConfig, stop_check: StopCheck | None):
        self.tokens: list[int] = []
        self.max_new_tokens = sampling.max_new_tokens
        self.stop_ids = frozenset(sampling.stop_token_ids)
        self.stop_check = stop_check
        self.finish: tuple[str, int | str | None] | None = ("length", None) if self.max_new_tokens == 0 else None

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            if self.finish is not None:
                return
            self.tokens.append(token)
            if len(self.tokens) >= self.max_new_tokens:
                self.finish = ("length", None)
            elif token in self.stop_ids:
                self.finish = ("stop", token)
            elif self.stop_check is not None and (matched := self.stop_check(self.tokens)) is not None:
                self.finish = ("stop", matched)


class _Run:
    """State of one generate call: the target cache, the committed length and the records."""

    def __init__(self, target, sampling, spec, proposer, timing, trace, stop_check, auto=None):
        self.target, self.sampling, self.spec, self.proposer = target, sampling, spec, proposer
        self.auto = auto
        self.device = target.get_input_embeddings().weight.device
        self.clock = _Clock(self.device, timing)
        self.cache = DynamicCache()
        self.cache_kwarg = "cache" if "cache" in inspect.signature(target.forward).parameters else "past_key_values"
        self.output = _Output(sampling, stop_check)
        self.rounds: list[metrics.RoundStats] = []
        self.traces: list[TreeTrace] | None = [] if trace else None
        self.generator = None
        if sampling.seed is not None:
            self.generator = torch.Generator(device=self.device).manual_seed(sampling.seed)

    @torch.inference_mode()
    def generate(self, prompt: list[int]) -> Generation:
        start = time.perf_counter()
        self._prefill(prompt)
        ttft = self.clock.now() - start
        self.decode_start = self.clock.now()
        while self.output.finish is None:
            if self.spec.method == "ar":
                self._ar_step(len(prompt) + len(self.output.tokens) - 1)
            else:
                self._spec_round(prompt)
        end = self.clock.now()
        times = StageTimes(**self.clock.totals) if self.clock.enabled else None
        return Generation(
            prompt_len=len(prompt),
            tokens=tuple(self.output.tokens),
            finish_reason=self.output.finish[0],
            matched=self.output.finish[1],
            rounds=tuple(self.rounds),
            ttft=ttft,
            decode_time=end - self.decode_start,
            total_time=end - start,
            stage_times=times,
            trace=None if self.traces is None else tuple(self.traces),
        )

    def _prefill(self, prompt: list[int]) -> None:
        ids = torch.tensor([prompt], device=self.device)
        out = self._forward(ids, torch.arange(len(prompt), device=self.device)[None], logits_to_keep=1)
        first = self._sample(out.logits[:, -1:])
        if self.proposer is not None and self.spec.method != "ar":
            self.proposer.add_context(_features(out.hidden_states, self.proposer.layer_ids))
        self.output.extend(first[0].tolist())

    def _ar_step(self, position: int) -> None:
        """One target forward on the last token: the harness's block_size = 1 baseline."""
        with self.clock.stage("verify"):
            ids = torch.tensor([[self.output.tokens[-1]]], device=self.device)
            out = self._forward(ids, torch.tensor([[position]], device=self.device))
        with self.clock.stage("commit"):
            self.output.extend(self._sample(out.logits)[0].tolist())

    def _spec_round(self, prompt: list[int]) -> None:
        tokens = prompt + self.output.tokens
        start = len(tokens) - 1  # position of the bonus token, = committed tokens in the target cache
        first = not self.rounds
        round_start = time.perf_counter()
        with self.clock.stage("draft_prefill" if first else "draft"):
            logits = self.proposer.propose(tokens)  # [1, L, V]
        if first:
            self.decode_start = self.clock.now()
        with self.clock.stage("tree_build"):
            topk, tree = self._tree(logits)
            predicted = None
            if self.auto is not None:
                expected = expected_accepts(tree)
                budget = self.auto.choose(expected)
                predicted = float(expected[0, budget])
                if budget < self.auto.largest:
                    tree = self._build(topk, budget)
        with self.clock.stage("tree_compile"):
            ids, positions, attention = self._compile(tree, tokens[-1], start)
        verify_start = time.perf_counter()
        with self.clock.stage("verify"):
            out = self._forward(ids, positions, attention=attention)
        verify_end = time.perf_counter()
        with self.clock.stage("commit"):
            accepted = self._commit(tree, topk, ids, out, start)
        if self.auto is not None:
            outside = (verify_start - round_start) + (time.perf_counter() - verify_end)
            self.auto.observe(predicted, accepted, None if first else 1000 * outside)  # first: the draft's prefill

    def _tree(self, logits: torch.Tensor) -> tuple[DraftTopK, DraftTree]:
        """DDTree: the best-first tree (held: the rank-0 chain first). DFlash: the argmax chain of the block.
        Logits over a draft vocabulary (the proposer's vocab_ids) rank its rows, which then become token ids."""
        impl, length, vocab = self.spec.tree_impl, logits.shape[1], logits.shape[2]
        if self.spec.method == "dflash":
            topk = self._token_ids(draft_topk(logits, min(length, vocab), impl=impl))
            if impl == "reference":  # the oracle: the best-first build of the rank-0 lists
                chain = DraftTopK(log_probs=topk.log_probs[..., :1], token_ids=topk.token_ids[..., :1])
                return topk, build_tree_from_topk(chain, length, impl=impl)
            return topk, chain_tree(topk)  # the same tree, without a build
        depth = length if self.spec.tree.max_depth is None else self.spec.tree.max_depth
        budget = self.spec.tree.budget if self.auto is None else self.auto.largest
        temperature = self.spec.tree.draft_temperature
        topk = draft_topk(logits[:, :depth], max(1, min(budget, vocab)), draft_temperature=temperature, impl=impl)
        topk = self._token_ids(topk)
        return topk, self._build(topk, budget)

    def _token_ids(self, topk: DraftTopK) -> DraftTopK:
        """`topk` with its rows of the proposer's draft vocabulary as token ids (as it is without one)."""
        vocab_ids = getattr(self.proposer, "vocab_ids", None)
        if vocab_ids is None:
            return topk
        return DraftTopK(log_probs=topk.log_probs, token_ids=vocab_ids[topk.token_ids])  # both on the head's device

    def _build(self, topk: DraftTopK, budget: int) -> DraftTree:
        """The tree of `budget` nodes (the same from any top-K with K >= min(budget, vocab): a node of rank r
        follows its r better siblings in pop order, so a tree of b nodes holds ranks < b only)."""
        depth = topk.token_ids.shape[1]
        impl, hold = self.spec.tree_impl, self.spec.tree.hold_chain
        return build_tree_from_topk(topk, budget, max_depth=depth, hold_chain=hold, impl=impl)

    def _compile(self, tree: DraftTree, root: int, start: int):
        """Verify inputs [1, n+1]: tokens, positions start + depth, and (DDTree) the additive mask."""
        n = int(tree.num_nodes[0])
        ids = torch.cat([torch.tensor([[root]], device=self.device), tree.token_ids[:, :n].to(self.device)], 1)
        positions = start + tree.depths[:, : n + 1].to(self.device)
        if self.spec.method == "dflash":
            return ids, positions, None  # a chain: the causal mask is its ancestor mask
        visible = tree_mask.ancestor_mask(_trimmed(tree, n), impl=self.spec.tree_impl)[0].to(self.device)
        dtype = self.target.get_input_embeddings().weight.dtype
        attention = torch.zeros(1, 1, n + 1, start + n + 1, dtype=dtype, device=self.device)
        attention[0, 0, :, start:].masked_fill_(~visible, torch.finfo(dtype).min)
        return ids, positions, attention

    def _commit(self, tree: DraftTree, topk: DraftTopK, ids: torch.Tensor, out, start: int) -> int:
        """Walk the tree, keep the accepted path's KV and features, record the round, emit its tokens; the
        accepted nodes (bonus excluded)."""
        n = int(tree.num_nodes[0])
        chosen = self._sample(out.logits)  # [1, n+1]
        padded = torch.full(tuple(tree.parents.shape), -1, dtype=torch.int64, device=tree.parents.device)
        padded[:, : n + 1] = chosen.to(padded.device)
        walk = verify.follow_tree(tree, padded, impl=self.spec.tree_impl)
        accept_len = int(walk.accept_lens[0])
        accepted = walk.accepted[0, :accept_len].to(self.device)
        _keep_path(self.cache, start, accepted)
        self.proposer.add_context(_features(out.hidden_states, self.proposer.layer_ids)[:, accepted])
        emitted = ids[0, accepted[1:]].tolist() + [int(walk.bonus[0])]  # the target's token at depths 1..tau
        tokens = torch.tensor([emitted], device=topk.token_ids.device)
        ranks = metrics.target_token_ranks(topk.token_ids, tokens, walk.accept_lens, impl=self.spec.tree_impl)
        self.rounds.extend(metrics.round_stats(tree, walk.accept_lens, ranks, topk.token_ids.shape[-1]))
        if self.traces is not None:
            self.traces.append(_trace(tree, n, accepted))
        self.output.extend(emitted)
        return accept_len - 1

    def _forward(self, ids, positions, *, attention=None, logits_to_keep=0):
        hidden = self.spec.method != "ar"
        kwargs = {self.cache_kwarg: self.cache}
        return self.target(
            input_ids=ids,
            position_ids=positions,
            attention_mask=attention,
            use_cache=True,
            output_hidden_states=hidden,
            logits_to_keep=logits_to_keep,
            **kwargs,
        )

    def _sample(self, logits: torch.Tensor) -> torch.Tensor:
        s = self.sampling
        return verify.sample_target_tokens(logits, s.temperature, s.top_p, s.top_k, self.generator)


def _features(hidden_states: Sequence[torch.Tensor], layer_ids: Sequence[int]) -> torch.Tensor:
    """z-lab's extract_context_feature: layer i is hidden_states[i + 1] ([0] is the embedding output)."""
    return torch.cat([hidden_states[i + 1] for i in layer_ids], dim=-1)


def _keep_path(cache: DynamicCache, past: int, accepted: torch.Tensor) -> None:
    """Keep the first `past` entries of every layer, then the verify entries `accepted` (in order)."""
    for layer in cache.layers:
        keys, values = layer.keys, layer.values  # [B, H, past + n + 1, D]
        index = past + accepted
        keys[:, :, past : past + len(accepted)] = keys.index_select(2, index)
        values[:, :, past : past + len(accepted)] = values.index_select(2, index)
        layer.keys, layer.values = keys[:, :, : past + len(accepted)], values[:, :, : past + len(accepted)]


def _trimmed(tree: DraftTree, n: int) -> DraftTree:
    """The tree without its padding columns (n non-root nodes)."""
    return dataclasses.replace(
        tree,
        token_ids=tree.token_ids[:, :n],
        parents=tree.parents[:, : n + 1],
        depths=tree.depths[:, : n + 1],
        scores=tree.scores[:, : n + 1],
        ranks=tree.ranks[:, : n + 1],
    )


def _trace(tree: DraftTree, n: int, accepted: torch.Tensor) -> TreeTrace:
    return TreeTrace(
        token_ids=tuple(tree.token_ids[0, :n].tolist()),
        parents=tuple(tree.parents[0, : n + 1].tolist()),
        depths=tuple(tree.depths[0, : n + 1].tolist()),
        accepted=tuple(accepted.tolist()),
    )


def _as_list(input_ids: Sequence[int] | torch.Tensor) -> list[int]:
    if isinstance(input_ids, torch.Tensor):
        return input_ids.reshape(-1).tolist()
    return [int(t) for t in input_ids]

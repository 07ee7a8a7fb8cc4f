"""The draft side of a DDTree round inside SGLang's draft CUDA graph (on unless SGLANG_DDTREE_DRAFT_GRAPH=0).

DFLASH folds its greedy head into the drafter's CUDA graph through the draft model runner's
`dflash_draft_sampler` hook: the graph runner calls the hook on the drafter's hidden states while it
captures each batch size, so every replay reruns it. `DraftHead` uses the same hook for everything between
the drafter's hidden states and the verify inputs, which the eager worker otherwise launches op by op
every round:

    hidden [bs * block, H] --logits_fn--> logits of block positions 1..D [bs, D, V]
      --per-request temperature / depth limits, top-K (rounds.draft_tree)--> DraftTopK, DraftTree

(the verify inputs follow in one launch after the graph: rounds.verify_batch). Inputs live in static
buffers the worker fills before the draft forward (`load`): each request's budget, depth limit and draft
temperature (always the per-request path, so one graph serves every mix). Outputs land in static buffers,
rows [:bs] (`outputs`); rows of padded batch slots hold stale values nobody reads. When the drafter runs
eagerly (no graph for this batch size), the worker calls the head itself: the same code on the same buffers.
Numerics equal the eager worker's: logits_fn is the same target-head call, the rest the same functions.

At TP > 1 the head's vocab shards are gathered inside the graph (the target's logits processor, as in
the eager round), so every rank builds the same trees; that path is opt-in (SGLANG_DDTREE_DRAFT_GRAPH=1)
until measured, and TP > 1 keeps the eager round by default.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence

import torch

from ddtree_core.settings import TreeSettings, env_flag
from ddtree_core.sglang import rounds
from ddtree_core.sglang.config import ServerSettings
from ddtree_core.tree import DraftTopK, DraftTree

ENV_DRAFT_GRAPH = "SGLANG_DDTREE_DRAFT_GRAPH"
_TOPK_FIELDS = tuple(f.name for f in dataclasses.fields(DraftTopK))
_TREE_FIELDS = tuple(f.name for f in dataclasses.fields(DraftTree) if f.name != "max_depth")


def enabled(environ=os.environ) -> bool | None:
    """SGLANG_DDTREE_DRAFT_GRAPH: 1 folds the draft side into the draft graph, 0 keeps it eager, unset
    (None) folds at TP = 1 only."""
    return env_flag(environ, ENV_DRAFT_GRAPH)


class DraftHead:
    """Static-buffer draft head (see the module docstring)."""

    def __init__(
        self,
        settings: ServerSettings,
        logits_fn: Callable[[torch.Tensor], torch.Tensor],
        *,
        hidden_size: int,
        max_bs: int,
        device: torch.device | str,
        dtype: torch.dtype,
    ):
        self.settings = settings
        self.block_size = settings.block_size
        self.max_bs = max_bs
        self._logits_fn = logits_fn
        defaults = settings.request_defaults()
        self.limits = rounds.RequestLimits(
            budgets=torch.full((max_bs,), defaults.budget, dtype=torch.int64, device=device),
            max_depths=torch.full((max_bs,), defaults.max_depth, dtype=torch.int64, device=device),
            draft_temperatures=torch.full((max_bs,), defaults.draft_temperature, dtype=torch.float32, device=device),
            hold_chains=torch.full((max_bs,), defaults.hold_chain, dtype=torch.bool, device=device),
        )
        self._loaded: list[TreeSettings] = [defaults] * max_bs  # what the limit buffers hold, per row
        self._device = torch.device(device)
        self._out: dict[str, torch.Tensor] = {}
        # One eager pass allocates every output buffer (max_bs rows) outside any graph capture.
        self(torch.zeros(self.block_size, hidden_size, dtype=dtype, device=device))

    def load(self, settings: Sequence[TreeSettings]) -> None:
        """Fill rows [:bs] of the limits, copied from the host only when they changed."""
        bs = len(settings)
        if bs > self.max_bs:
            raise ValueError(f"DDTREE draft head: batch {bs} exceeds the captured maximum {self.max_bs}")
        if list(settings) != self._loaded[:bs]:
            staged = rounds.staged_limits(settings, pin=self._device.type == "cuda")
            for field in dataclasses.fields(staged):
                getattr(self.limits, field.name)[:bs].copy_(getattr(staged, field.name), non_blocking=True)
            self._loaded[:bs] = settings

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor | None = None) -> None:
        """hidden_states: [bs * block, H], the drafter's output for the block [bonus, MASK ...]; input_ids,
        which SGLang 0.5.23's capture hook also passes, are not read."""
        bs = hidden_states.shape[0] // self.block_size
        depth = self.settings.tree_depth
        hidden = hidden_states.view(bs, self.block_size, -1)[:, 1 : 1 + depth]
        logits = self._logits_fn(hidden.reshape(bs * depth, -1)).view(bs, depth, -1)
        limits = rounds.RequestLimits(*(getattr(self.limits, f.name)[:bs] for f in dataclasses.fields(self.limits)))
        topk, tree = rounds.draft_tree(logits, self.settings, limits)
        produced = {f"topk_{name}": getattr(topk, name) for name in _TOPK_FIELDS}
        produced.update({f"tree_{name}": getattr(tree, name) for name in _TREE_FIELDS})
        for name, value in produced.items():
            if name not in self._out:
                self._out[name] = torch.empty((self.max_bs,) + value.shape[1:], dtype=value.dtype, device=value.device)
            self._out[name][:bs].copy_(value)

    def outputs(self, bs: int) -> tuple[DraftTopK, DraftTree]:
        """Views of rows [:bs]: top-K lists and trees."""
        out = {name: value[:bs] for name, value in self._out.items()}
        topk = DraftTopK(**{name: out[f"topk_{name}"] for name in _TOPK_FIELDS})
        tree = DraftTree(**{name: out[f"tree_{name}"] for name in _TREE_FIELDS}, max_depth=self.settings.tree_depth)
        return topk, tree

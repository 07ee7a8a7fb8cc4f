"""The four DDTree knobs of a request, their names, and the one validation of per-request overrides.

Every engine (the SGLang plugin, the reference engine) and the harness speak of a DDTree round with the same
four settings, and take a request's overrides from SGLang's `sampling_params.custom_params`:

    ddtree_budget             int in [0, the server's budget]    non-root tree nodes (0: the bonus token only),
                              or "auto" where the engine serves it   (each round's budget priced by the engine)
    ddtree_max_depth          int in [1, the server's limit]     depth limit of the tree
    ddtree_draft_temperature  finite number > 0                  divides the draft logits before the tree's scores
    ddtree_hold_chain         true / false                       the tree holds the drafter's rank-0 chain first

An override may only lower the server's budget and depth limit (their widths are fixed when a server starts);
any other `ddtree_*` key is refused; keys without the prefix belong to SGLang or other plugins and are left
alone. `TreeSettings.with_custom_params` is the validation, with one-line errors naming the field, its range
and the value:

    >>> server = TreeSettings(budget=64, max_depth=15)
    >>> server.with_custom_params({"ddtree_budget": 16, "ddtree_hold_chain": True}, max_depth=15)
    TreeSettings(budget=16, max_depth=15, draft_temperature=1.0, hold_chain=True, auto=False)
    >>> server.with_custom_params({"ddtree_budget": 10**9}, max_depth=15)
    TreeSettingsError: custom_params.ddtree_budget must be an int in [0, 64] (the server's budget), got 1000000000
    >>> TreeSettings(16, None, 0.5).to_custom_params()
    {'ddtree_budget': 16, 'ddtree_draft_temperature': 0.5, 'ddtree_hold_chain': False}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PARAM_BUDGET = "ddtree_budget"
PARAM_MAX_DEPTH = "ddtree_max_depth"
PARAM_DRAFT_TEMPERATURE = "ddtree_draft_temperature"
PARAM_HOLD_CHAIN = "ddtree_hold_chain"
REQUEST_PARAMS = (PARAM_BUDGET, PARAM_MAX_DEPTH, PARAM_DRAFT_TEMPERATURE, PARAM_HOLD_CHAIN)
PARAM_PREFIX = "ddtree_"


class TreeSettingsError(ValueError):
    """A request's DDTree overrides cannot run on this server (one line, naming the field)."""


@dataclass(frozen=True)
class TreeSettings:
    """One request's (or a server's default) DDTree settings."""

    budget: int  # non-root tree nodes (with auto: the largest a round may take)
    max_depth: int | None  # depth limit; None: the drafted block (block_size - 1)
    draft_temperature: float = 1.0  # > 0
    hold_chain: bool = False
    auto: bool = False  # each round's budget chosen by the engine (ddtree_core.policy), up to `budget`

    def with_custom_params(
        self, params: Mapping[str, Any] | None, *, max_depth: int, auto_served: bool = False
    ) -> TreeSettings:
        """These settings with a request's `custom_params` overrides applied, each checked: ddtree_budget in
        [0, self.budget] (or "auto" where `auto_served`), ddtree_max_depth in [1, max_depth] (the largest depth
        the server takes), the temperature finite and > 0, hold_chain a bool. TreeSettingsError otherwise, or
        for an unknown ddtree_ key."""
        if not params:
            return self
        if not isinstance(params, Mapping):
            raise TreeSettingsError("custom_params must be an object")
        unknown = sorted(
            k for k in params if isinstance(k, str) and k.startswith(PARAM_PREFIX) and k not in REQUEST_PARAMS
        )
        if unknown:
            raise TreeSettingsError(f"custom_params.{unknown[0]} is unknown; known: {', '.join(REQUEST_PARAMS)}")
        auto = self.auto
        if auto_served and params.get(PARAM_BUDGET) == "auto":
            budget, auto = self.budget, True
        elif PARAM_BUDGET in params:
            what = "the server's budget" + ('; or "auto"' if auto_served else "")
            budget, auto = _int_in(params, PARAM_BUDGET, self.budget, 0, self.budget, what), False
        else:
            budget = self.budget
        depth = _int_in(params, PARAM_MAX_DEPTH, self.max_depth, 1, max_depth, "the server's depth limit")
        temperature = params.get(PARAM_DRAFT_TEMPERATURE, self.draft_temperature)
        if not (_is_number(temperature) and math.isfinite(temperature) and temperature > 0):
            raise TreeSettingsError(
                f"custom_params.{PARAM_DRAFT_TEMPERATURE} must be a finite number > 0, got {temperature!r}"
            )
        hold_chain = params.get(PARAM_HOLD_CHAIN, self.hold_chain)
        if not isinstance(hold_chain, bool):
            raise TreeSettingsError(f"custom_params.{PARAM_HOLD_CHAIN} must be true or false, got {hold_chain!r}")
        return TreeSettings(budget, depth, float(temperature), hold_chain, auto)

    def to_custom_params(self) -> dict[str, Any]:
        """The custom_params that ask a server for these settings (a depth of None goes unsaid)."""
        budget = "auto" if self.auto else self.budget
        params: dict[str, Any] = {PARAM_BUDGET: budget, PARAM_DRAFT_TEMPERATURE: self.draft_temperature}
        if self.max_depth is not None:
            params[PARAM_MAX_DEPTH] = self.max_depth
        params[PARAM_HOLD_CHAIN] = self.hold_chain
        return params


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int_in(params: Mapping[str, Any], key: str, default: int | None, low: int, high: int, what: str) -> int | None:
    if key not in params:
        return default
    value = params[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise TreeSettingsError(f"custom_params.{key} must be an int in [{low}, {high}] ({what}), got {value!r}")
    return value

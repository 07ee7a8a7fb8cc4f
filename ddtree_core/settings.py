"""The four DDTree knobs as one frozen `TreeSettings`, their names, and their one validation.

Every engine (the SGLang plugin, the reference engine) and the harness speak of a DDTree round with the same
four settings, under the same names everywhere:

    field              custom_params key / server_info key   launch variable (SGLang plugin)
    budget (auto)      ddtree_budget                         SGLANG_DDTREE_BUDGET
    max_depth          ddtree_max_depth                      SGLANG_DDTREE_MAX_DEPTH
    draft_temperature  ddtree_draft_temperature              SGLANG_DDTREE_DRAFT_TEMPERATURE
    hold_chain         ddtree_hold_chain                     SGLANG_DDTREE_HOLD_CHAIN

    budget             int >= 0    non-root tree nodes (0: the bonus token only); with auto, the largest budget
                                   a round may take, each round's chosen by the engine (ddtree_core.policy)
    max_depth          int >= 1    depth limit of the tree; None: the drafted block (block_size - 1)
    draft_temperature  finite > 0  divides the draft logits before the tree's scores
    hold_chain         bool        the tree holds the drafter's rank-0 chain first (ddtree_core.tree)

Ways in, each checking what it takes against the rules above (and the limits of the server it is for), each
error one line naming the field as its source spells it:
- `TreeSettings(...)`: the rules above ("budget must be an int >= 0, got -1");
- `TreeSettings.from_custom_params(params, server=..., max_depth=...)`: a request's overrides of a server's
  settings, from SGLang's `sampling_params.custom_params`. An override may only lower the server's budget
  and depth limit (their widths are fixed when a server starts); ddtree_budget may be "auto" where the
  engine serves it; any other `ddtree_*` key is refused; keys without the prefix belong to SGLang or other
  plugins and are left alone;
- `TreeSettings.from_environment(environ, budget=..., max_depth=...)`: a server's launch settings from the
  SGLANG_DDTREE_* variables (unset or empty: the defaults given), with a launch's limits (`check_launch`:
  a budget >= 1, a depth limit within the drafted block).
Ways out: `to_custom_params` (what a client sends to ask for these settings) and `to_environment` (what a
launcher sets to start a server with them); each round-trips through its way in.

Worked example, a server of budget 64 and depth limit 15:

    >>> server = TreeSettings(budget=64, max_depth=15)
    >>> TreeSettings.from_custom_params({"ddtree_budget": 16, "ddtree_hold_chain": True}, server=server, max_depth=15)
    TreeSettings(budget=16, max_depth=15, draft_temperature=1.0, hold_chain=True, auto=False)
    >>> TreeSettings.from_custom_params({"ddtree_budget": 10**9}, server=server, max_depth=15)
    TreeSettingsError: custom_params.ddtree_budget must be an int in [0, 64] (the server's budget), got 1000000000
    >>> TreeSettings(16, None, 0.5).to_custom_params()
    {'ddtree_budget': 16, 'ddtree_draft_temperature': 0.5, 'ddtree_hold_chain': False}
    >>> server.to_environment()
    {'SGLANG_DDTREE_BUDGET': '64', 'SGLANG_DDTREE_DRAFT_TEMPERATURE': '1.0', 'SGLANG_DDTREE_MAX_DEPTH': '15'}
    >>> TreeSettings.from_environment({"SGLANG_DDTREE_BUDGET": "32"}, budget=15, max_depth=15)
    TreeSettings(budget=32, max_depth=15, draft_temperature=1.0, hold_chain=False, auto=False)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

PARAM_BUDGET = "ddtree_budget"
PARAM_MAX_DEPTH = "ddtree_max_depth"
PARAM_DRAFT_TEMPERATURE = "ddtree_draft_temperature"
PARAM_HOLD_CHAIN = "ddtree_hold_chain"
REQUEST_PARAMS = (PARAM_BUDGET, PARAM_MAX_DEPTH, PARAM_DRAFT_TEMPERATURE, PARAM_HOLD_CHAIN)
PARAM_PREFIX = "ddtree_"
BUDGET_AUTO = "auto"  # ddtree_budget of a request whose budget the engine chooses each round

ENV_BUDGET = "SGLANG_DDTREE_BUDGET"
ENV_MAX_DEPTH = "SGLANG_DDTREE_MAX_DEPTH"
ENV_DRAFT_TEMPERATURE = "SGLANG_DDTREE_DRAFT_TEMPERATURE"
ENV_HOLD_CHAIN = "SGLANG_DDTREE_HOLD_CHAIN"
ENVIRONMENT = (ENV_BUDGET, ENV_MAX_DEPTH, ENV_DRAFT_TEMPERATURE, ENV_HOLD_CHAIN)
_AUTO_AT_LAUNCH = f'{ENV_BUDGET} takes no "{BUDGET_AUTO}": a request asks for it ({PARAM_BUDGET})'


class TreeSettingsError(ValueError):
    """DDTree settings that cannot run (one line, naming the field as its source spells it)."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_temperature(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value) and value > 0


# field -> (what it must be, the check): the rules every way in applies.
_RULES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "budget": ("an int >= 0", lambda v: _is_int(v) and v >= 0),
    "max_depth": ("None or an int >= 1", lambda v: v is None or _is_int(v) and v >= 1),
    "draft_temperature": ("a finite number > 0", _is_temperature),
    "hold_chain": ("a bool", lambda v: isinstance(v, bool)),
    "auto": ("a bool", lambda v: isinstance(v, bool)),
}


@dataclass(frozen=True)
class TreeSettings:
    """One request's, one server's or one sweep cell's DDTree settings (see the module docstring)."""

    budget: int  # non-root tree nodes (with auto: the largest a round may take)
    max_depth: int | None  # depth limit; None: the drafted block (block_size - 1)
    draft_temperature: float = 1.0  # > 0
    hold_chain: bool = False
    auto: bool = False  # each round's budget chosen by the engine (ddtree_core.policy), up to `budget`

    def __post_init__(self):
        for field, (what, ok) in _RULES.items():
            value = getattr(self, field)
            if not ok(value):
                raise TreeSettingsError(f"{field} must be {what}, got {value!r}")

    @classmethod
    def from_custom_params(
        cls, params: Mapping[str, Any] | None, *, server: TreeSettings, max_depth: int, auto_served: bool = False
    ) -> TreeSettings:
        """The settings of a request to `server`: `server`'s, with the request's `custom_params` overrides
        applied, each checked: ddtree_budget an int in [0, server.budget] (or "auto" where `auto_served`:
        auto over the server's budget), ddtree_max_depth an int in [1, max_depth] (the largest depth the
        server takes), ddtree_draft_temperature a finite number > 0, ddtree_hold_chain true or false.
        TreeSettingsError otherwise, or for an unknown ddtree_ key. No overrides (None, {}): `server` itself.

        Example: {"ddtree_max_depth": 3} to TreeSettings(64, 15) with max_depth 15 -> TreeSettings(64, 3);
        {"ddtree_max_depth": 16} -> "custom_params.ddtree_max_depth must be an int in [1, 15] (the server's
        depth limit), got 16".
        """
        if not params:
            return server
        if not isinstance(params, Mapping):
            raise TreeSettingsError("custom_params must be an object")
        unknown = sorted(
            k for k in params if isinstance(k, str) and k.startswith(PARAM_PREFIX) and k not in REQUEST_PARAMS
        )
        if unknown:
            raise TreeSettingsError(f"custom_params.{unknown[0]} is unknown; known: {', '.join(REQUEST_PARAMS)}")
        auto = server.auto
        if auto_served and params.get(PARAM_BUDGET) == BUDGET_AUTO:
            budget, auto = server.budget, True
        elif PARAM_BUDGET in params:
            what = "the server's budget" + (f'; or "{BUDGET_AUTO}"' if auto_served else "")
            budget, auto = _int_in(params, PARAM_BUDGET, server.budget, 0, server.budget, what), False
        else:
            budget = server.budget
        depth = _int_in(params, PARAM_MAX_DEPTH, server.max_depth, 1, max_depth, "the server's depth limit")
        temperature = params.get(PARAM_DRAFT_TEMPERATURE, server.draft_temperature)
        if not _is_temperature(temperature):
            raise TreeSettingsError(
                f"custom_params.{PARAM_DRAFT_TEMPERATURE} must be a finite number > 0, got {temperature!r}"
            )
        hold_chain = params.get(PARAM_HOLD_CHAIN, server.hold_chain)
        if not isinstance(hold_chain, bool):
            raise TreeSettingsError(f"custom_params.{PARAM_HOLD_CHAIN} must be true or false, got {hold_chain!r}")
        return cls(budget, depth, float(temperature), hold_chain, auto)

    def to_custom_params(self) -> dict[str, Any]:
        """The custom_params that ask a server for these settings (a depth of None goes unsaid; auto asks for
        "auto", under the server's own budget). Example: TreeSettings(16, None, 0.5).to_custom_params() ->
        {"ddtree_budget": 16, "ddtree_draft_temperature": 0.5, "ddtree_hold_chain": False}."""
        budget = BUDGET_AUTO if self.auto else self.budget
        params: dict[str, Any] = {PARAM_BUDGET: budget, PARAM_DRAFT_TEMPERATURE: self.draft_temperature}
        if self.max_depth is not None:
            params[PARAM_MAX_DEPTH] = self.max_depth
        params[PARAM_HOLD_CHAIN] = self.hold_chain
        return params

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], *, budget: int, max_depth: int) -> TreeSettings:
        """A server's settings from the SGLANG_DDTREE_* variables of `environ`; unset or empty ones take the
        defaults: `budget`, `max_depth` (also the largest depth the server takes: its drafted block), a draft
        temperature of 1.0, unheld trees. Each value is checked with `check_launch`; a malformed one (not an
        integer, not a number, not 0 / 1) is refused too, TreeSettingsError naming the variable either way.

        Example: {"SGLANG_DDTREE_MAX_DEPTH": "8", "SGLANG_DDTREE_HOLD_CHAIN": "1"} with budget 15, max_depth 15
        -> TreeSettings(15, 8, 1.0, True); {"SGLANG_DDTREE_MAX_DEPTH": "16"} -> "SGLANG_DDTREE_MAX_DEPTH must be
        in 1..15, got 16".
        """
        budget = env_int(environ, ENV_BUDGET, budget)
        depth = env_int(environ, ENV_MAX_DEPTH, max_depth)
        temperature = env_float(environ, ENV_DRAFT_TEMPERATURE, 1.0)
        hold_chain = env_flag(environ, ENV_HOLD_CHAIN)
        _check_launch(budget, depth, temperature, max_depth)
        return cls(budget, depth, temperature, bool(hold_chain))

    def to_environment(self) -> dict[str, str]:
        """The SGLANG_DDTREE_* variables that start a server with these settings (a depth of None and unheld
        trees go unsaid: the server's defaults). An auto budget is a request's, not a server's:
        TreeSettingsError. Example: TreeSettings(31, None, 1.0, True).to_environment() ->
        {"SGLANG_DDTREE_BUDGET": "31", "SGLANG_DDTREE_DRAFT_TEMPERATURE": "1.0", "SGLANG_DDTREE_HOLD_CHAIN": "1"}.
        """
        if self.auto:
            raise TreeSettingsError(_AUTO_AT_LAUNCH)
        env = {ENV_BUDGET: str(self.budget), ENV_DRAFT_TEMPERATURE: str(self.draft_temperature)}
        if self.max_depth is not None:
            env[ENV_MAX_DEPTH] = str(self.max_depth)
        if self.hold_chain:
            env[ENV_HOLD_CHAIN] = "1"
        return env

    def check_launch(self, *, max_depth: int) -> None:
        """Whether these settings can start a server whose drafted block is `max_depth` deep: a budget >= 1, a
        depth limit in 1..max_depth, a draft temperature finite and > 0, no auto; TreeSettingsError naming the
        SGLANG_DDTREE_* variable otherwise ("SGLANG_DDTREE_BUDGET must be >= 1, got 0")."""
        if self.auto:
            raise TreeSettingsError(_AUTO_AT_LAUNCH)
        _check_launch(self.budget, self.max_depth, self.draft_temperature, max_depth)


def _check_launch(budget: Any, depth: Any, temperature: Any, max_depth: int) -> None:
    if not (_is_int(budget) and budget >= 1):
        raise TreeSettingsError(f"{ENV_BUDGET} must be >= 1, got {budget}")
    if not (_is_int(depth) and 1 <= depth <= max_depth):
        raise TreeSettingsError(f"{ENV_MAX_DEPTH} must be in 1..{max_depth}, got {depth}")
    if not _is_temperature(temperature):
        raise TreeSettingsError(f"{ENV_DRAFT_TEMPERATURE} must be a finite number > 0, got {temperature}")


def _int_in(params: Mapping[str, Any], key: str, default: int | None, low: int, high: int, what: str) -> int | None:
    if key not in params:
        return default
    value = params[key]
    if not _is_int(value) or not low <= value <= high:
        raise TreeSettingsError(f"custom_params.{key} must be an int in [{low}, {high}] ({what}), got {value!r}")
    return value


def env_int(environ: Mapping[str, str], name: str, default: int) -> int:
    """The integer variable `name` of `environ`; unset or empty: `default`. TreeSettingsError if malformed."""
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise TreeSettingsError(f"{name} must be an integer, got {raw!r}") from None


def env_float(environ: Mapping[str, str], name: str, default: float) -> float:
    """The number variable `name` of `environ`; unset or empty: `default`. TreeSettingsError if malformed."""
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise TreeSettingsError(f"{name} must be a number, got {raw!r}") from None


def env_flag(environ: Mapping[str, str], name: str) -> bool | None:
    """A 0 / 1 variable (also false / true, no / yes, off / on); None when unset or empty."""
    raw = environ.get(name, "").strip().lower()
    if not raw:
        return None
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise TreeSettingsError(f"{name} must be 0 or 1, got {raw!r}")

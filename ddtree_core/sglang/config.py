"""DDTree settings of the SGLang plugin: server-wide knobs from the environment, per-request overrides.

Server-wide, read from the environment (SGLang's spawned scheduler processes inherit it, and
`ServerArgs` cannot grow new CLI fields from a plugin):

    SGLANG_DDTREE_BUDGET             non-root tree nodes N, default block_size - 1
    SGLANG_DDTREE_MAX_DEPTH          depth limit, 1 .. block_size - 1, default block_size - 1
    SGLANG_DDTREE_DRAFT_TEMPERATURE  divides the drafter's logits before the top-K log-probs, default 1.0
    SGLANG_DDTREE_TOP_K              K, the drafter's candidates per depth, 1 .. budget, default the budget
                                     (the exact DDTree tree); a smaller K gives each node at most K
                                     children and cuts the top-K and build work
    SGLANG_DDTREE_HOLD_CHAIN         1: every tree holds the drafter's rank-0 chain first, then the best
                                     other nodes (ddtree_core.tree); a budget of at least the depth then
                                     accepts at least what DFLASH would. 0 (default): the DDTree tree

Per request, `sampling_params.custom_params` may lower them (never raise them: the verify width and
the walk width are fixed when the server starts and its CUDA graphs are captured):

    ddtree_budget             0 .. the server budget; nodes past it are padding of the fixed width
    ddtree_max_depth          1 .. the server depth limit
    ddtree_draft_temperature  any finite value > 0
    ddtree_hold_chain         true / false (either way, whatever the server default)

Widths, all static for the life of the server:
- tree_depth D = min(max_depth, budget): a tree of N nodes is at most N deep; a round emits <= D + 1
  tokens.
- verify_width W = max(budget + 1, block_size) tokens per request: the root, then W - 1 node columns
  (columns past a tree's node count are padding). W is never below the block: the drafter writes
  block_size KV slots past the prefix every round, and SGLang reserves (and accounts for) 2 * W slots
  per request and round (DFlashDraftInputV2.prepare_for_decode, mem_cache.common
  .get_alloc_reserve_per_decode). Under overlap scheduling the reservation starts at a committed length
  that may lag by one round, so it must cover the <= D + 1 tokens that round commits plus the
  max(W, block_size) slots this round writes; 2 * W covers both whenever W >= block_size, as
  D + 1 <= block_size <= W.
  A budget below block_size - 1 therefore verifies padding columns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ddtree_core.settings import PARAM_BUDGET, PARAM_MAX_DEPTH, TreeSettings, TreeSettingsError

ENV_BUDGET = "SGLANG_DDTREE_BUDGET"
ENV_MAX_DEPTH = "SGLANG_DDTREE_MAX_DEPTH"
ENV_DRAFT_TEMPERATURE = "SGLANG_DDTREE_DRAFT_TEMPERATURE"
ENV_TOP_K = "SGLANG_DDTREE_TOP_K"
ENV_HOLD_CHAIN = "SGLANG_DDTREE_HOLD_CHAIN"


class DDTreeConfigError(ValueError):
    """A DDTree setting that is missing its form or out of range."""


@dataclass(frozen=True)
class ServerSettings:
    """The DDTree settings of one server (see the module docstring)."""

    block_size: int  # drafter block: the bonus token plus block_size - 1 drafted positions
    budget: int  # non-root tree nodes, the most any request may use
    max_depth: int  # depth limit, <= block_size - 1
    draft_temperature: float  # default drafter temperature of the tree scores
    draft_top_k: int = 0  # K per depth, 1 .. budget; 0: the budget
    hold_chain: bool = False  # default for requests: trees hold the drafter's rank-0 chain first

    def __post_init__(self):
        if self.block_size < 2:
            raise DDTreeConfigError(f"the drafter block size must be >= 2, got {self.block_size}")
        if self.budget < 1:
            raise DDTreeConfigError(f"{ENV_BUDGET} must be >= 1, got {self.budget}")
        if not 1 <= self.max_depth <= self.block_size - 1:
            raise DDTreeConfigError(f"{ENV_MAX_DEPTH} must be in 1..{self.block_size - 1}, got {self.max_depth}")
        _check_temperature(self.draft_temperature, ENV_DRAFT_TEMPERATURE)
        if not 0 <= self.draft_top_k <= self.budget:
            raise DDTreeConfigError(f"{ENV_TOP_K} must be in 1..{self.budget} (the budget), got {self.draft_top_k}")

    @property
    def tree_depth(self) -> int:
        """D: the deepest level any tree can reach, the walk width minus one."""
        return min(self.max_depth, self.budget)

    @property
    def verify_width(self) -> int:
        """W: verify tokens per request, root included (SGLang's speculative_num_draft_tokens)."""
        return max(self.budget + 1, self.block_size)

    @property
    def top_k(self) -> int:
        """K of the drafter's top-K lists: K = budget gives the exact DDTree tree (clamp to the vocabulary)."""
        return self.draft_top_k or self.budget

    def info(self) -> dict:
        """What the server reports about itself (server_info keys)."""
        return {
            "ddtree_block_size": self.block_size,
            "ddtree_budget": self.budget,
            "ddtree_max_depth": self.max_depth,
            "ddtree_draft_temperature": self.draft_temperature,
            "ddtree_top_k": self.top_k,
            "ddtree_hold_chain": self.hold_chain,
            "ddtree_tree_depth": self.tree_depth,
            "ddtree_verify_width": self.verify_width,
        }

    @classmethod
    def from_env(cls, environ: Mapping[str, str], block_size: int) -> ServerSettings:
        """Settings from SGLANG_DDTREE_* variables (unset or empty: the defaults)."""
        default_depth = block_size - 1
        return cls(
            block_size=block_size,
            budget=_env_int(environ, ENV_BUDGET, default_depth),
            max_depth=_env_int(environ, ENV_MAX_DEPTH, default_depth),
            draft_temperature=_env_float(environ, ENV_DRAFT_TEMPERATURE, 1.0),
            draft_top_k=_env_int(environ, ENV_TOP_K, 0),
            hold_chain=_env_bool(environ, ENV_HOLD_CHAIN, False),
        )


@dataclass(frozen=True)
class RequestSettings:
    """One request's effective DDTree settings (server defaults unless its custom_params lower them)."""

    budget: int  # 0 .. server budget
    max_depth: int  # 1 .. server tree depth
    draft_temperature: float  # > 0
    hold_chain: bool = False

    @classmethod
    def defaults(cls, server: ServerSettings) -> RequestSettings:
        return cls(
            budget=server.budget,
            max_depth=server.tree_depth,
            draft_temperature=server.draft_temperature,
            hold_chain=server.hold_chain,
        )

    @classmethod
    def from_custom_params(cls, params: Mapping | None, server: ServerSettings) -> RequestSettings:
        """Apply a request's ddtree_* custom_params (checked by ddtree_core.settings); other keys (SGLang's own,
        other plugins') are ignored.

        A max_depth above the server's tree depth D is refused; one between D and the configured
        max_depth (possible when the budget is the tighter limit) is accepted and means D. A max_depth
        below D needs K >= the request's budget (rounds._limit_depths), so with SGLANG_DDTREE_TOP_K below
        the budget it is refused.
        """
        base = TreeSettings(server.budget, server.max_depth, server.draft_temperature, server.hold_chain)
        try:
            chosen = base.with_custom_params(params, max_depth=server.max_depth)
        except TreeSettingsError as error:
            raise DDTreeConfigError(str(error)) from None
        if chosen.max_depth < server.tree_depth and server.top_k < chosen.budget:
            raise DDTreeConfigError(
                f"custom_params.{PARAM_MAX_DEPTH} below the server's {server.tree_depth} needs {ENV_TOP_K} >= "
                f"{PARAM_BUDGET} ({server.top_k} < {chosen.budget})"
            )
        return cls(
            budget=chosen.budget,
            max_depth=min(chosen.max_depth, server.tree_depth),
            draft_temperature=chosen.draft_temperature,
            hold_chain=chosen.hold_chain,
        )


def request_error(params: Mapping | None, server: ServerSettings) -> str | None:
    """Why a request's custom_params cannot run on this server, or None when they can."""
    try:
        RequestSettings.from_custom_params(params, server)
    except DDTreeConfigError as error:
        return f"DDTREE: {error}"
    return None


def _check_temperature(value: float, name: str) -> None:
    if not (math.isfinite(value) and value > 0):
        raise DDTreeConfigError(f"{name} must be a finite number > 0, got {value}")


def _env_int(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise DDTreeConfigError(f"{name} must be an integer, got {raw!r}") from None


def _env_float(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise DDTreeConfigError(f"{name} must be a number, got {raw!r}") from None


def env_flag(environ: Mapping[str, str], name: str) -> bool | None:
    """A 0 / 1 variable (also false / true, no / yes, off / on); None when unset or empty."""
    raw = environ.get(name, "").strip().lower()
    if not raw:
        return None
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise DDTreeConfigError(f"{name} must be 0 or 1, got {raw!r}")


def _env_bool(environ: Mapping[str, str], name: str, default: bool) -> bool:
    flag = env_flag(environ, name)
    return default if flag is None else flag

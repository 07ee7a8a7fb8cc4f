"""DDTree settings of the SGLang plugin: server-wide knobs from the environment, per-request overrides.

Server-wide, read from the environment (SGLang's spawned scheduler processes inherit it, and
`ServerArgs` cannot grow new CLI fields from a plugin):

    SGLANG_DDTREE_BUDGET             non-root tree nodes N, default block_size - 1; or `auto` (budgets
                                     block_size - 1, 2 * block_size - 1 and 4 * block_size - 1: 15, 31, 63
                                     for a block of 16) or `auto:15,63`: each round verifies at one of these
                                     budgets, chosen from the running requests (ddtree_core.sglang.auto);
                                     N is then the largest
    SGLANG_DDTREE_MAX_DEPTH          depth limit, 1 .. block_size - 1, default block_size - 1
    SGLANG_DDTREE_DRAFT_TEMPERATURE  divides the drafter's logits before the top-K log-probs, default 1.0
    SGLANG_DDTREE_TOP_K              K, the drafter's candidates per depth, 1 .. budget, default the budget
                                     (the exact DDTree tree); a smaller K gives each node at most K
                                     children and cuts the top-K and build work
    SGLANG_DDTREE_HOLD_CHAIN         1: every tree holds the drafter's rank-0 chain first, then the best
                                     other nodes (ddtree_core.tree); a budget of at least the depth then
                                     accepts at least what DFLASH would. 0 (default): the DDTree tree

The four tree knobs are read by `ddtree_core.settings.TreeSettings.from_environment`, the one reader and
validation of those variables; the server's settings hold them as a `TreeSettings` (`ServerSettings.tree`).

Per request, `sampling_params.custom_params` may lower them (never raise them: the verify width and
the walk width are fixed when the server starts and its CUDA graphs are captured); a request's effective
settings are a `TreeSettings` too, parsed once, at admission (`admit`):

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
- With `auto`, the trees are built at the largest budget and cut each round (DraftTree.prefix) to the
  chosen one, which verifies max(b + 1, block_size) tokens per request: one verify CUDA graph set per
  width (`verify_widths`); SGLang's reservation stays 2 * W of the largest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ddtree_core.settings import (
    BUDGET_AUTO,
    ENV_BUDGET,
    PARAM_BUDGET,
    PARAM_DRAFT_TEMPERATURE,
    PARAM_HOLD_CHAIN,
    PARAM_MAX_DEPTH,
    TreeSettings,
    TreeSettingsError,
    env_int,
)

ENV_TOP_K = "SGLANG_DDTREE_TOP_K"
SETTINGS_ATTR = "_ddtree_settings"  # a request's TreeSettings on SGLang's Req, set at admission (`admit`)

DDTreeConfigError = TreeSettingsError  # a DDTree setting that is malformed or out of range (one line)


@dataclass(frozen=True)
class ServerSettings:
    """The DDTree settings of one server (see the module docstring).

    Example: ServerSettings(16, TreeSettings(63, 15)) has tree_depth 15, verify_width 64 and top_k 63; its
    requests run TreeSettings(63, 15) unless their custom_params lower it (`request_settings`)."""

    block_size: int  # drafter block: the bonus token plus block_size - 1 drafted positions
    tree: TreeSettings  # budget >= 1 (the most any request may use), max_depth in 1..block_size - 1, the defaults
    draft_top_k: int = 0  # K per depth, 1 .. budget; 0: the budget
    auto_budgets: tuple[int, ...] = ()  # `auto`: the budgets a round may take (their largest is tree.budget)

    def __post_init__(self):
        _check_block(self.block_size)
        self.tree.check_launch(max_depth=self.block_size - 1)
        if self.auto_budgets:
            budgets = self.auto_budgets
            if list(budgets) != sorted(set(budgets)) or budgets[0] < self.block_size - 1:
                raise DDTreeConfigError(
                    f"{ENV_BUDGET}=auto needs increasing budgets >= {self.block_size - 1} (the block's), got "
                    f"{','.join(map(str, budgets))}"
                )
            if budgets[-1] != self.tree.budget:
                raise DDTreeConfigError(f"auto budgets {budgets} must end at the tree budget {self.tree.budget}")
        if not 0 <= self.draft_top_k <= self.tree.budget:
            raise DDTreeConfigError(
                f"{ENV_TOP_K} must be in 1..{self.tree.budget} (the budget), got {self.draft_top_k}"
            )
        # fixed for the server's life and read every decode round (rounds.request_limits): built once
        object.__setattr__(self, "_request_defaults", dataclasses.replace(self.tree, max_depth=self.tree_depth))

    @property
    def tree_depth(self) -> int:
        """D: the deepest level any tree can reach, the walk width minus one."""
        return min(self.tree.max_depth, self.tree.budget)

    @property
    def verify_width(self) -> int:
        """W: verify tokens per request, root included (SGLang's speculative_num_draft_tokens)."""
        return max(self.tree.budget + 1, self.block_size)

    @property
    def verify_widths(self) -> tuple[int, ...]:
        """The verify widths the server captures, one per auto budget (increasing); (W,) without auto."""
        return tuple(max(b + 1, self.block_size) for b in self.auto_budgets) or (self.verify_width,)

    @property
    def auto(self) -> bool:
        return bool(self.auto_budgets)

    @property
    def top_k(self) -> int:
        """K of the drafter's top-K lists: K = budget gives the exact DDTree tree (clamp to the vocabulary)."""
        return self.draft_top_k or self.tree.budget

    def info(self) -> dict:
        """What the server reports about itself (server_info keys)."""
        return {
            "ddtree_block_size": self.block_size,
            PARAM_BUDGET: self.tree.budget,
            PARAM_MAX_DEPTH: self.tree.max_depth,
            PARAM_DRAFT_TEMPERATURE: self.tree.draft_temperature,
            "ddtree_top_k": self.top_k,
            PARAM_HOLD_CHAIN: self.tree.hold_chain,
            "ddtree_tree_depth": self.tree_depth,
            "ddtree_verify_width": self.verify_width,
            "ddtree_auto_budgets": list(self.auto_budgets),
        }

    @classmethod
    def from_env(cls, environ: Mapping[str, str], block_size: int) -> ServerSettings:
        """Settings from SGLANG_DDTREE_* variables (unset or empty: the defaults)."""
        _check_block(block_size)
        default_depth = block_size - 1
        auto = auto_budgets(environ.get(ENV_BUDGET, ""), block_size)
        if auto:
            environ = {**environ, ENV_BUDGET: str(auto[-1])}
        tree = TreeSettings.from_environment(environ, budget=default_depth, max_depth=default_depth)
        return cls(block_size, tree, env_int(environ, ENV_TOP_K, 0), auto)

    def request_defaults(self) -> TreeSettings:
        """What a request without DDTree custom_params runs: the server's settings, at most tree_depth deep."""
        return self._request_defaults

    def request_settings(self, params: Mapping | None) -> TreeSettings:
        """A request's settings: its ddtree_* custom_params applied to the server's (checked by
        TreeSettings.from_custom_params); other keys (SGLang's own, other plugins') are ignored.

        A max_depth above the server's tree depth D is refused; one between D and the configured
        max_depth (possible when the budget is the tighter limit) is accepted and means D. A max_depth
        below D needs K >= the request's budget (rounds._limit_depths), so with SGLANG_DDTREE_TOP_K below
        the budget it is refused.
        """
        chosen = TreeSettings.from_custom_params(
            params, server=self.tree, max_depth=self.tree.max_depth, auto_served=self.auto
        )
        chosen = dataclasses.replace(chosen, auto=False)  # "auto" on an auto server: its default trees
        if chosen.max_depth < self.tree_depth and self.top_k < chosen.budget:
            raise DDTreeConfigError(
                f"custom_params.{PARAM_MAX_DEPTH} below the server's {self.tree_depth} needs {ENV_TOP_K} >= "
                f"{PARAM_BUDGET} ({self.top_k} < {chosen.budget})"
            )
        return dataclasses.replace(chosen, max_depth=min(chosen.max_depth, self.tree_depth))


def admit(req: Any, server: ServerSettings) -> str | None:
    """Parse a request's custom_params, once: keep its settings on it (attribute SETTINGS_ATTR, where the
    worker reads them each round) and answer None, or answer why they cannot run on this server, as SGLang's
    admission hooks do ("DDTREE: custom_params.ddtree_budget must be an int in [0, 63] ..., got 64")."""
    try:
        settings = server.request_settings(req.sampling_params.custom_params)
    except DDTreeConfigError as error:
        return f"DDTREE: {error}"
    setattr(req, SETTINGS_ATTR, settings)
    return None


def auto_budgets(raw: str, block_size: int) -> tuple[int, ...]:
    """The budgets of an SGLANG_DDTREE_BUDGET value: () for a number or nothing; `auto`: block - 1, 2 * block - 1
    and 4 * block - 1; `auto:B1,B2,..`: those, sorted. Example: auto_budgets("auto", 16) -> (15, 31, 63);
    auto_budgets("auto:63,15", 16) -> (15, 63); auto_budgets("auto:x", 16) -> DDTreeConfigError."""
    raw = raw.strip().lower()
    if raw == BUDGET_AUTO:
        return tuple(k * block_size - 1 for k in (1, 2, 4))
    if not raw.startswith(BUDGET_AUTO + ":"):
        return ()
    try:
        return tuple(sorted({int(part) for part in raw[len(BUDGET_AUTO) + 1 :].split(",")}))
    except ValueError:
        raise DDTreeConfigError(f"{ENV_BUDGET} must be an integer, auto or auto:B1,B2,.., got {raw!r}") from None


def _check_block(block_size: int) -> None:
    if block_size < 2:
        raise DDTreeConfigError(f"the drafter block size must be >= 2, got {block_size}")

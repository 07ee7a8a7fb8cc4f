"""`ddbench model recommend`: which method and DDTree setting to serve at each load, and how to apply it.

For each (temperature, concurrency) of a sweep, the metric (tokens_per_s or speedup_vs_ar) of every
candidate setting (AR, DFLASH, each DDTree budget x depth x draft temperature x held chain) is pooled
over the selected datasets, the best DDTree setting is found, and it is recommended only when it beats
DFLASH and AR (the project's rule: never slower than DFlash); otherwise the faster of DFLASH and AR is.

Pooling: the candidates are the settings with a finished cell there; a candidate's value is the mean
of the metric over the selected datasets on which every candidate has a finished cell, so all are
compared on the same datasets (the others are named in a note). Failed and pending cells have no
value. With a parity floor, a DFLASH or DDTree setting whose parity is below it on any selected
dataset is refused at that temperature and concurrency (parity is measured at temperature 0 only).
A sweep with repeats is read as one row per setting, the median over its repeats
(`ddbench.harness.report.over_repeats`), never the best of them.

Applying it (`deploy`): one DDTree server started with the largest budget any band needs
(SGLANG_DDTREE_BUDGET; it fixes the verify width max(budget + 1, block size) and the CUDA graphs),
and per concurrency band the `custom_params` that lower budget, depth or draft temperature per
request. Bands of budget `auto` go to a server of their own, started with SGLANG_DDTREE_BUDGET=auto (the
budgets its measured server chose among, `auto:15,31,63`, where the manifest names them): the plugin serves
"ddtree_budget": "auto" only there, and such a server serves no fixed budget. It picks each round's budget
from the running requests, the expected acceptance of recent trees and a verify cost table
(SGLANG_DDTREE_COST_TABLE, one measured for the same model, GPU and TP size; without it the server measures
its own at startup, at TP 1). Trees that hold the drafter's chain (`+chain`) are server-wide
(SGLANG_DDTREE_HOLD_CHAIN=1) when every DDTree band holds it, else asked per request
(`"ddtree_hold_chain": true`). A DDTree server cannot run linear DFlash or plain decoding, so bands where
DFLASH or AR win need their own server. `Measurement` reads from the manifest how the DDTree cells were
served, which says whether the measured numbers hold on such a shared server.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import mean
from typing import Any

from rich.console import Console
from rich.table import Table

from ddbench.config import AUTO_BUDGET, DDBenchError, budget_label, largest_budget
from ddbench.harness.report import CellSummary
from ddtree_core.settings import (
    ENV_BUDGET,
    ENV_DRAFT_TEMPERATURE,
    ENV_HOLD_CHAIN,
    ENV_MAX_DEPTH,
    PARAM_BUDGET,
    PARAM_DRAFT_TEMPERATURE,
    PARAM_HOLD_CHAIN,
    PARAM_MAX_DEPTH,
)

METRICS = ("tokens_per_s", "speedup_vs_ar")


@dataclass(frozen=True)
class Setting:
    """A candidate: AR, DFLASH, or one DDTree setting."""

    method: str  # ar | dflash | ddtree
    budget: int | str | None = None  # ddtree only: an int or "auto" (config.AUTO_BUDGET)
    max_depth: int | None = None  # ddtree only; None: the drafter's block size - 1
    draft_temperature: float | None = None  # ddtree only
    hold_chain: bool = False  # ddtree only: trees hold the drafter's rank-0 chain first

    @classmethod
    def of(cls, row: CellSummary) -> Setting:
        if row.method != "ddtree":
            return cls(row.method)
        return cls("ddtree", row.budget, row.max_depth, row.draft_temperature, bool(row.hold_chain))

    @property
    def label(self) -> str:
        """AR, DFLASH, DDTree b64, DDTree b64 d7 dt0.6, DDTree b31+chain, DDTree auto."""
        if self.method != "ddtree":
            return self.method.upper()
        budget = budget_label(self.budget) + ("+chain" if self.hold_chain else "")
        parts = [budget] + ([f"d{self.max_depth}"] if self.max_depth is not None else [])
        parts += [f"dt{self.draft_temperature:g}"] if self.draft_temperature not in (None, 1.0) else []
        return "DDTree " + " ".join(parts)


AR, DFLASH = Setting("ar"), Setting("dflash")


@dataclass(frozen=True)
class Choice:
    """The recommendation at one temperature and concurrency; values are the pooled metric."""

    temperature: float
    concurrency: int
    chosen: Setting | None  # None: nothing comparable was measured here (see notes)
    value: float | None  # of `chosen`
    best_ddtree: Setting | None  # the best DDTree setting, chosen or not
    ddtree_value: float | None
    dflash_value: float | None
    ar_value: float | None
    datasets: tuple[str, ...]  # the datasets the values pool
    notes: tuple[str, ...]

    @property
    def vs_dflash(self) -> float | None:
        return self.value / self.dflash_value if self.value is not None and self.dflash_value else None

    @property
    def vs_ar(self) -> float | None:
        return self.value / self.ar_value if self.value is not None and self.ar_value else None


@dataclass(frozen=True)
class Recommendation:
    metric: str  # tokens_per_s | speedup_vs_ar
    datasets: tuple[str, ...]  # the selected datasets
    min_parity: float | None
    choices: tuple[Choice, ...]  # by temperature, then concurrency


def recommend(
    rows: Sequence[CellSummary],
    metric: str = "tokens_per_s",
    datasets: Sequence[str] | None = None,
    temperature: float | None = None,
    min_parity: float | None = None,
) -> Recommendation:
    """One Choice per (temperature, concurrency) of the selected rows; DDBenchError on bad input."""
    if metric not in METRICS:
        raise DDBenchError(f"unknown metric {metric!r}: use {' or '.join(METRICS)}")
    if min_parity is not None and not 0 <= min_parity <= 1:
        raise DDBenchError(f"--min-parity must be in 0..1, got {min_parity:g}")
    rows = select(rows, datasets, temperature)
    loads = sorted({(row.temperature, row.concurrency) for row in rows})
    choices = tuple(
        choose([row for row in rows if (row.temperature, row.concurrency) == load], metric, min_parity)
        for load in loads
    )
    return Recommendation(metric, tuple(dict.fromkeys(row.dataset for row in rows)), min_parity, choices)


def select(rows: Sequence[CellSummary], datasets: Sequence[str] | None, temperature: float | None) -> list[CellSummary]:
    """The rows of the selected datasets and temperature; DDBenchError if that leaves no DDTree cell."""
    known = list(dict.fromkeys(row.dataset for row in rows))
    unknown = [name for name in datasets or () if name not in known]
    if unknown:
        raise DDBenchError(f"unknown dataset {', '.join(unknown)}: the results hold {', '.join(known) or 'none'}")
    picked = [row for row in rows if not datasets or row.dataset in datasets]
    if temperature is not None:
        measured = ", ".join(f"{t:g}" for t in sorted({row.temperature for row in picked}))
        picked = [row for row in picked if math.isclose(row.temperature, temperature, abs_tol=1e-9)]
        if not picked:
            raise DDBenchError(f"no cells at temperature {temperature:g}: the results hold {measured or 'none'}")
    if not any(row.method == "ddtree" and row.status == "done" for row in picked):
        raise DDBenchError("no finished DDTree cells in the selected results")
    return picked


def choose(rows: Sequence[CellSummary], metric: str, min_parity: float | None) -> Choice:
    """The Choice for the rows of one temperature and concurrency (see the module docstring)."""
    first = rows[0]
    values, notes = _values(rows, metric, min_parity)
    if min_parity is not None and first.temperature > 0:
        notes.append("parity is measured at temperature 0 only: --min-parity filters nothing here")
    selected = list(dict.fromkeys(row.dataset for row in rows))
    common = tuple(name for name in selected if values and all(name in by_name for by_name in values.values()))
    left_out = [name for name in selected if name not in common]
    if left_out and common:
        notes.append(f"{', '.join(left_out)} left out: not every setting has a finished cell there")
    if not common:
        notes.append("no dataset on which every setting has a finished cell")
        return Choice(first.temperature, first.concurrency, None, None, None, None, None, None, (), tuple(notes))
    pooled = {setting: mean(by_name[name] for name in common) for setting, by_name in values.items()}
    ddtree = [setting for setting in pooled if setting.method == "ddtree"]
    best = max(
        ddtree, key=lambda s: (pooled[s], -_rank(s.budget), -(s.max_depth or math.inf), not s.hold_chain), default=None
    )
    baselines = {setting: pooled[setting] for setting in (DFLASH, AR) if setting in pooled}
    measured = {Setting.of(row) for row in rows if row.status == "done" and getattr(row, metric) is not None}
    if DFLASH not in measured:  # refused by parity is another matter: then DFLASH is no option
        chosen = None
        notes.append("no finished DFLASH cell, so no recommendation (the rule: never slower than DFlash)")
    elif best is not None and all(pooled[best] > value for value in baselines.values()):
        chosen = best
        if AR not in baselines:
            notes.append("no AR cell to compare with")
    else:
        chosen = max(baselines, key=baselines.get) if baselines else None
        if best is None:
            notes.append("no DDTree setting left to compare")
        else:
            ahead = [f"{s.label} {_fmt(v, metric)}" for s, v in baselines.items() if v >= pooled[best]]
            behind = [f"{s.label} {_fmt(v, metric)}" for s, v in baselines.items() if v < pooled[best]]
            beats = f" beats {', '.join(behind)} but" if behind else ""
            notes.append(f"{best.label} ({_fmt(pooled[best], metric)}){beats} does not beat {', '.join(ahead)}")
    return Choice(
        first.temperature, first.concurrency, chosen, pooled.get(chosen), best, pooled.get(best),
        pooled.get(DFLASH), pooled.get(AR), common, tuple(notes),
    )  # fmt: skip


def _values(
    rows: Sequence[CellSummary], metric: str, min_parity: float | None
) -> tuple[dict[Setting, dict[str, float]], list[str]]:
    """{setting: {dataset: metric}} of the finished cells, without parity-refused settings; notes."""
    values: dict[Setting, dict[str, float]] = {}
    refused: dict[Setting, list[str]] = {}
    for row in rows:
        value = getattr(row, metric)
        if row.status != "done" or value is None:
            continue
        setting = Setting.of(row)
        if min_parity is not None and row.parity is not None and row.parity < min_parity:
            refused.setdefault(setting, []).append(f"{row.parity:.2f} on {row.dataset}")
        values.setdefault(setting, {})[row.dataset] = value
    notes = [f"{s.label} refused: parity {', '.join(why)} < {min_parity:g}" for s, why in refused.items()]
    return {s: by_name for s, by_name in values.items() if s not in refused}, notes


@dataclass(frozen=True)
class Measurement:
    """How a results folder's cells were served, from its manifest (the config of every run into it)."""

    engine: str  # sglang | reference (the last run's)
    restart_per_budget: bool | None  # one server per DDTree setting; None: the runs differ
    shared_budgets: tuple[int, ...]  # SGLANG_DDTREE_BUDGET of the shared DDTree server of per-request runs
    model: str
    draft: str
    tp: int
    server_args: tuple[str, ...]
    auto_budgets: tuple[int, ...] = ()  # the budgets the last run's auto server chose among; (): its default

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any]) -> Measurement:
        """Shared budgets: ddbench.harness.runner.server_spec's (the widest tree, narrowed per request), or on running
        servers (`ddbench sweep --url`: the run's "servers") the ddtree_budget each DDTREE server reported,
        whose tp_size is then the last run's tp. auto_budgets: the ddtree_auto_budgets a running auto server reported
        (a server ddbench starts for auto takes SGLANG_DDTREE_BUDGET=auto, the plugin's default budgets)."""
        try:
            last = manifest["config"]
            runs = manifest.get("runs") or [{"config": last}]
            modes = {_per_budget(run) for run in runs}
            shared = {
                budget
                for run in runs
                if run["config"]["engine"] == "sglang" and not _per_budget(run)
                for budget in _shared_budgets(run)
            }
            servers = [server for server in runs[-1].get("servers", []) if server["method"] == "ddtree"]
            tp = servers[0]["settings"].get("tp_size") if servers else last.get("tp")  # running servers: reported
            auto = [server["settings"].get("ddtree_auto_budgets") for server in servers]
            auto_budgets = tuple(next((budgets for budgets in auto if budgets), ()))
            return cls(
                last["engine"], modes.pop() if len(modes) == 1 else None, tuple(sorted(shared)),
                last["model"], last["draft"], int(tp or 1), tuple(last.get("server_args") or ()), auto_budgets,
            )  # fmt: skip
        except (KeyError, TypeError, ValueError) as error:
            raise DDBenchError(f"malformed manifest ({error!r})") from error

    @property
    def description(self) -> str:
        if self.engine != "sglang":
            return f"the {self.engine} engine (HF transformers: no fixed verify width, no CUDA graphs)"
        if self.restart_per_budget is None:
            return "partly one server per DDTree setting, partly one shared server (the runs differ)"
        if self.restart_per_budget:
            return "one server per DDTree budget (started so, or running servers of each measured budget)"
        budgets = " or ".join(map(str, self.shared_budgets))
        return (
            f"one shared DDTree server started with {ENV_BUDGET}={budgets}, budgets lowered per "
            "request (manifest config.restart_per_budget: false)"
        )


def _per_budget(run: dict[str, Any]) -> bool:
    """Whether a run (manifest "runs" entry) measured each fixed budget on a server of that budget: started one per
    budget (restart_per_budget), or running servers (`ddbench sweep --url`, which sends a cell to the narrowest
    server that serves it) of every budget it measured."""
    if run["config"].get("restart_per_budget"):
        return True
    if "servers" not in run:
        return False
    fixed = {budget for budget in run["config"]["budgets"] if budget != AUTO_BUDGET}
    return fixed <= set(_shared_budgets(run))


def _shared_budgets(run: dict[str, Any]) -> list[int]:
    """The SGLANG_DDTREE_BUDGET of the DDTree servers of one per-request run (manifest "runs" entry)."""
    if "servers" in run:
        return [server["settings"][PARAM_BUDGET] for server in run["servers"] if server["method"] == "ddtree"]
    return [largest_budget(run["config"]["budgets"])]


@dataclass(frozen=True)
class Band:
    """Consecutive measured concurrencies of one temperature with the same recommendation."""

    temperature: float
    concurrencies: tuple[int, ...]
    setting: Setting | None
    custom_params: dict[str, Any] | None  # the DDTree requests' custom_params; None: not a DDTree band

    @property
    def label(self) -> str:
        low, high = self.concurrencies[0], self.concurrencies[-1]
        if low == high:
            return f"concurrency {low}"
        return f"concurrency <= {high}" if low == 1 else f"concurrency {low}-{high}"


@dataclass(frozen=True)
class Deployment:
    """The servers and request settings that apply a Recommendation."""

    env: dict[str, str]  # the DDTree server's SGLANG_DDTREE_* variables; empty: no band needs DDTree
    command: str | None  # the DDTree server's launch command (the auto server's where only auto bands need one)
    bands: tuple[Band, ...]
    other_servers: dict[str, str]  # launch command of each other server a band needs (DFLASH, AR, DDTree auto)
    caveat: str | None  # whether the measured numbers hold on the DDTree server


def deploy(recommendation: Recommendation, measurement: Measurement) -> Deployment:
    """One DDTree server sized for the largest fixed-budget band, one auto server for the auto bands (the main one
    where no band has a fixed budget), per-band custom_params, other servers, the caveat."""
    ddtree = [c.chosen for c in recommendation.choices if c.chosen is not None and c.chosen.method == "ddtree"]
    fixed = [s for s in ddtree if s.budget != AUTO_BUDGET]
    auto = [s for s in ddtree if s.budget == AUTO_BUDGET]
    auto_value = f"{AUTO_BUDGET}:{','.join(map(str, measurement.auto_budgets))}" if measurement.auto_budgets else None
    fixed_server, fixed_env = _server(fixed, max((s.budget for s in fixed), default=0))
    auto_server, auto_env = _server(auto, auto_value or AUTO_BUDGET)
    bands = []
    for choice in recommendation.choices:
        last = bands[-1] if bands else None
        if last and last.temperature == choice.temperature and last.setting == choice.chosen:
            bands[-1] = Band(
                last.temperature, last.concurrencies + (choice.concurrency,), last.setting, last.custom_params
            )
        else:
            on_auto = choice.chosen is not None and choice.chosen.budget == AUTO_BUDGET
            params = _custom_params(choice.chosen, auto_server if on_auto else fixed_server)
            bands.append(Band(choice.temperature, (choice.concurrency,), choice.chosen, params))
    others = {s.label: _launch(measurement, s) for s in (DFLASH, AR) if any(b.setting == s for b in bands)}
    env = fixed_env or auto_env
    if fixed_env and auto_env:
        others[AUTO_SERVER] = _launch(measurement, Setting("ddtree"), auto_env)
    command = _launch(measurement, Setting("ddtree"), env) if env else None
    return Deployment(env, command, tuple(bands), others, _caveat(measurement, ddtree))


AUTO_SERVER = "DDTree auto"  # other_servers' name of an auto server beside a fixed-budget one


def _server(settings: Sequence[Setting], budget: int | str) -> tuple[Setting | None, dict[str, str]]:
    """The DDTree server that serves `settings` (its launch settings) and its SGLANG_DDTREE_* variables, with
    SGLANG_DDTREE_BUDGET=`budget`; (None, {}) for no settings."""
    if not settings:
        return None, {}
    depths = {s.max_depth for s in settings}
    depth = None if None in depths else max(depths)  # None: the block size - 1
    temperatures = {s.draft_temperature for s in settings}
    temperature = temperatures.pop() if len(temperatures) == 1 else 1.0
    held = all(s.hold_chain for s in settings)
    env = {ENV_BUDGET: str(budget)}
    env.update({ENV_MAX_DEPTH: str(depth)} if depth is not None else {})
    env.update({ENV_DRAFT_TEMPERATURE: f"{temperature:g}"} if temperature != 1.0 else {})
    env.update({ENV_HOLD_CHAIN: "1"} if held else {})
    return Setting("ddtree", budget, depth, temperature, held), env


def _rank(budget: int | str) -> float:
    """A budget's place among equally good settings, the smaller first; auto after every fixed budget."""
    return math.inf if budget == AUTO_BUDGET else budget


def _custom_params(setting: Setting | None, server: Setting | None) -> dict | None:
    """A DDTree band's custom_params on the DDTree server `server` (its launch settings); None otherwise."""
    if setting is None or setting.method != "ddtree":
        return None
    params: dict[str, Any] = {PARAM_BUDGET: setting.budget}
    if setting.max_depth is not None and setting.max_depth != server.max_depth:
        params[PARAM_MAX_DEPTH] = setting.max_depth
    if setting.draft_temperature != server.draft_temperature:
        params[PARAM_DRAFT_TEMPERATURE] = setting.draft_temperature
    if setting.hold_chain and not server.hold_chain:
        params[PARAM_HOLD_CHAIN] = True
    return params


def _launch(measurement: Measurement, setting: Setting, env: dict[str, str] | None = None) -> str:
    """The launch command of an SGLang server for `setting`'s method, with the measured server's arguments."""
    module = "ddtree_core.sglang.launch_server" if setting.method == "ddtree" else "sglang.launch_server"
    words = ["python", "-m", module, "--model-path", measurement.model]
    if setting.method != "ar":
        words += ["--speculative-algorithm", setting.method.upper()]
        words += ["--speculative-draft-model-path", measurement.draft]
    words += ["--tp-size", str(measurement.tp), *measurement.server_args]
    variables = [f"{name}={shlex.quote(value)}" for name, value in (env or {}).items()]
    return " ".join(variables + [shlex.join(words)])


def _caveat(measurement: Measurement, ddtree: Sequence[Setting]) -> str | None:
    """Whether the DDTree cells were measured at the verify width the shared server gives every request, and how an
    auto server prices its rounds."""
    if not ddtree:
        return None
    fixed = sorted({s.budget for s in ddtree if s.budget != AUTO_BUDGET})
    measured = f"measured on {measurement.description}"
    if len(fixed) < len(ddtree) or not fixed:
        auto = (
            f"budget {AUTO_BUDGET}: its server picks each round's budget from a verify cost table, the one "
            "SGLANG_DDTREE_COST_TABLE names where it was measured for the same model, GPU and TP size, else one it "
            "measures at startup from its verify CUDA graphs (TP 1; at TP > 1 without a table it stays at its "
            "smallest budget)"
        )
        if not fixed:
            return f"{measured}; {auto}."
        measured = f"{measured}; {auto}"
    server = fixed[-1]
    width = f"max({server} + 1, block size)"
    smaller = ", ".join(str(b) for b in fixed if b < server)
    if measurement.engine != "sglang":
        return f"{measured}; an SGLang DDTree server was not measured here, its numbers may differ."
    if measurement.restart_per_budget is None:
        return f"{measured}: rerun in one mode to know the verify width each cell had."
    if measurement.restart_per_budget and not smaller:
        return f"{measured}: every DDTree band has the server's budget, so the verify widths match."
    if measurement.restart_per_budget:
        return (
            f"{measured}: each cell verified max(its budget + 1, block size) columns, but this server verifies "
            f"{width} for every request, so the budget {smaller} bands pay padding columns they were not measured "
            f"with and may be slower than shown; run one server per band ({ENV_BUDGET} = its budget) for "
            "the measured numbers, or remeasure with --per-request-budget."
        )
    if measurement.shared_budgets == (server,):
        return f"{measured}: every cell verified {width} columns (padding past its budget), as this server does."
    return (
        f"{measured}: this server's verify width {width} is not the one measured; start it with "
        f"{ENV_BUDGET}={max(measurement.shared_budgets)} (requests keep their custom_params) for the measured numbers."
    )


def to_json(recommendation: Recommendation, measurement: Measurement, deployment: Deployment) -> dict[str, Any]:
    """The recommendation (each Choice with its ratios), how it was measured and how to apply it, as JSON data."""
    choices = [{**asdict(c), "vs_dflash": c.vs_dflash, "vs_ar": c.vs_ar} for c in recommendation.choices]
    server = {"env": deployment.env, "command": deployment.command, "other_servers": deployment.other_servers}
    return {
        **asdict(recommendation),
        "choices": choices,
        "measurement": {**asdict(measurement), "description": measurement.description},
        "server": server,
        "bands": [{**asdict(band), "label": band.label} for band in deployment.bands],
        "caveat": deployment.caveat,
    }


def _fmt(value: float | None, metric: str) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if metric == "tokens_per_s" else f"{value:.2f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def tables(recommendation: Recommendation) -> list[Table]:
    """One Rich table per temperature: concurrency, method, setting, metric, vs DFLASH, vs AR, best DDTree."""
    out = []
    metric = recommendation.metric
    for temperature in dict.fromkeys(c.temperature for c in recommendation.choices):
        table = Table(title=f"temperature {temperature:g}: best {metric} ({', '.join(recommendation.datasets)})")
        for name in ("concurrency", "method", "setting", metric, "vs DFLASH", "vs AR", "best DDTree", "pooled over"):
            table.add_column(name, justify="left" if name in ("method", "setting", "pooled over") else "right")
        for c in (c for c in recommendation.choices if c.temperature == temperature):
            method = c.chosen.method.upper() if c.chosen else "-"
            best = "-" if c.best_ddtree is None else f"{c.best_ddtree.label}: {_fmt(c.ddtree_value, metric)}"
            row = (str(c.concurrency), method, c.chosen.label if c.chosen else "-", _fmt(c.value, metric))
            table.add_row(*row, _ratio(c.vs_dflash), _ratio(c.vs_ar), best, ", ".join(c.datasets) or "-")
        out.append(table)
    return out


def print_recommendation(
    recommendation: Recommendation, measurement: Measurement, deployment: Deployment, console: Console
) -> None:
    """The tables, their notes, then how to apply them: the server, the per-request settings, the caveat."""
    say = lambda text="": console.print(text, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
    for table in tables(recommendation):
        console.print(table)
    for c in recommendation.choices:
        for note in c.notes:
            say(f"  T={c.temperature:g} c={c.concurrency}: {note}")
    say()
    say(f"Measured on {measurement.description}.")
    if deployment.command is None and not deployment.other_servers:
        say("Nothing to recommend: see the notes above.")
        return
    if deployment.command is None:
        say("DDTree is not recommended at any measured load (rule: never slower than DFlash); serve with:")
        for label, command in deployment.other_servers.items():
            say(f"  {label}: {command}")
        return
    say("(a) one DDTree server for all loads:")
    say(f"  {deployment.command}")
    say("(b) per request, sampling_params.custom_params (budgets or depths above the server's are refused):")
    for band in deployment.bands:
        if band.custom_params is not None:
            how = json.dumps(band.custom_params)
        elif band.setting is None:
            how = "no recommendation (see the notes above)"
        else:
            how = f"{band.setting.label} wins: a DDTree server cannot run it; send these to {band.setting.label}"
        if band.setting is not None and band.setting.budget == AUTO_BUDGET and AUTO_SERVER in deployment.other_servers:
            how += f" on the {AUTO_SERVER} server"
        measured = f" (measured at {', '.join(map(str, band.concurrencies))})" if len(band.concurrencies) > 1 else ""
        say(f"  temperature {band.temperature:g}, {band.label}{measured}: {how}")
    for label, command in deployment.other_servers.items():
        say(f"  {label} server: {command}")
    say(f"Caveat: {deployment.caveat}")

"""Sweep configuration: a TOML file and command-line flags become one frozen `SweepConfig`.

Config flows one way: `configs/NAME.toml` (its `[sweep]` table) is read first, flags given on the
command line replace its keys, and the result is validated once here. `expand_cells` turns the config
into the grid of cells a sweep measures. Every grid holds, per dataset x temperature x concurrency, one
target-only cell (`ar`) and one linear DFlash cell (`dflash`) next to the DDTree cells, so speedup and
parity come from the same run. With `repeats = N` the whole grid is measured N times (repeat 1..N), each
repeat's cells under their own ids, so that methods are compared in one sitting, interleaved. With `url`
the cells run against servers that are already running (harness.fleet) instead of servers ddbench starts.

Example `configs/smoke.toml`:

    [sweep]
    engine = "reference"
    datasets = ["gsm8k"]
    budgets = [4, 8]
    num_prompts = 2
    max_new_tokens = 16
    repeats = 3

`budgets = ["auto", 15, 63]` adds a cell whose budget the server chooses each round (`AUTO_BUDGET`), under
the largest fixed budget of the list (`SweepConfig.largest_budget`). Against running servers (`--url`; engine,
model and drafter default to what the servers report):

    [sweep]
    url = ["ar=http://node1:30000", "dflash=http://node2:30000", "http://node3:30000", "http://node4:30000"]
    budgets = [16, 32, 63]
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddtree_core.settings import TreeSettings

ENGINES = ("sglang", "reference")
METHODS = ("ar", "dflash", "ddtree")
BUILTIN_DATASETS = ("mt-bench", "gsm8k", "humaneval")
CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"

# A DDTree budget the server chooses each round (custom_params.ddtree_budget "auto", ddtree_core.policy), up to
# its own budget. Every engine serves it: the reference server per request, the SGLang plugin from a server of
# its own, started with SGLANG_DDTREE_BUDGET=auto (harness.runner; running servers: harness.remote).
# The same word as ddtree_core.settings.BUDGET_AUTO, spelled here so that reading a config imports no torch.
AUTO_BUDGET = "auto"
AUTO_LARGEST_DEFAULT = 64  # auto's largest budget in a sweep without a fixed one: the reference server's default

# Fields that define what a request measures; a results folder holds one value of each.
RUN_DEFINING = ("engine", "model", "draft", "num_prompts", "max_new_tokens", "top_p", "top_k")


class DDBenchError(Exception):
    """An error the CLI reports as one line on stderr before exiting with status 2."""


@dataclass(frozen=True)
class ServerURL:
    """A running server a sweep measures: its base URL and the method it was labelled with, if any."""

    url: str  # http(s)://host:port, no trailing slash
    method: str | None = None  # ar | dflash | ddtree; None: the method the server reports

    @property
    def spec(self) -> str:
        """The form `--url` takes: ddtree=http://c:30000, or the bare URL."""
        return self.url if self.method is None else f"{self.method}={self.url}"


@dataclass(frozen=True)
class SweepConfig:
    """Everything a sweep needs; built by `build_config`, never mutated."""

    engine: str = "reference"  # sglang | reference
    model: str = ""  # target model folder or hub id
    draft: str = ""  # DFlash drafter folder or hub id
    methods: tuple[str, ...] = METHODS  # ar and dflash always; drop ddtree to measure the baselines alone
    budgets: tuple[int | str, ...] = (16, 32, 64, 128)  # DDTree node budgets (non-root nodes), or AUTO_BUDGET
    depths: tuple[int | None, ...] = (None,)  # DDTree depth limits; None = drafter block size - 1
    draft_temperatures: tuple[float, ...] = (1.0,)
    hold_chain: tuple[bool, ...] = (False,)  # DDTree: plain trees (False), trees holding the rank-0 chain (True)
    temperatures: tuple[float, ...] = (0.0,)
    concurrency: tuple[int, ...] = (1,)
    datasets: tuple[str, ...] = ("gsm8k",)  # builtin names or JSONL paths
    data_dir: str | None = None  # offline dataset mirror
    num_prompts: int | None = None  # prompts per dataset; None: 128 gsm8k, 164 humaneval, 80 mt-bench, all of a file
    # (the testbed drafter: the held-out prompts, client.load_prompts)
    max_new_tokens: int = 2048
    top_p: float = 1.0
    top_k: int = -1  # -1: no top-k
    gpus: tuple[int, ...] = ()  # GPU ids; empty: CPU (reference engine only)
    tp: int = 1  # GPUs per server; len(gpus) // tp servers run cells in parallel
    workers: int = 1  # CPU reference-engine servers running cells in parallel (no GPUs)
    out: str = "results/sweep"
    stream: bool = False  # stream responses (gives TTFT and inter-token latencies)
    restart_per_budget: bool = False  # one server per DDTree setting instead of per-request custom_params
    server_args: tuple[str, ...] = ()  # extra server command-line arguments
    startup_timeout_s: float = 900.0
    request_timeout_s: float = 3600.0
    name: str = "sweep"
    repeats: int = 1  # times the whole grid is measured, pass after pass (ddbench.harness.runner)
    url: tuple[ServerURL, ...] = ()  # running servers the cells go to (harness.fleet); empty: ddbench starts its own
    api_key: str | None = dataclasses.field(default=None, repr=False)  # sent as Authorization: Bearer; never stored

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def largest_budget(self) -> int:
        """The budget of a DDTree server that ddbench starts for several budgets (its --budget, or
        SGLANG_DDTREE_BUDGET; requests lower it), which an `auto` cell chooses under: the largest fixed budget
        of `budgets`, else AUTO_LARGEST_DEFAULT.

        Example: budgets auto,15,63 -> 63; budgets auto -> 64."""
        return largest_budget(self.budgets)

    def to_dict(self) -> dict[str, Any]:
        """The config as the manifest records it: URLs in their --url form, the API key left out."""
        data = dataclasses.asdict(self)
        data["url"] = [server.spec for server in self.url]
        del data["api_key"]
        return data


@dataclass(frozen=True)
class Cell:
    """One point of the grid: a method setting measured on one dataset at one temperature and load."""

    dataset: str  # dataset label: builtin name or JSONL file stem
    method: str  # ar | dflash | ddtree
    budget: int | str | None  # DDTree node budget or AUTO_BUDGET; None for ar and dflash
    max_depth: int | None  # DDTree depth limit; None: the drafter's block size - 1 (and for ar, dflash)
    draft_temperature: float | None  # DDTree draft temperature; None for ar and dflash
    temperature: float
    concurrency: int
    hold_chain: bool | None = None  # DDTree: trees hold the rank-0 chain first; None for ar and dflash
    repeat: int = 1  # 1-based measurement of this setting; None (cells written before repeats) reads as 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "hold_chain", ddtree_hold_chain(self.method, self.hold_chain))
        object.__setattr__(self, "repeat", cell_repeat(self.repeat))

    @property
    def cell_id(self) -> str:
        """A file-name-safe id, stable across runs: gsm8k__ddtree-b64-d7-dt1__t0__c1 (held: ...-dt1-chain__...;
        budget auto: ...-bauto-...); repeat 2 and later end in their number, gsm8k__ddtree-b64-d7-dt1__t0__c1-r2,
        repeat 1 in nothing."""
        setting = self.method
        if self.method == "ddtree":
            depth = "auto" if self.max_depth is None else str(self.max_depth)
            setting += f"-b{self.budget}-d{depth}-dt{_num(self.draft_temperature)}"
            setting += "-chain" if self.hold_chain else ""
        dataset = re.sub(r"[^A-Za-z0-9._-]+", "_", self.dataset)
        repeat = f"-r{self.repeat}" if self.repeat > 1 else ""
        return f"{dataset}__{setting}__t{_num(self.temperature)}__c{self.concurrency}{repeat}"

    @property
    def key(self) -> tuple:
        """The fields that identify a cell's setting across result sets (used to match baselines); the
        repeats of one setting share it."""
        return (
            self.dataset,
            self.method,
            self.budget,
            self.max_depth,
            self.draft_temperature,
            self.hold_chain,
            self.temperature,
            self.concurrency,
        )

    def tree_settings(self) -> TreeSettings | None:
        """The DDTree settings this cell asks a server for, None for ar and dflash: budget AUTO_BUDGET is auto
        (under the server's own budget, so its budget field reads 0), a depth of None the server's default.
        Requests send them as custom_params (`TreeSettings.to_custom_params`, ddbench.harness.client).

        Example: the cell gsm8k__ddtree-b16-dauto-dt0.5-chain__t0__c1 -> TreeSettings(16, None, 0.5, True);
        gsm8k__ddtree-bauto-d7-dt1__t0__c1 -> TreeSettings(0, 7, 1.0, False, auto=True)."""
        if self.method != "ddtree":
            return None
        from ddtree_core.settings import TreeSettings  # here, not at the top: reading configs needs no torch

        auto = self.budget == AUTO_BUDGET
        return TreeSettings(0 if auto else self.budget, self.max_depth, self.draft_temperature, self.hold_chain, auto)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Cell:
        return cls(**{f.name: data.get(f.name) for f in dataclasses.fields(cls)})


def ddtree_hold_chain(method: str, hold_chain: bool | None) -> bool | None:
    """The hold_chain of a `method` setting: a bool for ddtree, where None (results written before the knob)
    reads as False; None for ar and dflash."""
    if hold_chain is not None and not isinstance(hold_chain, bool):
        raise ValueError(f"hold_chain must be a bool or None, got {hold_chain!r}")
    if method != "ddtree":
        if hold_chain:
            raise ValueError(f"hold_chain is a DDTree setting, not one of {method}")
        return None
    return bool(hold_chain)


def cell_repeat(repeat: int | None) -> int:
    """A cell's or request's repeat: None (written before repeats) reads as 1; ValueError unless an int >= 1."""
    if repeat is None:
        return 1
    _check_count("repeat", repeat)
    return repeat


def _check_count(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _num(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


def parse_budget(value: Any) -> int | str:
    """A DDTree budget of a flag, a TOML list or a summary.csv field: an integer >= 1, or AUTO_BUDGET;
    ValueError saying what is allowed otherwise. Example: "16" -> 16, "auto" -> "auto", "-3" -> ValueError."""
    if isinstance(value, str) and value.strip().lower() == AUTO_BUDGET:
        return AUTO_BUDGET
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, bool) or not (isinstance(text, int) or isinstance(text, str) and text.isdigit()):
        raise ValueError(f"takes integers >= 1 or {AUTO_BUDGET}, got {value!r}")
    budget = int(text)
    if budget < 1:
        raise ValueError(f"takes integers >= 1 or {AUTO_BUDGET}, got {value!r}")
    return budget


def largest_budget(budgets: Sequence[int | str]) -> int:
    """The largest fixed budget of `budgets`, else (auto alone) AUTO_LARGEST_DEFAULT."""
    return max((budget for budget in budgets if budget != AUTO_BUDGET), default=AUTO_LARGEST_DEFAULT)


def budget_label(budget: int | str) -> str:
    """How tables and plots name a DDTree budget: b64, or auto."""
    return AUTO_BUDGET if budget == AUTO_BUDGET else f"b{budget}"


def dataset_label(spec: str) -> str:
    """The label a dataset spec is reported under: the builtin name, or a JSONL file's stem."""
    return spec if spec in BUILTIN_DATASETS else Path(spec).name.removesuffix(".gz").removesuffix(".jsonl")


def expand_cells(config: SweepConfig) -> list[Cell]:
    """The sweep grid: per dataset x temperature x concurrency, AR, DFLASH, then every DDTree setting; with
    `repeats` > 1 the grid again for repeat 2, 3, ... (grid of repeat 1, then of repeat 2, ...).

    Example: datasets gsm8k, budgets 16, repeats 2 give the ids gsm8k__ar__t0__c1, gsm8k__dflash__t0__c1,
    gsm8k__ddtree-b16-dauto-dt1__t0__c1, then the same three ending in -r2.
    """
    grid = _grid(config)
    return grid + [dataclasses.replace(cell, repeat=repeat) for repeat in range(2, config.repeats + 1) for cell in grid]


def _grid(config: SweepConfig) -> list[Cell]:
    """The cells of one repeat."""
    cells = []
    for spec in config.datasets:
        for temperature in config.temperatures:
            for concurrency in config.concurrency:
                common = dict(dataset=dataset_label(spec), temperature=temperature, concurrency=concurrency)
                cells.append(Cell(method="ar", budget=None, max_depth=None, draft_temperature=None, **common))
                cells.append(Cell(method="dflash", budget=None, max_depth=None, draft_temperature=None, **common))
                if "ddtree" not in config.methods:
                    continue
                for budget in config.budgets:
                    for depth in config.depths:
                        for draft_temperature in config.draft_temperatures:
                            for hold_chain in config.hold_chain:
                                cells.append(
                                    Cell(
                                        method="ddtree",
                                        budget=budget,
                                        max_depth=depth,
                                        draft_temperature=draft_temperature,
                                        hold_chain=hold_chain,
                                        **common,
                                    )
                                )
    return cells


def resolve_config_path(name_or_path: str) -> Path:
    """`configs/NAME.toml` for a bare name, else the path itself."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = CONFIG_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.toml")))
        raise DDBenchError(f"no sweep config {name_or_path!r} (known: {known})")
    return path


def read_config_file(name_or_path: str) -> dict[str, Any]:
    """The `[sweep]` table of a config file, with `name` defaulting to the file's stem."""
    path = resolve_config_path(name_or_path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise DDBenchError(f"{path}: {error}") from error
    table = dict(data.get("sweep", {}))
    if "api_key" in table:
        raise DDBenchError(f"{path}: api_key does not belong in a config file; pass --api-key or set DDBENCH_API_KEY")
    table.setdefault("name", path.stem)
    return table


def build_config(file_values: dict[str, Any], flag_values: dict[str, Any]) -> SweepConfig:
    """File values, then flags (None means 'not given'), then defaults; raises DDBenchError if invalid."""
    merged = dict(file_values)
    merged.update({key: value for key, value in flag_values.items() if value is not None})
    names = {f.name for f in dataclasses.fields(SweepConfig)}
    unknown = sorted(set(merged) - names)
    if unknown:
        raise DDBenchError(f"unknown sweep setting(s): {', '.join(unknown)}")
    values = {}
    for key, value in merged.items():
        try:
            values[key] = _coerce(key, value)
        except ValueError as error:  # e.g. --budgets abc: name the flag, not int()
            raise DDBenchError(f"--{key.replace('_', '-')} (`{key}` in a config): {error}") from error
    try:
        return SweepConfig(**values)
    except (TypeError, ValueError) as error:
        raise DDBenchError(str(error)) from error


Listed = str | Sequence[Any] | None  # a comma list ("16,32", "0-7") or a TOML list, as written; None: not given


@dataclass(frozen=True)
class SweepSettings:
    """A sweep as asked for, before any default: a config file's `[sweep]` table, the flags given over it, then
    what the machine decides (`ddbench sweep` fills engine, GPUs, target, output folder). None means not given;
    lists stay as written. `build()` validates once, through `build_config`, into a SweepConfig, so the checks
    and their one-line errors are the same whichever way a setting came. One field per SweepConfig field."""

    engine: str | None = None
    model: str | None = None
    draft: str | None = None
    methods: Listed = None
    budgets: Listed = None
    depths: Listed = None
    draft_temperatures: Listed = None
    hold_chain: Listed = None
    temperatures: Listed = None
    concurrency: Listed = None
    datasets: Listed = None
    data_dir: str | None = None
    num_prompts: int | None = None
    max_new_tokens: int | None = None
    top_p: float | None = None
    top_k: int | None = None
    gpus: Listed = None
    tp: int | None = None
    workers: int | None = None
    out: str | None = None
    stream: bool | None = None
    restart_per_budget: bool | None = None
    server_args: Listed = None
    startup_timeout_s: float | None = None
    request_timeout_s: float | None = None
    name: str | None = None
    repeats: int | None = None
    url: Listed = None
    api_key: str | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def from_file(cls, name_or_path: str) -> SweepSettings:
        """The `[sweep]` table of configs/NAME.toml (or of a .toml path), `name` defaulting to the file's stem;
        DDBenchError for a key that is no setting, as build_config words it."""
        table = read_config_file(name_or_path)
        unknown = sorted(set(table) - {field.name for field in dataclasses.fields(cls)})
        if unknown:
            raise DDBenchError(f"unknown sweep setting(s): {', '.join(unknown)}")
        return cls(**table)

    def given(self) -> dict[str, Any]:
        """The settings given (not None), by name."""
        return {name: value for name, value in vars(self).items() if value is not None}

    def over(self, base: SweepSettings) -> SweepSettings:
        """These settings where given, else `base`'s: the flags over a config file."""
        return dataclasses.replace(base, **self.given())

    def build(self) -> SweepConfig:
        """The validated SweepConfig; DDBenchError naming the first bad setting."""
        return build_config(self.given(), {})


def _coerce(key: str, value: Any) -> Any:
    """Turn TOML lists and flag strings ("16,32", "0-7") into the field's type."""
    if key == "gpus":
        return parse_gpus(value)
    if key == "url":
        return parse_urls(value)
    if key == "depths":
        return tuple(None if item in (None, "auto", "none", "") else int(item) for item in as_list(value))
    if key == "budgets":
        return tuple(parse_budget(item) for item in as_list(value))
    if key == "concurrency":
        return tuple(_number(int, item) for item in as_list(value))
    if key in ("draft_temperatures", "temperatures"):
        return tuple(_number(float, item) for item in as_list(value))
    if key == "hold_chain":
        return tuple(_flag(item) for item in as_list(value))
    if key == "server_args":
        return tuple(shlex.split(value) if isinstance(value, str) else (str(item) for item in value))
    if key in ("datasets", "methods"):
        return tuple(str(item) for item in as_list(value))
    return value


def _number(kind: type, item: Any) -> Any:
    """int(item) or float(item), or ValueError saying what was expected: "expected integers, got 'abc'"."""
    try:
        return kind(item)
    except (TypeError, ValueError):
        raise ValueError(f"expected {'integers' if kind is int else 'numbers'}, got {item!r}") from None


def as_list(value: Any) -> list:
    """A comma-separated string, a list or one value, as a list."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _flag(item: Any) -> bool:
    """0 / 1 (or false / true) of a flag list or a TOML list, as a bool."""
    text = str(item).strip().lower()
    if text not in ("0", "1", "false", "true"):
        raise ValueError(f"takes 0 or 1 (false or true), got {item!r}")
    return text in ("1", "true")


def parse_urls(value: Any) -> tuple[ServerURL, ...]:
    """Running servers from a comma list or a TOML list of URLs, each optionally labelled METHOD=; ValueError if
    one is malformed or given twice.

    Example: "ar=http://a:30000,http://b:30000/" -> (ServerURL("http://a:30000", "ar"), ServerURL("http://b:30000")).
    """
    servers = []
    for item in as_list(value):
        label, _, rest = str(item).partition("=")
        method, url = (label, rest) if label in METHODS else (None, str(item))
        url = url.strip().rstrip("/")
        if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", url):
            raise ValueError(f"url takes [METHOD=]http(s)://HOST:PORT, METHOD one of ar, dflash, ddtree; got {item!r}")
        servers.append(ServerURL(url, method))
    urls = [server.url for server in servers]
    if len(set(urls)) != len(urls):
        raise ValueError(f"url lists a server twice: {', '.join(urls)}")
    return tuple(servers)


def parse_gpus(value: Any) -> tuple[int, ...]:
    """GPU ids from "0-7", "0,2,4", a list, or "" (none)."""
    ids: list[int] = []
    for item in as_list(value):
        text = str(item)
        if re.fullmatch(r"\d+-\d+", text):
            first, last = (int(part) for part in text.split("-"))
            ids.extend(range(first, last + 1))
        elif text.isdigit():
            ids.append(int(text))
        else:
            raise ValueError(f"GPU list must look like 0-7 or 0,1,2, got {value!r}")
    return tuple(ids)


def _validate(config: SweepConfig) -> None:
    if config.engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {config.engine!r}")
    if not {"ar", "dflash"} <= set(config.methods) or not set(config.methods) <= set(METHODS):
        raise ValueError(f"methods must include ar and dflash, out of {', '.join(METHODS)}; got {list(config.methods)}")
    if not config.budgets or any(b != AUTO_BUDGET and not (type(b) is int and b >= 1) for b in config.budgets):
        raise ValueError(f"--budgets takes integers >= 1 or {AUTO_BUDGET}, got {list(config.budgets)}")
    if any(depth is not None and depth < 1 for depth in config.depths) or not config.depths:
        raise ValueError(f"depths must be >= 1, got {list(config.depths)}")
    if not config.draft_temperatures or any(t <= 0 for t in config.draft_temperatures):
        raise ValueError(f"draft temperatures must be > 0, got {list(config.draft_temperatures)}")
    if not config.hold_chain or not all(isinstance(held, bool) for held in config.hold_chain):
        raise ValueError(f"hold_chain must list 0 or 1, got {list(config.hold_chain)}")
    if not config.temperatures or any(t < 0 for t in config.temperatures):
        raise ValueError(f"temperatures must be >= 0, got {list(config.temperatures)}")
    if not config.concurrency or any(c < 1 for c in config.concurrency):
        raise ValueError(f"concurrency must be >= 1, got {list(config.concurrency)}")
    if not config.datasets:
        raise ValueError("at least one dataset is needed")
    for spec in config.datasets:
        if spec not in BUILTIN_DATASETS and not spec.endswith((".jsonl", ".jsonl.gz")):
            raise ValueError(f"unknown dataset {spec!r}: use {', '.join(BUILTIN_DATASETS)} or a .jsonl path")
    labels = [dataset_label(spec) for spec in config.datasets]
    if len(set(labels)) != len(labels):
        raise ValueError(f"datasets must have distinct names, got {labels}")
    _check_count("repeats", config.repeats)
    for name in ("num_prompts", "max_new_tokens", "tp", "workers"):
        if getattr(config, name) is not None and getattr(config, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(config, name)}")
    if config.gpus and len(config.gpus) % config.tp:
        raise ValueError(f"--tp {config.tp} must divide the {len(config.gpus)} GPUs given")
    if config.url:
        _validate_running(config)
    elif config.engine == "sglang" and not config.gpus:
        raise ValueError("the sglang engine needs GPUs (--gpus)")
    if config.engine == "reference" and config.stream:
        raise ValueError("the reference engine does not stream; drop --stream")
    if not config.model or not config.draft and not config.url:  # running servers: the fleet says what is missing
        raise ValueError("a target model and a drafter are needed (--model, --draft)")


def _validate_running(config: SweepConfig) -> None:
    """Settings of servers ddbench starts have no place in a sweep of running servers."""
    launch = {
        "gpus": config.gpus != (),
        "tp": config.tp != 1,
        "workers": config.workers != 1,
        "restart_per_budget": config.restart_per_budget,
        "server_args": config.server_args != (),
    }
    given = [name for name, set_ in launch.items() if set_]
    if given:
        raise ValueError(f"{', '.join(given)} only apply to servers ddbench starts, not to the running servers of url")

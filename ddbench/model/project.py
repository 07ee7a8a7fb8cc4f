"""`ddbench model project`: PROJECTED tokens/s of DDTree, DFLASH and AR on another GPU, never a measurement.

    ddbench model project --cost results/cost/h200 --kernels results/kernels/h200-2026-11-29 \\
        --acceptance configs/acceptance/published-qwen3-8b.json --ddtree-gain-from results/testbed/reference-cpu \\
        --target-gpu rtx-pro-6000 --out results/projection/rtx-pro-6000

Inputs:
- the cost run (`ddbench model cost`, cost_bench.py): time_ms (verify step with lm_head) and body_ms (without) of
  B requests x T tokens on the source GPU, for a random decoder with the target's shapes;
- the tree round (`ddbench kernels bench`, kernel_bench.py, optional): round_us per (batch, budget) of one impl at
  the vocab nearest the cost run's; interpolated linearly in budget, then in batch, and held at the nearest
  measured value outside the grid (a note says where); without --kernels the tree round costs 0 (a note);
- acceptance tau (bonus included) per dataset for DFLASH and per DDTree budget: a JSON file
  ({"source": ..., "datasets": {name: {"dflash": tau, "ddtree": {"16": tau, ...}}}}), or a ddbench results
  folder (pooled acceptance_length at one temperature, the lowest concurrency measured, default depth,
  draft temperature 1, no held chain), or a file whose empty "ddtree" tables are DERIVED as its DFlash tau
  x the relative gain tau(N) / tau(DFlash) measured in a results folder (--ddtree-gain-from), capped at the
  block size.

Scaling rule: a cost cell (B, T) measured in t ms on the source GPU takes t x floor_target / floor_source on
the target, floor = max(bytes / bandwidth, FLOPs / peak) of that cell (cost_bench.floors: weights + KV cache
read once; matmuls + dense attention): the same efficiency against the roofline on both GPUs. The tree
round scales by bandwidth_source / bandwidth_target (it reads draft logits). A verify width between two
measured widths is the linear interpolation of the two projected times (--no-interpolate: not projected).

Round model at concurrency B (B requests in flight on one GPU; tokens/s counts all B streams):
- draft(B): the DFlash drafter as --draft-layers L layers of the target's shape over the block (T = block),
  i.e. L / layers x body_ms, plus that cell's lm_head time (time_ms - body_ms, as DFlash drafters reuse the
  target's lm_head); its fc projection and the capture of target hidden states are left out;
- DDTree budget N: round = draft + tree(B, N) + verify(B, max(N + 1, block)); tokens/s = B x tau(N) / round;
- DFLASH: round = draft + verify(B, block); tokens/s = B x tau_dflash / round;
- AR: tokens/s = B / verify(B, 1);
- --overhead-ms ar=MS,dflash=MS,ddtree=MS adds a fixed time to each method's round (AR: step), unscaled:
  e.g. the rounds of SGLang serving a small target, where launches and host work are most of the round,
  as a pessimistic edge (overlap scheduling hides part of it behind a large target's GPU work).
Prefill and memory capacity are not modelled; the context is the cost run's prefix.

Outputs, each titled "PROJECTION (not measured on <target GPU>)" and naming the cost run and the acceptance
source: projection.csv (every projected row, the label in its first column) and projection.md (inputs, notes,
the best DDTree budget per concurrency beside DFLASH and AR, every setting); the command prints the same.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ddbench.config import AUTO_BUDGET, DDBenchError
from ddbench.model.cost_bench import H200_BANDWIDTH, H200_FLOPS, ModelShape, floors


@dataclass(frozen=True)
class GpuSpec:
    name: str
    bandwidth: float  # peak memory bandwidth, bytes/s
    flops: float  # peak dense bf16 tensor FLOP/s
    source: str  # where the two figures come from


GPUS = {
    "h200": GpuSpec("NVIDIA H200", H200_BANDWIDTH, H200_FLOPS, "../shared/research/anchors.md §5.2 (4.8 TB/s; "
                    "989 TFLOPS dense BF16 from the datacrunch spec table [S])"),
    # 500 TFLOPS is anchors.md's own estimate [X] (NVIDIA's 4000 FP4-sparse TOPS / 8, full-rate FP32
    # accumulate); third-party spec pages (hmc-tech.com) list 503.8 dense BF16 tensor TFLOPS. --flops overrides.
    "rtx-pro-6000": GpuSpec("NVIDIA RTX PRO 6000 Blackwell", 1.792e12, 500e12, "../shared/research/anchors.md "
                            "§5.2 (1.792 TB/s GDDR7, gpu.name / VideoCardz [S]; 500 TFLOPS dense BF16 is an estimate "
                            "[X]: about 250 if FP32 accumulate runs at half rate)"),
}  # fmt: skip


@dataclass(frozen=True)
class Acceptance:
    source: str  # what the values are and where they come from
    origin: str  # file | measured: how tau_dflash and the non-derived DDTree taus were obtained
    dflash: dict[str, float]  # dataset -> DFLASH tau
    ddtree: dict[str, dict[int, float]]  # dataset -> budget -> DDTree tau; empty where unknown
    derived: tuple[str, ...] = ()  # datasets whose DDTree taus are derived (--ddtree-gain-from)


@dataclass(frozen=True)
class CostCell:
    batch: int
    width: int  # T = nodes + 1 tokens per request
    prefix: int  # cached tokens per request
    time_ms: float  # verify step with final norm and lm_head, the preset's layers
    body_ms: float  # the same without final norm and lm_head


@dataclass(frozen=True)
class CostRun:
    path: Path
    device: str  # run.json "device": where the cells were measured
    preset: str
    shape: ModelShape
    itemsize: int  # bytes per weight / KV element of the run's dtype
    cells: tuple[CostCell, ...]  # the timed cells (skips and errors left out)
    eager: tuple[tuple[int, int], ...] = ()  # (B, T) of cells timed without a CUDA graph (cost_sglang's graph column)


@dataclass(frozen=True)
class TreeTimes:
    """Draft-side round times of one kernel_bench impl at one vocab, on the source GPU."""

    path: Path
    impl: str
    vocab: int
    round_us: dict[int, dict[int, float]]  # batch -> budget -> round_us

    def us(self, batch: int, budget: int) -> float:
        """Linear in budget per measured batch, then in batch; held at the nearest edge outside the grid."""
        per_batch = {b: _interpolate(by_budget, _clamp(budget, by_budget)) for b, by_budget in self.round_us.items()}
        return _interpolate(per_batch, _clamp(batch, per_batch))

    def covers(self, batch: int, budget: int) -> bool:
        return min(self.round_us) <= batch <= max(self.round_us) and all(
            min(b) <= budget <= max(b) for b in self.round_us.values()
        )


@dataclass(frozen=True)
class Settings:
    source: GpuSpec  # the GPU of the cost and kernel runs
    target: GpuSpec  # the GPU projected to
    draft_layers: int  # DFlash drafter layers of the target's shape
    block: int  # drafter block size: DFLASH verify width and least DDTree verify width
    interpolate: bool  # verify widths between measured ones: interpolate, else skip
    overhead_ms: dict[str, float] = field(default_factory=dict)  # method -> ms added to each round (unscaled)

    def __post_init__(self):
        if self.draft_layers < 1 or self.block < 2:
            raise DDBenchError(f"--draft-layers must be >= 1 and --block >= 2, got {self.draft_layers}, {self.block}")
        unknown = set(self.overhead_ms) - set(METHODS)
        if unknown or any(not (ms >= 0 and math.isfinite(ms)) for ms in self.overhead_ms.values()):
            raise DDBenchError(f"--overhead-ms takes ms >= 0 for {', '.join(METHODS)}, got {self.overhead_ms}")


METHODS = ("ar", "dflash", "ddtree")


def parse_overhead(text: str | None) -> dict[str, float]:
    """'ar=1.4,dflash=3.5,ddtree=3.3' -> {method: ms}; DDBenchError on anything else."""
    out = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        method, _, value = item.partition("=")
        try:
            out[method.strip()] = float(value)
        except ValueError:
            raise DDBenchError(f"--overhead-ms wants METHOD=MS items such as ar=1.4,dflash=3.5, got {item!r}") from None
    return out


@dataclass(frozen=True)
class Row:
    """One projected (dataset, concurrency, method setting)."""

    dataset: str
    concurrency: int  # B requests in flight on one GPU
    method: str  # ar | dflash | ddtree
    budget: int | None  # DDTree node budget
    width: int  # verify tokens per request
    tau: float  # tokens per round per request (AR: 1)
    tau_source: str  # file | measured | derived | definition (AR)
    draft_ms: float
    tree_ms: float
    verify_ms: float
    overhead_ms: float  # --overhead-ms of the method (0 without it)
    round_ms: float
    tokens_per_s: float  # all B streams
    tokens_per_s_per_request: float
    vs_dflash: float | None  # tokens_per_s over DFLASH's at the same dataset and concurrency
    vs_ar: float | None
    interpolated: bool  # the verify or draft width lies between measured widths


@dataclass(frozen=True)
class Projection:
    label: str  # "PROJECTION (not measured on <target>)"
    inputs: tuple[str, ...]  # one line per input, for every output
    notes: tuple[str, ...]
    rows: tuple[Row, ...]
    cost_run: str
    acceptance_source: str


def _clamp(x: float, points: dict) -> float:
    return min(max(x, min(points)), max(points))


def _interpolate(points: dict[int, float], x: float) -> float | None:
    """Linear interpolation of points {x: y} at x; None outside [min x, max x]."""
    if x in points:
        return points[x]
    below = [p for p in points if p < x]
    above = [p for p in points if p > x]
    if not below or not above:
        return None
    x0, x1 = max(below), min(above)
    return points[x0] + (points[x1] - points[x0]) * (x - x0) / (x1 - x0)


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DDBenchError(f"{path}: no such {what}") from None
    except (OSError, json.JSONDecodeError) as error:
        raise DDBenchError(f"{path}: malformed {what} ({error})") from None


def _tau(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value < math.inf:
        raise DDBenchError(f"{where}: tau must be a number >= 1 (bonus included), got {value!r}")
    return float(value)


def load_acceptance(path: Path) -> Acceptance:
    """The acceptance JSON file (format in the module docstring)."""
    data = _read_json(path, "acceptance file")
    if not isinstance(data, dict) or not isinstance(data.get("source"), str) or not data["source"].strip():
        raise DDBenchError(f'{path}: needs a non-empty "source" string')
    datasets = data.get("datasets")
    if not isinstance(datasets, dict) or not datasets:
        raise DDBenchError(f'{path}: needs "datasets": {{name: {{"dflash": tau, "ddtree": {{budget: tau}}}}}}')
    dflash, ddtree = {}, {}
    for name, entry in datasets.items():
        if not isinstance(entry, dict) or "dflash" not in entry or not isinstance(entry.get("ddtree", {}), dict):
            raise DDBenchError(f'{path}: dataset {name!r} needs "dflash": tau and "ddtree": {{budget: tau}}')
        dflash[name] = _tau(entry["dflash"], f"{path}: {name} dflash")
        try:
            ddtree[name] = {int(k): _tau(v, f"{path}: {name} ddtree {k}") for k, v in entry.get("ddtree", {}).items()}
        except ValueError:
            raise DDBenchError(f"{path}: {name} ddtree budgets must be integers") from None
        if any(budget < 1 for budget in ddtree[name]):
            raise DDBenchError(f"{path}: {name} ddtree budgets must be >= 1")
    return Acceptance(data["source"].strip(), "file", dflash, ddtree)


def measured_acceptance(results: Path, temperature: float) -> Acceptance:
    """Pooled tau of a results folder's DFLASH and DDTree cells (a fixed budget, default depth, draft temperature
    1, no held chain) at `temperature`, from the lowest concurrency each setting was measured at."""
    from ddbench.harness.report import summarize
    from ddbench.harness.results import find_run_folder, load_cells

    rows = [
        row for row in summarize(load_cells(find_run_folder(results)))
        if row.status == "done" and row.acceptance_length is not None and math.isclose(row.temperature, temperature)
        and (row.method == "dflash" or (row.method == "ddtree" and row.budget != AUTO_BUDGET and row.max_depth is None
                                         and row.draft_temperature == 1.0 and not row.hold_chain))
    ]  # fmt: skip
    rows.sort(key=lambda row: row.concurrency)
    dflash, ddtree = {}, {}
    for row in rows:
        if row.method == "dflash":
            dflash.setdefault(row.dataset, row.acceptance_length)
        else:
            ddtree.setdefault(row.dataset, {}).setdefault(row.budget, row.acceptance_length)
    if not dflash:
        raise DDBenchError(f"{results}: no finished DFLASH cell with acceptance at temperature {temperature:g}")
    loads = sorted({row.concurrency for row in rows})
    source = (f"measured in {results} (pooled acceptance_length, temperature {temperature:g}, concurrency "
              f"{loads[0]}{' (lowest of ' + ', '.join(map(str, loads)) + ')' if len(loads) > 1 else ''})")  # fmt: skip
    return Acceptance(source, "measured", dflash, {name: ddtree.get(name, {}) for name in dflash})


def with_ddtree_gain(acceptance: Acceptance, results: Path, temperature: float, block: int) -> Acceptance:
    """Fill every empty DDTree table with tau_dflash x tau(N) / tau(DFlash) measured in `results`, capped at
    the block size (a round emits at most block tokens)."""
    measured = measured_acceptance(results, temperature)
    ddtree, derived = dict(acceptance.ddtree), []
    for name, tau_dflash in acceptance.dflash.items():
        gains = measured.ddtree.get(name)
        if acceptance.ddtree.get(name) or not gains:
            continue
        ddtree[name] = {n: min(block, tau_dflash * tau / measured.dflash[name]) for n, tau in gains.items()}
        derived.append(name)
    if not derived:
        raise DDBenchError(f"--ddtree-gain-from {results}: no dataset with measured DDTree cells and an empty "
                           f'"ddtree" table ({", ".join(acceptance.dflash)})')  # fmt: skip
    source = (f"{acceptance.source.rstrip('.')}. DDTree tau DERIVED (not published) for {', '.join(derived)}: "
              f"the DFlash tau above x tau(N) / tau(DFlash) {measured.source}, capped at {block}")  # fmt: skip
    return replace(acceptance, source=source, ddtree=ddtree, derived=tuple(derived))


def build(cost: Path, acceptance: Path | None, acceptance_from: Path | None, ddtree_gain_from: Path | None,
          kernels: Path | None, kernel_impl: str, temperature: float, settings: Settings) -> Projection:  # fmt: skip
    """Load what the options name and project it; DDBenchError on a missing, malformed or contradictory input."""
    if (acceptance is None) == (acceptance_from is None):
        raise DDBenchError("give exactly one of --acceptance FILE and --acceptance-from RESULTS")
    if acceptance_from is not None and ddtree_gain_from is not None:
        raise DDBenchError("--ddtree-gain-from derives DDTree tau for --acceptance FILE; --acceptance-from measures it")
    run = load_cost(cost)
    table = load_acceptance(acceptance) if acceptance else measured_acceptance(acceptance_from, temperature)
    if ddtree_gain_from is not None:
        table = with_ddtree_gain(table, ddtree_gain_from, temperature, settings.block)
    taus = [*table.dflash.values(), *(tau for budgets in table.ddtree.values() for tau in budgets.values())]
    if max(taus) > settings.block:
        raise DDBenchError(f"a tau of {max(taus):g} exceeds the block size {settings.block} (a round emits at most "
                           "block tokens): wrong --block or acceptance table")  # fmt: skip
    tree = load_tree_times(kernels, kernel_impl, run.shape.vocab) if kernels else None
    return project(run, table, tree, settings)


def load_cost(path: Path) -> CostRun:
    """A cost_bench output folder: run.json (config, shape, device) and the timed rows of cells.csv."""
    record = _read_json(path / "run.json", "cost run record (run.json of `ddbench model cost`)")
    try:
        import torch

        config, shape = record["config"], ModelShape(**record["shape"])
        itemsize = getattr(torch, config["dtype"]).itemsize
        with open(path / "cells.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        cells = tuple(
            CostCell(int(r["batch"]), int(r["width"]), int(r["prefix"]), float(r["time_ms"]), float(r["body_ms"]))
            for r in rows if r["time_ms"] and r["body_ms"]
        )  # fmt: skip
    except FileNotFoundError:
        raise DDBenchError(f"{path}: no cells.csv (not a `ddbench model cost` output folder)") from None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise DDBenchError(f"{path}: malformed cost run ({type(error).__name__}: {error})") from None
    if not cells:
        raise DDBenchError(f"{path}: no timed cell in cells.csv")
    eager = tuple((int(r["batch"]), int(r["width"])) for r in rows if r.get("graph") == "False" and r["time_ms"])
    return CostRun(path, str(record.get("device")), str(config.get("preset")), shape, itemsize, cells, eager)


def load_tree_times(path: Path, impl: str, vocab: int) -> TreeTimes:
    """kernel_bench cells.csv: round_us of `impl` at the measured vocab nearest `vocab`."""
    try:
        with open(path / "cells.csv", newline="") as handle:
            rows = [r for r in csv.DictReader(handle) if r["impl"] == impl and r["round_us"]]
        timed = [(int(r["vocab"]), int(r["batch"]), int(r["budget"]), float(r["round_us"])) for r in rows]
    except FileNotFoundError:
        raise DDBenchError(f"{path}: no cells.csv (not a `ddbench kernels bench` output folder)") from None
    except (KeyError, TypeError, ValueError) as error:
        raise DDBenchError(f"{path}: malformed kernel cells ({type(error).__name__}: {error})") from None
    if not timed:
        raise DDBenchError(f"{path}: no timed {impl} round in cells.csv")
    nearest = min({v for v, *_ in timed}, key=lambda v: (abs(v - vocab), v))
    round_us: dict[int, dict[int, float]] = {}
    for v, batch, budget, us in timed:
        if v == nearest:
            round_us.setdefault(batch, {})[budget] = us
    return TreeTimes(path, impl, nearest, round_us)


def gpu(name: str, bandwidth: float | None = None, flops: float | None = None) -> GpuSpec:
    """A built-in GPU, its bandwidth and FLOP/s optionally overridden (the source then says so)."""
    if name not in GPUS:
        raise DDBenchError(f"unknown GPU {name!r}; expected one of {', '.join(GPUS)}")
    spec = GPUS[name]
    for value, option in ((bandwidth, "--bandwidth"), (flops, "--flops")):
        if value is not None and not value > 0:
            raise DDBenchError(f"{option} must be > 0, got {value}")
    if bandwidth is None and flops is None:
        return spec
    overridden = [f"{option} {value:g}" for value, option in ((bandwidth, "--bandwidth"), (flops, "--flops")) if value]
    return GpuSpec(spec.name, bandwidth or spec.bandwidth, flops or spec.flops,
                   f"{spec.source}; overridden: {', '.join(overridden)}")  # fmt: skip


def floor_ratio(run: CostRun, cell: CostCell, source: GpuSpec, target: GpuSpec) -> float:
    """floor_target / floor_source of one cost cell, floor = max(bytes / bandwidth, FLOPs / peak)."""
    floor = lambda spec: floors(run.shape, cell.batch, cell.width, cell.prefix, run.itemsize, spec.bandwidth,
                                spec.flops).floor_ms  # fmt: skip
    return floor(target) / floor(source)


@dataclass(frozen=True)
class Curve:
    """Projected times of one batch size on the target GPU, per measured verify width T."""

    verify_ms: dict[int, float]  # T -> the verify step
    draft_ms: dict[int, float]  # T -> the drafter's block forward modelled on that cell (module docstring)
    interpolate: bool  # widths between measured ones: linear interpolation, else None

    def measured(self, width: int) -> bool:
        return width in self.verify_ms

    def verify(self, width: int) -> float | None:
        return _interpolate(self.verify_ms, width) if self.interpolate else self.verify_ms.get(width)

    def draft(self, width: int) -> float | None:
        return _interpolate(self.draft_ms, width) if self.interpolate else self.draft_ms.get(width)


def curves(run: CostRun, settings: Settings) -> dict[int, Curve]:
    """Every timed cost cell scaled to the target GPU by its floor ratio, grouped by batch size."""
    out: dict[int, Curve] = {}
    for cell in run.cells:
        ratio = floor_ratio(run, cell, settings.source, settings.target)
        lm_head = max(cell.time_ms - cell.body_ms, 0.0)  # timing noise can make it negative on tiny decoders
        draft_ms = (settings.draft_layers / run.shape.layers * cell.body_ms + lm_head) * ratio
        curve = out.setdefault(cell.batch, Curve({}, {}, settings.interpolate))
        curve.verify_ms[cell.width] = cell.time_ms * ratio
        curve.draft_ms[cell.width] = draft_ms
    return out


def project(run: CostRun, acceptance: Acceptance, tree: TreeTimes | None, settings: Settings) -> Projection:
    """Every projectable (dataset, concurrency, setting); what cannot be projected is named in the notes."""
    by_batch = curves(run, settings)
    rows = [
        row for name in acceptance.dflash for batch, curve in sorted(by_batch.items())
        for row in _with_ratios(_rows(name, batch, curve, acceptance, tree, settings))
    ]  # fmt: skip
    label = f"PROJECTION (not measured on {settings.target.name})"
    return Projection(label, _inputs(run, acceptance, tree, settings), tuple(_notes(run, acceptance, tree, settings,
                      by_batch)), tuple(rows), str(run.path), acceptance.source)  # fmt: skip


def _rows(name: str, batch: int, curve: Curve, acceptance: Acceptance, tree: TreeTimes | None,
          settings: Settings) -> list[Row]:  # fmt: skip
    out = []
    if curve.verify(1) is not None:
        out.append(_row(name, batch, "ar", None, 1, 1.0, "definition", 0.0, 0.0, curve.verify(1), curve.measured(1),
                        settings))  # fmt: skip
    draft_ms, block_ms = curve.draft(settings.block), curve.verify(settings.block)
    if draft_ms is None or block_ms is None:
        return out
    measured = curve.measured(settings.block)
    out.append(_row(name, batch, "dflash", None, settings.block, acceptance.dflash[name], acceptance.origin, draft_ms,
                    0.0, block_ms, measured, settings))  # fmt: skip
    source = "derived" if name in acceptance.derived else acceptance.origin
    us_to_target_ms = settings.source.bandwidth / settings.target.bandwidth / 1e3
    for budget, tau in sorted(acceptance.ddtree.get(name, {}).items()):
        width = max(budget + 1, settings.block)
        if curve.verify(width) is not None:
            tree_ms = tree.us(batch, budget) * us_to_target_ms if tree else 0.0
            out.append(_row(name, batch, "ddtree", budget, width, tau, source, draft_ms, tree_ms, curve.verify(width),
                            measured and curve.measured(width), settings))  # fmt: skip
    return out


def _row(dataset: str, batch: int, method: str, budget: int | None, width: int, tau: float, source: str,
         draft_ms: float, tree_ms: float, verify_ms: float, measured: bool, settings: Settings) -> Row:  # fmt: skip
    overhead_ms = settings.overhead_ms.get(method, 0.0)
    round_ms = draft_ms + tree_ms + verify_ms + overhead_ms
    per_request = tau / round_ms * 1e3
    return Row(dataset, batch, method, budget, width, tau, source, draft_ms, tree_ms, verify_ms, overhead_ms, round_ms,
               batch * per_request, per_request, None, None, not measured)  # fmt: skip


def _with_ratios(rows: list[Row]) -> list[Row]:
    base = {row.method: row.tokens_per_s for row in rows if row.method in ("ar", "dflash")}
    ratio = lambda row, method: row.tokens_per_s / base[method] if method in base else None
    return [replace(row, vs_dflash=ratio(row, "dflash"), vs_ar=ratio(row, "ar")) for row in rows]


def _gpu_line(role: str, spec: GpuSpec) -> str:
    return f"{role} GPU: {spec.name}, {spec.bandwidth / 1e12:.4g} TB/s, {spec.flops / 1e12:.4g} TFLOP/s ({spec.source})"


def _inputs(run: CostRun, acceptance: Acceptance, tree: TreeTimes | None, settings: Settings) -> tuple[str, ...]:
    prefixes = ", ".join(str(p) for p in sorted({cell.prefix for cell in run.cells}))
    tree_line = "none (--kernels not given): 0 ms" if tree is None else (
        f"{tree.path} ({tree.impl}, vocab {tree.vocab}), scaled by the bandwidth ratio")  # fmt: skip
    overhead = ", ".join(f"{m} {settings.overhead_ms[m]:g} ms" for m in METHODS if m in settings.overhead_ms)
    overhead_line = (f"added per round, unscaled (--overhead-ms): {overhead}" if overhead else
                     "none (--overhead-ms not given): rounds are GPU time only, host work not modelled")  # fmt: skip
    return (
        f"cost run: {run.path} (device {run.device}, preset {run.preset}, prefix {prefixes} tokens, "
        f"{len(run.cells)} timed cells)",
        f"acceptance: {acceptance.source}",
        f"tree round: {tree_line}",
        f"host time: {overhead_line}",
        _gpu_line("source", settings.source),
        _gpu_line("target", settings.target),
        f"drafter: {settings.draft_layers} layer(s) of the target's shape over T = {settings.block} tokens "
        f"(body_ms x {settings.draft_layers} / {run.shape.layers}) + the target's lm_head (time_ms - body_ms)",
        "scaling: t x floor_target / floor_source per cost cell, floor = max(bytes / bandwidth, FLOPs / peak); "
        "round = draft + tree + verify(B, max(N + 1, block)) + host time; tokens/s = B x tau / round; "
        "AR = B / (verify(B, 1) + host time)",
    )  # fmt: skip


def _notes(run: CostRun, acceptance: Acceptance, tree: TreeTimes | None, settings: Settings,
           by_batch: dict[int, Curve]) -> list[str]:  # fmt: skip
    notes = []
    if settings.source.name.lower().removeprefix("nvidia ") not in run.device.lower():
        notes.append(f"the cost run was measured on {run.device!r}, not on {settings.source.name}; scaled as if it was")
    if tree is None:
        notes.append("no --kernels: the DDTree tree round costs 0 ms here, which favours DDTree")
    if run.eager:
        cells = ", ".join(f"{b}x{t}" for b, t in run.eager)
        notes.append(f"cost cells B x T = {cells} ran without a CUDA graph: their times, and rows that use them, are "
                     "upper bounds")  # fmt: skip
    without = [name for name in acceptance.dflash if not acceptance.ddtree.get(name)]
    if without:
        notes.append(
            f"no DDTree tau per budget for {', '.join(without)} in the acceptance table, so DDTree cannot be "
            "projected there (--ddtree-gain-from RESULTS derives one from measured gains, labelled derived)"
        )
    budgets = sorted({budget for table in acceptance.ddtree.values() for budget in table})
    for label, width in [("AR", 1), ("DFLASH and the drafter", settings.block)] + [
        (f"budget {n}", max(n + 1, settings.block)) for n in budgets
    ]:
        missing = [b for b, curve in sorted(by_batch.items()) if curve.verify(width) is None]
        between = [b for b, curve in sorted(by_batch.items()) if curve.verify(width) is not None and not
                   curve.measured(width)]  # fmt: skip
        if missing:
            why = "outside the measured widths" if settings.interpolate else "not measured (--no-interpolate)"
            notes.append(f"{label} (T = {width}) not projected at B = {_ints(missing)}: {why}")
        if between:
            notes.append(f"{label} (T = {width}) interpolated linearly in T between measured widths at B = "
                         f"{_ints(between)}")  # fmt: skip
    outside = sorted({(b, n) for b in by_batch for n in budgets if tree and not tree.covers(b, n)})
    if outside:
        cells = ", ".join(f"B={b} N={n}" for b, n in outside)
        notes.append(f"tree round held at the nearest measured kernel cell (outside the kernel grid): {cells}")
    return notes


def _ints(values: Sequence[int]) -> str:
    return ", ".join(map(str, values))


@dataclass(frozen=True)
class Best:
    """The fastest DDTree budget of one dataset and concurrency, beside DFLASH and AR."""

    dataset: str
    concurrency: int
    ddtree: Row | None
    dflash: Row | None
    ar: Row | None


def best_per_concurrency(rows: Sequence[Row]) -> list[Best]:
    """Per (dataset, concurrency): the DDTree row of most tokens/s (the smaller budget on a tie)."""
    out = []
    for key in dict.fromkeys((row.dataset, row.concurrency) for row in rows):
        group = [row for row in rows if (row.dataset, row.concurrency) == key]
        by_method = {row.method: row for row in group if row.method != "ddtree"}
        trees = [row for row in group if row.method == "ddtree"]
        best = max(trees, key=lambda row: (row.tokens_per_s, -row.budget), default=None)
        out.append(Best(*key, best, by_method.get("dflash"), by_method.get("ar")))
    return out


CSV_COLUMNS = ("projection",) + tuple(f.name for f in fields(Row)) + ("cost_run", "acceptance_source")


def to_csv(projection: Projection) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in projection.rows:
        values = ["" if value is None else value for value in asdict(row).values()]
        writer.writerow([projection.label, *values, projection.cost_run, projection.acceptance_source])
    return buffer.getvalue()


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


BEST_COLUMNS = ("concurrency", "best DDTree budget", "tau", "DDTree tok/s", "DFLASH tok/s", "AR tok/s",
                "DDTree vs DFLASH", "DDTree vs AR")  # fmt: skip


def _best_cells(best: Best) -> tuple[str, ...]:
    tree = best.ddtree
    return (
        str(best.concurrency), "-" if tree is None else str(tree.budget), "-" if tree is None else f"{tree.tau:.2f}",
        _num(tree and tree.tokens_per_s), _num(best.dflash and best.dflash.tokens_per_s),
        _num(best.ar and best.ar.tokens_per_s), _ratio(tree and tree.vs_dflash), _ratio(tree and tree.vs_ar),
    )  # fmt: skip


def _setting(row: Row) -> str:
    return f"DDTree b{row.budget}" if row.method == "ddtree" else row.method.upper()


def to_markdown(projection: Projection) -> str:
    lines = [f"# {projection.label}: tokens/s per GPU of DDTree, DFLASH and AR", "",
             "Computed from cost curves measured on another GPU and the acceptance below; nothing here ran on the "
             "target GPU.", "", "## Inputs", ""]  # fmt: skip
    lines += [f"- {line}" for line in projection.inputs]
    lines += ["", "## Notes", ""] + [f"- {note}" for note in projection.notes or ("none",)]
    best = best_per_concurrency(projection.rows)
    for name in dict.fromkeys(row.dataset for row in projection.rows):
        lines += ["", f"## {name}: {projection.label}", "", _md_row(BEST_COLUMNS)]
        lines += [_md_row(["---"] * len(BEST_COLUMNS))]
        lines += [_md_row(_best_cells(b)) for b in best if b.dataset == name]
        rows = [row for row in projection.rows if row.dataset == name]
        loads = sorted({row.concurrency for row in rows})
        header = ("setting", "tau", "T", *(f"B={b} tok/s" for b in loads))
        lines += ["", f"Every setting ({projection.label}):", "", _md_row(header), _md_row(("---",) * len(header))]
        for setting in dict.fromkeys((row.method, row.budget) for row in rows):
            group = {row.concurrency: row for row in rows if (row.method, row.budget) == setting}
            first = next(iter(group.values()))
            cells = (_num(group[b].tokens_per_s) + ("*" if group[b].interpolated else "") if b in group else "-"
                     for b in loads)  # fmt: skip
            lines.append(_md_row((_setting(first), f"{first.tau:.2f}", str(first.width), *cells)))
        lines.append("\n\\* a width between measured widths (interpolated).")
    return "\n".join(lines) + "\n"


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def write(out: Path, projection: Projection) -> tuple[Path, Path]:
    from ddbench.harness.results import write_atomic

    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "projection.csv", to_csv(projection))
    write_atomic(out / "projection.md", to_markdown(projection))
    return out / "projection.csv", out / "projection.md"


def print_projection(projection: Projection, console: Console) -> None:
    say = lambda text="": console.print(text, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
    say(projection.label)
    for line in projection.inputs + tuple(f"note: {note}" for note in projection.notes):
        say(f"  {line}")
    best = best_per_concurrency(projection.rows)
    for name in dict.fromkeys(row.dataset for row in projection.rows):
        table = Table(title=f"{name}: {projection.label}")
        for column in BEST_COLUMNS:
            table.add_column(column, justify="right")
        for b in best:
            if b.dataset == name:
                table.add_row(*_best_cells(b))
        console.print(table)

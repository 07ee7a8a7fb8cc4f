"""Compare a results folder against a baseline: matched cells, deltas, and a pass/fail verdict.

Baselines (`load_baseline` picks the reader by what the path holds):
- a ddbench results folder (or any file in it);
- `zlab.json`, written by `ddbench baseline` (schema in ddbench.harness.baseline);
- a `.pt` run file of the liranringel/ddtree benchmark (`benchmark.py --save-path`): {"responses":
  [{"baseline" | "dflash" | "ddtree_tb<B>": SimpleNamespace(output_ids [1, prompt+gen],
  num_input_tokens, acceptance_lengths, time_per_output_token, ...)}], "block_size", "args": {dataset,
  temperature, ...}}, one response per (prompt, turn), read as the DDTree paper's cells;
- the text the z-lab dflash benchmark prints (offline "Decoding speedup / Average Acceptance length /
  Acceptance length histogram", or the server summary "Dataset / Concurrency / Accept length"): one
  DFLASH cell; its dataset (offline output names none) and temperature come from --dataset/--temperature.

Speedups follow each source's convention: ddbench's is throughput over AR's at the same load (prefill
and queueing included), the offline harnesses' is AR's over the method's time per output token
(prefill excluded); use --no-speed when the two differ or the machines do.

Cells match on dataset, method, budget, depth limit, draft temperature, held chain (absent from
older results and baselines: not held) and temperature, plus concurrency where the baseline has one.
Deltas are results minus baseline. Acceptance compares the pooled tau when both sides have it, else
the per-response mean (what offline harnesses print). A ddbench folder with repeats compares as one
cell per setting: its numbers the medians over the repeats (`report.over_repeats`), its outputs those of
its first finished repeat.
Requests match on the hash of the prompt's token ids; `match` is the fraction of matched requests
with identical output ids and `first_div` the earliest divergences (p<prompt>t<turn>@<token index>).
`tau equal` is the pooled acceptance of both sides over the requests whose outputs are identical: two
engines whose greedy outputs part at a bf16 near-tie (see `ddbench check diverge`) then accept on different
text, and only the requests they answered alike compare their trees and walks like for like.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ddbench.config import DDBenchError, budget_label
from ddbench.harness.baseline import OfflineCell, offline_cells_from_pt, read_zlab_json
from ddbench.harness.report import CellSummary, over_repeats, request_accept_lens, summarize
from ddbench.harness.results import CellResult, RunFolder, find_run_folder, load_cells
from ddtree_core import metrics


@dataclass(frozen=True)
class Side:
    """One cell's comparable numbers and its requests' outputs, from either kind of source."""

    key: tuple  # Cell.key; concurrency None where the source has none
    acceptance_length: float | None
    acceptance_length_per_response: float | None
    accept_histogram: tuple[float, ...]
    depth_acceptance: tuple[float | None, ...]
    speedup_vs_ar: float | None
    parity: float | None
    outputs: dict[str, tuple[int, ...]]  # prompt hash -> output ids
    labels: dict[str, str]  # prompt hash -> "p<prompt index>t<turn>" where known
    accept_lens: dict[str, tuple[int, ...]] = field(default_factory=dict)  # prompt hash -> tau per round


@dataclass(frozen=True)
class Tolerances:
    accept: float = 0.02  # relative drop of tau
    histogram: float = 0.05  # total-variation distance of the accept-length histograms
    depth: float = 0.05  # largest absolute per-depth acceptance difference
    speedup: float = 0.10  # relative drop of speedup
    parity: float = 0.05  # absolute drop of parity vs AR
    min_match: float | None = None  # least fraction of outputs equal to the baseline's
    accept_equal: float | None = None  # relative drop of tau over the identical outputs (None: not checked)
    strict: bool = False  # also fail on tau or speedup above the baseline by more than the tolerance
    check_speed: bool = True


@dataclass(frozen=True)
class CellDelta:
    """One matched pair of cells."""

    key: tuple
    accept: tuple[float, float] | None  # (ours, baseline)
    histogram_distance: float | None
    depth_difference: float | None
    speedup: tuple[float, float] | None
    parity: tuple[float, float] | None
    match: float | None
    accept_equal: tuple[float, float, int] | None  # (ours, baseline, requests) over identical outputs
    divergences: tuple[str, ...]  # "p<index>t<turn>@<position>" of the first few differing outputs
    failures: tuple[str, ...]  # which checks failed

    @property
    def ok(self) -> bool:
        return not self.failures


def load_baseline(path: str | Path, *, dataset: str | None = None, temperature: float = 0.0) -> list[Side]:
    """The baseline's cells, whatever kind of file `path` is (DDBenchError if it is none of them)."""
    path = Path(path)
    if not path.exists():
        raise DDBenchError(f"baseline {path} does not exist")
    try:
        if path.is_dir() or path.name in ("manifest.json", "summary.csv", "requests.jsonl"):
            return sides_from_results(load_cells(find_run_folder(path)))
        if path.suffix == ".json":
            return [side_from_offline(cell) for cell in read_zlab_json(path)]
        if path.suffix == ".pt":
            return [side_from_offline(cell) for cell in offline_cells_from_pt(path)]
        return [parse_zlab_text(path.read_text(errors="replace"), dataset=dataset, temperature=temperature)]
    except DDBenchError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, OSError, RuntimeError) as error:
        raise DDBenchError(f"malformed baseline {path}: {error}") from error


def sides_from_results(results: Sequence[CellResult]) -> list[Side]:
    """One Side per finished setting: the median row over its repeats, the records of its first finished repeat."""
    first: dict[tuple, CellResult] = {}
    for result in results:
        if result.status == "done":
            first.setdefault(result.cell.key, result)
    sides = []
    for row in over_repeats(summarize(results)):
        if row.status != "done":
            continue
        records = first[row.cell.key].records
        outputs = {r.prompt_hash: r.output_ids for r in records}
        labels = {r.prompt_hash: f"p{r.prompt_index}t{r.turn}" for r in records}
        accept_lens = {r.prompt_hash: tuple(request_accept_lens(r) or ()) for r in records}
        sides.append(_side_from_summary(row, outputs, labels, accept_lens))
    return sides


# The cell metrics a Side copies from a summary row or an offline cell (both carry them by these names).
_CELL_METRICS = (
    "acceptance_length", "acceptance_length_per_response", "accept_histogram", "depth_acceptance",
    "speedup_vs_ar", "parity",
)  # fmt: skip


def _side_from_summary(row: CellSummary, outputs: dict, labels: dict, accept_lens: dict) -> Side:
    cell_metrics = {name: getattr(row, name) for name in _CELL_METRICS}
    return Side(key=row.cell.key, **cell_metrics, outputs=outputs, labels=labels, accept_lens=accept_lens)


def side_from_offline(cell: OfflineCell) -> Side:
    responses = cell.responses
    return Side(
        key=cell.key,
        **{name: getattr(cell, name) for name in _CELL_METRICS},
        outputs={r.prompt_hash: r.output_ids for r in responses},
        labels={r.prompt_hash: f"p{r.prompt_index}t{r.turn}" for r in responses if r.prompt_index is not None},
        accept_lens={r.prompt_hash: tuple(r.acceptance_lengths) for r in responses},
    )


_TEXT_PATTERNS = {
    "speedup": r"Decoding speedup:\s*([0-9.]+)",
    "per_response": r"(?:Average Acceptance length|Accept length):\s*([0-9.]+)",
    "histogram": r"Acceptance length histogram:\s*\[([^\]]*)\]",
    "dataset": r"Dataset:\s*(\S+)",
    "concurrency": r"Concurrency:\s*(\d+)",
}


def parse_zlab_text(text: str, *, dataset: str | None, temperature: float) -> Side:
    """The DFLASH cell of a z-lab dflash benchmark printout (offline or server mode)."""
    found = {name: re.search(pattern, text) for name, pattern in _TEXT_PATTERNS.items()}
    if found["per_response"] is None:
        raise DDBenchError("malformed baseline: no 'Average Acceptance length' or 'Accept length' line")
    dataset = dataset or (found["dataset"].group(1) if found["dataset"] else None)
    if dataset is None:
        raise DDBenchError("the z-lab printout names no dataset; pass --dataset")
    histogram: tuple[float, ...] = ()
    if found["histogram"]:
        shares = [float(item.strip(" '\"%")) / 100 for item in found["histogram"].group(1).split(",") if item.strip()]
        histogram = tuple(shares[1:])  # z-lab index b = accept length b; ours i = tau - 1
    concurrency = int(found["concurrency"].group(1)) if found["concurrency"] else None
    return Side(
        key=(dataset, "dflash", None, None, None, None, temperature, concurrency),
        acceptance_length=None,
        acceptance_length_per_response=float(found["per_response"].group(1)),
        accept_histogram=histogram,
        depth_acceptance=(),
        speedup_vs_ar=float(found["speedup"].group(1)) if found["speedup"] else None,
        parity=None,
        outputs={},
        labels={},
    )


def match_cells(ours: Sequence[Side], baseline: Sequence[Side]) -> list[tuple[Side, Side]]:
    """Pairs (ours, baseline) whose keys agree; a baseline concurrency (the key's last field) of None matches any."""
    pairs = []
    for theirs in baseline:
        for side in ours:
            same = side.key[:-1] == theirs.key[:-1]
            if same and (theirs.key[-1] is None or theirs.key[-1] == side.key[-1]):
                pairs.append((side, theirs))
    return pairs


def compare_cells(ours: Side, theirs: Side, tolerances: Tolerances) -> CellDelta:
    accept = _accept_pair(ours, theirs)
    hist = _tv_distance(ours.accept_histogram, theirs.accept_histogram)
    depth = _depth_difference(ours.depth_acceptance, theirs.depth_acceptance)
    speedup = _pair(ours.speedup_vs_ar, theirs.speedup_vs_ar)
    parity = _pair(ours.parity, theirs.parity)
    match, divergences = _output_match(ours, theirs)
    accept_equal = _equal_output_accept(ours, theirs)
    failures = []
    if accept and _out_of(accept, tolerances.accept, tolerances.strict):
        failures.append("acceptance")
    if hist is not None and hist > tolerances.histogram:
        failures.append("histogram")
    if depth is not None and depth > tolerances.depth:
        failures.append("per-depth")
    if tolerances.check_speed and speedup and _out_of(speedup, tolerances.speedup, tolerances.strict):
        failures.append("speedup")
    if parity and parity[0] < parity[1] - tolerances.parity:
        failures.append("parity")
    if tolerances.min_match is not None and match is not None and match < tolerances.min_match:
        failures.append("match")
    if tolerances.accept_equal is not None and accept_equal is not None:
        if _out_of(accept_equal[:2], tolerances.accept_equal, tolerances.strict):
            failures.append("acceptance on equal outputs")
    return CellDelta(ours.key, accept, hist, depth, speedup, parity, match, accept_equal, divergences, tuple(failures))


def _accept_pair(ours: Side, theirs: Side) -> tuple[float, float] | None:
    pooled = _pair(ours.acceptance_length, theirs.acceptance_length)
    return pooled or _pair(ours.acceptance_length_per_response, theirs.acceptance_length_per_response)


def _pair(ours: float | None, theirs: float | None) -> tuple[float, float] | None:
    if ours is None or theirs is None or math.isnan(ours) or math.isnan(theirs):
        return None
    return ours, theirs


def _out_of(pair: tuple[float, float], relative: float, strict: bool) -> bool:
    """Below the baseline by more than `relative` of it (or above by as much, when strict)."""
    ours, theirs = pair
    margin = relative * abs(theirs)
    return ours < theirs - margin or (strict and ours > theirs + margin)


def _tv_distance(a: Sequence[float], b: Sequence[float]) -> float | None:
    if not a or not b:
        return None
    width = max(len(a), len(b))
    a, b = list(a) + [0.0] * (width - len(a)), list(b) + [0.0] * (width - len(b))
    return 0.5 * sum(abs(x - y) for x, y in zip(a, b))


def _depth_difference(a: Sequence[float | None], b: Sequence[float | None]) -> float | None:
    diffs = [abs(x - y) for x, y in zip(a, b) if x is not None and y is not None]
    return max(diffs) if diffs else None


def _output_match(ours: Side, theirs: Side) -> tuple[float | None, tuple[str, ...]]:
    """Fraction of shared prompts (by hash) with equal outputs, and where the first few differ."""
    shared = [key for key in ours.outputs if key in theirs.outputs]
    if not shared:
        return None, ()
    divergences = []
    for key in shared:
        divergence = metrics.first_divergence(ours.outputs[key], theirs.outputs[key])
        if divergence is not None:
            divergences.append((divergence.index, ours.labels.get(key, key[:8])))
    divergences.sort()
    return 1 - len(divergences) / len(shared), tuple(f"{label}@{index}" for index, label in divergences[:3])


def _equal_output_accept(ours: Side, theirs: Side) -> tuple[float, float, int] | None:
    """Pooled tau of each side over the shared prompts with identical outputs and known rounds."""
    equal = [
        key
        for key, output in ours.outputs.items()
        if theirs.outputs.get(key) == output and ours.accept_lens.get(key) and theirs.accept_lens.get(key)
    ]
    if not equal:
        return None

    def pooled(side: Side) -> float:
        lens = [tau for key in equal for tau in side.accept_lens[key]]
        return sum(lens) / len(lens)

    return pooled(ours), pooled(theirs), len(equal)


def compare(results_path: str | Path, baseline: Sequence[Side], tolerances: Tolerances) -> list[CellDelta]:
    """Every matched cell's deltas (DDBenchError when nothing matches)."""
    folder: RunFolder = find_run_folder(results_path)
    ours = sides_from_results(load_cells(folder))
    pairs = match_cells(ours, baseline)
    if not pairs:
        raise DDBenchError("no cell of the results matches a baseline cell (dataset, method, budget, temperature)")
    return [compare_cells(side, theirs, tolerances) for side, theirs in pairs]


def _key_label(key: tuple) -> str:
    dataset, method, budget, depth, draft_temperature, hold_chain, temperature, concurrency = key
    chain = "+chain" if hold_chain else ""
    label = method.upper() if method != "ddtree" else f"DDTree {budget_label(budget)}{chain}"
    if depth is not None:
        label += f" d{depth}"
    if draft_temperature not in (None, 1.0):
        label += f" dt{draft_temperature:g}"
    label += f" T={temperature:g}"
    return f"{dataset} {label}" + (f" c={concurrency}" if concurrency is not None else "")


def _delta(pair: tuple[float, float] | None, digits: int = 3) -> str:
    if pair is None:
        return "-"
    ours, theirs = pair
    return f"{ours:.{digits}f} vs {theirs:.{digits}f} ({ours - theirs:+.{digits}f})"


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _equal_cell(equal: tuple[float, float, int] | None) -> str:
    return "-" if equal is None else f"{_delta(equal[:2])} ({equal[2]})"


COMPARISON_COLUMNS = (
    ("cell", lambda d: _key_label(d.key)),
    ("tau (ours vs base)", lambda d: _delta(d.accept)),
    ("hist TV", lambda d: _value(d.histogram_distance)),
    ("depth max|d|", lambda d: _value(d.depth_difference)),
    ("speedup", lambda d: _delta(d.speedup, 2)),
    ("parity", lambda d: _delta(d.parity, 2)),
    ("match", lambda d: _value(d.match)),
    ("tau equal (n)", lambda d: _equal_cell(d.accept_equal)),
    ("first div", lambda d: ", ".join(d.divergences) or "-"),
    ("verdict", lambda d: "ok" if d.ok else "REGRESSION: " + ", ".join(d.failures)),
)


def comparison_table(deltas: Sequence[CellDelta]):
    """A Rich table of the matched cells."""
    from rich.table import Table

    table = Table(title="results vs baseline")
    for name, _ in COMPARISON_COLUMNS:
        table.add_column(name, justify="left" if name in ("cell", "first div", "verdict") else "right")
    for delta in deltas:
        style = None if delta.ok else "red"
        table.add_row(*(render(delta) for _, render in COMPARISON_COLUMNS), style=style)
    return table


def comparison_markdown(deltas: Sequence[CellDelta]) -> str:
    lines = ["| " + " | ".join(name for name, _ in COMPARISON_COLUMNS) + " |"]
    lines.append("|" + "---|" * len(COMPARISON_COLUMNS))
    for delta in deltas:
        lines.append("| " + " | ".join(render(delta).replace("|", "\\|") for _, render in COMPARISON_COLUMNS) + " |")
    return "\n".join(lines) + "\n"

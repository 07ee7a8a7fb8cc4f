"""Per-cell summaries of a results folder: `summary.csv` and the tables `ddbench report` prints.

Columns (acceptance conventions are ddtree_core.metrics'):
- acceptance_length: pooled over every round of every request, sum(tau) / rounds, tau counting the
  bonus token; acceptance_length_per_response: the mean of the per-request values (DDTree paper).
  Rounds come from each response's `spec_accept_histogram` (rounds with i accepted drafts at index i);
  where a server gives only `spec_verify_ct`, completion tokens / verify rounds. AR is 1 by definition.
- accept_histogram: the pooled histogram as fractions, index i = rounds with tau == i + 1.
- depth_acceptance: P(accept depth d | reached d - 1) for d = 1..; each round's tree is taken to reach
  its depth limit (--depths, else the block size - 1 the server reports), capped by the budget for
  DDTree, so a round whose tree stopped short counts as a miss at the missing depths.
- tokens_per_s: completion tokens of the cell / the cell's wall time (prefill and queueing included);
  speedup_vs_ar: tokens_per_s over the AR cell's at the same dataset, temperature, concurrency and repeat.
- parity (temperature 0, DFLASH and DDTree cells): fraction of requests whose output ids equal the AR
  cell's of the same repeat for the same prompt and turn (the AR cell at the same concurrency, else any).
- latency_*, ttft_*, itl_p50_s: client-side request latency percentiles (TTFT and inter-chunk gaps need
  --stream).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
from rich.console import Console
from rich.table import Table

from ddbench.config import Cell, DDBenchError, ddtree_hold_chain
from ddbench.results import CellResult, RequestRecord, RunFolder, write_atomic
from ddtree_core import metrics


@dataclass(frozen=True)
class CellSummary:
    """One row of summary.csv."""

    dataset: str
    method: str
    budget: int | None
    max_depth: int | None
    draft_temperature: float | None
    hold_chain: bool | None  # DDTree: trees held the drafter's rank-0 chain first; None for ar and dflash
    temperature: float
    concurrency: int
    repeat: int | None  # 1-based
    status: str  # done | failed | pending
    num_requests: int
    completion_tokens: int
    wall_s: float | None
    tokens_per_s: float | None
    speedup_vs_ar: float | None
    parity: float | None
    acceptance_length: float | None
    acceptance_length_per_response: float | None
    latency_p50_s: float | None
    latency_p90_s: float | None
    latency_p99_s: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    itl_p50_s: float | None
    accept_histogram: tuple[float, ...]  # fractions, index i = rounds with tau == i + 1
    depth_acceptance: tuple[float | None, ...]  # index d - 1 = depth d; None where undefined
    error: str | None
    cell_id: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "hold_chain", ddtree_hold_chain(self.method, self.hold_chain))

    @property
    def cell(self) -> Cell:
        return Cell.from_dict({f.name: getattr(self, f.name) for f in fields(self)})


def request_accept_lens(record: RequestRecord) -> list[int] | None:
    """The response's per-round tau values (order unknown), from its accept histogram; None if absent."""
    if record.method == "ar":
        return [1] * record.completion_tokens
    histogram = record.meta_info.get("spec_accept_histogram")
    if not histogram:
        return None
    return [drafts + 1 for drafts, count in enumerate(histogram) for _ in range(int(count))]


def summarize(results: Sequence[CellResult]) -> list[CellSummary]:
    """One CellSummary per cell, in the order given; speedup and parity against the AR cells of its repeat."""
    done = {(result.cell.key, result.cell.repeat): result for result in results if result.status == "done"}
    rows = []
    for result in results:
        if result.status != "done":
            rows.append(_empty_row(result))
            continue
        ar = _ar_counterpart(done, result.cell)
        rows.append(_summarize_cell(result, ar, _ar_outputs(done, result.cell)))
    return rows


def _summarize_cell(
    result: CellResult, ar: CellResult | None, ar_outputs: dict[tuple[int, int], tuple[int, ...]] | None
) -> CellSummary:
    records, cell = result.records, result.cell
    tokens = sum(record.completion_tokens for record in records)
    tokens_per_s = tokens / result.wall_s if result.wall_s else None
    ar_rate = _tokens_per_s(ar) if ar is not None else None
    accept = _acceptance(records, cell, result.server.get("block_size"))
    latencies = [record.latency_s for record in records]
    ttfts = [record.ttft_s for record in records if record.ttft_s is not None]
    gaps = [gap for record in records for gap in record.itl_s]
    return CellSummary(
        **cell.to_dict(),
        status="done",
        num_requests=len(records),
        completion_tokens=tokens,
        wall_s=result.wall_s,
        tokens_per_s=tokens_per_s,
        speedup_vs_ar=tokens_per_s / ar_rate if tokens_per_s and ar_rate else None,
        parity=_parity(records, ar_outputs) if cell.method != "ar" and cell.temperature == 0 and ar_outputs else None,
        acceptance_length=accept[0],
        acceptance_length_per_response=accept[1],
        latency_p50_s=_percentile(latencies, 50),
        latency_p90_s=_percentile(latencies, 90),
        latency_p99_s=_percentile(latencies, 99),
        ttft_p50_s=_percentile(ttfts, 50),
        ttft_p99_s=_percentile(ttfts, 99),
        itl_p50_s=_percentile(gaps, 50),
        accept_histogram=accept[2],
        depth_acceptance=accept[3],
        error=None,
        cell_id=cell.cell_id,
    )


def _acceptance(records: Sequence[RequestRecord], cell: Cell, block_size: int | None) -> tuple:
    """(pooled, per-response, histogram fractions, per-depth acceptance) of a cell's requests."""
    per_request = [request_accept_lens(record) for record in records]
    if any(taus is None for taus in per_request):
        rounds = sum(int(record.meta_info.get("spec_verify_ct") or 0) for record in records)
        tokens = sum(record.completion_tokens for record in records)
        pooled = tokens / rounds if rounds else None
        return pooled, None, (), ()
    taus = [tau for request in per_request for tau in request]
    if not taus:
        return None, None, (), ()
    histogram = metrics.accept_length_histogram(taus)
    depth = round_depth(cell, len(histogram) - 1, block_size)
    per_depth = metrics.depth_acceptance(taus, depth) if depth > 0 else ()
    return (
        metrics.acceptance_length(taus),
        metrics.acceptance_length_per_response(per_request),
        tuple(count / len(taus) for count in histogram),
        tuple(None if math.isnan(value) else value for value in per_depth),
    )


def round_depth(cell: Cell, deepest_accepted: int, block_size: int | None) -> int:
    """The depth every round's tree is taken to reach (see the module docstring)."""
    if cell.method == "ar":
        return 0
    if cell.max_depth is not None:
        limit = cell.max_depth
    else:
        limit = block_size - 1 if block_size else deepest_accepted
    if cell.method == "ddtree" and cell.budget is not None:
        limit = min(limit, cell.budget)
    return max(limit, deepest_accepted)


def _ar_key(cell: Cell | CellSummary) -> tuple:
    """The Cell.key of the AR setting at a cell's (or row's) dataset, temperature and concurrency."""
    return (cell.dataset, "ar", None, None, None, None, cell.temperature, cell.concurrency)


def _ar_counterpart(done: dict[tuple, CellResult], cell: Cell) -> CellResult | None:
    return done.get((_ar_key(cell), cell.repeat))


def _ar_outputs(done: dict[tuple, CellResult], cell: Cell) -> dict[tuple[int, int], tuple[int, ...]] | None:
    """AR output ids per (prompt, turn) in the cell's repeat: the AR cell at its concurrency first, then any other."""
    candidates = [
        result
        for result in done.values()
        if result.cell.method == "ar"
        and result.cell.dataset == cell.dataset
        and result.cell.temperature == cell.temperature
        and result.cell.repeat == cell.repeat
    ]
    if not candidates:
        return None
    candidates.sort(key=lambda result: result.cell.concurrency != cell.concurrency)
    outputs: dict[tuple[int, int], tuple[int, ...]] = {}
    for result in reversed(candidates):
        outputs.update({(record.prompt_index, record.turn): record.output_ids for record in result.records})
    return outputs


def _parity(records: Sequence[RequestRecord], ar_outputs: dict[tuple[int, int], tuple[int, ...]]) -> float | None:
    pairs = [(r.output_ids, ar_outputs.get((r.prompt_index, r.turn))) for r in records]
    pairs = [(ours, theirs) for ours, theirs in pairs if theirs is not None]
    return sum(ours == theirs for ours, theirs in pairs) / len(pairs) if pairs else None


def _tokens_per_s(result: CellResult) -> float | None:
    tokens = sum(record.completion_tokens for record in result.records)
    return tokens / result.wall_s if result.wall_s else None


def _percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def _empty_row(result: CellResult) -> CellSummary:
    blank = {f.name: None for f in fields(CellSummary)}
    blank.update(result.cell.to_dict())
    blank.update(status=result.status, num_requests=0, completion_tokens=0, error=result.error)
    blank.update(accept_histogram=(), depth_acceptance=(), cell_id=result.cell.cell_id)
    return CellSummary(**blank)


def summary_csv(rows: Sequence[CellSummary]) -> str:
    """CSV text; tuples as JSON lists, None as an empty field."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([f.name for f in fields(CellSummary)])
    for row in rows:
        writer.writerow([_csv_value(getattr(row, f.name)) for f in fields(CellSummary)])
    return out.getvalue()


def _csv_value(value) -> str:
    if value is None:
        return ""
    if isinstance(value, tuple):
        return json.dumps(list(value))
    return str(value)


def write_summary(folder: RunFolder, results: Sequence[CellResult]) -> list[CellSummary]:
    rows = summarize(results)
    write_atomic(folder.summary, summary_csv(rows))
    return rows


def read_summary(path) -> list[CellSummary]:
    """summary.csv back into CellSummary rows (raises DDBenchError on a malformed file); a file written
    before the hold_chain or repeat column reads as no chain held, repeat 1."""
    types = {f.name: f.type for f in fields(CellSummary)}
    try:
        with open(path, newline="") as stream:
            rows = [{"hold_chain": "", "repeat": "1", **row} for row in csv.DictReader(stream)]
        return [CellSummary(**{k: _parse(types[k], v) for k, v in row.items()}) for row in rows]
    except (KeyError, TypeError, ValueError) as error:
        raise DDBenchError(f"{path}: malformed summary ({error})") from error


def _parse(type_name: str, text: str):
    if text == "":
        return () if type_name.startswith("tuple") else None
    if type_name.startswith("tuple"):
        return tuple(json.loads(text))
    if type_name.startswith("bool"):
        return {"True": True, "False": False}[text]
    if type_name.startswith("int"):
        return int(text)
    if type_name.startswith("float"):
        return float(text)
    return text


def _fmt(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def setting(row: CellSummary) -> str:
    """A short label of a cell's method setting: AR, DFLASH, DDTree b64 (d7, dt0.6), DDTree b31+chain."""
    if row.method != "ddtree":
        return row.method.upper()
    extras = [f"d{row.max_depth}"] if row.max_depth is not None else []
    extras += [f"dt{row.draft_temperature:g}"] if row.draft_temperature not in (None, 1.0) else []
    chain = "+chain" if row.hold_chain else ""
    return f"DDTree b{row.budget}{chain}" + (f" ({', '.join(extras)})" if extras else "")


TABLE_COLUMNS = (
    ("setting", lambda r: setting(r)),
    ("T", lambda r: f"{r.temperature:g}"),
    ("conc", lambda r: str(r.concurrency)),
    ("n", lambda r: str(r.num_requests)),
    ("tau", lambda r: _fmt(r.acceptance_length)),
    ("tau/resp", lambda r: _fmt(r.acceptance_length_per_response)),
    ("tok/s", lambda r: _fmt(r.tokens_per_s, 1)),
    ("speedup", lambda r: _fmt(r.speedup_vs_ar)),
    ("parity", lambda r: _fmt(r.parity)),
    ("p50 s", lambda r: _fmt(r.latency_p50_s, 3)),
    ("p99 s", lambda r: _fmt(r.latency_p99_s, 3)),
    ("status", lambda r: r.status if r.error is None else f"{r.status}: {r.error[:60]}"),
)


def tables(rows: Sequence[CellSummary]) -> list[Table]:
    """One Rich table per dataset, the best-speedup DDTree row marked with *."""
    out = []
    for dataset in dict.fromkeys(row.dataset for row in rows):
        subset = [row for row in rows if row.dataset == dataset]
        best = best_budget_rows(subset)
        table = Table(title=f"{dataset}")
        for name, _ in TABLE_COLUMNS:
            table.add_column(name, justify="left" if name in ("setting", "status") else "right")
        for row in subset:
            cells = [render(row) for _, render in TABLE_COLUMNS]
            cells[0] += " *" if row in best else ""
            table.add_row(*cells)
        out.append(table)
    return out


def best_budget_rows(rows: Sequence[CellSummary]) -> list[CellSummary]:
    """Per (temperature, concurrency), the finished DDTree row with the highest speedup."""
    best: dict[tuple, CellSummary] = {}
    for row in rows:
        if row.method != "ddtree" or row.speedup_vs_ar is None:
            continue
        key = (row.dataset, row.temperature, row.concurrency)
        if key not in best or row.speedup_vs_ar > best[key].speedup_vs_ar:
            best[key] = row
    return list(best.values())


def markdown(rows: Sequence[CellSummary]) -> str:
    """The same tables as GitHub markdown."""
    parts = []
    for dataset in dict.fromkeys(row.dataset for row in rows):
        subset = [row for row in rows if row.dataset == dataset]
        best = best_budget_rows(subset)
        parts.append(f"### {dataset}\n")
        parts.append("| " + " | ".join(name for name, _ in TABLE_COLUMNS) + " |")
        parts.append("|" + "---|" * len(TABLE_COLUMNS))
        for row in subset:
            cells = [render(row).replace("|", "\\|") for _, render in TABLE_COLUMNS]
            cells[0] += " *" if row in best else ""
            parts.append("| " + " | ".join(cells) + " |")
        parts.append("")
    return "\n".join(parts)


def print_report(rows: Sequence[CellSummary], console: Console) -> None:
    for table in tables(rows):
        console.print(table)
    console.print("* best DDTree budget (highest speedup) per temperature and concurrency")

"""Per-cell summaries of a results folder: `summary.csv`, `summary_repeats.csv` and the tables `ddbench report`
prints.

Columns (acceptance conventions are ddtree_core.metrics'):
- budget: the DDTree node budget, or `auto` where the server chose each round's (`ddbench sweep --budgets
  auto`); empty for AR and DFLASH.
- acceptance_length: pooled over every round of every request, sum(tau) / rounds, tau counting the
  bonus token; acceptance_length_per_response: the mean of the per-request values (DDTree paper).
  Rounds come from each response's `spec_accept_histogram` (rounds with i accepted drafts at index i);
  where a server gives only `spec_verify_ct`, completion tokens / verify rounds. AR is 1 by definition.
- accept_histogram: the pooled histogram as fractions, index i = rounds with tau == i + 1.
- depth_acceptance: P(accept depth d | reached d - 1) for d = 1..; each round's tree is taken to reach
  its depth limit (--depths, else the block size - 1 the server reports), capped by a fixed budget for
  DDTree, so a round whose tree stopped short counts as a miss at the missing depths.
- tokens_per_s: completion tokens of the cell / the cell's wall time (prefill and queueing included);
  speedup_vs_ar: tokens_per_s over the AR cell's at the same dataset, temperature, concurrency and repeat.
- parity (temperature 0, DFLASH and DDTree cells): fraction of requests whose output ids equal the AR
  cell's of the same repeat for the same prompt and turn (the AR cell at the same concurrency, else any).
- latency_*, ttft_*, itl_p50_s: client-side request latency percentiles (TTFT and inter-chunk gaps need
  --stream).
- held_out: True when every prompt of the cell is in the held-out split no drafter of ours trains on
  (ddbench.heldout), False when one is not (numbers of the testbed drafter on it may be inflated by
  training prompts), empty for a cell not done or run before the column.

A sweep with repeats (`ddbench sweep --repeats N`) has one row per cell and repeat in summary.csv, and
one row per setting in summary_repeats.csv (`summarize_repeats`): the median over the repeats, the
spread of tokens/s and of the repeats' own speedups (min, max), and the speedup of the medians. Report,
compare, recommend and plot read such a folder through `over_repeats`: one median row per setting, never
the best of the repeats.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from statistics import mean, median, median_low

import numpy as np
from rich.console import Console
from rich.table import Table

from ddbench.config import Cell, DDBenchError, budget_label, ddtree_hold_chain, parse_budget
from ddbench.harness.results import CellResult, RequestRecord, RunFolder, write_atomic
from ddtree_core import metrics


@dataclass(frozen=True)
class CellSummary:
    """One row of summary.csv."""

    dataset: str
    method: str
    budget: int | str | None  # an int, or "auto" (config.AUTO_BUDGET); None for ar and dflash
    max_depth: int | None
    draft_temperature: float | None
    hold_chain: bool | None  # DDTree: trees held the drafter's rank-0 chain first; None for ar and dflash
    temperature: float
    concurrency: int
    repeat: int | None  # 1-based; None in a row over every repeat of its setting (`over_repeats`)
    status: str  # done | failed | pending
    held_out: bool | None  # every prompt of the cell was held out from drafter training (ddbench.heldout)
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
        held_out=result.held_out,
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
    if cell.method == "ddtree" and isinstance(cell.budget, int):  # auto: each round's budget, unknown here
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


@dataclass(frozen=True)
class RepeatSummary:
    """One setting over its repeats: a row of summary_repeats.csv and of the report's tables over repeats."""

    median: CellSummary  # the setting's median row (see `summarize_repeats`)
    repeats: int  # finished repeats
    tokens_per_s_min: float | None
    tokens_per_s_max: float | None
    speedup_min: float | None  # of the repeats' own speedups, each against the AR cell of its repeat
    speedup_max: float | None


# The numbers of a median row that are the median of the repeats' (speedup_vs_ar is the medians' ratio).
_MEDIAN_FIELDS = (
    "wall_s", "tokens_per_s", "parity", "acceptance_length", "acceptance_length_per_response", "latency_p50_s",
    "latency_p90_s", "latency_p99_s", "ttft_p50_s", "ttft_p99_s", "itl_p50_s",
)  # fmt: skip
_COUNT_FIELDS = ("num_requests", "completion_tokens")  # the lower median: a count of one of the repeats


def summarize_repeats(rows: Sequence[CellSummary]) -> list[RepeatSummary]:
    """One RepeatSummary per setting (Cell.key) of `rows` (summarize's), in order of first appearance.

    The median row of a setting measured in several repeats: each of `_MEDIAN_FIELDS` is the median over
    its finished repeats, the counts are the lower median, the tau histogram and the per-depth acceptance
    are averaged element by element (a median of shares would not sum to one), speedup_vs_ar is its median
    tokens/s over the AR setting's median tokens/s (same dataset, temperature, concurrency), repeat is None
    and cell_id is repeat 1's. A setting with one row keeps that row; one without a finished repeat keeps
    its first row's status and error.

    Example: AR at 10, 12, 11 tokens/s and DDTree b64 at 30, 20, 33 in repeats 1, 2, 3 give DDTree b64 a
    median of 30 tokens/s (min 20, max 33), speedup 30 / 11 = 2.73, and repeat speedups from 20 / 12 = 1.67
    to 3.0.
    """
    groups: dict[tuple, list[CellSummary]] = {}
    for row in rows:
        groups.setdefault(row.cell.key, []).append(row)
    medians = {key: group[0] if len(group) == 1 else _median_row(group) for key, group in groups.items()}
    summaries = []
    for key, group in groups.items():
        row = medians[key]
        if len(group) > 1:
            ar = medians.get(_ar_key(row))
            row = replace(row, speedup_vs_ar=_ratio(row.tokens_per_s, ar.tokens_per_s if ar else None))
        finished = [repeat for repeat in group if repeat.status == "done"]
        rates = _spread(repeat.tokens_per_s for repeat in finished)
        speedups = _spread(repeat.speedup_vs_ar for repeat in finished)
        summaries.append(RepeatSummary(row, len(finished), *rates, *speedups))
    return summaries


def over_repeats(rows: Sequence[CellSummary]) -> list[CellSummary]:
    """One row per setting, the median over its repeats (`summarize_repeats`); `rows` themselves when every
    setting was measured once."""
    return [summary.median for summary in summarize_repeats(rows)]


def has_repeats(rows: Sequence[CellSummary]) -> bool:
    """Whether `rows` hold a repeat after the first."""
    return any(row.repeat is not None and row.repeat > 1 for row in rows)


def _median_row(rows: Sequence[CellSummary]) -> CellSummary:
    """The repeats of one setting as one row, speedup_vs_ar aside (see `summarize_repeats`)."""
    finished = [row for row in rows if row.status == "done"]
    first = replace(finished[0] if finished else rows[0], repeat=None)
    first = replace(first, cell_id=first.cell.cell_id)  # row.cell of repeat None is repeat 1's
    if not finished:
        return first
    numbers = {name: _median([getattr(row, name) for row in finished]) for name in _MEDIAN_FIELDS}
    counts = {name: median_low([getattr(row, name) for row in finished]) for name in _COUNT_FIELDS}
    return replace(
        first,
        **numbers,
        **counts,
        accept_histogram=_mean_shares([row.accept_histogram for row in finished], missing=0.0),
        depth_acceptance=_mean_shares([row.depth_acceptance for row in finished], missing=None),
    )


def _spread(values: Iterable[float | None]) -> tuple[float | None, float | None]:
    """(min, max) of the known values; (None, None) if there are none."""
    known = [value for value in values if value is not None]
    return (min(known), max(known)) if known else (None, None)


def _median(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return median(known) if known else None


def _mean_shares(vectors: Sequence[tuple], missing: float | None) -> tuple:
    """Element-wise mean of share vectors, the shorter ones padded with `missing`; None entries are skipped."""
    width = max(map(len, vectors), default=0)
    columns = zip(*(list(vector) + [missing] * (width - len(vector)) for vector in vectors))
    known = [[value for value in column if value is not None] for column in columns]
    return tuple(mean(column) if column else None for column in known)


def _ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value and base else None


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


# The columns of summary_repeats.csv: a setting's fields, its finished repeats, then its median row's numbers
# with the spreads beside them.
REPEAT_CSV_COLUMNS = (
    "dataset", "method", "budget", "max_depth", "draft_temperature", "hold_chain", "temperature", "concurrency",
    "held_out", "repeats", "tokens_per_s", "tokens_per_s_min", "tokens_per_s_max", "speedup_vs_ar", "speedup_min",
    "speedup_max", "acceptance_length", "acceptance_length_per_response", "parity", "latency_p50_s", "status",
    "cell_id",
)  # fmt: skip


def repeats_csv(summaries: Sequence[RepeatSummary]) -> str:
    """summary_repeats.csv's text (REPEAT_CSV_COLUMNS); None as an empty field."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(REPEAT_CSV_COLUMNS)
    for summary in summaries:
        values = {f.name: getattr(summary.median, f.name) for f in fields(CellSummary)}
        values.update({f.name: getattr(summary, f.name) for f in fields(RepeatSummary) if f.name != "median"})
        writer.writerow([_csv_value(values[name]) for name in REPEAT_CSV_COLUMNS])
    return out.getvalue()


def write_summary(folder: RunFolder, results: Sequence[CellResult]) -> list[CellSummary]:
    """summary.csv, and summary_repeats.csv when the folder holds repeats."""
    rows = summarize(results)
    write_atomic(folder.summary, summary_csv(rows))
    if has_repeats(rows):
        write_atomic(folder.summary_repeats, repeats_csv(summarize_repeats(rows)))
    return rows


def read_summary(path) -> list[CellSummary]:
    """summary.csv back into CellSummary rows (raises DDBenchError on a malformed file); a file written
    before the hold_chain, repeat or held_out column reads as no chain held, repeat 1, held_out unknown."""
    types = {f.name: f.type for f in fields(CellSummary)}
    try:
        with open(path, newline="") as stream:
            rows = [{"hold_chain": "", "repeat": "1", "held_out": "", **row} for row in csv.DictReader(stream)]
        return [CellSummary(**{k: _parse(types[k], v, k) for k, v in row.items()}) for row in rows]
    except (KeyError, TypeError, ValueError) as error:
        raise DDBenchError(f"{path}: malformed summary ({error})") from error


def _parse(type_name: str, text: str, name: str = ""):
    if text == "":
        return () if type_name.startswith("tuple") else None
    if name == "budget":
        return parse_budget(text)
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
    """A short label of a cell's method setting: AR, DFLASH, DDTree b64 (d7, dt0.6), DDTree b31+chain, DDTree auto."""
    if row.method != "ddtree":
        return row.method.upper()
    extras = [f"d{row.max_depth}"] if row.max_depth is not None else []
    extras += [f"dt{row.draft_temperature:g}"] if row.draft_temperature not in (None, 1.0) else []
    chain = "+chain" if row.hold_chain else ""
    return f"DDTree {budget_label(row.budget)}{chain}" + (f" ({', '.join(extras)})" if extras else "")


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
    ("status", lambda r: _status(r)),
)
# The cell tables of a folder with repeats name each cell's repeat.
REPEATED_TABLE_COLUMNS = TABLE_COLUMNS[:3] + (("rep", lambda r: str(r.repeat)),) + TABLE_COLUMNS[3:]
# The tables over repeats: medians, the spreads of tokens/s and of the repeats' speedups.
REPEAT_COLUMNS = (
    ("setting", lambda s: setting(s.median)),
    ("T", lambda s: f"{s.median.temperature:g}"),
    ("conc", lambda s: str(s.median.concurrency)),
    ("reps", lambda s: str(s.repeats)),
    ("tau", lambda s: _fmt(s.median.acceptance_length)),
    ("tok/s", lambda s: _fmt(s.median.tokens_per_s, 1)),
    ("tok/s min-max", lambda s: _range_text(s.tokens_per_s_min, s.tokens_per_s_max, 1)),
    ("speedup", lambda s: _fmt(s.median.speedup_vs_ar)),
    ("speedup min-max", lambda s: _range_text(s.speedup_min, s.speedup_max, 2)),
    ("parity", lambda s: _fmt(s.median.parity)),
    ("status", lambda s: _status(s.median)),
)


def _status(row: CellSummary) -> str:
    return row.status if row.error is None else f"{row.status}: {row.error[:60]}"


def _range_text(low: float | None, high: float | None, digits: int) -> str:
    return "-" if low is None else f"{low:.{digits}f}-{high:.{digits}f}"


def tables(rows: Sequence[CellSummary]) -> list[Table]:
    """The report's tables (`views`) as Rich tables."""
    out = []
    for title, columns, lines in views(rows):
        table = Table(title=title)
        for name, _ in columns:
            table.add_column(name, justify="left" if name in ("setting", "status") else "right")
        for cells in lines:
            table.add_row(*cells)
        out.append(table)
    return out


def markdown(rows: Sequence[CellSummary]) -> str:
    """The same tables as GitHub markdown."""
    parts = []
    for title, columns, lines in views(rows):
        parts.append(f"### {title}\n")
        parts.append("| " + " | ".join(name for name, _ in columns) + " |")
        parts.append("|" + "---|" * len(columns))
        parts += ["| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |" for cells in lines]
        parts.append("")
    return "\n".join(parts)


def views(rows: Sequence[CellSummary]) -> list[tuple[str, tuple, list[list[str]]]]:
    """(title, columns, rendered rows) of each table: one per dataset of its cells, the best DDTree row per
    temperature and concurrency (and repeat) starred; with repeats then one per dataset of its settings over
    their repeats (`summarize_repeats`), the best median speedup starred."""
    if not has_repeats(rows):
        return [(dataset, TABLE_COLUMNS, lines) for dataset, lines in _per_dataset(rows, rows, TABLE_COLUMNS)]
    summaries = summarize_repeats(rows)
    cells = _per_dataset(rows, rows, REPEATED_TABLE_COLUMNS)
    medians = _per_dataset(summaries, [summary.median for summary in summaries], REPEAT_COLUMNS)
    return [(dataset, REPEATED_TABLE_COLUMNS, lines) for dataset, lines in cells] + [
        (f"{dataset}: median over repeats", REPEAT_COLUMNS, lines) for dataset, lines in medians
    ]


def _per_dataset(items: Sequence, rows: Sequence[CellSummary], columns: tuple) -> list[tuple[str, list[list[str]]]]:
    """Per dataset, its `items` rendered by `columns`; rows[i] is items[i]'s summary row, which says the dataset
    and whether the item is starred (`best_budget_rows`)."""
    out = []
    for dataset in dict.fromkeys(row.dataset for row in rows):
        pairs = [(item, row) for item, row in zip(items, rows) if row.dataset == dataset]
        best = best_budget_rows([row for _, row in pairs])
        lines = []
        for item, row in pairs:
            cells = [render(item) for _, render in columns]
            cells[0] += " *" if row in best else ""
            lines.append(cells)
        out.append((dataset, lines))
    return out


def best_budget_rows(rows: Sequence[CellSummary]) -> list[CellSummary]:
    """Per (dataset, temperature, concurrency, repeat), the finished DDTree row with the highest speedup."""
    best: dict[tuple, CellSummary] = {}
    for row in rows:
        if row.method != "ddtree" or row.speedup_vs_ar is None:
            continue
        key = (row.dataset, row.temperature, row.concurrency, row.repeat)
        if key not in best or row.speedup_vs_ar > best[key].speedup_vs_ar:
            best[key] = row
    return list(best.values())


def print_report(rows: Sequence[CellSummary], console: Console) -> None:
    for table in tables(rows):
        console.print(table)
    note = " (in each repeat; over repeats: by the speedup of the medians)" if has_repeats(rows) else ""
    console.print(f"* best DDTree budget (highest speedup) per temperature and concurrency{note}")

"""PNG plots of a results folder (matplotlib, Agg backend): one file per view, one panel per dataset.

- acceptance_vs_budget.png: DDTree tau vs node budget, DFLASH and AR as horizontal lines (a budget-auto
  cell too, dash-dotted);
- speedup_vs_budget.png: DDTree speedup vs budget, DFLASH as a line, the best budget starred;
- throughput_vs_concurrency.png: tokens/s vs concurrency per method setting;
- latency_cdf.png: CDF of request latency per method setting (the requests of all its repeats);
- accept_histograms.png: the tau histogram per method setting;
- depth_acceptance.png: P(accept depth d | reached d - 1) per method setting;
  (these two are the drafter's and the tree's, not the load's: each shows only the lowest concurrency of
  every setting and temperature, which keeps a large sweep's panels readable);
- acceptance_vs_depth_limit.png, speedup_vs_depth_limit.png (sweeps of --depths): DDTree tau / speedup vs
  the depth limit ("auto" last), one line per budget, drafter temperature, temperature and concurrency
  (dashed: trees that hold the chain), DFLASH as dotted lines;
- cost.png (`plot_cost`, a `ddbench model cost` folder): verify time vs tree width per batch size, with floors.

DDTree lines are drawn per (temperature, concurrency, depth limit, draft temperature, held chain) series.
A folder with repeats is drawn from one median row per setting (`ddbench.harness.report.over_repeats`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ddbench.config import AUTO_BUDGET, Cell, budget_label, largest_budget  # noqa: E402
from ddbench.harness.report import CellSummary, best_budget_rows, setting  # noqa: E402
from ddbench.harness.results import CellResult  # noqa: E402


def plot_all(rows: Sequence[CellSummary], results: Sequence[CellResult], out_dir: Path) -> list[Path]:
    """Write every view that has data into out_dir; returns the files written."""
    done = [row for row in rows if row.status == "done"]
    views: list[tuple[str, Callable]] = [
        ("acceptance_vs_budget.png", lambda ax, d: _versus_budget(ax, d, "acceptance_length", "acceptance length")),
        ("speedup_vs_budget.png", lambda ax, d: _versus_budget(ax, d, "speedup_vs_ar", "speedup vs AR", star=True)),
        ("throughput_vs_concurrency.png", _throughput),
        ("accept_histograms.png", _histograms),
        ("depth_acceptance.png", _depth_curves),
        ("acceptance_vs_depth_limit.png", lambda ax, d: _versus_depth_limit(ax, d, "acceptance_length", "tau")),
        ("speedup_vs_depth_limit.png", lambda ax, d: _versus_depth_limit(ax, d, "speedup_vs_ar", "speedup vs AR")),
    ]
    written = []
    for name, draw in views:
        if _draw_per_dataset(done, draw, out_dir / name):
            written.append(out_dir / name)
    finished = [result for result in results if result.status == "done"]
    if _draw_latency(finished, out_dir / "latency_cdf.png"):
        written.append(out_dir / "latency_cdf.png")
    return written


def _draw_per_dataset(rows: Sequence[CellSummary], draw: Callable, path: Path) -> bool:
    datasets = list(dict.fromkeys(row.dataset for row in rows))
    if not datasets:
        return False
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 4.2), squeeze=False)
    drawn = False
    for ax, dataset in zip(axes[0], datasets):
        drawn |= bool(draw(ax, [row for row in rows if row.dataset == dataset]))
        ax.set_title(dataset)
    if drawn:
        _legend_below(fig, axes[0])
        _save(fig, path)
    plt.close(fig)
    return drawn


def _series(row: CellSummary) -> str:
    parts = [f"T={row.temperature:g}", f"c={row.concurrency}"]
    if row.max_depth is not None:
        parts.append(f"d={row.max_depth}")
    if row.draft_temperature not in (None, 1.0):
        parts.append(f"dt={row.draft_temperature:g}")
    return ", ".join(parts)


def _versus_budget(ax, rows: Sequence[CellSummary], field: str, label: str, star: bool = False) -> bool:
    """DDTree `field` against the fixed budgets, per series; a series' budget-auto cell is a dash-dot line
    (starred, when best, at the largest fixed budget: the one auto chose under)."""
    trees = [row for row in rows if row.method == "ddtree" and getattr(row, field) is not None]
    tree_series = lambda row: (_series(row), bool(row.hold_chain))  # noqa: E731
    with_baselines = set()  # AR and DFLASH lines once per series name, in the colour of its first DDTree line
    for index, (name, held) in enumerate(dict.fromkeys(map(tree_series, trees))):
        mine = [row for row in trees if tree_series(row) == (name, held)]
        points = sorted((row.budget, getattr(row, field)) for row in mine if row.budget != AUTO_BUDGET)
        color, tree = f"C{index}", f"DDTree{'+chain' if held else ''}"
        if points:
            ax.plot(*zip(*points), marker="o", color=color, label=f"{tree} {name}")
        for row in mine:
            if row.budget == AUTO_BUDGET:
                ax.axhline(getattr(row, field), color=color, linestyle="-.", label=f"{tree} {AUTO_BUDGET} {name}")
        if name in with_baselines:
            continue
        with_baselines.add(name)
        for row in rows:
            if row.method in ("ar", "dflash") and getattr(row, field) is not None and _series(row) == name:
                style = "--" if row.method == "dflash" else ":"
                ax.axhline(getattr(row, field), color=color, linestyle=style, label=f"{row.method.upper()} {name}")
    if star:
        largest = largest_budget([row.budget for row in trees])
        for row in best_budget_rows(trees):
            x = largest if row.budget == AUTO_BUDGET else row.budget
            ax.plot([x], [row.speedup_vs_ar], marker="*", markersize=16, color="gold", markeredgecolor="k")
    if trees:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("node budget")
        ax.set_ylabel(label)
    return bool(trees)


def _versus_depth_limit(ax, rows: Sequence[CellSummary], field: str, label: str) -> bool:
    """DDTree `field` against the depth limit, drawn when the rows hold two limits or more (None, the
    drafter's whole block, is "auto", placed last)."""
    trees = [row for row in rows if row.method == "ddtree" and getattr(row, field) is not None]
    limits = sorted({row.max_depth for row in trees if row.max_depth is not None})
    limits += [None] if any(row.max_depth is None for row in trees) else []
    if len(limits) < 2:
        return False
    place = {limit: index for index, limit in enumerate(limits)}
    name = lambda row: (  # noqa: E731
        f"{budget_label(row.budget)} dt={1.0 if row.draft_temperature is None else row.draft_temperature:g} "
        f"T={row.temperature:g} c={row.concurrency}"
    )
    colors: dict[str, str] = {}
    for series, held in dict.fromkeys((name(row), bool(row.hold_chain)) for row in trees):
        points = sorted((place[row.max_depth], getattr(row, field)) for row in trees
                        if (name(row), bool(row.hold_chain)) == (series, held))  # fmt: skip
        color = colors.setdefault(series, f"C{len(colors)}")
        ax.plot(*zip(*points), marker="o", color=color, linestyle="--" if held else "-",
                label=f"DDTree{'+chain' if held else ''} {series}")  # fmt: skip
    for row in rows:
        if row.method == "dflash" and getattr(row, field) is not None:
            ax.axhline(getattr(row, field), color="k", linestyle=":",
                       label=f"DFLASH T={row.temperature:g} c={row.concurrency}")  # fmt: skip
    ax.set_xticks(range(len(limits)), ["auto" if limit is None else str(limit) for limit in limits])
    ax.set_xlabel("depth limit")
    ax.set_ylabel(label)
    return True


def _throughput(ax, rows: Sequence[CellSummary]) -> bool:
    rated = [row for row in rows if row.tokens_per_s is not None]
    for name in dict.fromkeys(f"{setting(row)} T={row.temperature:g}" for row in rated):
        points = sorted(
            (row.concurrency, row.tokens_per_s) for row in rated if f"{setting(row)} T={row.temperature:g}" == name
        )
        ax.plot(*zip(*points), marker="o", label=name)
    if rated:
        ax.set_xlabel("concurrency")
        ax.set_ylabel("output tokens / s")
    return bool(rated)


def _lowest_concurrency(rows: Sequence[CellSummary]) -> list[CellSummary]:
    """The rows at the lowest concurrency of their (setting, temperature, depth limit, draft temperature)."""
    key = lambda row: (setting(row), row.temperature, row.max_depth, row.draft_temperature)  # noqa: E731
    lowest: dict[tuple, int] = {}
    for row in rows:
        lowest[key(row)] = min(lowest.get(key(row), row.concurrency), row.concurrency)
    return [row for row in rows if row.concurrency == lowest[key(row)]]


def _histograms(ax, rows: Sequence[CellSummary]) -> bool:
    shown = _lowest_concurrency([row for row in rows if row.accept_histogram])
    width = 0.8 / max(len(shown), 1)
    for index, row in enumerate(shown):
        taus = np.arange(1, len(row.accept_histogram) + 1) + index * width - 0.4
        ax.bar(taus, row.accept_histogram, width=width, label=f"{setting(row)} {_series(row)}", align="edge")
    if shown:
        ax.set_xlabel("accept length tau (bonus included)")
        ax.set_ylabel("share of rounds")
    return bool(shown)


def _depth_curves(ax, rows: Sequence[CellSummary]) -> bool:
    shown = _lowest_concurrency([row for row in rows if any(value is not None for value in row.depth_acceptance)])
    for row in shown:
        depths = [d + 1 for d, value in enumerate(row.depth_acceptance) if value is not None]
        values = [value for value in row.depth_acceptance if value is not None]
        ax.plot(depths, values, marker=".", label=f"{setting(row)} {_series(row)}")
    if shown:
        ax.set_xlabel("depth d")
        ax.set_ylabel("P(accept d | reached d-1)")
        ax.set_ylim(0, 1.02)
    return bool(shown)


def _draw_latency(results: Sequence[CellResult], path: Path) -> bool:
    datasets = list(dict.fromkeys(result.cell.dataset for result in results))
    if not datasets:
        return False
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 4.2), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        by_setting: dict[Cell, list[float]] = {}  # repeat 1's cell: the latencies of every repeat
        for result in (r for r in results if r.cell.dataset == dataset and r.records):
            latencies = by_setting.setdefault(replace(result.cell, repeat=1), [])
            latencies.extend(record.latency_s for record in result.records)
        for cell, latencies in by_setting.items():
            latencies = np.sort(latencies)
            shares = np.arange(1, len(latencies) + 1) / len(latencies)
            chain = "+chain" if cell.hold_chain else ""
            budget = "" if cell.budget is None else f" {budget_label(cell.budget)}"
            label = f"{cell.method}{budget}{chain} T={cell.temperature:g} c={cell.concurrency}"
            ax.step(latencies, shares, where="post", label=label)
        ax.set_title(dataset)
        ax.set_xlabel("request latency (s)")
        ax.set_ylabel("CDF")
    _legend_below(fig, axes[0])
    _save(fig, path)
    plt.close(fig)
    return True


def plot_cost(cells_csv: Path, out_dir: Path) -> Path:
    """cost.png of a `ddbench model cost` folder: verify ms vs tokens per request (log2), one line per batch size,
    its floor dashed and its knee (the largest width within 10 % of one token) ringed."""
    import csv

    by_batch: dict[int, list[dict]] = {}
    for row in csv.DictReader(open(cells_csv)):
        if row.get("time_ms"):
            by_batch.setdefault(int(row["batch"]), []).append(row)
    if not by_batch:
        raise ValueError(f"{cells_csv} holds no timed cells")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for batch, rows in sorted(by_batch.items()):
        rows.sort(key=lambda r: int(r["width"]))
        widths = [int(r["width"]) for r in rows]
        line = ax.plot(widths, [float(r["time_ms"]) for r in rows], marker="o", ms=3, label=f"batch {batch}")[0]
        ax.plot(widths, [float(r["floor_ms"]) for r in rows], ls="--", lw=0.8, color=line.get_color())
        knees = [r for r in rows if r.get("knee") == "True"]
        if knees:
            ax.plot([int(knees[-1]["width"])], [float(knees[-1]["time_ms"])], "o", mfc="none", ms=9,
                    color=line.get_color())  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("verify tokens per request (tree nodes + 1)")
    ax.set_ylabel("verify step (ms); dashed: floor")
    ax.legend(fontsize=7)
    path = out_dir / "cost.png"
    _save(fig, path)
    plt.close(fig)
    return path


def _legend_below(fig, axes) -> None:
    """One legend for all panels (each series once), under them, the figure taller by its rows: a legend
    inside a panel hides the data once a sweep has more than a few series."""
    entries: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    if not entries:
        return
    width, height = fig.get_size_inches()
    # as many columns as fit the figure's width at 7 points: about 4 points a character and 30 for the handle
    fit = int(width * 72 // (4 * max(map(len, entries)) + 30))
    columns = max(1, min(len(entries), 3 * len(axes), fit))
    rows = -(-len(entries) // columns)
    extra = 0.22 * rows + 0.2
    fig.set_size_inches(width, height + extra)
    fig.legend(list(entries.values()), list(entries), loc="lower center", ncol=columns, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, extra / (height + extra), 1, 1))


def _save(fig, path: Path) -> None:
    """Save through a temporary file and a rename, so a reader never sees half a PNG."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not fig.legends:  # _legend_below laid the figure out around its legend
        fig.tight_layout()
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".png")
    os.close(handle)
    try:
        fig.savefig(temporary, dpi=120)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise

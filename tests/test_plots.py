"""ddbench.harness.plots: the drafter's views (tau histograms, per-depth acceptance) keep each setting's lowest
concurrency, so a large sweep's panels stay readable; the depth-limit views appear for sweeps of --depths."""

import dataclasses

import matplotlib.pyplot as plt

from ddbench.harness import plots
from ddbench.harness.report import CellSummary


def summary(method, budget, concurrency, temperature=0.0, max_depth=None, held=False, tau=None):
    blank = {field.name: None for field in dataclasses.fields(CellSummary)}
    knobs = f"-d{max_depth}-{held}" if max_depth or held else ""
    blank.update(
        dataset="gsm8k", method=method, budget=budget, draft_temperature=1.0 if method == "ddtree" else None,
        hold_chain=held if method == "ddtree" else None, temperature=temperature, concurrency=concurrency,
        status="done", num_requests=2, completion_tokens=10, accept_histogram=(0.5, 0.5),
        depth_acceptance=(0.9, 0.5), max_depth=max_depth, acceptance_length=tau,
        cell_id=f"{method}{budget}-c{concurrency}-t{temperature}{knobs}",
    )  # fmt: skip
    return CellSummary(**blank)


def test_drafter_views_keep_the_lowest_concurrency_of_each_setting():
    rows = [summary(m, b, c, t) for m, b in (("dflash", None), ("ddtree", 15), ("ddtree", 63))
            for c in (16, 4, 32) for t in (0.0, 1.0)]  # fmt: skip
    kept = plots._lowest_concurrency(rows)
    assert sorted(r.cell_id for r in kept) == sorted(
        f"{m}{b}-c4-t{t}" for m, b in (("dflash", None), ("ddtree", 15), ("ddtree", 63)) for t in (0.0, 1.0)
    )
    fig, ax = plt.subplots()
    assert plots._depth_curves(ax, rows) and len(ax.get_lines()) == 6
    plt.close(fig)


def test_depth_limit_views_draw_each_setting_against_the_limits_auto_last(tmp_path):
    rows = [summary("ddtree", 63, 1, max_depth=d, held=h, tau=2.0 + (d or 16) / 10 + h)
            for d in (None, 10, 3) for h in (False, True)] + [summary("dflash", None, 1, tau=2.1)]  # fmt: skip
    fig, ax = plt.subplots()
    assert plots._versus_depth_limit(ax, rows, "acceptance_length", "tau")
    lines = ax.get_lines()
    assert [line.get_label() for line in lines[:2]] == ["DDTree b63 dt=1 T=0 c=1", "DDTree+chain b63 dt=1 T=0 c=1"]
    assert list(lines[0].get_xdata()) == [0, 1, 2] and list(lines[0].get_ydata()) == [2.3, 3.0, 3.6]
    assert [label.get_text() for label in ax.get_xticklabels()] == ["3", "10", "auto"]
    assert lines[2].get_label() == "DFLASH T=0 c=1" and list(lines[2].get_ydata()) == [2.1, 2.1]
    plt.close(fig)
    one_limit = [summary("ddtree", b, 1, tau=2.0) for b in (15, 63)]
    fig, ax = plt.subplots()
    assert not plots._versus_depth_limit(ax, one_limit, "acceptance_length", "tau")
    plt.close(fig)
    written = plots.plot_all(rows, [], tmp_path)
    assert tmp_path / "acceptance_vs_depth_limit.png" in written
    assert plots.plot_all(one_limit, [], tmp_path / "b") == [tmp_path / "b" / "acceptance_vs_budget.png",
                                                            tmp_path / "b" / "accept_histograms.png",
                                                            tmp_path / "b" / "depth_acceptance.png"]  # fmt: skip


def test_a_budget_auto_cell_is_a_line_across_the_fixed_budgets_and_starred_at_the_largest():
    rows = [summary("ddtree", b, 1, tau=t) for b, t in ((15, 2.5), ("auto", 3.5), (63, 3.0))]
    rows = [dataclasses.replace(row, speedup_vs_ar=row.acceptance_length) for row in rows]
    fig, ax = plt.subplots()
    assert plots._versus_budget(ax, rows, "speedup_vs_ar", "speedup vs AR", star=True)
    tree, auto, star = ax.get_lines()
    assert tree.get_label() == "DDTree T=0, c=1" and list(tree.get_xdata()) == [15, 63]
    assert auto.get_label() == "DDTree auto T=0, c=1" and list(auto.get_ydata()) == [3.5, 3.5]
    assert (list(star.get_xdata()), list(star.get_ydata())) == ([63], [3.5])
    plt.close(fig)
    fig, ax = plt.subplots()
    assert plots._versus_budget(ax, rows[1:2], "acceptance_length", "tau")  # auto alone: its line only
    assert [line.get_label() for line in ax.get_lines()] == ["DDTree auto T=0, c=1"]
    plt.close(fig)

"""ddbench.plots: the drafter's views (tau histograms, per-depth acceptance) keep each setting's lowest
concurrency, so a large sweep's panels stay readable."""

import dataclasses

import matplotlib.pyplot as plt

from ddbench import plots
from ddbench.report import CellSummary


def summary(method, budget, concurrency, temperature=0.0):
    blank = {field.name: None for field in dataclasses.fields(CellSummary)}
    blank.update(
        dataset="gsm8k", method=method, budget=budget, draft_temperature=1.0 if method == "ddtree" else None,
        hold_chain=False if method == "ddtree" else None, temperature=temperature, concurrency=concurrency,
        status="done", num_requests=2, completion_tokens=10, accept_histogram=(0.5, 0.5),
        depth_acceptance=(0.9, 0.5), cell_id=f"{method}{budget}-c{concurrency}-t{temperature}",
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

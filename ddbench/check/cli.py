"""`ddbench check`: is an engine's output what it should be? Greedy divergences from AR and the target's logit
gap there (`diverge`), the engine's rounds recomputed by the reference engine (`replay`), and a chi-square test
of sampled tokens against the target-only server's (`sampled`), and a serving load with faults after which the
server must still hold (`load`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ddbench.commands import Tool, console, fail, lazy_group
from ddbench.config import DDBenchError

TOOLS = {
    "replay": Tool(
        "ddbench.check.replay:main",
        "Replay an engine's greedy responses with the reference engine; compare acceptance on the same text.",
    ),
    "load": Tool(
        "ddbench.check.load:main",
        "A load with aborts, disconnects and bad input; then no KV leaked, the same outputs, /metrics consistent.",
    ),
    "sampled": Tool(
        "ddbench.check.sampled:main",
        "Is a speculative server's sampled output distributed as the target's own? A two-sample chi-square test.",
    ),
}
app = typer.Typer(
    help="Is the output right? Divergences from AR, rounds replayed, sampling tested, a load with faults survived.",
    no_args_is_help=True,
    cls=lazy_group(TOOLS),
)


@app.command()
def diverge(
    results: Annotated[Path, typer.Argument(help="Results folder written by `ddbench sweep` (with AR cells).")],
    model: Annotated[str | None, typer.Option(help="The run's target model folder (default: the manifest's).")] = None,
    data_dir: Annotated[str | None, typer.Option(help="Offline dataset mirror (default: the manifest's).")] = None,
    tie_threshold: Annotated[
        float, typer.Option(help="Largest |logit(AR token) - logit(other token)| called a near-tie.")
    ] = 0.5,
    dtype: Annotated[str, typer.Option(help="dtype of the offline target run: float32 | bfloat16.")] = "float32",
    device: Annotated[str, typer.Option(help="Device of the offline target run: cpu | cuda.")] = "cpu",
    out: Annotated[Path | None, typer.Option(help="Folder for divergences.csv/.md (default: RESULTS).")] = None,
) -> None:
    """First divergences of greedy outputs from AR and the target's logit gap there; exit 1 if one is no near-tie."""
    from rich.progress import Progress
    from rich.table import Table

    from ddbench.check import diverge as analysis

    try:
        with Progress(console=console(stderr=True), transient=True) as bar:

            def progress(total: int):
                task = bar.add_task("target logits at divergences", total=total)
                return lambda: bar.advance(task)

            rows, cells = analysis.run(
                results, model=model, data_dir=data_dir, tie_threshold=tie_threshold, dtype=dtype, device=device,
                progress=progress,
            )  # fmt: skip
        analysis.write(out or results, rows, cells, tie_threshold)
    except DDBenchError as error:
        raise fail(str(error)) from None
    table = Table("cell", "compared", "identical", "near-tie", "not a tie", "max |gap|", "history differs")
    for cell in cells:
        gap = "-" if cell.max_abs_gap is None else f"{cell.max_abs_gap:.3f}"
        row = (cell.compared, cell.identical, cell.near_ties, cell.not_ties)
        table.add_row(cell.cell_id, *map(str, row), gap, str(cell.history_differs))
    console().print(table)
    bad = sum(cell.not_ties for cell in cells)
    console().print(f"{len(rows)} divergences, {bad} not near-ties (threshold {tie_threshold:g}); {out or results}")
    if bad:
        raise typer.Exit(code=1)

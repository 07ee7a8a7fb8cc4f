"""Progress of a sweep on the console: rich bars on a terminal, a line per finished cell elsewhere."""

from __future__ import annotations

import datetime
import time

from rich.console import Console


class RichProgress:
    """Rich progress bars for a sweep: one for the cells, one per cell running; also a plain counter. The bars
    start with the first of them, so that an error before any (one line, exit 2) is all that is printed. Off a
    terminal (output piped or logged), where bars draw nothing until the end, each finished cell prints a line:
    "cell 2/5 done: gsm8k__dflash__t0__c1 (0:01:12 in all)"."""

    def __init__(self, console: Console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        self.bars = Progress(*columns, console=console, transient=False)
        self.cells = None
        self.running: dict = {}
        self.finished, self.planned, self.started = 0, 0, time.monotonic()

    def __enter__(self) -> RichProgress:
        return self

    def __exit__(self, *exc_info) -> None:
        if self.bars.live.is_started:  # Progress.stop prints a line off a terminal, started or not
            self.bars.stop()

    def counter(self, description: str, total: int):
        self.bars.start()
        task = self.bars.add_task(description, total=total)
        return lambda: self.bars.advance(task)

    def cells_planned(self, num_cells: int) -> None:
        self.bars.start()
        self.cells = self.bars.add_task("cells", total=num_cells)
        self.planned = num_cells

    def cell_started(self, cell, num_requests: int) -> None:
        self.running[cell.cell_id] = self.bars.add_task(f"  {cell.cell_id}", total=num_requests)

    def request_done(self, cell) -> None:
        self.bars.advance(self.running[cell.cell_id])

    def cell_finished(self, cell, error: str | None) -> None:
        if self.cells is not None:
            self.bars.advance(self.cells)
        task = self.running.pop(cell.cell_id, None)
        if task is not None:
            self.bars.remove_task(task)
        if error is not None:
            self.bars.console.print(f"[red]failed[/red] {cell.cell_id}: {error.splitlines()[0][:200]}")
        self.finished += 1
        if not self.bars.console.is_terminal:
            elapsed = datetime.timedelta(seconds=round(time.monotonic() - self.started))
            status = "failed" if error is not None else "done"
            line = f"cell {self.finished}/{self.planned or '?'} {status}: {cell.cell_id} ({elapsed} in all)"
            self.bars.console.print(line, markup=False, highlight=False)

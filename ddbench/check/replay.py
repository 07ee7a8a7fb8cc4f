"""Acceptance on the same text: an engine's greedy DFLASH / DDTree responses replayed by the reference engine.

    ddbench check replay results/sglang/h200-2026-11-29/match --model ~/.cache/ddbench/SmolLM2-135M-Instruct \
        --data-dir ../shared/data

Two lossless engines part at near-ties (bf16 against float32, other kernels) and then accept on different
text, so their cells' mean acceptance differs by more than either engine's error. A greedy round's acceptance
is a function of the text alone: from the bonus token at position p, the drafter (conditioned on the target's
features of the committed prefix) proposes the block, and the round accepts the longest tree path (DFLASH:
the leading argmax matches) that spells the output's next tokens, plus the bonus; the next round starts
after them. So each response's rounds can be recomputed by the reference engine's own drafter, target and
tree build (CPU, float32) on the response's own output, with no sampling and no serving (ddbench.model.strength's
round rules, computed at the positions the replay reaches).

Per response: rounds (engine: its acceptance histogram; replay: the recomputed rounds) and whether the two
histograms agree (the engine counts its last round whole, the replay cuts it at the output's end:
`strength.same_but_last`). Per cell: tau = output tokens / rounds for both on the same tokens, so their
ratio is the ratio of round counts. Exit 1 when a cell's tau differs by more than --tol (relative).
Temperature-0 cells only; held-chain cells replay the held tree.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import torch
import typer

from ddbench.config import AUTO_BUDGET
from ddbench.model.strength import greedy_rounds, open_run, same_but_last

COLUMNS = ("cell_id", "method", "budget", "hold_chain", "responses", "same_histogram", "tokens", "engine_rounds",
           "replay_rounds", "engine_tau", "replay_tau", "relative_diff")  # fmt: skip


@dataclass(frozen=True)
class Replayed:
    rounds: list[int]  # acceptance length of each replayed round, the last cut at the output's end


def replay(prompt: list[int], output: list[int], budget: int | None, hold_chain: bool, target, drafter) -> Replayed:
    """The rounds the reference engine's drafter and tree give on prompt + output (budget None: DFLASH's chain)."""
    from ddtree_core.reference.decode import _features
    from ddtree_core.reference.dflash import DFlashProposer

    ids = list(prompt) + list(output)
    with torch.inference_mode():
        out = target(torch.tensor([ids]), output_hidden_states=True)
        features = _features(out.hidden_states, drafter.target_layer_ids)

        def draft(p: int) -> torch.Tensor:
            proposer = DFlashProposer(drafter, target)
            proposer.add_context(features[:, :p])
            return torch.log_softmax(proposer.propose(ids[: p + 1])[0].float(), dim=-1)

        return Replayed(greedy_rounds(ids, len(prompt), draft, budget, hold_chain=hold_chain))


def engine_rounds(meta_info: dict) -> int | None:
    histogram = meta_info.get("spec_accept_histogram")
    return int(sum(histogram)) if histogram else None


def run(
    results: Path,
    model: str,
    data_dir: str | None,
    limit: int | None,
    progress=None,
    *,
    datasets: Sequence[str] | None = None,
    budgets: Sequence[int] | None = None,
    on_cell=None,
) -> list[dict]:
    """One row per greedy DFLASH / DDTree cell of a fixed budget (of `datasets`, default all; given `budgets`, only
    the DDTree cells of those budgets); progress(record) after each response, on_cell(rows) after each cell (so an
    interrupted replay keeps what it finished)."""
    cells, builder_for, models = open_run(results, model, data_dir)
    rows = []
    for cell in cells:
        method = cell.cell.method
        if method not in ("dflash", "ddtree") or cell.cell.temperature != 0.0 or not cell.records:
            continue
        if datasets and cell.cell.dataset not in datasets:
            continue
        budget = cell.cell.budget if method == "ddtree" else None
        if budgets and budget not in budgets or budget == AUTO_BUDGET:  # auto: each round's budget is unrecorded
            continue
        hold = bool(getattr(cell.cell, "hold_chain", False))
        builder = builder_for(cell.records)  # a later turn carried this cell's own earlier answers
        records = sorted(cell.records, key=lambda r: (r.prompt_index, r.turn))[: limit or None]
        same = tokens = ours = theirs = 0
        for record in records:
            want = engine_rounds(record.meta_info)
            if want is None or not record.output_ids:
                continue
            got = replay(builder.input_ids(record), record.output_ids, budget, hold, models.target, models.drafter)
            same += same_but_last(got.rounds, record.meta_info["spec_accept_histogram"])
            tokens += len(record.output_ids)
            theirs += want
            ours += len(got.rounds)
            if progress:
                progress(record)
        if not theirs:
            continue
        engine_tau, replay_tau = tokens / theirs, tokens / ours
        rows.append({"cell_id": cell.cell.cell_id, "method": method, "budget": budget or "", "hold_chain": hold,
                     "responses": len(records), "same_histogram": same, "tokens": tokens, "engine_rounds": theirs,
                     "replay_rounds": ours, "engine_tau": round(engine_tau, 4), "replay_tau": round(replay_tau, 4),
                     "relative_diff": round(engine_tau / replay_tau - 1, 4)})  # fmt: skip
        if on_cell:
            on_cell(rows)
    return rows


def markdown(rows: list[dict], tol: float) -> str:
    lines = [
        f"Acceptance on the same text (tau = output tokens / rounds); a cell fails beyond {tol:.0%}.",
        "",
        "| cell | responses | same histogram | engine tau | replay tau | difference |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(f"| {row['cell_id']} | {row['responses']} | {row['same_histogram']} | {row['engine_tau']:.3f} | "
                     f"{row['replay_tau']:.3f} | {row['relative_diff']:+.2%} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(
    results: Annotated[Path, typer.Argument(help="Results folder of greedy DFLASH / DDTree cells (with AR cells).")],
    model: Annotated[str, typer.Option(help="The run's target model folder.")],
    data_dir: Annotated[str | None, typer.Option(help="Offline dataset mirror (default: the manifest's).")] = None,
    limit: Annotated[int | None, typer.Option(help="Responses per cell at most (default: all).")] = None,
    tol: Annotated[float, typer.Option(help="Largest relative tau difference per cell.")] = 0.02,
    out: Annotated[Path | None, typer.Option(help="Folder for replay.csv / replay.md (default: RESULTS).")] = None,
    datasets: Annotated[str | None, typer.Option(help="Datasets to replay, comma list (default: all).")] = None,
    budgets: Annotated[
        str | None, typer.Option(help="Only the DDTree cells of these budgets, comma list (default: every cell).")
    ] = None,
) -> None:
    """Replay an engine's greedy responses with the reference engine; compare acceptance on the same text."""
    from rich.console import Console

    from ddbench.config import DDBenchError

    console = Console()
    out = out or results

    def write(rows: list[dict]) -> None:  # after every cell
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "replay.csv", "w", newline="") as stream:
            writer = csv.DictWriter(stream, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        (out / "replay.md").write_text(markdown(rows, tol))

    wanted = [d.strip() for d in datasets.split(",") if d.strip()] if datasets else None
    try:
        chosen = [int(b) for b in budgets.split(",") if b.strip()] if budgets else None
    except ValueError:
        Console(stderr=True).print(f"error: --budgets takes integers such as 127,255, got {budgets!r}", markup=False)
        raise typer.Exit(2) from None
    try:
        rows = run(results, model, data_dir, limit, lambda r: console.print(f"{r.cell_id} {r.prompt_index}.{r.turn}"),
                   datasets=wanted, budgets=chosen, on_cell=write)  # fmt: skip
    except DDBenchError as error:
        Console(stderr=True).print(f"error: {error}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    write(rows)
    console.print(markdown(rows, tol), markup=False)
    if any(abs(row["relative_diff"]) > tol for row in rows):
        raise typer.Exit(1)


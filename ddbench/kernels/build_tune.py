"""Launch-configuration sweep of the Triton tree build (ddtree_core/kernels/tree_build.py).

    ddbench kernels tune build --out results/kernels/build-h200
    ddbench kernels tune build --out /tmp/bt --smoke          # tiny sizes, CPU under the Triton interpreter

One program builds one request's tree, so at batch 1 the build is a single streaming multiprocessor's latency:
the launch decides how much of it is spent. Per (batch, budget, logit scale) cell it draws bf16 draft logits
(randn x scale, L = 16: the kernel benchmark's drafts, the same tensors at the same seed, batch and vocab),
takes their top-`budget` lists once, and times as CUDA-graph replays (CUDA events; host clock on a CPU) the
default build and every launch of the grid: warps x HIST_BINS (the kept-key histogram behind the level bound),
then each LOG_BINS (the radix selection's digit), QCH (entries per step of the rank compares) and CHUNK
(candidates per block of the expand / select passes) alone, the rest at the default, counted ranks (SORT_RANKS
off: levels and final nodes ordered by counting, as above budget 1024, instead of tl.sort), and the --launch
launches (by default the former defaults: the level bound's histogram bucket not split further, FINE_BITS=0;
a level's survivors selected, not sorted, SORT_SURVIVORS=0; the final nodes selected and ranked, not sorted,
FCH=0; all three and each alone). Each tree is checked field by field against the default's. Then the
default launch at smaller depth limits (--depths): the program stops after that many levels, so the
differences split the build's time between its levels and its final selection (those trees are checked
against the torch build at the same limit). Writes cells.csv (one row per launch) and best.csv (per cell:
the fastest equal launch at the full depth, and the default). On CUDA it also writes phases.csv: the default
launch and each --launch launch once more with every program stamping the SM's cycle counter after each
phase of each level (expand, select, append, bound) and of the final selection
(select, rank, write), as mean microseconds per request (`tree_build.phase_times`), which says where a level's
time goes.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from pathlib import Path
from typing import Annotated

import torch
import typer

from ddbench.kernels.kernel_bench import draft_logits, launch_label, parse_ints, parse_launches, tune_row

LENGTH = 16
# KEYS: tree_build.LAUNCH_KEYS, in column order; FLAGS: the bool ones
KEYS = ("num_warps", "HIST_BINS", "LOG_BINS", "QCH", "CHUNK", "SORT_RANKS", "FINE_BITS", "SORT_SURVIVORS", "FCH", "CUT",
        "TAILS", "TB", "FS", "FR")
FLAGS = ("SORT_RANKS", "SORT_SURVIVORS", "CUT", "TAILS")
COLUMNS = ("batch", "budget", "logit_scale", "max_depth", *KEYS, "us", "equal", "mean_depth", "note")
PHASE_COLUMNS = ("batch", "budget", "logit_scale", "launch", "phase", "us")
BEST_COLUMNS = ("batch", "budget", "logit_scale", *KEYS, "us", "default_us")


def launches(
    warps: list[int], hist_bins: list[int], log_bins: list[int], qch: list[int] = (), chunk: list[int] = (),
    counted_ranks: bool = False, extra: list[dict] = (),
) -> list[dict]:
    """The default ({}) first, then warps x HIST_BINS, then each LOG_BINS, QCH and CHUNK alone, then
    (counted_ranks) the ranks counted instead of sorted, then the `extra` launches."""
    grid = [{"num_warps": w, "HIST_BINS": h} for w in warps for h in hist_bins]
    alone = [{"LOG_BINS": b} for b in log_bins] + [{"QCH": q} for q in qch] + [{"CHUNK": c} for c in chunk]
    return [{}] + grid + alone + ([{"SORT_RANKS": False}] if counted_ranks else []) + list(extra)


def _same_tree(a, b) -> bool:
    return all(
        torch.equal(getattr(a, f.name), getattr(b, f.name))
        for f in dataclasses.fields(a)
        if isinstance(getattr(a, f.name), torch.Tensor)
    )


def run(
    out: Path,
    cells: list[tuple[int, int]],
    scales: list[float],
    vocab: int,
    warps: list[int],
    hist_bins: list[int],
    log_bins: list[int],
    depths: list[int] = (),
    qch: list[int] = (),
    chunk: list[int] = (),
    counted_ranks: bool = False,
    seed: int = 0,
    extra: list[dict] = (),
) -> list[dict]:
    from ddtree_core import tree as trees
    from ddtree_core.kernels import topk_radix, tree_build

    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows, phase_rows = [], []
    for batch, budget in cells:
        for scale in scales:
            logits = draft_logits(batch, LENGTH, vocab, scale, seed, device)
            lists = topk_radix.draft_topk(logits, min(budget, vocab), 1.0)
            expected = tree_build.build_tree_from_topk(lists, budget, LENGTH, budget)
            grid = launches(warps, hist_bins, log_bins, qch, chunk, counted_ranks and budget <= 1024, extra)
            plan = [(LENGTH, launch) for launch in grid]
            plan += [(depth, {}) for depth in depths if 1 <= depth < LENGTH]
            for depth, launch in plan:
                row = {"batch": batch, "budget": budget, "logit_scale": scale, "max_depth": depth}
                row.update({key: launch.get(key, "auto") for key in KEYS})

                def call(lists=lists, budget=budget, launch=launch, depth=depth):
                    return tree_build.build_tree_from_topk(lists, budget, depth, budget, launch=launch)

                def check(built, lists=lists, budget=budget, depth=depth, expected=expected):
                    want = expected if depth == LENGTH else trees.build_tree_from_topk(
                        lists, budget, max_depth=depth, impl="torch")  # fmt: skip
                    mean_depth = float(built.depths.clamp(min=0).amax(dim=1).float().mean())
                    return {"equal": _same_tree(built, want), "mean_depth": round(mean_depth, 2)}

                rows.append(tune_row(row, call, check, COLUMNS))
            if device == "cuda":
                cell = {"batch": batch, "budget": budget, "logit_scale": scale}
                for launch in [{}, *extra]:
                    label = launch_label(launch)
                    phase_rows += [cell | {"launch": label, "phase": name, "us": round(us, 2)}
                                   for name, us in phases(lists, budget, launch).items()]  # fmt: skip
    _write(out, rows, phase_rows)
    return rows


def phases(lists, budget: int, launch: dict | None = None) -> dict[str, float]:
    """A launch's phase times (tree_build.phase_times) after two unstamped warm-up builds."""
    from ddtree_core.kernels import tree_build

    clock = torch.zeros(lists.log_probs.shape[0], tree_build.clock_slots(LENGTH), dtype=torch.int64, device="cuda")
    for stamps in (None, None, clock):
        tree_build.build_tree_from_topk(lists, budget, LENGTH, budget, launch=launch, clock=stamps)
    torch.cuda.synchronize()
    return tree_build.phase_times(clock, LENGTH)


def _is_default(row: dict) -> bool:
    return all(row[key] == "auto" for key in KEYS)


def _full_depth(row: dict) -> bool:
    return int(row.get("max_depth", LENGTH)) == LENGTH


def best_rows(rows: list[dict]) -> list[dict]:
    """Per (batch, budget, logit scale): the fastest launch whose trees equal the default's, and the default."""
    cells: dict[tuple, list[dict]] = {}
    for row in filter(_full_depth, rows):
        cells.setdefault((row["batch"], row["budget"], row["logit_scale"]), []).append(row)
    best = []
    for (batch, budget, scale), group in cells.items():
        timed = [r for r in group if r["us"] != "" and r["equal"]]
        default = next((r["us"] for r in group if _is_default(r)), "")
        if timed:
            fastest = min(timed, key=lambda r: r["us"])
            best.append({"batch": batch, "budget": budget, "logit_scale": scale, **{k: fastest[k] for k in KEYS},
                         "us": fastest["us"], "default_us": default})  # fmt: skip
    return best


def _write(out: Path, rows: list[dict], phase_rows: list[dict] = ()) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tables = [("cells.csv", COLUMNS, rows), ("best.csv", BEST_COLUMNS, best_rows(rows))]
    if phase_rows:
        tables.append(("phases.csv", PHASE_COLUMNS, phase_rows))
    for name, columns, table in tables:
        with open(out / name, "w", newline="") as stream:
            writer = csv.DictWriter(stream, fieldnames=columns)
            writer.writeheader()
            writer.writerows(table)


def _cells(text: str) -> list[tuple[int, int]]:
    try:
        cells = [tuple(int(x) for x in item.split("x")) for item in text.split(",") if item.strip()]
    except ValueError:
        cells = []
    if not cells or any(len(c) != 2 or min(c) < 1 for c in cells):
        raise typer.BadParameter(f"expected BATCHxBUDGET pairs such as 1x256,64x64, got {text!r}")
    return cells


def main(
    out: Annotated[Path, typer.Option(help="Folder for cells.csv and best.csv.")],
    smoke: Annotated[bool, typer.Option(help="Tiny sizes (CPU, Triton interpreter).")] = False,
    cells: Annotated[
        str, typer.Option(help="BATCHxBUDGET cells; K of the lists = budget.")
    ] = "1x256,8x64,64x64,1x1024",
    scales: Annotated[str, typer.Option(help="Draft logit scales (randn x scale; 12: chain-like).")] = "4,12",
    vocab: Annotated[int, typer.Option(help="Vocabulary of the draft logits.")] = 152064,
    warps: Annotated[str, typer.Option(help="Warps of the build program to try.")] = "4,8",
    hist_bins: Annotated[str, typer.Option(help="Kept-key histogram buckets (powers of two).")] = "32,64,128,256,2048",
    log_bins: Annotated[str, typer.Option(help="Radix-selection digit bits to try.")] = "4,8",
    depths: Annotated[
        str, typer.Option(help="Depth limits for the default launch (levels' cost; '' none).")
    ] = "1,2,3,4,8",
    qch: Annotated[str, typer.Option(help="Rank-compare steps to try (powers of two).")] = "8,128",
    chunk: Annotated[str, typer.Option(help="Candidate blocks to try (powers of two).")] = "256,4096",
    counted_ranks: Annotated[
        bool, typer.Option(help="Also try counted ranks instead of tl.sort (SORT_RANKS off; budgets <= 1024).")
    ] = True,
    seed: Annotated[int, typer.Option(help="Seed of the draft logits (kernel_bench's --seed gives the same).")] = 0,
    launch: Annotated[
        str,
        typer.Option(help="More launches, ';' between launches, each key=value pairs of tree_build.LAUNCH_KEYS "
                     f"(0 / 1 for {', '.join(FLAGS)}); phases.csv stamps each. "
                     "The default "
                     "tries the former defaults: FINE_BITS=0 (the bound's bucket not split), SORT_SURVIVORS=0 (levels "
                     "selected, not sorted), FCH=0 (final nodes selected, not sorted), together and alone.")
    ] = "FINE_BITS=0,SORT_SURVIVORS=0,FCH=0;FINE_BITS=0;SORT_SURVIVORS=0;FCH=0",
) -> None:
    """Time every launch of the Triton tree build on the same lists; write cells.csv and best.csv."""
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    _configure_pdl()
    if smoke:
        cells, scales, vocab, warps, hist_bins, log_bins, depths = "1x8,2x5", "4", 64, "4", "2,2048", "4", "1"
        qch, chunk = "2", "16"
    scale_list = [float(s) for s in scales.split(",") if s.strip()]
    lists = (list(parse_ints(t) or ()) for t in (warps, hist_bins, log_bins, depths, qch, chunk))
    extra = parse_launches(launch, KEYS, FLAGS)
    run(out, _cells(cells), scale_list, vocab, *lists, counted_ranks=counted_ranks, seed=seed, extra=extra)


def _configure_pdl() -> None:
    """DDTREE_PDL=0 turns programmatic dependent launch off (the kernels read no environment themselves)."""
    from ddtree_core.kernels import pdl  # after TRITON_INTERPRET is settled: importing Triton reads it

    pdl.configure(pdl.from_environ(os.environ))


"""Launch-configuration sweep of the Triton top-K (ddtree_core/kernels/topk_radix.py, the one tree.draft_topk
dispatches to on CUDA).

    ddbench kernels tune topk --out results/kernels/topk-h200
    ddbench kernels tune topk --out /tmp/tt --smoke          # tiny sizes, CPU under the Triton interpreter

The launch parameters change only the speed. `draft_topk(tile=, chunks=, warps=, group=, super_group=,
select_warps=, block=, gather=, log_bins=, scan_registers=, select_registers=)`: tile is the logits one scan
program reads per step, chunks the vocabulary slices per row, warps those of one scan program, group the tokens
per group maximum, super_group the groups per super-group maximum (1: none; timed through --launch),
select_warps those of its per-row selection program, block and log_bins the group keys per step and radix digit
of that program (a block that holds all groups keeps them in registers), gather its read-back step, and the
register caps per thread of the scan and the selection (more programs per SM, some registers spilled); tiled
and, through --launch only, emit (the tiles' candidates first: the floor's rank among a tile's group maxima, 0:
off), emit_warps (per program of the kernel that finds them) and union_tiles (the tiles whose candidates the
selection gathers per step).
For every (batch, vocab, K) cell it times, as CUDA-graph replays (CUDA events; host clock on a CPU): the
default ("auto"), every (tile, chunks, warps) launch with the default group, every (group, select_warps) and
every (block, log_bins) launch with the default scan, every gather, every register cap on the scan, the
selection and both; and "radix-scan", the default's first kernel alone (its group maxima checked against
torch's), which splits the time between the scan and the per-row selection. Each launch's lists are checked
against the torch path's (batched.draft_topk: ids exactly, log-probs within 1e-5, the logsumexps summing in
different orders). It writes cells.csv (one row per launch; settled: for a launch with emit, the share of rows
the tiles' candidates settled) and best.csv (per method and cell: the fastest launch with equal lists and the
method's default), for tuning `topk_radix._plan`. On CUDA it also writes phases.csv:
the radix default (and each --launch) once more with its selection program stamping the SM's cycle counter after
each phase (logsumexp; compact: gathering the tiles' candidates, 0 without emit; union: their K best, checked;
supers: choosing the K best super-groups, 0 without them; groups: the K best groups; gather: reading them back;
select: the K best of the kept tokens; rank: writing the K best in order, the union's where it settled the row), as
mean microseconds per row. Rows are L = 16 draft positions per request, bf16 logits.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Annotated

import torch
import typer

from ddbench.kernels.kernel_bench import launch_label, parse_ints, parse_launches, settled_share, tune_row

LENGTH = 16
PARAMS = ("tile", "chunks", "warps", "group", "super_group", "select_warps", "block", "gather", "log_bins",
          "scan_registers", "select_registers", "tiled", "emit", "emit_warps", "union_tiles")
COLUMNS = ("method", "batch", "vocab", "k", *PARAMS, "us", "equal", "settled", "note")
PHASE_COLUMNS = ("batch", "vocab", "k", "launch", "phase", "us")
BEST_COLUMNS = ("method", "batch", "vocab", "k", *PARAMS, "us", "auto_us")


def launches(
    tiles, chunk_counts, warp_counts, groups, select_warps, blocks=(), log_bins=(), gathers=(), registers=(), extra=()
) -> list[tuple[str, dict]]:
    """(method, keyword arguments) of every launch of a cell, the defaults ({}) first; `extra`: more launches,
    each a dict of PARAMS (kernel_bench.parse_launches)."""
    scan = [{"tile": t, "chunks": c, "warps": w} for t in tiles for c in chunk_counts for w in warp_counts]
    select = [{"group": g, "select_warps": w} for g in groups for w in select_warps]
    select += [{"block": b, "log_bins": n} for b in blocks for n in log_bins]
    select += [{"gather": g} for g in gathers]
    select += [{key: r} for r in registers for key in ("scan_registers", "select_registers")]
    select += [{"scan_registers": r, "select_registers": r} for r in registers]
    select += [dict(kw) for kw in extra]
    return [("radix", {}), ("radix-scan", {})] + [("radix", kw) for kw in scan + select]


def run(
    out: Path,
    batches: list[int],
    vocabs: list[int],
    ks: list[int],
    tiles: list[int],
    chunk_counts: list[int],
    warp_counts: list[int] = (4,),
    groups: list[int] = (),
    select_warps: list[int] = (),
    blocks: list[int] = (),
    log_bins: list[int] = (),
    gathers: list[int] = (),
    registers: list[int] = (),
    extra: list[dict] = (),
) -> list[dict]:
    from ddtree_core import batched
    from ddtree_core.kernels import topk_radix

    device = "cuda" if torch.cuda.is_available() else "cpu"
    phase_rows = []
    methods = {"radix": topk_radix.draft_topk, "radix-scan": topk_radix.group_maxima}
    rows = []
    for batch in batches:
        for vocab in vocabs:
            logits = torch.randn(batch, LENGTH, vocab, device=device, generator=None).bfloat16() * 4
            for k in ks:
                expected = batched.draft_topk(logits, k, 1.0)
                grid = launches(
                    tiles, chunk_counts, warp_counts, groups, select_warps, blocks, log_bins, gathers, registers, extra
                )
                for method, kwargs in grid:
                    fn = methods[method]
                    row = {"method": method, "batch": batch, "vocab": vocab, "k": k}
                    row.update({p: kwargs.get(p, "auto") for p in PARAMS})

                    def call(fn=fn, logits=logits, k=k, kwargs=kwargs):
                        return fn(logits, k, 1.0, **kwargs)

                    def check(got, expected=expected, logits=logits, k=k, method=method):
                        if method == "radix-scan":  # kernel 1 alone: its group maxima against torch's
                            return {"equal": torch.equal(got.long(), group_max_keys(logits, k))}
                        # Ids exactly; log-probs to float32 rounding (the logsumexps sum in different orders).
                        ids = torch.equal(got.token_ids, expected.token_ids)
                        return {"equal": ids and torch.allclose(got.log_probs, expected.log_probs, rtol=0, atol=1e-5)}

                    rows.append(tune_row(row, call, check, COLUMNS))
                    if kwargs.get("emit") and rows[-1]["us"] != "":
                        rows[-1]["settled"] = settled_share(logits, k, **kwargs)
                if device == "cuda":
                    cell = {"batch": batch, "vocab": vocab, "k": k}
                    for launch in [{}, *extra]:  # the default and every --launch
                        label = launch_label(launch)
                        phase_rows += [cell | {"launch": label, "phase": name, "us": round(us, 2)}
                                       for name, us in phases(logits, k, **launch).items()]  # fmt: skip
    _write(out, rows, phase_rows)
    return rows


def phases(logits: torch.Tensor, k: int, **launch) -> dict[str, float]:
    """A radix launch's selection phases (topk_radix.select_phase_times) after two unstamped calls."""
    from ddtree_core.kernels import topk_radix

    rows = logits.numel() // logits.shape[-1]
    clock = torch.zeros(rows, topk_radix.SELECT_SLOTS, dtype=torch.int64, device=logits.device)
    for stamps in (None, None, clock):
        topk_radix.draft_topk(logits, k, 1.0, clock=stamps, **launch)
    torch.cuda.synchronize()
    return topk_radix.select_phase_times(clock)


def group_max_keys(logits: torch.Tensor, k: int) -> torch.Tensor:
    """[rows, groups] int64: the largest order key (topk_lists.py's: the float32 bits, negatives mirrored) of each
    group of the radix kernel's default plan, at draft temperature 1; no NaN in the logits."""
    from ddtree_core.kernels import topk_radix

    rows = logits.reshape(-1, logits.shape[-1]).float()
    group = topk_radix._plan(rows, k, None, None, None)[3]
    bits = rows.view(torch.int32)
    keys = torch.where(bits >= 0, bits, -(bits & 0x7FFFFFFF)).long()
    pad = -keys.shape[1] % group
    keys = torch.nn.functional.pad(keys, (0, pad), value=-(2**31))
    return keys.view(keys.shape[0], -1, group).amax(dim=2)


def _is_default(row: dict) -> bool:
    return all(row[p] in ("auto", "") for p in PARAMS)


def best_rows(rows: list[dict]) -> list[dict]:
    """Per (method, batch, vocab, k): the fastest launch with equal lists and the method's default time."""
    cells: dict[tuple, list[dict]] = {}
    for row in rows:
        cells.setdefault((row["batch"], row["vocab"], row["k"]), []).append(row)
    best = []
    for (batch, vocab, k), group in cells.items():
        for method in dict.fromkeys(r["method"] for r in group):
            mine = [r for r in group if r["method"] == method]
            timed = [r for r in mine if r["us"] != "" and r["equal"]]
            auto = next((r["us"] for r in mine if _is_default(r) and r["us"] != ""), "")
            if timed:
                fastest = min(timed, key=lambda r: r["us"])
                best.append({"method": method, "batch": batch, "vocab": vocab, "k": k,
                             **{p: fastest[p] for p in PARAMS}, "us": fastest["us"], "auto_us": auto})  # fmt: skip
    return best


def _write(out: Path, rows: list[dict], phase_rows: list[dict] = ()) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if phase_rows:
        with open(out / "phases.csv", "w", newline="") as stream:
            writer = csv.DictWriter(stream, fieldnames=PHASE_COLUMNS)
            writer.writeheader()
            writer.writerows(phase_rows)
    with open(out / "cells.csv", "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    best = best_rows(rows)
    with open(out / "best.csv", "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=BEST_COLUMNS)
        writer.writeheader()
        writer.writerows(best)


def main(
    out: Annotated[Path, typer.Option(help="Folder for cells.csv and best.csv.")],
    smoke: Annotated[bool, typer.Option(help="Tiny sizes (CPU, Triton interpreter).")] = False,
    batches: Annotated[str, typer.Option(help="Requests per call (rows = batch x 16).")] = "1,8,64",
    vocabs: Annotated[str, typer.Option(help="Vocabulary sizes.")] = "152064",
    ks: Annotated[str, typer.Option(help="K of the lists (the tree budget).")] = "64,256",
    tiles: Annotated[str, typer.Option(help="Tiles to try (powers of two).")] = "1024,2048,4096",
    chunks: Annotated[str, typer.Option(help="Chunks per row to try.")] = "1,2,4,8,16",
    warps: Annotated[str, typer.Option(help="Warps per scan program to try.")] = "4,8",
    groups: Annotated[str, typer.Option(help="Tokens per group of the radix kernel to try.")] = "32,64,128",
    select_warps: Annotated[str, typer.Option(help="Warps per radix selection program to try.")] = "1,2,4,8",
    blocks: Annotated[
        str, typer.Option(help="Group keys per step of the radix selection to try.")
    ] = "1024,4096,8192",
    log_bins: Annotated[str, typer.Option(help="Radix digit bits of the radix selection to try.")] = "6,8",
    gathers: Annotated[
        str, typer.Option(help="Read-back tokens per step of the radix selection to try.")
    ] = "2048,4096,8192",
    registers: Annotated[
        str, typer.Option(help="Register caps per thread (maxnreg) of the radix scan, its selection, and both.")
    ] = "64,80,96",
    launch: Annotated[
        str,
        typer.Option(help="More radix launches, ';' between launches, each key=value pairs of the radix options "
                     "(e.g. 'select_warps=2;select_warps=2,select_registers=64').")
    ] = "",
) -> None:
    """Time every launch of the Triton top-K on the same cells; write cells.csv and best.csv."""
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    _configure_pdl()
    texts = (batches, vocabs, ks, tiles, chunks, warps, groups, select_warps, blocks, log_bins, gathers, registers)
    if smoke:
        texts = ("1,2", "300", "4", "64,128", "1,2", "4", "8", "4", "64", "8", "32", "64")
    extra = parse_launches(launch, PARAMS)
    run(out, *(list(parse_ints(text) or ()) for text in texts), extra)  # "" tries none (--groups "")


def _configure_pdl() -> None:
    """DDTREE_PDL=0 turns programmatic dependent launch off (the kernels read no environment themselves)."""
    from ddtree_core.kernels import pdl  # after TRITON_INTERPRET is settled: importing Triton reads it

    pdl.configure(pdl.from_environ(os.environ))


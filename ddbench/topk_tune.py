"""Launch-configuration sweep of the fused Triton top-K (ddtree_core/kernels/topk.py).

    python -m ddbench.topk_tune --out results/kernels/topk-h200
    python -m ddbench.topk_tune --out /tmp/tt --smoke          # tiny sizes, CPU under the Triton interpreter

`draft_topk(tile=, chunks=, warps=)` changes only the speed: tile is the logits one program scans per step,
chunks the vocabulary slices per row (more programs, then a merge kernel), warps those of one scan program.
For every (batch, vocab, K) cell it times every (tile, chunks, warps) launch and the default heuristic
("auto") as CUDA-graph replays (CUDA events; host clock on a CPU), checks each launch's lists against the
default's (ids exactly, log-probs within 1e-5: the logsumexp sums in tile order), and writes cells.csv
(one row per launch) and best.csv (the fastest per cell next to auto), for tuning `topk._plan` from data.
Rows are L = 16 draft positions per request, bf16 logits.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Annotated

import torch
import typer

from ddbench.kernel_bench import eager_seconds, graph_seconds, parse_ints

LENGTH = 16
COLUMNS = ("batch", "vocab", "k", "tile", "chunks", "warps", "us", "equal", "note")


def run(
    out: Path,
    batches: list[int],
    vocabs: list[int],
    ks: list[int],
    tiles: list[int],
    chunk_counts: list[int],
    warp_counts: list[int] = (4,),
) -> list[dict]:
    from ddtree_core.kernels import topk

    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for batch in batches:
        for vocab in vocabs:
            logits = torch.randn(batch, LENGTH, vocab, device=device, generator=None).bfloat16() * 4
            for k in ks:
                expected = topk.draft_topk(logits, k, 1.0)
                configs = [(None, None, None)] + [(t, c, w) for t in tiles for c in chunk_counts for w in warp_counts]
                for tile, chunks, warps in configs:
                    row = {"batch": batch, "vocab": vocab, "k": k, "tile": tile or "auto",
                           "chunks": chunks or "auto", "warps": warps or "auto"}  # fmt: skip
                    kwargs = {} if tile is None else {"tile": tile, "chunks": chunks, "warps": warps}
                    try:
                        got = topk.draft_topk(logits, k, 1.0, **kwargs)

                        def call(logits=logits, k=k, kwargs=kwargs):
                            return topk.draft_topk(logits, k, 1.0, **kwargs)

                        seconds = (
                            graph_seconds(call, 0.05) if device == "cuda" else eager_seconds(call, 0.0, False)
                        )
                        # Ids exactly; log-probs to float32 rounding (the logsumexp sums in tile order).
                        equal = torch.equal(got.token_ids, expected.token_ids) and torch.allclose(
                            got.log_probs, expected.log_probs, rtol=0, atol=1e-5
                        )
                        row.update(us=round(seconds * 1e6, 1), equal=equal, note="")
                    except Exception as error:  # a pair that cannot launch costs its row only
                        row.update(us="", equal="", note=f"{type(error).__name__}: {str(error)[:80]}")
                    rows.append(row)
                    print(", ".join(f"{key}={row[key]}" for key in COLUMNS if row.get(key) != ""), flush=True)
    _write(out, rows)
    return rows


def best_rows(rows: list[dict]) -> list[dict]:
    """Per (batch, vocab, k): the fastest pair with equal lists, and the default's time."""
    cells: dict[tuple, list[dict]] = {}
    for row in rows:
        cells.setdefault((row["batch"], row["vocab"], row["k"]), []).append(row)
    best = []
    for (batch, vocab, k), group in cells.items():
        timed = [r for r in group if r["us"] != "" and r["equal"]]
        auto = next((r["us"] for r in group if r["tile"] == "auto" and r["us"] != ""), "")
        if timed:
            fastest = min(timed, key=lambda r: r["us"])
            best.append({"batch": batch, "vocab": vocab, "k": k, "tile": fastest["tile"], "chunks": fastest["chunks"],
                         "warps": fastest["warps"], "us": fastest["us"], "auto_us": auto})  # fmt: skip
    return best


def _write(out: Path, rows: list[dict]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "cells.csv", "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    best = best_rows(rows)
    with open(out / "best.csv", "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=("batch", "vocab", "k", "tile", "chunks", "warps", "us", "auto_us"))
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
) -> None:
    """Time every (tile, chunks, warps) launch of the fused top-K; write cells.csv and best.csv."""
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if smoke:
        batches, vocabs, ks, tiles, chunks, warps = "1,2", "300", "4", "64,128", "1,2", "4"
    run(out, *(list(parse_ints(text)) for text in (batches, vocabs, ks, tiles, chunks, warps)))


if __name__ == "__main__":
    typer.run(main)

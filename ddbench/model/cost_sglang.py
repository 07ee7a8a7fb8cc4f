"""A verify-cost run from SGLang's own decode step, for targets ddbench.model.cost_bench cannot build (MoE).

    ddbench model cost-sglang results/cost/h200-moe/qwen3-coder-30b-a3b.jsonl \
        --preset qwen3-coder-30b-a3b --device "NVIDIA H200" --out results/cost/h200-moe/qwen3-coder-30b-a3b

Input: the result file of `python -m sglang.benchmark.one_batch --load-format dummy --batch-size n1 n2 ...
--input-len P --output-len O --result-filename F` (random weights, nothing downloaded; the `cost-sglang` job
of scripts/h200.sh): one JSON line per batch size n with its median decode step
(`median_decode_latency`, seconds, CUDA graphs on up to --cuda-graph-max-bs).

A verify step of B requests x T tokens multiplies the same weights as a decode step of n = B x T tokens: all
of a dense model's, and for an MoE the experts those n tokens route to, which is what its cost grows with.
So the cell (B, T) takes the decode time of n = B x T; the attention differs (a verify attends over its
request's prefix and tree, the decode step over P + O tokens of n sequences), small beside the weights at the
short contexts measured here. body_ms (the step without lm_head, for the drafter's share in `ddbench model
project`) is time_ms less lm_head's share of the step's bytes floor (cost_bench.floors). Writes cells.csv and
run.json in `ddbench model cost`'s format, so that `ddbench model project --cost OUT` reads it. `ddbench model
project` counts the drafter as --draft-layers layers of the target's shape: for an MoE target that includes
expert reads a dense drafter does not make, so the projected draft time is an upper bound there.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Annotated

import typer

from ddbench.config import DDBenchError
from ddbench.model.cost_bench import H200_BANDWIDTH, H200_FLOPS, MOE_PRESETS, PRESETS, ModelShape, floors

COLUMNS = ("batch", "nodes", "width", "prefix", "time_ms", "body_ms", "tokens", "decode_batch", "floor_ms", "bound",
           "over_floor", "graph")  # fmt: skip
ITEMSIZE = 2  # bf16
H200 = (H200_BANDWIDTH, H200_FLOPS)


def decode_times(path: Path) -> tuple[dict[int, float], int]:
    """{decode batch size: median step ms} and the prefix length P of a one_batch result file."""
    try:
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        steps = {int(r["batch_size"]): 1e3 * float(r["median_decode_latency"]) for r in lines
                 if r.get("median_decode_latency") is not None}  # fmt: skip
        prefixes = {int(r["input_len"]) for r in lines}
    except FileNotFoundError:
        raise DDBenchError(f"{path}: no such result file") from None
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise DDBenchError(f"{path}: not a one_batch result file ({type(error).__name__}: {error})") from None
    if not steps:
        raise DDBenchError(f"{path}: no decode timing (was --output-len at least 2?)")
    if len(prefixes) != 1:
        raise DDBenchError(f"{path}: expected one --input-len, got {sorted(prefixes)}")
    return steps, prefixes.pop()


def cells(shape: ModelShape, steps: dict[int, float], prefix: int, batches, widths, graph_max: int = 512,
          peaks: tuple[float, float] = H200) -> list[dict]:  # fmt: skip
    """The (B, T) cells whose B x T was measured, as cost_bench rows, with the floor of the decode step
    measured (n = B x T sequences of one token over prefix P) and whether it ran as a CUDA graph
    (n <= graph_max, one_batch's --cuda-graph-max-bs; larger steps launch eagerly, an upper bound)."""
    lm_head = shape.vocab * shape.hidden
    rows = []
    for batch in batches:
        for width in widths:
            tokens = batch * width
            if tokens not in steps:
                continue
            time_ms = steps[tokens]
            body_ms = time_ms * (1 - lm_head / shape.read_params(tokens))
            floor = floors(shape, tokens, 1, prefix, ITEMSIZE, *peaks)
            rows.append(dict(batch=batch, nodes=width - 1, width=width, prefix=prefix, time_ms=time_ms,
                             body_ms=body_ms, tokens=tokens, decode_batch=tokens, floor_ms=floor.floor_ms,
                             bound=floor.bound, over_floor=time_ms / floor.floor_ms,
                             graph=tokens <= graph_max))  # fmt: skip
    return rows


def convert(source: Path, preset: str, device: str, out: Path, batches, widths, graph_max: int = 512,
            peaks: tuple[float, float] = H200) -> list[dict]:  # fmt: skip
    shapes = {**PRESETS, **MOE_PRESETS}
    if preset not in shapes:
        raise DDBenchError(f"unknown preset {preset!r}; expected one of {', '.join(shapes)}")
    shape = shapes[preset]
    steps, prefix = decode_times(source)
    rows = cells(shape, steps, prefix, batches, widths, graph_max, peaks)
    if not rows:
        raise DDBenchError(f"{source}: no measured decode batch equals B x T for B in {batches}, T in {widths}")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "cells.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    record = {
        "config": {
            "preset": preset,
            "dtype": "bfloat16",
            "prefix": prefix,
            "source": str(source),
            "graph_max_tokens": graph_max,
            "peak_bandwidth": peaks[0],
            "peak_flops": peaks[1],
        },
        "shape": dataclasses.asdict(shape),
        "matmul_params": shape.matmul_params,
        "device": device,
        "timing": f"SGLang one_batch median decode step of B x T tokens, random weights; CUDA graphs up to {graph_max}"
        " tokens (the graph column), eager above",
        "cells": rows,
    }
    (out / "run.json").write_text(json.dumps(record, indent=1))
    return rows


def main(
    source: Annotated[Path, typer.Argument(help="one_batch result file (JSON lines).")],
    preset: Annotated[str, typer.Option(help="The target's shape (cost_bench PRESETS or MOE_PRESETS).")],
    device: Annotated[str, typer.Option(help="The GPU the steps ran on, e.g. 'NVIDIA H200'.")],
    out: Annotated[Path, typer.Option(help="Folder for cells.csv and run.json.")],
    batches: Annotated[str, typer.Option(help="Requests per verify step B.")] = "1,4,16,32",
    widths: Annotated[str, typer.Option(help="Verify tokens per request T (nodes + 1).")] = "1,16,32,64,128,256",
    graph_max_tokens: Annotated[
        int, typer.Option(help="one_batch's --cuda-graph-max-bs: larger steps ran eagerly (graph column False).")
    ] = 512,
    peak_bandwidth: Annotated[float, typer.Option(help="Peak memory bandwidth, bytes/s, for floor_ms.")] = H200[0],
    peak_flops: Annotated[float, typer.Option(help="Peak dense bf16 FLOP/s, for floor_ms.")] = H200[1],
) -> None:
    """Turn SGLang decode-step timings into a `ddbench model cost` run folder for `ddbench model project`."""
    try:
        rows = convert(source, preset, device, out, _ints(batches), _ints(widths), graph_max_tokens,
                       (peak_bandwidth, peak_flops))  # fmt: skip
    except DDBenchError as error:
        raise typer.BadParameter(str(error)) from None
    for row in rows:
        eager = "" if row["graph"] else ", eager: an upper bound"
        print(f"B={row['batch']:>3} T={row['width']:>4}: {row['time_ms']:.2f} ms (body {row['body_ms']:.2f}, "
              f"{row['over_floor']:.2f}x its {row['bound']} floor{eager})")  # fmt: skip
    print(f"wrote {out / 'cells.csv'} and {out / 'run.json'}")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(item) for item in text.split(",") if item.strip())


"""`ddbench model`: what speed to expect, and where. Verify cost curves of a GPU (`cost`, `cost-sglang`),
tokens/s projected to another GPU (`project`), the reference target's verify cost for budget=auto
(`calibrate`), acceptance simulated for stronger drafters (`strength`) or a new drafter (`accept`), and the best
setting of a results folder (`recommend`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ddbench.commands import Tool, console, fail, lazy_group
from ddbench.config import DDBenchError, as_list

TOOLS = {
    "cost": Tool(
        "ddbench.model.cost_bench:main",
        "Time the target verify step of a random Qwen3-shaped decoder over batch x tree nodes; write to --out.",
    ),
    "cost-sglang": Tool(
        "ddbench.model.cost_sglang:main",
        "Turn SGLang decode-step timings into a `ddbench model cost` run folder for `ddbench model project`.",
    ),
    "strength": Tool(
        "ddbench.model.strength:main",
        "Simulated DFlash and DDTree acceptance as the drafter gets stronger (see ddbench/model/strength.py).",
    ),
    "calibrate": Tool(
        "ddbench.model.calibrate:main",
        "Measure the target's verify cost against tokens once and write it for budget=auto (--cost-table).",
    ),
    "accept": Tool(
        "ddbench.model.accept:main",
        "A drafter's DFlash and DDTree acceptance on the target's greedy answers, simulated without serving.",
    ),
}
app = typer.Typer(
    help="What speed to expect: verify cost, projections to other GPUs, simulated acceptance, the best setting.",
    no_args_is_help=True,
    cls=lazy_group(TOOLS),
)


@app.command()
def recommend(
    results: Annotated[Path, typer.Argument(help="Results folder written by `ddbench sweep`.")],
    metric: Annotated[str, typer.Option(help="What to maximise: tokens_per_s | speedup_vs_ar.")] = "tokens_per_s",
    dataset: Annotated[
        str | None, typer.Option(help="Dataset(s) to pool, comma list (default: every dataset in RESULTS).")
    ] = None,
    temperature: Annotated[float | None, typer.Option(help="Only this sampling temperature (default: all).")] = None,
    min_parity: Annotated[
        float | None, typer.Option(help="Refuse DFLASH/DDTree settings whose parity with AR is below this.")
    ] = None,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the recommendation as JSON.")] = None,
) -> None:
    """Best method and DDTree setting per temperature and concurrency, and the server and request settings for it."""
    from ddbench.harness.report import over_repeats, summarize
    from ddbench.harness.results import find_run_folder, load_cells, write_json
    from ddbench.model import recommend as advice

    try:
        folder = find_run_folder(results)
        measurement = advice.Measurement.from_manifest(folder.read_manifest())
        rows = over_repeats(summarize(load_cells(folder)))
        choices = advice.recommend(rows, metric, as_list(dataset) if dataset else None, temperature, min_parity)
    except DDBenchError as error:
        raise fail(str(error)) from None
    deployment = advice.deploy(choices, measurement)
    advice.print_recommendation(choices, measurement, deployment, console())
    if json_file is not None:
        write_json(json_file, advice.to_json(choices, measurement, deployment))


@app.command()
def project(
    cost: Annotated[
        Path, typer.Option(help="`ddbench model cost` output folder (cells.csv, run.json) of the source GPU.")
    ],
    out: Annotated[Path, typer.Option(help="Folder for projection.csv and projection.md.")],
    acceptance: Annotated[
        Path | None, typer.Option(help='JSON {"source", "datasets": {name: {"dflash": tau, "ddtree": {N: tau}}}}.')
    ] = None,
    acceptance_from: Annotated[Path | None, typer.Option(help="A results folder: its measured tau instead.")] = None,
    ddtree_gain_from: Annotated[
        Path | None, typer.Option(help="A results folder: empty DDTree tables = DFlash tau x its measured gain.")
    ] = None,
    kernels: Annotated[
        Path | None, typer.Option(help="`ddbench kernels bench` folder (default: tree round 0).")
    ] = None,
    kernel_impl: Annotated[str, typer.Option(help="Kernel impl whose round times count.")] = "triton",
    target_gpu: Annotated[str, typer.Option(help="GPU to project to: rtx-pro-6000 | h200.")] = "rtx-pro-6000",
    source_gpu: Annotated[str, typer.Option(help="GPU of the cost and kernel runs.")] = "h200",
    bandwidth: Annotated[float | None, typer.Option(help="Target memory bandwidth, bytes/s (override).")] = None,
    flops: Annotated[float | None, typer.Option(help="Target dense bf16 FLOP/s (override).")] = None,
    draft_layers: Annotated[int, typer.Option(help="DFlash drafter layers of the target's shape.")] = 5,
    block: Annotated[int, typer.Option(help="Drafter block size: DFLASH verify width.")] = 16,
    temperature: Annotated[float, typer.Option(help="Temperature of the results folders' cells.")] = 0.0,
    interpolate: Annotated[
        bool, typer.Option("--interpolate/--no-interpolate", help="Interpolate unmeasured widths, else skip them.")
    ] = True,
    overhead_ms: Annotated[
        str | None,
        typer.Option(help="Host time added to each round, unscaled: ar=MS,dflash=MS,ddtree=MS (default: none)."),
    ] = None,
) -> None:
    """PROJECTED tokens/s on another GPU: measured cost curves scaled by roofline ratios, with given acceptance."""
    from ddbench.model import project as projection

    try:
        target = projection.gpu(target_gpu, bandwidth, flops)
        overhead = projection.parse_overhead(overhead_ms)
        settings = projection.Settings(projection.gpu(source_gpu), target, draft_layers, block, interpolate, overhead)
        result = projection.build(
            cost, acceptance, acceptance_from, ddtree_gain_from, kernels, kernel_impl, temperature, settings
        )
        paths = projection.write(out, result)
    except DDBenchError as error:
        raise fail(str(error)) from None
    projection.print_projection(result, console())
    console().print(f"wrote {paths[0]} and {paths[1]}")

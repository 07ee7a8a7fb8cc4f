"""`ddbench testbed inflate`: inflate a target (and its drafter), check it against the source, print the sizes.

`compare_targets(src, dst, prompts)` loads two model folders and compares their teacher-forced logits and
greedy continuations on the same prompts; `run` is the command: `inflate.inflate_target` (and
`inflate_drafter`), then, with --check N, the inflated target against the source on N GSM8K evaluation
prompts in the written dtype and, for bfloat16, the yardstick: the source in bfloat16 against itself in
float32, i.e. what bfloat16 alone changes. Example: at llama3-8b in bf16 the inflated target's largest
logit difference should be of the yardstick's size, not far above it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ddbench.testbed.inflate import (
    Inflation,
    InflationError,
    Shape,
    inflate_drafter,
    inflate_target,
    read_config,
    resolve_shape,
    write_inflation,
)


@dataclass(frozen=True)
class FunctionCheck:
    """One model against another on the same prompts: teacher-forced logits and greedy continuations."""

    dtype: str  # of the second model (the inflated one)
    source_dtype: str  # of the first
    device: str
    num_prompts: int
    num_positions: int  # prompt positions whose logits were compared
    max_abs_logit_diff: float
    max_rel_logit_diff: float  # max |difference| / max |first model's logit|, over all compared positions
    top1_agreement: float  # share of positions whose argmax token agrees
    greedy_tokens: int  # greedy tokens generated per prompt by each model
    greedy_equal: int  # prompts whose greedy continuations are equal


def compare_targets(
    src_dir: str | Path,
    dst_dir: str | Path,
    prompts: list[list[int]],
    *,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    source_dtype: torch.dtype | None = None,
    greedy_tokens: int = 32,
) -> FunctionCheck:
    """`src_dir` loaded in `source_dtype` (default `dtype`) against `dst_dir` in `dtype`, on `device`.

    compare_targets(src, src, prompts, dtype=torch.bfloat16, source_dtype=torch.float32) measures what
    bfloat16 alone changes: the yardstick for an inflated model's bfloat16 deviation.
    """
    from transformers import AutoModelForCausalLM

    results = []
    for folder, folder_dtype in ((src_dir, source_dtype or dtype), (dst_dir, dtype)):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=folder_dtype, attn_implementation="sdpa")
        model = model.to(device).eval()
        logits, continuations = [], []
        with torch.no_grad():
            for ids in prompts:
                input_ids = torch.tensor([ids], device=device)
                logits.append(model(input_ids).logits[0].float().cpu())
                out = model.generate(
                    input_ids, max_new_tokens=greedy_tokens, do_sample=False, top_p=None, top_k=None, temperature=None
                )
                continuations.append(out[0, len(ids) :].tolist())
        results.append((logits, continuations))
        del model
        if device != "cpu":
            torch.cuda.empty_cache()
    (src_logits, src_text), (dst_logits, dst_text) = results
    source, inflated = torch.cat(src_logits), torch.cat(dst_logits)
    diff = (source - inflated).abs().max().item()
    return FunctionCheck(
        dtype=str(dtype).removeprefix("torch."),
        source_dtype=str(source_dtype or dtype).removeprefix("torch."),
        device=device,
        num_prompts=len(prompts),
        num_positions=source.shape[0],
        max_abs_logit_diff=diff,
        max_rel_logit_diff=diff / source.abs().max().item(),
        top1_agreement=(source.argmax(-1) == inflated.argmax(-1)).float().mean().item(),
        greedy_tokens=greedy_tokens,
        greedy_equal=sum(a == b for a, b in zip(src_text, dst_text, strict=True)),
    )


def check_prompts(folder: Path, num_prompts: int, data_dir: str | None) -> list[list[int]]:
    """Token ids of the first `num_prompts` GSM8K evaluation prompts, chat-templated by `folder`'s tokenizer."""
    from transformers import AutoTokenizer

    from ddbench import datasets
    from ddbench.harness.client import chat_input_ids
    from ddbench.heldout import EVAL_SIZES

    if num_prompts > EVAL_SIZES["gsm8k"]:
        raise InflationError(f"--check takes at most {EVAL_SIZES['gsm8k']} prompts (the evaluation split)")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompts = datasets.load_prompts("gsm8k", num_prompts, data_dir=data_dir)
    return [chat_input_ids(tokenizer, datasets.chat_messages(prompt)) for prompt in prompts]


def run(
    src: Path,
    dst: Path,
    *,
    draft: tuple[Path, Path] | None,
    preset: str | None,
    sizes: dict[str, int | None],
    draft_layers: int | None,
    device: str,
    dtype: str,
    seed: int,
    check: int,
    data_dir: str | None,
    console: Any,
    progress: Callable[[], Any],
) -> tuple[Inflation, Inflation | None]:
    """`ddbench testbed inflate`: inflate the target (and the drafter), check, print a table of sizes."""
    import time

    from rich.table import Table

    if dtype not in ("bfloat16", "float32"):
        raise InflationError(f"--dtype must be bfloat16 or float32, got {dtype!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InflationError("--device cuda, but torch sees no CUDA device")
    weights_dtype = getattr(torch, dtype)
    shape, reference = resolve_shape(Shape.of(read_config(Path(src))), preset, sizes)
    started = time.perf_counter()
    with progress() as bars:
        advance = _advance(bars, "target tensors")
        target_dir, target = inflate_target(
            src, dst, shape, device=device, dtype=weights_dtype, seed=seed, reference=reference, progress=advance
        )
        drafter = None
        if draft is not None:
            advance = _advance(bars, "drafter tensors")
            _, drafter = inflate_drafter(
                draft[0],
                draft[1],
                target=shape,
                num_layers=draft_layers,
                device=device,
                dtype=weights_dtype,
                seed=seed,
                progress=advance,
            )
    seconds = time.perf_counter() - started
    if check:
        prompts = check_prompts(Path(src), check, data_dir)
        checks = {"inflated": asdict(compare_targets(src, target_dir, prompts, dtype=weights_dtype, device=device))}
        if weights_dtype != torch.float32:  # the yardstick: what bfloat16 alone does to the source
            yardstick = compare_targets(
                src, src, prompts, dtype=weights_dtype, source_dtype=torch.float32, device=device
            )
            checks["source_vs_float32"] = asdict(yardstick)
        target = replace(target, check=checks)
        write_inflation(target_dir, target)
    table = Table(title=f"inflated in {seconds:.1f} s ({dtype}, {device})")
    for column in ("model", "shape", "parameters", "KV bytes / token"):
        table.add_column(column)
    table.add_row("source", Shape(**target.source_shape).describe(), "", "")
    table.add_row("target", shape.describe(), f"{target.parameters:,}", f"{target.kv_bytes_per_token:,}")
    if reference is not None:
        ratio = target.parameters / reference.parameters
        table.add_row(
            reference.name,
            f"(preset {preset})",
            f"{reference.parameters:,} ({ratio:.1%} of it)",
            f"{reference.kv_bytes_per_token:,}",
        )
    if drafter is not None:
        table.add_row("drafter", Shape(**drafter.shape).describe(), f"{drafter.parameters:,}", "")
    console.print(table)
    if target.rounded:
        console.print(f"rounded once in {dtype}: {', '.join(target.rounded)}")
    for name, c in (target.check or {}).items():
        console.print(
            f"{name}: {c['dtype']} against the source in {c['source_dtype']} on {c['num_prompts']} GSM8K evaluation "
            f"prompts ({c['device']}): max |logit diff| {c['max_abs_logit_diff']:.3g} ({c['max_rel_logit_diff']:.2e} "
            f"relative), top-1 agreement {c['top1_agreement']:.4f}, greedy {c['greedy_tokens']} tokens equal on "
            f"{c['greedy_equal']} of {c['num_prompts']}"
        )
    console.print(str(target_dir))
    return target, drafter


def _advance(bars: Any, description: str) -> Callable[[int, int], None]:
    """A progress callback (done, total) that draws one bar on the sweep's Rich progress."""
    state: dict[str, Any] = {}

    def advance(done: int, total: int) -> None:
        if "step" not in state:
            state["step"] = bars.counter(description, total)
        state["step"]()

    return advance

"""Is a speculative server's sampled output distributed as the target's own? A two-sample chi-square test.

Lossless sampling means the first tokens a DDTree (or DFLASH) server samples at temperature T follow exactly the
distribution the target alone samples from. For each of a few fixed prompts this draws `samples` completions
of `tokens` tokens from both servers (no seeds: every request an independent draw), counts each distinct
sequence as one category, and tests homogeneity of the two count vectors:

    chi2 = sum over both rows and all categories of (observed - expected)^2 / expected,
    expected = row total * column total / all,       df = categories - 1,
    p = P(chi2_df >= chi2) = gammaincc(df / 2, chi2 / 2)

Categories whose pooled count is below `min_count` are merged into one (the chi-square approximation wants
expected counts of about 5 or more). A prompt fails when p < alpha / prompts (Bonferroni). A test that cannot
fail proves nothing, so `--spec-temperature` plants a failure: the speculative side is asked at another
temperature, as a round that applied the wrong temperature would sample; the test must reject that.

    ddbench check sampled --ar http://127.0.0.1:30000 --spec http://127.0.0.1:30001 --model TARGET \\
        --samples 2000 --tokens 2 --temperature 1.0 [--top-p 0.9] [--spec-temperature 0.8] [--out result.json]

Example: at 2,000 samples per side a correct server gives p spread uniformly on [0, 1] (rejected 5 % of the
time at alpha 0.05 before correction); one that samples at T = 0.8 instead of 1.0 shifts the first token's
distribution enough for p < 1e-6 on ordinary prompts.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated

import httpx
import torch
import typer

from ddbench.harness.client import chat_input_ids
from ddbench.testbed.distill import generate_many, generate_one

PROMPTS = (
    "Tell me a short story about a fox.",
    "What is the capital of France? Answer in one sentence.",
    "Write a Python function that adds two numbers.",
    "List three colors.",
)


def chi_square(a: Counter, b: Counter, min_count: int = 10) -> dict:
    """Two-sample chi-square homogeneity test of two category counts: {chi2, df, p, categories}."""
    pooled = a + b
    kept = [key for key, count in pooled.items() if count >= min_count]
    rare = [key for key in pooled if key not in kept]
    rows = [[counts[key] for key in kept] + [sum(counts[key] for key in rare)] for counts in (a, b)]
    if not rare:
        rows = [row[:-1] for row in rows]
    table = torch.tensor(rows, dtype=torch.float64)
    table = table[:, table.sum(dim=0) > 0]
    if table.shape[1] < 2:
        return {"chi2": 0.0, "df": 0, "p": 1.0, "categories": int(table.shape[1])}
    expected = table.sum(dim=1, keepdim=True) * table.sum(dim=0, keepdim=True) / table.sum()
    chi2 = float(((table - expected) ** 2 / expected).sum())
    df = table.shape[1] - 1
    p = float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(chi2 / 2)))
    return {"chi2": chi2, "df": df, "p": p, "categories": int(table.shape[1])}


def draw(url: str, input_ids: list[int], samples: int, params: dict, *, batch: int, concurrency: int) -> Counter:
    """`samples` completions of one prompt, counted by their token sequences."""
    counts: Counter = Counter()
    sizes = [min(batch, samples - start) for start in range(0, samples, batch)]
    with httpx.Client(timeout=600.0) as http, ThreadPoolExecutor(concurrency) as pool:

        def one(size: int) -> list[list[int]]:
            if batch == 1:
                return [generate_one(http, url, input_ids, params)]
            return generate_many(http, url, [input_ids] * size, params)

        for outputs in pool.map(one, sizes):
            counts.update(tuple(output) for output in outputs)
    return counts


def compare(
    ar_url: str,
    spec_url: str,
    tokenizer,
    prompts: Sequence[str],
    *,
    samples: int,
    tokens: int,
    temperature: float,
    top_p: float = 1.0,
    spec_temperature: float | None = None,
    alpha: float = 0.05,
    batch: int = 64,
    concurrency: int = 8,
) -> dict:
    """The test on every prompt: per prompt counts' size, chi2, df and p; `rejected` when any p < alpha / prompts."""
    results = []
    for prompt in prompts:
        ids = chat_input_ids(tokenizer, [{"role": "user", "content": prompt}])
        params = {"temperature": temperature, "top_p": top_p, "max_new_tokens": tokens, "ignore_eos": True}
        spec_params = {**params, "temperature": temperature if spec_temperature is None else spec_temperature}
        a = draw(ar_url, ids, samples, params, batch=batch, concurrency=concurrency)
        b = draw(spec_url, ids, samples, spec_params, batch=batch, concurrency=concurrency)
        results.append({"prompt": prompt, **chi_square(a, b)})
    threshold = alpha / len(prompts)
    return {
        "samples": samples, "tokens": tokens, "temperature": temperature, "top_p": top_p,
        "spec_temperature": spec_temperature, "alpha": alpha, "threshold": threshold,
        "rejected": any(r["p"] < threshold for r in results), "prompts": results,
    }  # fmt: skip


def main(
    ar: Annotated[str, typer.Option(help="The target-only server (SGLang /generate).")],
    spec: Annotated[str, typer.Option(help="The speculative server under test.")],
    model: Annotated[str, typer.Option(help="The target's folder (its tokenizer).")],
    samples: Annotated[int, typer.Option(help="Completions per prompt and server.")] = 2000,
    tokens: Annotated[int, typer.Option(help="Tokens per completion (1-3).")] = 2,
    temperature: Annotated[float, typer.Option(help="Sampling temperature, both servers.")] = 1.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling p, both servers.")] = 1.0,
    spec_temperature: Annotated[
        float | None, typer.Option(help="Planted failure: ask the speculative side at this temperature instead.")
    ] = None,
    alpha: Annotated[float, typer.Option(help="Family-wise level (Bonferroni over prompts).")] = 0.05,
    batch: Annotated[int, typer.Option(help="Prompts per request (SGLang takes lists; 1 for other servers).")] = 64,
    out: Annotated[Path | None, typer.Option(help="Also write the result as JSON here.")] = None,
) -> None:
    """Is a speculative server's sampled output distributed as the target's own? A two-sample chi-square test
    of its first tokens against the target-only server's, per prompt (see ddbench/check/sampled.py)."""
    from transformers import AutoTokenizer

    result = compare(
        ar, spec, AutoTokenizer.from_pretrained(model), PROMPTS, samples=samples, tokens=tokens,
        temperature=temperature, top_p=top_p, spec_temperature=spec_temperature, alpha=alpha, batch=batch,
    )  # fmt: skip
    text = json.dumps(result, indent=1)
    if out:
        out.write_text(text + "\n")
    print(text)
    verdict = "rejected: the distributions differ" if result["rejected"] else "not rejected"
    print(f"{verdict} (min p {min(r['p'] for r in result['prompts']):.3g}, threshold {result['threshold']:.3g})",
          file=sys.stderr)  # fmt: skip

"""The target's own answers, from a running server: training data for a drafter, or the greedy outputs on which
`ddbench.model.accept` measures a drafter's acceptance.

    ddbench testbed distill train PROMPTS.jsonl OUT.jsonl --url http://127.0.0.1:30000 --model TARGET \\
        --temperatures 0,0.7,1.0 --max-new-tokens 256 --batch 64 --concurrency 8
    ddbench testbed distill eval OUT.jsonl --url ... --model TARGET --max-new-tokens 128

`train` answers every prompt of PROMPTS (`ddbench testbed train-prompts` writes it; a held-out prompt is
refused, exit 2, before any request) once per temperature; `eval` answers the held-out prompts greedily
(the first turn of each held-out prompt of the three datasets, and every prompt of heldout.OOD_FILE). Each
request is the benchmark's: the chat template as `ddbench.harness.client.chat_input_ids` applies it, sent as token
ids to SGLang's /generate (any server with that API: the AR server of the target is the fast one). Each
answer is one JSON line:

    {"key": "17:0.7", "dataset": "synth-math", "prompt": "...", "temperature": 0.7,
     "prompt_len": 48, "ids": [prompt ids..., answer ids...]}

Requests go in a seeded random order, so a run cut short (`timeout`) holds a fair sample of every dataset and
temperature; an interrupted run resumes: keys already in OUT are skipped. A line per 5 % reports progress.
"""

from __future__ import annotations

import json
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from ddbench import heldout
from ddbench.datasets import load_all_prompts
from ddbench.harness.client import chat_input_ids, generate


def eval_rows(data_dir: str | None = None) -> list[dict[str, Any]]:
    """The first turn of every held-out prompt, in the split's order, then every OOD prompt."""
    rows = [
        {"dataset": name, "index": prompt.index, "prompt": prompt.turns[0]}
        for name in heldout.EVAL_SIZES
        for prompt in heldout.eval_prompts(name, data_dir=data_dir)
    ]
    rows += [
        {"dataset": "ood", "index": p.index, "prompt": p.turns[0]} for p in load_all_prompts(str(heldout.OOD_FILE))
    ]
    return rows


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """JSON lines of a prompts or answers file."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def answer_all(
    rows: list[dict[str, Any]],
    out: Path,
    *,
    url: str,
    model: str,
    temperatures: list[float],
    max_new_tokens: int,
    concurrency: int,
    batch: int = 1,
    seed: int = 0,
    log=print,
) -> int:
    """Append to `out` the answer of every (row, temperature) not yet in it; returns how many were added.

    The requests go in a seeded random order (a run stopped early holds a sample of every dataset and
    temperature, not the first ones), `batch` prompts per request (SGLang's /generate takes a list of
    input_ids with a list of sampling_params, one each, so the prompts of a request may differ in
    temperature; 1 sends one prompt per request, as any server takes), `concurrency` requests in flight:
    at most batch x concurrency answers are being generated at once.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    done = {row["key"] for row in read_rows(out)} if out.exists() else set()
    jobs = [(f"{i}:{t:g}", row, t) for t in temperatures for i, row in enumerate(rows) if f"{i}:{t:g}" not in done]
    random.Random(seed).shuffle(jobs)
    prompts = {row["prompt"]: None for _, row, _ in jobs}
    for text in prompts:  # tokenized once, here, not under the workers' lock
        prompts[text] = chat_input_ids(tokenizer, [{"role": "user", "content": text}])
    groups = [jobs[i : i + batch] for i in range(0, len(jobs), batch)]
    log(f"{len(jobs)} answers to get in {len(groups)} requests ({len(done)} already in {out})")
    start, step = time.time(), max(1, len(jobs) // 20)

    def one(http: httpx.Client, group: list) -> list[dict[str, Any]]:
        ids = [prompts[row["prompt"]] for _, row, _ in group]
        params = [{"temperature": temperature, "max_new_tokens": max_new_tokens} for _, _, temperature in group]
        outputs = generate_many(http, url, ids, params) if batch > 1 else [generate_one(http, url, ids[0], params[0])]
        return [
            {
                "key": key,
                "dataset": row.get("dataset"),
                "prompt": row["prompt"],
                "temperature": temperature,
                "prompt_len": len(prompt),
                "ids": prompt + output,
            }
            for (key, row, temperature), prompt, output in zip(group, ids, outputs)
        ]

    written = 0
    limits = httpx.Limits(max_connections=concurrency)
    with httpx.Client(timeout=1800.0, limits=limits) as http, out.open("a") as sink:
        with ThreadPoolExecutor(concurrency) as pool:
            futures = [pool.submit(one, http, group) for group in groups]
            for future in as_completed(futures):
                for answer in future.result():
                    sink.write(json.dumps(answer) + "\n")
                    written += 1
                    if written % step == 0 or written == len(jobs):
                        log(f"{written}/{len(jobs)} answers, {time.time() - start:.0f} s")
                sink.flush()
    return written


def generate_one(http: httpx.Client, url: str, input_ids: list[int], params: dict) -> list[int]:
    return list(generate(http, url, input_ids, params, stream=False).output_ids)


def generate_many(http: httpx.Client, url: str, input_ids: list[list[int]], params: list[dict]) -> list[list[int]]:
    """One /generate request for several prompts, each with its sampling params (SGLang answers a list with a
    list, in order)."""
    response = http.post(f"{url}/generate", json={"input_ids": input_ids, "sampling_params": params})
    response.raise_for_status()
    bodies = response.json()
    if not isinstance(bodies, list) or len(bodies) != len(input_ids):
        raise ValueError(f"{url}/generate: expected a list of {len(input_ids)} answers for a batched request")
    return [[int(token) for token in body["output_ids"]] for body in bodies]


app = typer.Typer(
    help="The target's own answers from a running server: a drafter's training data, or its evaluation answers.",
    no_args_is_help=True,
    add_completion=False,
)
Out = Annotated[Path, typer.Argument(help="Answers JSONL (appended to; keys already there are skipped).")]
Url = Annotated[str, typer.Option(help="Server with SGLang's /generate, e.g. http://127.0.0.1:30000.")]
Model = Annotated[str, typer.Option(help="The served target's folder (its tokenizer).")]
Concurrency = Annotated[int, typer.Option(help="Requests in flight.")]
Batch = Annotated[int, typer.Option(help="Prompts per request (SGLang takes lists; 1 for other servers).")]


@app.command("train")
def train_command(
    prompts: Annotated[
        Path, typer.Argument(help="JSONL with a 'prompt' per line (`ddbench testbed train-prompts` writes it).")
    ],
    out: Out,
    url: Url,
    model: Model,
    max_new_tokens: Annotated[int, typer.Option(help="Tokens per answer at most.")] = 256,
    concurrency: Concurrency = 8,
    batch: Batch = 64,
    temperatures: Annotated[str, typer.Option(help="Comma list; 0 is greedy.")] = "0",
    seed: Annotated[int, typer.Option(help="Order of the requests (a run cut short answers another sample).")] = 0,
) -> None:
    """Answer the training prompts once per temperature; a held-out prompt is refused (exit 2) before any request."""
    rows = read_rows(prompts)
    try:
        heldout.check_training_texts(row["prompt"] for row in rows)
    except heldout.HeldOutError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(code=2) from None
    temperature_list = [float(t) for t in temperatures.split(",")]
    answer_all(
        rows,
        out,
        url=url,
        model=model,
        temperatures=temperature_list,
        max_new_tokens=max_new_tokens,
        concurrency=concurrency,
        batch=batch,
        seed=seed,
        log=_log,
    )


@app.command("eval")
def eval_command(
    out: Out,
    url: Url,
    model: Model,
    data_dir: Annotated[
        str | None, typer.Option(help="The offline dataset mirror (default: $DDBENCH_DATA_DIR).")
    ] = None,
    max_new_tokens: Annotated[int, typer.Option(help="Tokens per answer at most.")] = 128,
    concurrency: Concurrency = 8,
    batch: Batch = 64,
) -> None:
    """Answer the held-out prompts greedily: what `ddbench model accept` measures a drafter on."""
    answer_all(
        eval_rows(data_dir),
        out,
        url=url,
        model=model,
        temperatures=[0.0],
        max_new_tokens=max_new_tokens,
        concurrency=concurrency,
        batch=batch,
        log=_log,
    )


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)

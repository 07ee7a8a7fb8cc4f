"""The target's own answers, from a running server: training data for a drafter, or the greedy outputs on which
`ddbench.accept` measures a drafter's acceptance.

    python -m ddbench.distill train PROMPTS.jsonl OUT.jsonl --url http://127.0.0.1:30000 --model TARGET \\
        --temperatures 0,0.7,1.0 --max-new-tokens 256 --concurrency 512
    python -m ddbench.distill eval OUT.jsonl --url ... --model TARGET --max-new-tokens 128

`train` answers every prompt of PROMPTS (`ddbench.testbed train-prompts` writes it; a held-out prompt is
refused, exit 2, before any request) once per temperature; `eval` answers the held-out prompts greedily
(the first turn of each held-out prompt of the three datasets, and every prompt of heldout.OOD_FILE). Each
request is the benchmark's: the chat template as `ddbench.client.chat_input_ids` applies it, sent as token
ids to SGLang's /generate (any server with that API: the AR server of the target is the fast one). Each
answer is one JSON line:

    {"key": "17:0.7", "dataset": "synth-math", "prompt": "...", "temperature": 0.7,
     "prompt_len": 48, "ids": [prompt ids..., answer ids...]}

An interrupted run resumes: keys already in OUT are skipped. A line per 5 % of the requests reports progress.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import httpx

from ddbench import heldout
from ddbench.client import chat_input_ids, generate
from ddbench.datasets import load_all_prompts


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
    log=print,
) -> int:
    """Append to `out` the answer of every (row, temperature) not yet in it; returns how many were added."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    done = {row["key"] for row in read_rows(out)} if out.exists() else set()
    jobs = [(f"{i}:{t:g}", row, t) for t in temperatures for i, row in enumerate(rows) if f"{i}:{t:g}" not in done]
    log(f"{len(jobs)} requests ({len(done)} answers already in {out})")
    start, step = time.time(), max(1, len(jobs) // 20)

    def one(http: httpx.Client, key: str, row: dict[str, Any], temperature: float) -> dict[str, Any]:
        prompt = chat_input_ids(tokenizer, [{"role": "user", "content": row["prompt"]}])
        params = {"temperature": temperature, "max_new_tokens": max_new_tokens}
        completion = generate(http, url, prompt, params, stream=False)
        return {
            "key": key,
            "dataset": row.get("dataset"),
            "prompt": row["prompt"],
            "temperature": temperature,
            "prompt_len": len(prompt),
            "ids": prompt + list(completion.output_ids),
        }

    written = 0
    with httpx.Client(timeout=600.0, limits=httpx.Limits(max_connections=concurrency)) as http, out.open("a") as sink:
        with ThreadPoolExecutor(concurrency) as pool:
            futures = [pool.submit(one, http, *job) for job in jobs]
            for future in as_completed(futures):
                sink.write(json.dumps(future.result()) + "\n")
                written += 1
                if written % step == 0 or written == len(jobs):
                    log(f"{written}/{len(jobs)} answers, {time.time() - start:.0f} s")
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="answer training prompts (held-out ones refused)")
    train.add_argument("prompts", help="JSONL with a 'prompt' per line (ddbench.testbed train-prompts)")
    evaluate = commands.add_parser("eval", help="answer the held-out prompts greedily")
    evaluate.add_argument("--data-dir", help="the offline dataset mirror (default: $DDBENCH_DATA_DIR)")
    for command in (train, evaluate):
        command.add_argument("out", help="answers JSONL (appended to; keys already there are skipped)")
        command.add_argument("--url", required=True, help="server with SGLang's /generate, e.g. http://127.0.0.1:30000")
        command.add_argument("--model", required=True, help="the served target's folder (its tokenizer)")
        command.add_argument("--max-new-tokens", type=int, default=256 if command is train else 128)
        command.add_argument("--concurrency", type=int, default=256, help="requests in flight")
    train.add_argument("--temperatures", default="0", help="comma list; 0 is greedy (default: 0)")
    args = parser.parse_args(argv)
    if args.command == "train":
        rows = read_rows(args.prompts)
        try:
            heldout.check_training_texts(row["prompt"] for row in rows)
        except heldout.HeldOutError as error:
            parser.exit(2, f"{parser.prog}: error: {error}\n")
        temperatures = [float(t) for t in args.temperatures.split(",")]
    else:
        rows, temperatures = eval_rows(args.data_dir), [0.0]
    answer_all(
        rows,
        Path(args.out),
        url=args.url,
        model=args.model,
        temperatures=temperatures,
        max_new_tokens=args.max_new_tokens,
        concurrency=args.concurrency,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )


if __name__ == "__main__":
    main()

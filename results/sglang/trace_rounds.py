"""Torch-profiler traces of a live SGLang server's decode rounds, at each concurrency.

    python results/sglang/trace_rounds.py --url http://127.0.0.1:31000 --out DIR --prefix ddtree-b15 \
        --data-dir DATA --concurrency 1,16 --steps 12

For each concurrency c: c GSM8K chat requests (greedy, ignore_eos, --max-tokens each) are sent at once,
and once they decode (after --delay s) POST /start_profile records --steps scheduler steps with CPU and
GPU activity and Python stacks; the server writes DIR/PREFIX-c{c}-*.trace.json.gz. A warm-up at the
same concurrency first compiles what the batch size needs. Summaries: python -m ddbench.trace_summary.
"""

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx


def questions(data_dir: Path, n: int) -> list[str]:
    with open(data_dir / "gsm8k_test.jsonl") as f:
        return [json.loads(line)["question"] for _, line in zip(range(n), f)]


def generate(url: str, question: str, max_tokens: int) -> int:
    body = {
        "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600)
    reply.raise_for_status()
    return int(reply.json()["usage"]["completion_tokens"])


def burst(url: str, prompts: list[str], max_tokens: int, during=None) -> list[int]:
    """Send every prompt at once; call during() while they run; the completion token counts."""
    with ThreadPoolExecutor(len(prompts)) as pool:
        futures = [pool.submit(generate, url, p, max_tokens) for p in prompts]
        if during is not None:
            during()
        return [f.result() for f in futures]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--steps", type=int, default=12, help="scheduler steps per trace")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--delay", type=float, default=0.3, help="seconds between sending and tracing")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    out_dir = str(args.out.resolve())
    for c in (int(x) for x in args.concurrency.split(",")):
        prompts = questions(args.data_dir, c)
        burst(args.url, prompts, 32)  # warm-up at this batch size

        def start_profile(c=c):
            time.sleep(args.delay)
            body = {"output_dir": out_dir, "num_steps": args.steps, "activities": ["CPU", "GPU"],
                    "with_stack": True, "profile_prefix": f"{args.prefix}-c{c}"}
            httpx.post(f"{args.url}/start_profile", json=body, timeout=60).raise_for_status()

        started = time.perf_counter()
        tokens = burst(args.url, prompts, args.max_tokens, during=start_profile)
        print(f"{args.prefix} c{c}: {sum(tokens)} tokens in {time.perf_counter() - started:.2f} s")
        deadline = time.time() + 120
        while not list(args.out.glob(f"{args.prefix}-c{c}-*.trace.json.gz")) and time.time() < deadline:
            time.sleep(1)
        time.sleep(3)  # the exporter may still be writing
        print(" ", [p.name for p in args.out.glob(f"{args.prefix}-c{c}-*")])


if __name__ == "__main__":
    main()

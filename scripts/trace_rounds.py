"""Decode rounds of a live SGLang server under load, traced with the torch profiler or not.

    python scripts/trace_rounds.py --url http://127.0.0.1:31000 --out DIR --prefix ddtree-b15 \
        --data-dir DATA --concurrency 1,16 --steps 12          # traces DIR/PREFIX-c{c}-*.trace.json.gz
    python scripts/trace_rounds.py ... --steps 0 --repeat 4   # load only: time rounds from the server log

For each concurrency c, --repeat bursts of c GSM8K chat requests (greedy, ignore_eos, --max-tokens each)
are sent at once; their texts go to DIR/PREFIX-outputs.jsonl (one line per request: concurrency, burst,
prompt index, text), so two servers' greedy outputs can be compared. A warm-up burst at the same
concurrency first compiles what the batch size needs. With --steps N > 0, --delay s into the first burst
POST /start_profile records N scheduler steps with CPU and GPU activity and Python stacks; a trace that
has not appeared 60 s after the burst is stopped with /stop_profile. Summaries: python -m
ddbench.kernels.trace_summary; round times from the server's own log: scripts/log_rounds.py.
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


def generate(url: str, question: str, max_tokens: int) -> str:
    body = {
        "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600)
    reply.raise_for_status()
    return reply.json()["choices"][0]["message"]["content"]


def burst(url: str, prompts: list[str], max_tokens: int, during=None) -> list[str]:
    """Send every prompt at once; call during() while they run; the completion texts."""
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
    parser.add_argument("--steps", type=int, default=12, help="scheduler steps per trace (0: no trace)")
    parser.add_argument("--repeat", type=int, default=1, help="bursts per concurrency")
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--delay", type=float, default=0.2, help="seconds between sending and tracing")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    out_dir = str(args.out.resolve())
    outputs = open(args.out / f"{args.prefix}-outputs.jsonl", "w")
    for c in (int(x) for x in args.concurrency.split(",")):
        prompts = questions(args.data_dir, c)
        burst(args.url, prompts, 32)  # warm-up at this batch size

        def start_profile(c=c):
            time.sleep(args.delay)
            body = {"output_dir": out_dir, "num_steps": args.steps, "activities": ["CPU", "GPU"],
                    "with_stack": True, "profile_prefix": f"{args.prefix}-c{c}"}
            httpx.post(f"{args.url}/start_profile", json=body, timeout=60).raise_for_status()

        for repeat in range(args.repeat):
            started = time.perf_counter()
            trace = start_profile if args.steps and repeat == 0 else None
            texts = burst(args.url, prompts, args.max_tokens, during=trace)
            print(f"{args.prefix} c{c} burst {repeat}: {len(texts)} requests in {time.perf_counter() - started:.2f} s")
            for index, text in enumerate(texts):
                outputs.write(json.dumps({"concurrency": c, "burst": repeat, "prompt": index, "text": text}) + "\n")
        if args.steps:
            pattern = f"{args.prefix}-c{c}-*.trace.json.gz"
            deadline = time.time() + 60
            while not list(args.out.glob(pattern)) and time.time() < deadline:
                time.sleep(1)
            if not list(args.out.glob(pattern)):
                httpx.post(f"{args.url}/stop_profile", timeout=120)
            time.sleep(3)  # the exporter may still be writing
            print(" ", [p.name for p in args.out.glob(f"{args.prefix}-c{c}-*")])
    outputs.close()


if __name__ == "__main__":
    main()

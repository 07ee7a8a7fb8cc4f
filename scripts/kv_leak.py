"""KV-leak check of a running SGLang server: after a load, the KV tokens in use return to their idle value.

    python scripts/kv_leak.py --url http://127.0.0.1:30000            # 500 requests, 16 at a time
    python scripts/kv_leak.py --url ... --abort-fraction 0.1          # also drop some streams early

It flushes the radix cache (POST /flush_cache), reads the KV usage once the server is idle, sends the
requests (random short text prompts, or --input-ids), waits until the server is idle again, reads the
usage, flushes and reads once more; prints both readings, then one JSON line, and exits 0 when the idle
usage is back at its start, 1 on a leak, a failed request or a server lost, 2 when it cannot start.
Stdlib and httpx only.

The reading (SGLang 0.5.15): GET /v1/loads (entrypoints/v1_loads.py) returns, per DP rank, the load
snapshot the scheduler publishes (SchedulerLoadInquirer.get_loads; Scheduler.on_idle republishes it on
every idle pass), whose num_used_tokens = max_total_num_tokens - (allocator free + radix-cache
evictable) (SchedulerPoolStatsObserver._get_token_info; the larger of the full and SWA pools on hybrid
models). Tokens the radix cache keeps from finished requests are evictable and not counted, so an idle
server reads 0 unless KV slots leaked (neither free nor owned by the cache); that is why the check reads
the usage before flushing. Scheduler.flush_cache clears the allocator and the radix tree outright
(token_to_kv_pool_allocator.clear()), which hides a leak: the reading after it is reported, not judged.

SGLang checks the same invariant itself at idle (Scheduler.on_idle -> SchedulerInvariantChecker
._check_all_pools) and raises in the scheduler when SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE is on
(the default), which ends the server: this script then reports the server lost. Starting the server
with SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY=1 also checks it after every busy iteration.

With a DDTREE server (/server_info speculative_algorithm), requests cycle through the budgets of
--budgets that the server's own budget allows, as sampling_params.custom_params {"ddtree_budget": b}.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

POLL_S = 0.5  # seconds between usage readings


@dataclass(frozen=True)
class KVUsage:
    """The KV pool of a server, summed over its DP ranks (GET /v1/loads)."""

    used_tokens: int  # allocated KV slots neither free nor evictable from the radix cache
    max_total_tokens: int
    running_reqs: int
    waiting_reqs: int

    @property
    def idle(self) -> bool:
        return self.running_reqs == 0 and self.waiting_reqs == 0


@dataclass(frozen=True)
class RequestSpec:
    """One request of the load."""

    prompt: str | list[int]  # text, or token ids
    budget: int | None  # ddtree_budget custom param; None sends none
    temperature: float
    abort: bool  # stream, then disconnect after the first chunk (the server aborts the request)


@dataclass(frozen=True)
class Outcome:
    completion_tokens: int
    aborted: bool
    error: str | None


def parse_loads(body: dict) -> KVUsage:
    """KVUsage from a /v1/loads answer: {"loads": [{"num_used_tokens": .., ...} per DP rank]}."""
    loads = body.get("loads") if isinstance(body, dict) else None
    if not loads:
        raise ValueError(f"no loads in the /v1/loads answer: {str(body)[:200]}")
    total = lambda key: sum(int(load[key]) for load in loads)
    try:
        return KVUsage(
            used_tokens=total("num_used_tokens"),
            max_total_tokens=total("max_total_num_tokens"),
            running_reqs=total("num_running_reqs"),
            waiting_reqs=total("num_waiting_reqs"),
        )
    except (KeyError, TypeError) as error:
        raise ValueError(f"malformed /v1/loads answer ({error!r}): {str(body)[:200]}") from None


def usable_budgets(budgets: Sequence[int], server_info: dict) -> list[int | None]:
    """The DDTree budgets to send: those within the server's budget; [None] when it runs no DDTREE."""
    if server_info.get("speculative_algorithm") != "DDTREE":
        return [None]
    limit = server_info.get("ddtree_budget")
    allowed = [b for b in budgets if limit is None or b <= int(limit)]
    if not allowed:
        raise ValueError(f"none of the budgets {list(budgets)} fits the server's ddtree_budget {limit}")
    return allowed


def random_prompts(count: int, rng: random.Random) -> list[str]:
    """Short prompts of varied length; every fourth starts with one shared prefix, so the radix cache
    holds shared and private tokens (and page boundaries fall at varied places)."""
    shared = " ".join(str(rng.randrange(1000)) for _ in range(120))
    prompts = []
    for k in range(count):
        tail = " ".join(str(rng.randrange(1000)) for _ in range(rng.randrange(4, 200)))
        prompts.append(f"{shared} {tail}" if k % 4 == 0 else f"Continue the list: {tail}")
    return prompts


def plan(
    prompts: Sequence[str | list[int]],
    count: int,
    budgets: Sequence[int | None],
    temperatures: Sequence[float],
    abort_fraction: float,
    rng: random.Random,
) -> list[RequestSpec]:
    """count requests: prompts cycled, every budget with every temperature, a seeded share aborted."""
    return [
        RequestSpec(
            prompt=prompts[k % len(prompts)],
            budget=budgets[k % len(budgets)],
            temperature=temperatures[(k // len(budgets)) % len(temperatures)],
            abort=rng.random() < abort_fraction,
        )
        for k in range(count)
    ]


def payload(spec: RequestSpec, max_new_tokens: int) -> dict:
    """The /generate body of a request."""
    params: dict = {"max_new_tokens": max_new_tokens, "temperature": spec.temperature}
    if spec.budget is not None:
        params["custom_params"] = {"ddtree_budget": spec.budget}
    key = "text" if isinstance(spec.prompt, str) else "input_ids"
    return {key: spec.prompt, "sampling_params": params, "stream": spec.abort}


def send(client: httpx.Client, url: str, spec: RequestSpec, max_new_tokens: int) -> Outcome:
    """Send one request and wait for its answer (or, for an abort, its first chunk)."""
    try:
        if spec.abort:
            with client.stream("POST", url + "/generate", json=payload(spec, max_new_tokens)) as response:
                response.raise_for_status()
                first = next((line for line in response.iter_lines() if line.startswith("data:")), "")
            if '"error"' in first:
                return Outcome(0, False, first[:300])
            return Outcome(completion_tokens=0, aborted=True, error=None)  # closing the stream aborts it
        response = client.post(url + "/generate", json=payload(spec, max_new_tokens))
        response.raise_for_status()
        body = response.json()
        body = body[0] if isinstance(body, list) else body
        return Outcome(int(body.get("meta_info", {}).get("completion_tokens", 0)), False, None)
    except httpx.HTTPStatusError as error:
        return Outcome(0, False, f"HTTP {error.response.status_code}: {error.response.text[:300]}")
    except httpx.HTTPError as error:
        return Outcome(0, False, f"{type(error).__name__}: {error}")


def read_usage(client: httpx.Client, url: str) -> KVUsage:
    response = client.get(url + "/v1/loads", params={"include": "core"})
    response.raise_for_status()
    return parse_loads(response.json())


def wait_idle(client: httpx.Client, url: str, timeout_s: float, stable: int = 3) -> KVUsage:
    """The usage once `stable` readings POLL_S apart are idle and equal."""
    deadline = time.monotonic() + timeout_s
    last, streak = None, 0
    while True:
        usage = read_usage(client, url)
        streak = (streak + 1 if usage == last else 1) if usage.idle else 0
        last = usage
        if streak >= stable:
            return usage
        if time.monotonic() > deadline:
            raise TimeoutError(f"not idle after {timeout_s} s: {usage}")
        time.sleep(POLL_S)


def flush(client: httpx.Client, url: str, timeout_s: float) -> None:
    """POST /flush_cache; the server refuses (400) while requests are in flight, so retry."""
    deadline = time.monotonic() + timeout_s
    while (response := client.post(url + "/flush_cache")).status_code != 200:
        if time.monotonic() > deadline:
            raise TimeoutError(f"/flush_cache refused for {timeout_s} s: {response.text[:200]}")
        time.sleep(POLL_S)


def load_input_ids(path: str) -> list[list[int]]:
    """Token-id prompts, one JSON list (or {"input_ids": [...]}) per line."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [[int(t) for t in (row["input_ids"] if isinstance(row, dict) else row)] for row in rows]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    url = args.url.rstrip("/")
    rng = random.Random(args.seed)
    limits = httpx.Limits(max_connections=args.concurrency + 2)
    with httpx.Client(timeout=args.request_timeout, limits=limits) as client:
        try:
            info = client.get(url + "/server_info").raise_for_status().json()
            budgets = usable_budgets(args.budgets, info)
            flush(client, url, args.idle_timeout)
            start = wait_idle(client, url, args.idle_timeout)
        except (httpx.HTTPError, ValueError, TimeoutError) as error:
            print(f"kv_leak: cannot start: {error}", file=sys.stderr)
            return 2
        prompts = load_input_ids(args.input_ids) if args.input_ids else random_prompts(args.requests, rng)
        specs = plan(prompts, args.requests, budgets, args.temperatures, args.abort_fraction, rng)
        print(f"start: {start}; sending {len(specs)} requests, budgets {budgets}", file=sys.stderr)
        began = time.perf_counter()
        with ThreadPoolExecutor(args.concurrency) as pool:
            outcomes = list(pool.map(lambda spec: send(client, url, spec, args.max_new_tokens), specs))
        load_s = time.perf_counter() - began
        idle = flushed = lost = None
        try:
            idle = wait_idle(client, url, args.idle_timeout)
            flush(client, url, args.idle_timeout)
            flushed = wait_idle(client, url, args.idle_timeout)
        except (httpx.HTTPError, ValueError, TimeoutError) as error:
            lost = f"{type(error).__name__}: {error}"
    record = {
        "url": url,
        "algorithm": info.get("speculative_algorithm"),
        "concurrency": args.concurrency,
        "max_new_tokens": args.max_new_tokens,
        "budgets": budgets,
        "temperatures": args.temperatures,
        "load_s": round(load_s, 2),
        **verdict(start, idle, flushed, outcomes, lost),
    }
    print(
        f"used tokens: start {start.used_tokens}, idle after the load {record['used_tokens_idle']}, "
        f"after flush {record['used_tokens_after_flush']}"
    )
    print(json.dumps(record))
    return 0 if record["ok"] else 1


def verdict(
    start: KVUsage, idle: KVUsage | None, flushed: KVUsage | None, outcomes: Sequence[Outcome], lost: str | None
) -> dict:
    """The judged numbers: ok when no request failed, the server answered to the end and the idle usage
    after the load equals the usage at the start."""
    errors = [o.error for o in outcomes if o.error is not None]
    leaked = None if idle is None else idle.used_tokens - start.used_tokens
    return {
        "requests": len(outcomes),
        "aborted": sum(o.aborted for o in outcomes),
        "failed": len(errors),
        "first_error": errors[0] if errors else None,
        "completion_tokens": sum(o.completion_tokens for o in outcomes),
        "max_total_num_tokens": start.max_total_tokens,
        "used_tokens_start": start.used_tokens,
        "used_tokens_idle": None if idle is None else idle.used_tokens,
        "used_tokens_after_flush": None if flushed is None else flushed.used_tokens,
        "leaked_tokens": leaked,
        "server_lost": lost,
        "ok": lost is None and not errors and leaked == 0,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ints = lambda text: [int(v) for v in text.split(",")]
    floats = lambda text: [float(v) for v in text.split(",")]
    parser.add_argument("--url", default="http://127.0.0.1:30000", help="the server (default %(default)s)")
    parser.add_argument("--requests", type=int, default=500, help="requests to send (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight (default %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="per request (default %(default)s)")
    parser.add_argument(
        "--budgets", type=ints, default=[8, 16, 32, 64], help="DDTree budgets to cycle, comma-separated (DDTREE only)"
    )
    parser.add_argument("--temperatures", type=floats, default=[0.0, 0.7], help="temperatures to cycle (0 = greedy)")
    parser.add_argument("--abort-fraction", type=float, default=0.0, help="share of requests dropped mid-stream")
    parser.add_argument("--input-ids", help="JSONL of token-id prompts to cycle instead of random text prompts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--idle-timeout", type=float, default=120.0, help="seconds to wait for an idle server")
    parser.add_argument("--request-timeout", type=float, default=600.0, help="seconds per request")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())

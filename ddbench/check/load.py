"""`ddbench check load`: a serving load with faults, and what an SGLang server must still hold after it.

    ddbench check load --url http://127.0.0.1:30000            # 2,000 requests, 32 in flight, 10 % aborted,
                                                               # 10 % disconnected, 5 % invalid
    ddbench check load --url ... --requests 500 --out load.json

The check, in order:
1. `/server_info`: the method, and on a DDTREE server its budget and, on an auto server
   (SGLANG_DDTREE_BUDGET=auto), the budgets it chooses among. The radix cache is flushed (POST /flush_cache) and,
   once the server is idle, the KV tokens in use are read (GET /v1/loads).
2. The fixed set: `--fixed` prompts answered greedily, one at a time; their output tokens. Then the counters of
   `/metrics` (where the server runs with --enable-metrics).
3. The load: `--requests` requests, `--concurrency` in flight, prompts of 4 to 400 words (every fourth behind one
   shared prefix, so the radix cache holds shared and private tokens), max_new_tokens cycled over
   `--max-new-tokens`, temperatures over `--temperatures`, and on a DDTREE server a ddtree_budget cycled over the
   budgets it serves (`--budgets` up to its own; `auto` too on an auto server). Each request is, seeded:
   - `complete`: answered in full (every other one streamed);
   - `abort`: streamed; after its first chunk the client asks POST /abort_request for its rid, and its stream
     must end (finish_reason abort, or length/stop where it finished first);
   - `disconnect`: streamed; the client closes the connection after the first chunk (SGLang aborts it);
   - `invalid`: custom_params the server must refuse (a budget that is negative, a string, a float, above the
     server's, or `auto` on a fixed server; a draft temperature <= 0, NaN or infinite; a depth 0 or past the
     block; an unknown ddtree_* key), max_new_tokens -1, or a prompt of LONG_PROMPT tokens, past any context:
     HTTP 400 with a one-line message that names the field ("context length" for the prompt).
   max_new_tokens 0 (in the default lengths) is valid: an empty answer.
4. Once the server is idle again: the KV tokens in use must be back at their start (0 leaked: KV slots freed
   by the aborts and disconnects too).
5. The cache flushed, the fixed set again: every output must equal step 2's.
6. `/metrics` again: `sglang:num_requests_total` must have risen by at least the completed requests and at most
   the requests sent; `sglang:generation_tokens_total` by at least their completion tokens and at most that
   plus the max_new_tokens of the aborted and disconnected ones.

It prints a summary line per check and one JSON record (also to --out), and exits 0 when everything holds, 1
when something does not (the record says what), 2 when it cannot start (no server, no /v1/loads).

The leak reading (SGLang 0.5.15): /v1/loads returns, per DP rank, num_used_tokens = max_total_num_tokens -
(allocator free + radix-cache evictable), so an idle server reads 0 unless KV slots leaked; the reading comes
before a flush, since Scheduler.flush_cache clears the allocator outright and would hide a leak.

Example: on a DDTREE server of budget 63 with --budgets 8,16,32,64, requests carry budgets 8, 16 and 32 (64 is
above the server's); on an auto server ("ddtree_auto_budgets": [15, 31, 63]) also "auto".
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from ddbench.config import as_list

POLL_S = 0.5  # seconds between usage readings
KINDS = ("complete", "abort", "disconnect", "invalid")
LONG_PROMPT = 262_144  # token ids of an invalid prompt: longer than the context of the targets served here
COUNTERS = ("sglang:num_requests_total", "sglang:generation_tokens_total", "sglang:num_aborted_requests_total")


class CannotStart(Exception):
    """The server cannot be checked: unreachable, or without the endpoints the check reads."""


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
class Request:
    """One request of the load."""

    rid: str
    kind: str  # one of KINDS
    prompt: str | list[int]  # text, or token ids
    max_new_tokens: int
    temperature: float
    custom_params: dict[str, Any] | None
    stream: bool
    invalid_field: str | None = None  # the field an invalid request's refusal must name


@dataclass(frozen=True)
class Outcome:
    rid: str
    kind: str
    completion_tokens: int  # of a finished answer; 0 where none came
    finish: str | None  # finish_reason type: length, stop, abort; None without an answer
    error: str | None  # what went wrong, judged by the request's kind; None: as it should


def parse_loads(body: dict) -> KVUsage:
    """KVUsage from a /v1/loads answer: {"loads": [{"num_used_tokens": .., ...} per DP rank]}."""
    loads = body.get("loads") if isinstance(body, dict) else None
    if not loads:
        raise ValueError(f"no loads in the /v1/loads answer: {str(body)[:200]}")
    total = lambda key: sum(int(load[key]) for load in loads)  # noqa: E731
    try:
        return KVUsage(
            used_tokens=total("num_used_tokens"),
            max_total_tokens=total("max_total_num_tokens"),
            running_reqs=total("num_running_reqs"),
            waiting_reqs=total("num_waiting_reqs"),
        )
    except (KeyError, TypeError) as error:
        raise ValueError(f"malformed /v1/loads answer ({error!r}): {str(body)[:200]}") from None


def parse_metrics(text: str, names: Sequence[str] = COUNTERS) -> dict[str, float]:
    """The Prometheus text exposition's samples of `names`, summed over their labels.

    Example: 'sglang:num_requests_total{model_name="m"} 12.0' -> {"sglang:num_requests_total": 12.0}."""
    totals = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in totals:
            totals[name] += float(line.rsplit(" ", 1)[1])
    return totals


def served_budgets(budgets: Sequence[int], info: dict) -> list[int | str | None]:
    """The ddtree_budget values the load sends: `budgets` up to the server's own, and "auto" on an auto server;
    [None] (no custom_params) on a server without DDTREE."""
    if info.get("speculative_algorithm") != "DDTREE":
        return [None]
    limit = info.get("ddtree_budget")
    served: list[int | str | None] = [b for b in budgets if limit is None or b <= int(limit)]
    if info.get("ddtree_auto_budgets"):
        served.append("auto")
    if not served:
        raise ValueError(f"none of the budgets {list(budgets)} fits the server's ddtree_budget {limit}")
    return served


def invalid_params(info: dict) -> list[tuple[str, dict[str, Any]]]:
    """(the field the refusal must name, a bad update of the request: sampling_params keys, or "input_ids") for a
    server described by /server_info."""
    common = [("max_new_tokens", {"max_new_tokens": -1}), ("context length", {"input_ids": [1] * LONG_PROMPT})]
    if info.get("speculative_algorithm") != "DDTREE":
        return common
    budget, block = int(info.get("ddtree_budget") or 0), int(info.get("ddtree_block_size") or 16)
    custom = [
        ("ddtree_budget", -1),
        ("ddtree_budget", "many"),
        ("ddtree_budget", 2.5),
        ("ddtree_budget", budget + 1),
        ("ddtree_draft_temperature", 0),
        ("ddtree_draft_temperature", -1.0),
        ("ddtree_draft_temperature", math.nan),
        ("ddtree_draft_temperature", math.inf),
        ("ddtree_max_depth", 0),
        ("ddtree_max_depth", block + 1),
        ("ddtree_no_such_knob", 1),
    ]
    if not info.get("ddtree_auto_budgets"):
        custom.append(("ddtree_budget", "auto"))
    return [(field, {"custom_params": {field: value}}) for field, value in custom] + common


def random_prompts(count: int, rng: random.Random) -> list[str]:
    """Prompts of 4 to 400 words; every fourth starts with one shared 120-word prefix, so the radix cache holds
    shared and private tokens (and page boundaries fall at varied places)."""
    shared = " ".join(str(rng.randrange(1000)) for _ in range(120))
    prompts = []
    for k in range(count):
        tail = " ".join(str(rng.randrange(1000)) for _ in range(rng.randrange(4, 400)))
        prompts.append(f"{shared} {tail}" if k % 4 == 0 else f"Continue the list: {tail}")
    return prompts


def plan(
    prompts: Sequence[str | list[int]],
    count: int,
    budgets: Sequence[int | str | None],
    temperatures: Sequence[float],
    lengths: Sequence[int],
    fractions: dict[str, float],
    invalid: Sequence[tuple[str, dict[str, Any]]],
    rng: random.Random,
) -> list[Request]:
    """`count` requests: prompts, budgets, temperatures and lengths cycled; each one's kind drawn with
    `fractions` ({kind: share}, the rest complete); invalid ones cycle over `invalid`."""
    requests = []
    for k in range(count):
        draw, kind = rng.random(), "complete"
        for name in ("abort", "disconnect", "invalid"):
            if draw < fractions.get(name, 0.0):
                kind = name
                break
            draw -= fractions.get(name, 0.0)
        budget = budgets[k % len(budgets)]
        params: dict[str, Any] = {} if budget is None else {"custom_params": {"ddtree_budget": budget}}
        field = None
        if kind == "invalid":
            field, bad = invalid[k % len(invalid)]
            params = {**params, **bad}
        requests.append(
            Request(
                rid=f"load-{k}",
                kind=kind,
                prompt=params.pop("input_ids", prompts[k % len(prompts)]),
                max_new_tokens=params.pop("max_new_tokens", lengths[k % len(lengths)]),
                temperature=temperatures[(k // len(budgets)) % len(temperatures)],
                custom_params=params.get("custom_params"),
                stream=kind in ("abort", "disconnect") or (kind == "complete" and k % 2 == 1),
                invalid_field=field,
            )
        )
    return requests


def payload(request: Request) -> dict[str, Any]:
    """The /generate body of a request."""
    params: dict[str, Any] = {"max_new_tokens": request.max_new_tokens, "temperature": request.temperature}
    if request.custom_params is not None:
        params["custom_params"] = request.custom_params
    key = "text" if isinstance(request.prompt, str) else "input_ids"
    return {key: request.prompt, "sampling_params": params, "stream": request.stream, "rid": request.rid}


def _body(request: Request) -> dict[str, Any]:
    """httpx arguments posting payload(request): JSON with NaN and Infinity written out (httpx's json= refuses
    them), as a client that sends them would."""
    content = json.dumps(payload(request)).encode()
    return {"content": content, "headers": {"Content-Type": "application/json"}}


def _finish(body: dict) -> tuple[int, str | None]:
    meta = body.get("meta_info") or {}
    reason = meta.get("finish_reason")
    return int(meta.get("completion_tokens") or 0), reason.get("type") if isinstance(reason, dict) else reason


def _refusal(response: httpx.Response) -> str:
    """The message of an error answer (SGLang: {"error": {"message": ...}}, or FastAPI's {"detail": ...})."""
    try:
        body = response.json()
    except ValueError:
        return response.text
    error = body.get("error", body.get("detail", body)) if isinstance(body, dict) else body
    return str(error.get("message", error) if isinstance(error, dict) else error)


def send(client: httpx.Client, url: str, request: Request) -> Outcome:
    """Send one request as its kind says and judge what came back."""
    done = lambda tokens=0, finish=None, error=None: Outcome(request.rid, request.kind, tokens, finish, error)  # noqa: E731
    try:
        if request.kind == "invalid":
            response = client.post(url + "/generate", **_body(request))
            message = _refusal(response)
            if response.status_code != 400:
                return done(error=f"HTTP {response.status_code}, not 400: {message[:200]}")
            if "\n" in message.strip() or request.invalid_field not in message:
                return done(error=f"the refusal is not one line naming {request.invalid_field}: {message[:300]}")
            return done()
        if not request.stream:
            response = client.post(url + "/generate", **_body(request))
            if response.status_code != 200:
                return done(error=f"HTTP {response.status_code}: {_refusal(response)[:300]}")
            body = response.json()
            return done(*_finish(body[0] if isinstance(body, list) else body))
        last: dict = {}
        with client.stream("POST", url + "/generate", **_body(request)) as response:
            if response.status_code != 200:
                response.read()
                return done(error=f"HTTP {response.status_code}: {_refusal(response)[:300]}")
            for line in response.iter_lines():
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                chunk = json.loads(line[len("data:") :])
                if "error" in chunk:
                    return done(error=f"stream error: {str(chunk['error'])[:300]}")
                first, last = not last, chunk
                if first and request.kind == "disconnect":
                    return done()  # leaving the block closes the connection: SGLang aborts the request
                if first and request.kind == "abort":
                    client.post(url + "/abort_request", json={"rid": request.rid}).raise_for_status()
        tokens, finish = _finish(last)
        if not last or finish is None:
            return done(tokens, finish, "the stream ended without a finish_reason")
        if request.kind == "complete" and finish == "abort":
            return done(tokens, finish, f"aborted by the server: {str(last.get('meta_info'))[:300]}")
        return done(tokens, finish)
    except (httpx.HTTPError, ValueError) as error:
        return done(error=f"{type(error).__name__}: {error}")


def read_usage(client: httpx.Client, url: str) -> KVUsage:
    response = client.get(url + "/v1/loads", params={"include": "core"})
    response.raise_for_status()
    return parse_loads(response.json())


def read_metrics(client: httpx.Client, url: str) -> dict[str, float] | None:
    """The COUNTERS now; None where the server has no /metrics (started without --enable-metrics)."""
    response = client.get(url + "/metrics")
    return parse_metrics(response.text) if response.status_code == 200 else None


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


def fixed_outputs(client: httpx.Client, url: str, prompts: Sequence[str | list[int]], tokens: int) -> list[Any]:
    """Greedy answers to `prompts`, one at a time, with the server's own DDTree settings: each one's output token
    ids (or its text where the server returns none)."""
    outputs = []
    for prompt in prompts:
        key = "text" if isinstance(prompt, str) else "input_ids"
        body = {key: prompt, "sampling_params": {"max_new_tokens": tokens, "temperature": 0.0}}
        answer = client.post(url + "/generate", json=body).raise_for_status().json()
        outputs.append(answer.get("output_ids", answer.get("text")))
    return outputs


def check_metrics(
    before: dict[str, float] | None,
    after: dict[str, float] | None,
    outcomes: Sequence[Outcome],
    requests: Sequence[Request],
) -> dict[str, Any] | None:
    """The counters' rises against what the load saw: {name: rise, "ok": bool, "why": ...}; None without /metrics."""
    if before is None or after is None:
        return None
    rise = {name: after[name] - before[name] for name in COUNTERS}
    completed = [o for o in outcomes if o.kind == "complete" and o.error is None]
    tokens = sum(o.completion_tokens for o in completed)
    cut = {r.rid: r.max_new_tokens for r in requests if r.kind in ("abort", "disconnect")}
    bounds = {
        "sglang:num_requests_total": (len(completed), len(requests)),
        "sglang:generation_tokens_total": (tokens, tokens + sum(cut.values())),
    }
    why = [
        f"{name} rose by {rise[name]:g}, outside [{low}, {high}]"
        for name, (low, high) in bounds.items()
        if not low <= rise[name] <= high
    ]
    return {**rise, "bounds": bounds, "ok": not why, "why": why}


def run_check(
    url: str,
    requests: int = 2000,
    concurrency: int = 32,
    lengths: Sequence[int] = (0, 1, 16, 64, 256),
    budgets: Sequence[int] = (8, 16, 32, 64),
    temperatures: Sequence[float] = (0.0, 0.7),
    fractions: dict[str, float] | None = None,
    fixed: int = 16,
    fixed_tokens: int = 64,
    input_ids: Sequence[list[int]] | None = None,
    seed: int = 0,
    idle_timeout: float = 120.0,
    request_timeout: float = 600.0,
    progress: Callable[[int], Callable[[], None]] | None = None,
) -> dict[str, Any]:
    """The whole check (module docstring) against the server at `url`; its record, "ok" the verdict. Raises
    CannotStart where the server cannot be checked."""
    fractions = {"abort": 0.1, "disconnect": 0.1, "invalid": 0.05} if fractions is None else fractions
    url, rng = url.rstrip("/"), random.Random(seed)
    limits = httpx.Limits(max_connections=2 * concurrency + 4)  # a stream and its abort
    with httpx.Client(timeout=request_timeout, limits=limits) as client:
        try:
            info = client.get(url + "/server_info").raise_for_status().json()
            served = served_budgets(budgets, info)
            flush(client, url, idle_timeout)
            start = wait_idle(client, url, idle_timeout)
            prompts = list(input_ids) if input_ids else random_prompts(max(requests, fixed), rng)
            plan_ = plan(prompts, requests, served, temperatures, lengths, fractions, invalid_params(info), rng)
            fixed_set = prompts[:fixed]
            before = fixed_outputs(client, url, fixed_set, fixed_tokens)
            metrics_before = read_metrics(client, url)  # after the fixed set: the counters' rise is the load's
        except (httpx.HTTPError, ValueError, TimeoutError) as error:
            raise CannotStart(f"{type(error).__name__}: {error}") from None
        tick = progress(len(plan_)) if progress else (lambda: None)

        def one(request: Request) -> Outcome:
            outcome = send(client, url, request)
            tick()
            return outcome

        began = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            outcomes = list(pool.map(one, plan_))
        load_s = time.perf_counter() - began
        idle = after = metrics_after = lost = None
        try:
            idle = wait_idle(client, url, idle_timeout)
            metrics_after = read_metrics(client, url)
            flush(client, url, idle_timeout)
            after = fixed_outputs(client, url, fixed_set, fixed_tokens)
        except (httpx.HTTPError, ValueError, TimeoutError) as error:
            lost = f"{type(error).__name__}: {error}"
    return verdict(
        info, served, start, idle, before, after, metrics_before, metrics_after, plan_, outcomes, lost, load_s
    )


def verdict(
    info: dict,
    served: Sequence[int | str | None],
    start: KVUsage,
    idle: KVUsage | None,
    before: Sequence[Any],
    after: Sequence[Any] | None,
    metrics_before: dict[str, float] | None,
    metrics_after: dict[str, float] | None,
    requests: Sequence[Request],
    outcomes: Sequence[Outcome],
    lost: str | None,
    load_s: float,
) -> dict[str, Any]:
    """The record: counts by kind, what failed, the leak, the fixed set and the counters; ok when all hold."""
    failed = [o for o in outcomes if o.error is not None]
    leaked = None if idle is None else idle.used_tokens - start.used_tokens
    same = None if after is None else sum(a == b for a, b in zip(before, after))
    metrics = check_metrics(metrics_before, metrics_after, outcomes, requests)
    ok = lost is None and not failed and leaked == 0 and same == len(before) and (metrics is None or metrics["ok"])
    return {
        "algorithm": info.get("speculative_algorithm"),
        "server_budget": info.get("ddtree_budget"),
        "budgets": list(served),
        "requests": len(requests),
        "kinds": dict(Counter(r.kind for r in requests)),
        "finishes": dict(Counter(str(o.finish) for o in outcomes)),
        "failed": len(failed),
        "failed_by_kind": dict(Counter(o.kind for o in failed)),
        "first_failures": [asdict(o) for o in failed[:5]],
        "completion_tokens": sum(o.completion_tokens for o in outcomes if o.error is None),
        "load_s": round(load_s, 2),
        "max_total_num_tokens": start.max_total_tokens,
        "used_tokens_start": start.used_tokens,
        "used_tokens_idle": None if idle is None else idle.used_tokens,
        "leaked_tokens": leaked,
        "fixed_set": len(before),
        "fixed_set_same": same,
        "metrics": metrics,
        "server_lost": lost,
        "ok": ok,
    }


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(part) for part in as_list(text)]
    except ValueError:
        raise typer.BadParameter(f"comma-separated integers, got {text!r}", param_hint=flag) from None
    if any(v < 0 for v in values):
        raise typer.BadParameter(f"must be >= 0, got {text!r}", param_hint=flag)
    return values


def main(
    url: Annotated[str, typer.Option(help="The SGLang server under test.")] = "http://127.0.0.1:30000",
    requests: Annotated[int, typer.Option(min=1, help="Requests of the load.")] = 2000,
    concurrency: Annotated[int, typer.Option(min=1, help="Requests in flight.")] = 32,
    max_new_tokens: Annotated[str, typer.Option(help="max_new_tokens values to cycle, comma-separated.")] = (
        "0,1,16,64,256"
    ),
    budgets: Annotated[
        str, typer.Option(help="DDTree budgets to cycle (those up to the server's; auto added on an auto server).")
    ] = "8,16,32,64",
    temperatures: Annotated[str, typer.Option(help="Temperatures to cycle, comma-separated (0: greedy).")] = "0,0.7",
    abort_fraction: Annotated[
        float, typer.Option(min=0, max=1, help="Share aborted after their first chunk (POST /abort_request).")
    ] = 0.1,
    disconnect_fraction: Annotated[
        float, typer.Option(min=0, max=1, help="Share whose client disconnects after the first chunk.")
    ] = 0.1,
    invalid_fraction: Annotated[
        float, typer.Option(min=0, max=1, help="Share with parameters the server must refuse (HTTP 400, one line).")
    ] = 0.05,
    fixed: Annotated[int, typer.Option(min=0, help="Prompts answered greedily before and after the load.")] = 16,
    input_ids: Annotated[
        Path | None, typer.Option(help="JSONL of token-id prompts (a list, or {'input_ids': [...]}) instead of text.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seeds the prompts and the kinds.")] = 0,
    idle_timeout: Annotated[float, typer.Option(help="Seconds to wait for an idle server.")] = 120.0,
    request_timeout: Annotated[float, typer.Option(help="Seconds per request.")] = 600.0,
    out: Annotated[Path | None, typer.Option(help="Also write the JSON record here.")] = None,
) -> None:
    """A load with aborts, disconnects and bad input against an SGLang server; then no KV leaked, the same greedy
    outputs as before it, and /metrics consistent. Exit 1 when one fails (see ddbench/check/load.py)."""
    from rich.progress import Progress

    from ddbench.commands import console, fail

    lengths = _ints(max_new_tokens, "--max-new-tokens")
    try:
        temps = [float(t) for t in as_list(temperatures)]
    except ValueError:
        raise typer.BadParameter(f"comma-separated numbers, got {temperatures!r}", "--temperatures") from None
    if any(not math.isfinite(t) or t < 0 for t in temps):
        raise typer.BadParameter(f"must be finite and >= 0, got {temperatures!r}", param_hint="--temperatures")
    fractions = {"abort": abort_fraction, "disconnect": disconnect_fraction, "invalid": invalid_fraction}
    if sum(fractions.values()) > 1:
        total = sum(fractions.values())
        raise fail(f"--abort-fraction + --disconnect-fraction + --invalid-fraction must be <= 1, got {total:g}")
    ids = None
    if input_ids is not None:
        try:
            rows = [json.loads(line) for line in input_ids.read_text().splitlines() if line.strip()]
            ids = [[int(t) for t in (row["input_ids"] if isinstance(row, dict) else row)] for row in rows]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise fail(f"--input-ids {input_ids}: {type(error).__name__}: {error}") from None
    with Progress(console=console(stderr=True), transient=True) as bar:

        def progress(total: int):
            task = bar.add_task("requests", total=total)
            return lambda: bar.advance(task)

        try:
            record = run_check(
                url, requests, concurrency, lengths, _ints(budgets, "--budgets"), temps, fractions, fixed,
                input_ids=ids, seed=seed, idle_timeout=idle_timeout, request_timeout=request_timeout, progress=progress,
            )  # fmt: skip
        except CannotStart as error:
            raise fail(f"cannot check {url}: {error}") from None
    say = lambda text: print(text, file=sys.stderr)  # noqa: E731
    say(f"requests: {record['kinds']}; failed {record['failed']} {record['failed_by_kind'] or ''}")
    say(f"KV tokens in use: {record['used_tokens_start']} before, {record['used_tokens_idle']} idle after")
    say(f"fixed set: {record['fixed_set_same']} of {record['fixed_set']} outputs the same after the load")
    metrics = record["metrics"]
    say("metrics: no /metrics (start the server with --enable-metrics)" if metrics is None else f"metrics: {metrics}")
    text = json.dumps(record)
    if out is not None:
        out.write_text(json.dumps(record, indent=1) + "\n")
    print(text)
    if not record["ok"]:
        raise typer.Exit(1)

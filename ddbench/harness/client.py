"""The `/generate` client: one request in SGLang's protocol timed on the client side, and a cell's requests.

Requests carry token ids (`input_ids`), so every engine sees exactly the same prompt. Per-request
DDTree settings travel in `sampling_params.custom_params` (ddtree_budget: an int or "auto", ddtree_max_depth,
ddtree_draft_temperature, and `"ddtree_hold_chain": true` for held cells only, so servers without the
knob serve the others). With `stream=True` the server sends server-sent events
(`data: {...}` ... `data: [DONE]`); the client then records time to first token and the gaps between
chunks. SGLang's chunks carry cumulative `output_ids` unless started with --stream-output, which
makes them incremental; `Completion` keeps whichever reading matches `meta_info.completion_tokens`.

`run_cell` sends a cell's prompts, `concurrency` conversations at a time; a multi-turn prompt sends
its turns one after the other, turn t carrying the cell's own answers to turns < t. Several server URLs
share a cell's requests round robin, request by request (a record names the URL that answered it).
With an API key every request carries `Authorization: Bearer KEY`. Prompts are the DDTree harness's:
the chat template as text (no system prompt, thinking off), then `encode`.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

import httpx

from ddbench.config import Cell, DDBenchError, SweepConfig, dataset_label
from ddbench.harness.results import RequestRecord, prompt_hash
from ddtree_core.settings import PARAM_HOLD_CHAIN


@dataclass(frozen=True)
class Completion:
    """A finished request as the client saw it."""

    output_ids: tuple[int, ...]
    text: str
    finish_reason: str | None
    latency_s: float
    ttft_s: float | None  # streaming only
    itl_s: tuple[float, ...]  # gaps between streamed chunks (streaming only)
    meta_info: dict[str, Any]

    @property
    def completion_tokens(self) -> int:
        return int(self.meta_info.get("completion_tokens", len(self.output_ids)))


def sampling_params(cell: Cell, config: SweepConfig, explicit_block: int | None = None) -> dict[str, Any]:
    """SGLang sampling_params for one cell; DDTree settings ride in custom_params.

    Servers ddbench starts have the defaults it gave them, so a depth of `auto` and unheld trees go unsaid.
    Running servers (`explicit_block`: their drafter's block) have their own: every knob is then sent,
    e.g. {"ddtree_budget": 8, "ddtree_draft_temperature": 1.0, "ddtree_max_depth": 15, "ddtree_hold_chain":
    false} for an auto-depth cell and a block of 16; a cell of budget auto sends "ddtree_budget": "auto".
    """
    params: dict[str, Any] = {
        "temperature": cell.temperature,
        "top_p": config.top_p,
        "top_k": config.top_k,
        "max_new_tokens": config.max_new_tokens,
    }
    tree = cell.tree_settings()
    if tree is not None:
        if tree.max_depth is None and explicit_block is not None:
            tree = replace(tree, max_depth=explicit_block - 1)
        custom = tree.to_custom_params()
        if not (tree.hold_chain or explicit_block is not None):
            del custom[PARAM_HOLD_CHAIN]  # what the server ddbench started holds already
        params["custom_params"] = custom
    return params


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The headers that carry an API key (SGLang's --api-key), none without one."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class RoundRobin:
    """URLs handed out in turn, thread-safe: request i goes to urls[i % len(urls)]."""

    def __init__(self, urls: Sequence[str]):
        self._urls, self._lock = itertools.cycle(urls), threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            return next(self._urls)


def generate(
    client: httpx.Client, url: str, input_ids: Sequence[int], params: dict[str, Any], *, stream: bool
) -> Completion:
    """POST /generate and wait for the whole answer; raises httpx.HTTPError on failure."""
    payload = {"input_ids": list(input_ids), "sampling_params": params, "stream": stream}
    start = time.perf_counter()
    if not stream:
        response = client.post(url + "/generate", json=payload)
        _raise_for_status(response)
        body = _one(response.json())
        return _completion(body, body.get("output_ids", []), time.perf_counter() - start, None, ())
    return _generate_streaming(client, url, payload, start)


def _generate_streaming(client: httpx.Client, url: str, payload: dict, start: float) -> Completion:
    arrivals: list[float] = []
    cumulative: list[int] = []
    concatenated: list[int] = []
    body: dict[str, Any] = {}
    with client.stream("POST", url + "/generate", json=payload) as response:
        if response.is_error:
            response.read()
        _raise_for_status(response)
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                break
            body = _one(json.loads(data))
            if "error" in body:
                raise httpx.HTTPError(f"streamed error: {str(body['error'])[:300]}")
            ids = [int(token) for token in body.get("output_ids", [])]
            if ids:
                arrivals.append(time.perf_counter())
                cumulative = ids
                concatenated.extend(ids)
    latency = time.perf_counter() - start
    expected = int(body.get("meta_info", {}).get("completion_tokens", len(cumulative)))
    output_ids = concatenated if len(concatenated) == expected != len(cumulative) else cumulative
    ttft = arrivals[0] - start if arrivals else None
    gaps = tuple(b - a for a, b in zip(arrivals, arrivals[1:]))
    return _completion(body, output_ids, latency, ttft, gaps)


def _completion(
    body: dict[str, Any], output_ids: Sequence[int], latency: float, ttft: float | None, gaps: tuple[float, ...]
) -> Completion:
    meta = dict(body.get("meta_info") or {})
    finish = meta.get("finish_reason")
    if isinstance(finish, dict):
        finish = finish.get("type")
    return Completion(
        output_ids=tuple(int(token) for token in output_ids),
        text=str(body.get("text", "")),
        finish_reason=finish,
        latency_s=latency,
        ttft_s=ttft,
        itl_s=gaps,
        meta_info=meta,
    )


def _raise_for_status(response: httpx.Response) -> None:
    """Like raise_for_status, with the server's own error message in the exception."""
    if response.is_error:
        raise httpx.HTTPStatusError(
            f"HTTP {response.status_code}: {response.text[:300]}", request=response.request, response=response
        )


def _one(body: Any) -> dict[str, Any]:
    """SGLang answers a single request with an object, some versions with a one-item list."""
    if isinstance(body, list):
        body = body[0]
    if not isinstance(body, dict):
        raise httpx.DecodingError(f"unexpected /generate answer: {str(body)[:200]}")
    return body


def load_prompts(config: SweepConfig) -> dict[str, list]:
    """The prompts of every dataset of the config, by dataset label (DDBenchError if one is missing).

    With the testbed drafter (`testbed.is_testbed_drafter`) a builtin dataset without num_prompts gives its
    held-out prompts (ddbench.heldout: 128 gsm8k, 64 humaneval, 40 mt-bench), and a dataset with prompts
    outside the split prints one line on stderr, e.g. for humaneval and num_prompts 100:
    "warning: humaneval: 36 of 100 prompts are not held out from the testbed drafter's training (ddbench.heldout)".
    """
    from ddbench import datasets, heldout
    from ddbench.testbed import target as testbed

    testbed_drafter = testbed.is_testbed_drafter(config.draft)
    prompts = {}
    for spec in config.datasets:
        label = dataset_label(spec)
        try:
            if testbed_drafter and config.num_prompts is None and spec in heldout.EVAL_SIZES:
                prompts[label] = heldout.eval_prompts(spec, data_dir=config.data_dir)
            else:
                prompts[label] = datasets.load_prompts(spec, config.num_prompts, data_dir=config.data_dir)
        except (ValueError, OSError, datasets.DatasetUnavailableError) as error:
            raise DDBenchError(f"dataset {spec}: {str(error).splitlines()[0]}") from error
        outside = sum(not heldout.is_held_out(prompt) for prompt in prompts[label]) if testbed_drafter else 0
        if outside:
            print(
                f"warning: {label}: {outside} of {len(prompts[label])} prompts are not held out from the testbed "
                "drafter's training (ddbench.heldout)",
                file=sys.stderr,
            )
    return prompts


def held_out_datasets(prompts: dict[str, list]) -> dict[str, bool]:
    """Per dataset label, whether every one of its prompts is held out from drafter training (ddbench.heldout)."""
    from ddbench.heldout import is_held_out

    return {label: all(map(is_held_out, items)) for label, items in prompts.items()}


def chat_input_ids(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """The DDTree harness's prompt: chat template as text (no thinking), then `encode`."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    return list(tokenizer.encode(text))


class Inputs:
    """Prompts per dataset label, whether each dataset's are all held out (`held_out_datasets`), and the target's
    tokenizer; tokenization is serialized (thread safety)."""

    def __init__(self, config: SweepConfig):
        from transformers import AutoTokenizer

        self.prompts = load_prompts(config)
        self.held_out = held_out_datasets(self.prompts)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(config.model)
        except (OSError, ValueError) as error:
            hint = " (the running servers' target: pass --model with a copy of it here)" if config.url else ""
            raise DDBenchError(f"cannot load the tokenizer of {config.model}{hint}: {error}") from error
        self._lock = threading.Lock()

    def num_requests(self, dataset: str) -> int:
        return sum(len(prompt.turns) for prompt in self.prompts[dataset])

    def encode(self, messages: list[dict[str, str]]) -> list[int]:
        with self._lock:
            return chat_input_ids(self.tokenizer, messages)

    def decode(self, token_ids: Sequence[int]) -> str:
        with self._lock:
            return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)


def run_cell(
    config: SweepConfig,
    cell: Cell,
    urls: Sequence[str],
    inputs: Inputs,
    on_request: Callable[[Cell], None],
    explicit_block: int | None = None,
) -> tuple[list[RequestRecord], float]:
    """All prompts of the cell's dataset, `concurrency` conversations at a time, each request to the next of
    `urls` in turn, after an unmeasured warm-up burst (warm_up_cell); (records, wall seconds). `explicit_block`:
    see sampling_params."""
    params = sampling_params(cell, config, explicit_block)
    warm_up_cell(config, cell, urls, inputs, explicit_block)
    limits = httpx.Limits(max_connections=cell.concurrency + 1)
    next_url = RoundRobin(urls)
    with httpx.Client(timeout=config.request_timeout_s, limits=limits, headers=auth_headers(config.api_key)) as http:
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=cell.concurrency) as pool:
            futures = [
                pool.submit(_conversation, http, next_url, cell, prompt, params, inputs, start, config.stream,
                            on_request)
                for prompt in inputs.prompts[cell.dataset]
            ]  # fmt: skip
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for future in futures:
                future.cancel()
            records = [record for future in futures for record in future.result()]
        wall_s = time.perf_counter() - start
    return sorted(records, key=lambda r: (r.prompt_index, r.turn)), wall_s


WARMUP_TOKENS = 4  # the i-th warm-up request asks for WARMUP_TOKENS * (i + 1) tokens


def warm_up_cell(
    config: SweepConfig, cell: Cell, urls: Sequence[str], inputs: Inputs, explicit_block: int | None = None
) -> None:
    """`concurrency` unmeasured requests with the cell's sampling params before its measured ones, at least one
    per URL, handed out round robin as the measured ones are.

    Their lengths are staggered, so each server's running batch shrinks through every size from its share of
    `concurrency` to 1 and code specialised per batch size (Triton kernels compiled on first use, say) is
    built here rather than inside the measurement. Greedy or not, the answers are discarded.
    """
    prompt = inputs.prompts[cell.dataset][0]
    from ddbench.datasets import chat_messages

    input_ids = inputs.encode(chat_messages(prompt))
    params = sampling_params(cell, config, explicit_block)
    count = max(cell.concurrency, len(urls))
    with httpx.Client(timeout=config.request_timeout_s, headers=auth_headers(config.api_key)) as http:
        with ThreadPoolExecutor(max_workers=count) as pool:
            futures = [
                pool.submit(generate, http, urls[i % len(urls)], input_ids,
                            {**params, "max_new_tokens": WARMUP_TOKENS * (i + 1)}, stream=False)
                for i in range(count)
            ]  # fmt: skip
            for future in futures:
                future.result()


def _conversation(http, next_url, cell, prompt, params, inputs, cell_start, stream, on_request) -> list[RequestRecord]:
    """Every turn of one prompt, each to the URL `next_url` gives; turn t's history holds this cell's own answers
    to turns < t."""
    from ddbench.datasets import chat_messages

    answers: list[str] = []
    records = []
    for turn in range(len(prompt.turns)):
        input_ids = inputs.encode(chat_messages(prompt, answers))
        start_s = time.perf_counter() - cell_start
        url = next_url()
        completion = generate(http, url, input_ids, params, stream=stream)
        answers.append(inputs.decode(completion.output_ids))
        records.append(_record(cell, prompt.index, turn, input_ids, completion, start_s, url))
        on_request(cell)
    return records


def _record(
    cell: Cell, index: int, turn: int, input_ids, completion: Completion, start_s: float, url: str
) -> RequestRecord:
    meta: dict[str, Any] = completion.meta_info
    return RequestRecord(
        cell_id=cell.cell_id,
        **cell.to_dict(),
        prompt_index=index,
        turn=turn,
        prompt_hash=prompt_hash(input_ids),
        prompt_tokens=int(meta.get("prompt_tokens", len(input_ids))),
        completion_tokens=completion.completion_tokens,
        output_ids=completion.output_ids,
        text=completion.text,
        finish_reason=completion.finish_reason,
        latency_s=completion.latency_s,
        ttft_s=completion.ttft_s,
        itl_s=completion.itl_s,
        start_s=start_s,
        meta_info=meta,
        server_url=url,
    )

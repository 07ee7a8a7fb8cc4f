"""An HTTP server for the reference engine, speaking the part of SGLang's API that benchmarks use.

    POST /generate        {"text" | "input_ids", "sampling_params": {...}, "rid"}
    GET  /health          200 when ready
    GET  /model_info      model and draft paths, the method (also /get_model_info, as SGLang 0.5.15)
    GET  /server_info     the engine, its version, the method and its default knobs (also /get_server_info)

sampling_params: temperature, top_p, top_k, max_new_tokens, stop, stop_token_ids, ignore_eos,
skip_special_tokens, no_stop_trim, sampling_seed, and custom_params {ddtree_budget, ddtree_max_depth,
ddtree_draft_temperature, ddtree_hold_chain} (per-request DDTree knobs, ignored by the other methods;
ddtree_hold_chain is a JSON bool that overrides --hold-chain either way). Penalties and
other knobs are accepted only at their neutral values. Responses carry "text", "output_ids" and
"meta_info" with SGLang's keys (finish_reason, prompt_tokens, completion_tokens, e2e_latency,
spec_verify_ct, spec_accept_length, spec_accept_rate, spec_num_correct_drafts, ...), the acceptance
summary of ddtree_core.metrics (`SUMMARY_KEYS`) and the engine's timings (`ENGINE_KEYS`).

Lengths as SGLang checks them: a prompt must be shorter than the target's context, and max_new_tokens
is an int in [0, context - prompt tokens]; 0 answers an empty response that finishes by length, as
SGLang does (the prompt is prefilled, no token is returned).

One model instance serves one request at a time (concurrent clients wait on a lock, in arrival order
as far as the OS schedules them). `main` loads the models and runs every decode on one engine thread
(`ReferenceEngine(worker=...)`); the request threads only parse and answer. On a CPU, torch work from two
threads makes two OpenMP teams, and once its threads outnumber the cores libgomp stops spinning between
parallel regions, which slows a decode on a request thread of a small machine.

A malformed request gets HTTP 400 with a one-line reason naming the
field and, where it has one, its range (custom_params: ddtree_core.settings), and the server goes on
serving. With --api-key every route but /health wants `Authorization: Bearer KEY` (HTTP 401 otherwise),
as SGLang's --api-key.

    python -m ddtree_core.reference.server --model PATH --draft PATH --method ddtree --port 30000
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hmac
import importlib.metadata
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ddtree_core import metrics, ops
from ddtree_core.policy import AutoBudget, auto_budgets
from ddtree_core.reference.decode import Generation, SamplingConfig, SpecConfig, generate
from ddtree_core.reference.dflash import DFlashDraftModel, DFlashProposer, DraftHead
from ddtree_core.settings import (
    PARAM_BUDGET,
    PARAM_DRAFT_TEMPERATURE,
    PARAM_HOLD_CHAIN,
    PARAM_MAX_DEPTH,
    TreeSettings,
    TreeSettingsError,
)

logger = logging.getLogger(__name__)

# Engine extras in meta_info (besides SGLang's keys and metrics.SUMMARY_KEYS).
ENGINE_KEYS = (
    "ddtree_method",
    "ddtree_ttft",
    "ddtree_decode_time",
    "ddtree_time_per_output_token",
    "ddtree_stage_times",
)
SAMPLING_KEYS = frozenset(
    {"temperature", "top_p", "top_k", "max_new_tokens", "stop", "stop_token_ids", "ignore_eos"}
    | {"skip_special_tokens", "no_stop_trim", "sampling_seed", "custom_params"}
)
# SGLang knobs the engine does not implement: accepted only at these (neutral) values.
NEUTRAL_SAMPLING = {
    "min_p": 0.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "min_new_tokens": 0,
    "n": 1,
    "spaces_between_special_tokens": True,
    "json_schema": None,
    "regex": None,
    "ebnf": None,
    "logit_bias": None,
}
MAX_BODY_BYTES = 64 << 20
ENGINE_NAME = "ddtree_core.reference"  # server_info.engine: how clients tell this server from SGLang


class RequestError(ValueError):
    """A malformed or unsupported request (HTTP 400)."""


@dataclasses.dataclass(frozen=True)
class GenerateRequest:
    """A parsed /generate request."""

    rid: str
    input_ids: tuple[int, ...]
    sampling: SamplingConfig
    spec: SpecConfig
    stop: tuple[str, ...]  # stop strings
    skip_special_tokens: bool
    no_stop_trim: bool


class ReferenceEngine:
    """One target (+ drafter, tokenizer) behind a lock; turns request dicts into response dicts."""

    def __init__(
        self,
        target: Any,
        *,
        drafter: DFlashDraftModel | None = None,
        tokenizer: Any | None = None,
        spec: SpecConfig | None = None,
        eos_token_ids: tuple[int, ...] = (),
        model_path: str = "",
        draft_path: str | None = None,
        auto: AutoBudget | None = None,
        worker: Executor | None = None,
        draft_vocab: int | None = None,
    ):
        self.spec = spec or SpecConfig()
        if self.spec.method != "ar" and drafter is None:
            raise ValueError(f"method {self.spec.method!r} needs a drafter")
        self.target, self.drafter, self.tokenizer = target, drafter, tokenizer
        self.eos_token_ids = tuple(eos_token_ids)
        self.model_path, self.draft_path = model_path, draft_path
        self.vocab_size = target.get_input_embeddings().weight.shape[0]
        self.auto = auto  # budget=auto's state (custom_params.ddtree_budget "auto"), shared by the requests
        self.worker = worker  # the thread every decode runs on (None: the calling thread)
        # the drafter's head, built once: all of the target's rows, or a draft vocabulary's (dflash.DraftHead)
        self.draft_head = None if drafter is None else DraftHead(target, drafter.dtype, draft_vocab, self.eos_token_ids)
        self._lock = threading.Lock()

    def generate(self, body: Any) -> dict[str, Any]:
        """Serve one /generate body (raises RequestError for a bad one)."""
        received = time.perf_counter()
        request = self.parse(body)
        if self.worker is None:
            result = self._decode(request)
        else:
            result = self.worker.submit(self._decode, request).result()
        return self._response(request, result, time.perf_counter() - received)

    def _decode(self, request: GenerateRequest) -> Generation:
        with self._lock:
            proposer = None
            if request.spec.method != "ar":
                proposer = DFlashProposer(self.drafter, self.target, request.spec.block_size, self.draft_head)
            return generate(
                self.target,
                request.input_ids,
                request.sampling,
                request.spec,
                proposer=proposer,
                timing=True,
                stop_check=self._stop_check(request.stop),
                auto=self.auto if request.spec.tree.auto else None,
            )

    def parse(self, body: Any) -> GenerateRequest:
        if not isinstance(body, dict):
            raise RequestError("the body must be a JSON object")
        _check_top_level(body)
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise RequestError("sampling_params must be an object")
        _check_sampling_keys(params)
        stop = params.get("stop") or []
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
            raise RequestError("stop must be a non-empty string or a list of them")
        if stop and self.tokenizer is None:
            raise RequestError("stop strings need a tokenizer; the server has none")
        input_ids = self._input_ids(body)
        return GenerateRequest(
            rid=str(body.get("rid") or uuid.uuid4().hex),
            input_ids=input_ids,
            sampling=self._sampling(params, len(input_ids)),
            spec=self._spec(params.get("custom_params")),
            stop=tuple(stop),
            skip_special_tokens=_typed(params, "skip_special_tokens", bool, True),
            no_stop_trim=_typed(params, "no_stop_trim", bool, False),
        )

    def model_info(self) -> dict[str, Any]:
        config = self.target.config
        return {
            "model_path": self.model_path,
            "tokenizer_path": self.model_path if self.tokenizer is not None else None,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "model_type": getattr(config, "model_type", None),
            "architectures": getattr(config, "architectures", None),
            "draft_model_path": self.draft_path,
            "speculative_algorithm": None if self.spec.method == "ar" else self.spec.method.upper(),
        }

    def server_info(self) -> dict[str, Any]:
        block = None if self.drafter is None else self.spec.block_size or self.drafter.block_size
        return {
            "engine": ENGINE_NAME,
            "version": _version(),
            "model_path": self.model_path,
            "speculative_algorithm": None if self.spec.method == "ar" else self.spec.method.upper(),
            "speculative_draft_model_path": self.draft_path,
            "speculative_num_draft_tokens": block,
            "ddtree_method": self.spec.method,
            PARAM_BUDGET: self.spec.tree.budget,
            PARAM_MAX_DEPTH: self.spec.tree.max_depth,
            "ddtree_block_size": block,
            PARAM_DRAFT_TEMPERATURE: self.spec.tree.draft_temperature,
            PARAM_HOLD_CHAIN: self.spec.tree.hold_chain,
            "ddtree_tree_impl": self.spec.tree_impl,
            "dtype": str(self.target.dtype).removeprefix("torch."),
            "draft_dtype": None if self.drafter is None else str(self.drafter.dtype).removeprefix("torch."),
            "draft_vocab": None if self.draft_head is None or self.draft_head.vocab_ids is None
            else int(self.draft_head.vocab_ids.numel()),
        }

    def _input_ids(self, body: dict) -> tuple[int, ...]:
        text, ids = body.get("text"), body.get("input_ids")
        if (text is None) == (ids is None):
            raise RequestError("give exactly one of text and input_ids")
        if text is not None:
            if not isinstance(text, str):
                raise RequestError("text must be a string (batched requests are not supported)")
            if self.tokenizer is None:
                raise RequestError("text needs a tokenizer; the server has none, send input_ids")
            ids = self.tokenizer.encode(text)
        if not isinstance(ids, list) or not ids or not all(_is_int(t) for t in ids):
            raise RequestError("input_ids must be a non-empty list of ints (batched requests are not supported)")
        if not all(0 <= t < self.vocab_size for t in ids):
            raise RequestError(f"input_ids must lie in [0, {self.vocab_size})")
        context = self._context()
        if context is not None and len(ids) >= context:
            raise RequestError(f"the prompt has {len(ids)} tokens; it must be shorter than the context ({context})")
        return tuple(ids)

    def _context(self) -> int | None:
        """The target's context length (max_position_embeddings), None when its config has none."""
        return getattr(self.target.config, "max_position_embeddings", None)

    def _max_new_tokens(self, params: dict, prompt_len: int) -> int:
        """sampling_params.max_new_tokens as SGLang takes it: an int in [0, context - prompt] (0: an empty
        response that finishes by length); absent: 128, or what the context leaves if less."""
        context = self._context()
        limit = None if context is None else context - prompt_len
        value = params.get("max_new_tokens")
        if value is None:
            return 128 if limit is None else min(128, limit)
        if not _is_int(value) or value < 0 or (limit is not None and value > limit):
            allowed = "an int >= 0" if limit is None else f"an int in [0, {limit}]"
            where = "" if limit is None else f" (the context {context} less the prompt's {prompt_len} tokens)"
            raise RequestError(f"max_new_tokens must be {allowed}{where}, got {value!r}")
        return value

    def _sampling(self, params: dict, prompt_len: int) -> SamplingConfig:
        stop_ids = params.get("stop_token_ids") or []
        if not isinstance(stop_ids, list) or not all(_is_int(t) for t in stop_ids):
            raise RequestError("stop_token_ids must be a list of ints")
        if not _typed(params, "ignore_eos", bool, False):
            stop_ids = [*stop_ids, *self.eos_token_ids]
        try:
            return SamplingConfig(
                max_new_tokens=self._max_new_tokens(params, prompt_len),
                temperature=float(_typed(params, "temperature", float, 1.0)),
                top_p=float(_typed(params, "top_p", float, 1.0)),
                top_k=_typed(params, "top_k", int, -1),
                stop_token_ids=tuple(stop_ids),
                seed=_typed(params, "sampling_seed", int, None),
            )
        except ValueError as error:
            raise RequestError(str(error)) from error

    def _spec(self, custom: Any) -> SpecConfig:
        """The request's DDTree settings: the server's, with custom_params' ddtree_* keys in their ranges.

        ddtree_budget: an int in [0, the server's --budget] (0: the bonus token only); ddtree_max_depth: an
        int in [1, block - 1]; ddtree_draft_temperature: a finite number > 0; ddtree_hold_chain: a bool
        (ddtree_core.settings checks them). Any other ddtree_* key is refused. Example: {"ddtree_budget":
        1000000000} on a --budget 64 server -> HTTP 400 "custom_params.ddtree_budget must be an int in [0, 64]
        (the server's budget), got 1000000000".
        """
        if custom is None or self.spec.method != "ddtree":
            return self.spec
        block = self.spec.block_size or self.drafter.block_size
        try:
            tree = TreeSettings.from_custom_params(
                custom, server=self.spec.tree, max_depth=block - 1, auto_served=self.auto is not None
            )
        except TreeSettingsError as error:
            raise RequestError(str(error)) from None
        return dataclasses.replace(self.spec, tree=tree)

    def _stop_check(self, stop: tuple[str, ...]):
        """A decode-time check for stop strings over a window of the latest tokens."""
        if not stop:
            return None
        window = max(len(s) for s in stop) + 8  # a token decodes to at least one character

        def check(tokens) -> str | None:
            tail = self.tokenizer.decode(list(tokens[-window:]))
            return next((s for s in stop if s in tail), None)

        return check

    def _response(self, request: GenerateRequest, result: Generation, latency: float) -> dict[str, Any]:
        meta = {
            "id": request.rid,
            "finish_reason": _finish_reason(result, request.sampling),
            "prompt_tokens": result.prompt_len,
            "completion_tokens": result.num_tokens,
            "cached_tokens": 0,
            "e2e_latency": latency,
        }
        if request.spec.method != "ar":
            meta.update(spec_meta_info(result.rounds, result.num_tokens))
            meta.update(metrics.summarize([result.rounds]).to_dict())
        meta.update(_engine_meta(result, request.spec))
        return {"text": self._text(request, result), "output_ids": list(result.tokens), "meta_info": meta}

    def _text(self, request: GenerateRequest, result: Generation) -> str:
        if self.tokenizer is None:
            return ""
        text = self.tokenizer.decode(list(result.tokens), skip_special_tokens=request.skip_special_tokens)
        if isinstance(result.matched, str) and not request.no_stop_trim and result.matched in text:
            text = text[: text.index(result.matched)]
        return text


def _version() -> str | None:
    """The installed ddtree package's version (None when run from a checkout that is not installed)."""
    try:
        return importlib.metadata.version("ddtree")
    except importlib.metadata.PackageNotFoundError:
        return None


def spec_meta_info(rounds: tuple[metrics.RoundStats, ...], completion_tokens: int) -> dict[str, Any]:
    """SGLang's per-request speculative keys (tokenizer_manager's spec decoding metrics).

    spec_accept_length = completion_tokens / verify_ct (so it includes the prefill token);
    spec_accept_rate = correct drafts / proposed drafts, proposed = the drafted nodes verified (for
    DFlash verify_ct * (block_size - 1), as SGLang counts). The histogram counts rounds by correct
    drafts (accept_len - 1).
    """
    verify_ct = len(rounds)
    correct = sum(r.accept_len - 1 for r in rounds)
    proposed = sum(r.num_nodes for r in rounds)
    meta: dict[str, Any] = {"spec_verify_ct": verify_ct}
    if verify_ct and proposed:
        histogram = list(metrics.accept_length_histogram([r.accept_len for r in rounds]))
        meta.update(
            spec_accept_rate=correct / proposed,
            spec_accept_length=completion_tokens / verify_ct,
            spec_num_correct_drafts=correct,
            spec_num_proposed_drafts=proposed,
            spec_accepted_drafts=correct,
            spec_proposed_drafts=proposed,
            spec_correct_drafts_histogram=histogram,
            spec_accept_histogram=histogram,
        )
    return meta


def _engine_meta(result: Generation, spec: SpecConfig) -> dict[str, Any]:
    stages = None if result.stage_times is None else dataclasses.asdict(result.stage_times)
    values = (spec.method, result.ttft, result.decode_time, result.time_per_output_token, stages)
    return dict(zip(ENGINE_KEYS, values))


def _finish_reason(result: Generation, sampling: SamplingConfig) -> dict[str, Any]:
    if result.finish_reason == "length":
        return {"type": "length", "length": sampling.max_new_tokens}
    return {"type": "stop", "matched": result.matched}


def _check_top_level(body: dict) -> None:
    known = {"text", "input_ids", "sampling_params", "rid"}
    for key, value in body.items():
        if key not in known and value not in (None, False):
            raise RequestError(f"unsupported request field {key!r} (only {sorted(known)}; no streaming)")


def _check_sampling_keys(params: dict) -> None:
    for key, value in params.items():
        if key in SAMPLING_KEYS:
            continue
        if key not in NEUTRAL_SAMPLING:
            raise RequestError(f"unknown sampling parameter {key!r}")
        if value is not None and value != NEUTRAL_SAMPLING[key]:
            raise RequestError(f"sampling parameter {key}={value!r} is not supported (only {NEUTRAL_SAMPLING[key]!r})")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _typed(params: dict, key: str, kind: type, default: Any) -> Any:
    """params[key] checked to be of `kind` (ints pass as floats; bools never pass as numbers)."""
    value = params.get(key)
    if value is None:
        return default
    checks = {
        int: _is_int,
        bool: lambda v: isinstance(v, bool),
        float: lambda v: _is_int(v) or isinstance(v, float),
    }
    if not checks[kind](value):
        raise RequestError(f"{key} must be {kind.__name__}, got {value!r}")
    return value


def make_handler(engine: ReferenceEngine, api_key: str | None = None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            routes = {
                "/health": lambda: None,
                "/model_info": engine.model_info,
                "/get_model_info": engine.model_info,
                "/server_info": engine.server_info,
                "/get_server_info": engine.server_info,
            }
            if self.path not in routes:
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            if self.path != "/health" and not self._authorized():
                return
            self._send(200, routes[self.path]())

        def do_POST(self):
            if self.path != "/generate":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            if not self._authorized():
                return
            try:
                self._send(200, engine.generate(self._body()))
            except RequestError as error:
                self._send(400, {"error": {"message": str(error)}})
            except Exception as error:
                logger.exception("generation failed")
                self._send(500, {"error": {"message": f"{type(error).__name__}: {error}"}})

        def _authorized(self) -> bool:
            """Whether the request carries the API key (any does without one); answers 401 if not."""
            given = self.headers.get("Authorization", "")
            if api_key is None or hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                return True
            self._send(401, {"error": {"message": "Unauthorized"}})
            return False

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_BODY_BYTES:
                raise RequestError(f"a JSON body of 1 .. {MAX_BODY_BYTES} bytes is required")
            try:
                return json.loads(self.rfile.read(length))
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise RequestError(f"invalid JSON: {error}") from error

        def _send(self, status: int, payload: Any) -> None:
            data = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format, *args):
            logger.info("%s " + format, self.address_string(), *args)

    return Handler


def make_server(
    engine: ReferenceEngine, host: str = "127.0.0.1", port: int = 30000, api_key: str | None = None
) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), make_handler(engine, api_key))
    server.daemon_threads = True
    return server


@contextlib.contextmanager
def serving(
    engine: ReferenceEngine, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None
) -> Iterator[str]:
    """Serve in a background thread; yields the base URL (port 0 picks a free port)."""
    server = make_server(engine, host, port, api_key)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def load_engine(
    model: str,
    draft: str | None,
    spec: SpecConfig,
    *,
    dtype: str = "auto",
    device: str = "auto",
    draft_dtype: str = "auto",
    cost_table: str | None = None,
    worker: Executor | None = None,
    draft_vocab: str = "auto",
) -> ReferenceEngine:
    """The engine a server of `spec` runs over the model folders (or hub ids) `model` and `draft`; a DDTree
    engine prices budget=auto with `cost_table` (`ddbench model calibrate`) where it fits this target, else
    with a verify cost measured here (and a warning saying why the table did not fit). `draft_vocab`: the
    drafter's vocabulary (`draft_vocab_size`)."""
    from ddtree_core.reference import loading

    models = loading.load_models(model, draft, dtype=dtype, device=device, draft_dtype=draft_dtype)
    auto = None
    if spec.method == "ddtree" and spec.tree.budget >= 1:  # budget=auto's verify cost, measured here (seconds)
        from ddtree_core.reference.cost import load_cost_table, measure_verify_cost

        budgets = auto_budgets(spec.tree.budget)
        widths = (1,) + tuple(b + 1 for b in budgets)
        cost, why = load_cost_table(cost_table, models.target, widths) if cost_table else (None, None)
        if why is not None:
            logger.warning("budget=auto: %s; measuring the verify cost here instead", why)
        source = f"from {cost_table}" if cost is not None else "measured here"
        if cost is None:
            cost = measure_verify_cost(models.target, widths)
        logger.info(
            "budget=auto weighs budgets %s; verify ms at %s tokens (%s): %s", budgets, cost.tokens, source, cost.ms
        )
        auto = AutoBudget(cost, budgets)
    return ReferenceEngine(
        models.target,
        drafter=models.drafter,
        tokenizer=models.tokenizer,
        spec=spec,
        eos_token_ids=loading.eos_token_ids(models.target, models.tokenizer),
        model_path=model,
        draft_path=draft,
        auto=auto,
        worker=worker,
        draft_vocab=draft_vocab_size(draft_vocab, models.target),
    )


DRAFT_VOCAB_CPU = 16_384  # the drafter's vocabulary on a CPU under --draft-vocab auto (dflash.DraftHead)


def draft_vocab_size(value: str, target: Any) -> int | None:
    """--draft-vocab as the engine takes it: "all" -> None (the whole vocabulary); a number N >= 1 -> N; "auto"
    -> DRAFT_VOCAB_CPU on a CPU, where the head's GEMM is a large part of a round and the testbed drafter
    accepts as much from its lowest 16,384 ids as from all 49,152, and None on a GPU (SGLang's DFLASH, which
    the GPU runs are compared with, drafts over the whole vocabulary).

    Example: draft_vocab_size("auto", a CPU target) -> 16384; draft_vocab_size("all", any) -> None."""
    if value == "all":
        return None
    if value == "auto":
        return DRAFT_VOCAB_CPU if target.get_input_embeddings().weight.device.type == "cpu" else None
    return int(value)


def _draft_vocab_flag(text: str) -> str:
    if text in ("auto", "all") or (text.isdigit() and int(text) >= 1):
        return text
    raise argparse.ArgumentTypeError(f"auto, all or an integer >= 1, got {text!r}")


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    tree = TreeSettings(args.budget, args.max_depth, args.draft_temperature, args.hold_chain)
    spec = SpecConfig(method=args.method, tree=tree, block_size=args.block_size, tree_impl=args.tree_impl)
    if args.device.startswith("cuda") and ops.triton_available():  # DDTREE_PDL=0: plain kernel launches
        from ddtree_core.kernels import pdl

        pdl.configure(pdl.from_environ(os.environ))
    worker = ThreadPoolExecutor(1, thread_name_prefix="engine")  # loads, then decodes every request (docstring)
    engine = worker.submit(
        load_engine,
        args.model,
        args.draft,
        spec,
        dtype=args.dtype,
        device=args.device,
        draft_dtype=args.draft_dtype,
        cost_table=args.cost_table,
        worker=worker,
        draft_vocab=args.draft_vocab,
    ).result()
    server = make_server(engine, args.host, args.port, args.api_key)
    logger.info("reference server (%s) listening on http://%s:%d", args.method, args.host, server.server_address[1])
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="target model folder (or hub id)")
    parser.add_argument("--draft", help="DFlash drafter folder (or hub id); needed by dflash and ddtree")
    parser.add_argument("--method", choices=("ar", "dflash", "ddtree"), default="ddtree")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 | float16")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    parser.add_argument(
        "--draft-dtype",
        default="auto",
        choices=("auto", "same", "float32", "bfloat16", "float16"),
        help="the drafter's dtype: auto (bfloat16 beside a float32 target on a CPU with native bfloat16, else the"
        " target's) | same | float32 | bfloat16 | float16; the target alone decides the output, so any is lossless",
    )
    parser.add_argument(
        "--draft-vocab",
        type=_draft_vocab_flag,
        default="auto",
        help="the tokens the drafter may propose: the N lowest ids (BPE ids run roughly by falling frequency) and"
        f" the end-of-sequence ids, all, or auto ({DRAFT_VOCAB_CPU} on a CPU, where the drafter's lm_head GEMM is a"
        " large part of a round; all on a GPU); lossless either way, the target verifies every proposal",
    )
    parser.add_argument("--budget", type=int, default=64, help="DDTree tree nodes per round")
    parser.add_argument("--max-depth", type=int, default=None, help="DDTree depth limit (default block_size - 1)")
    parser.add_argument("--block-size", type=int, default=None, help="draft block size (default: the drafter's)")
    parser.add_argument("--draft-temperature", type=float, default=1.0)
    hold = "DDTree trees hold the drafter's rank-0 chain first (custom_params.ddtree_hold_chain overrides it)"
    parser.add_argument("--hold-chain", action="store_true", help=hold)
    parser.add_argument(
        "--tree-impl",
        default="torch",
        choices=("reference", "torch", "triton"),
        help="tree build, mask and walk: torch (default: equal to the host-heap reference bit for bit, and several"
        " times faster per round), reference (the oracle), or triton (GPU)",
    )
    parser.add_argument(
        "--cost-table",
        help="verify cost JSON of `ddbench model calibrate` for budget=auto (default: measured at startup); one"
        " measured for another target shape, dtype, device or thread count is ignored with a warning",
    )
    parser.add_argument("--api-key", help="every route but /health wants Authorization: Bearer API_KEY")
    return parser


if __name__ == "__main__":
    main()

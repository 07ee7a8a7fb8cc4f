"""What a running server is, from what it says of itself: the detection behind `ddbench sweep --url`.

`probe` asks a URL three things (with `Authorization: Bearer KEY` when there is an API key):

    GET  /model_info  (else /get_model_info)    model_path
    GET  /server_info (else /get_server_info)   speculative_*, ddtree_*, version; SGLang: its ServerArgs
    POST /generate    one greedy token of the prompt [0]: an SGLang-compatible answer has output_ids, meta_info

and `describe` reads the two documents as a `RemoteServer`:

    method      speculative_algorithm: none -> ar, DFLASH -> dflash, DDTREE -> ddtree (others are not swept)
    engine      reference if server_info.engine is "ddtree_core.reference", else sglang
    version     server_info.version (SGLang's release; the reference server's ddtree package version)
    model       model_info.model_path (else server_info's); draft: server_info.speculative_draft_model_path
    block_size  ddtree_block_size, else (DFLASH) speculative_dflash_block_size or speculative_num_draft_tokens
    max_budget  DDTREE: the largest per-request ddtree_budget with the exact DDTree tree: ddtree_budget, capped
                by ddtree_top_k (SGLANG_DDTREE_TOP_K < budget gives other trees); the verify width is budget + 1
    max_depth   DDTREE: the deepest ddtree_max_depth a request may ask: the server's own, else block_size - 1
    settings    what it reported of RECORDED_KEYS and the speculative_* / ddtree_* keys (never api_key and the
                like: SGLang's server_info holds every ServerArgs field, secrets too)

A DDTREE server serves every DDTree cell up to its widths through per-request custom_params, and the
budget `auto` (chosen by the server each round, up to its own budget): the reference server per request; our
SGLang plugin only when started with SGLANG_DDTREE_BUDGET=auto (server_info ddtree_auto_budgets), and such a
server serves budget-auto cells and no others (its rounds take their own widths), every other SGLang DDTREE
server the fixed budgets alone. An AR or DFLASH
server serves the cells of its method (`refusal`).

Worked example: our SGLang plugin started with SGLANG_DDTREE_BUDGET=63 on a block-16 drafter answers
/server_info with SGLang's ServerArgs and, among them, {"speculative_algorithm": "DDTREE",
"speculative_num_draft_tokens": 64, "speculative_dflash_block_size": 16, "ddtree_block_size": 16,
"ddtree_budget": 63, "ddtree_max_depth": 15, "ddtree_top_k": 63, "ddtree_hold_chain": false,
"version": "0.5.15", "api_key": "..."}: RemoteServer(method="ddtree", engine="sglang", version="0.5.15",
block_size=16, max_budget=63, max_depth=15, ...), which serves budget 64 not at all ("budget 64 > 63"),
budget 32 at depth auto (15) or 7, held or not. With SGLANG_DDTREE_TOP_K=8 it serves budgets up to 8.
tests/data/server_info.json holds what the reference server and SGLang 0.5.15 answer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import httpx

from ddbench.config import AUTO_BUDGET, Cell, DDBenchError, ServerURL
from ddbench.harness.client import auth_headers
from ddtree_core.settings import PARAM_BUDGET, PARAM_HOLD_CHAIN, PARAM_MAX_DEPTH

ALGORITHMS = {None: "ar", "DFLASH": "dflash", "DDTREE": "ddtree"}  # speculative_algorithm -> method
REFERENCE_ENGINE = "ddtree_core.reference"  # server_info.engine of ddtree_core.reference.server
RECORDED_KEYS = (  # how the server is deployed, besides its speculative_* and ddtree_* keys
    "engine", "version", "model_path", "tp_size", "dp_size", "pp_size", "ep_size", "nnodes", "dtype",
    "kv_cache_dtype", "quantization", "attention_backend", "page_size", "max_running_requests",
    "mem_fraction_static", "disable_radix_cache", "disable_overlap_schedule", "disable_cuda_graph",
    "cuda_graph_max_bs_decode", "max_total_num_tokens",
)  # fmt: skip
TIMEOUT = httpx.Timeout(60.0, connect=10.0)


@dataclass(frozen=True)
class RemoteServer:
    """A running server as it describes itself (see the module docstring)."""

    url: str
    method: str  # ar | dflash | ddtree
    engine: str  # sglang | reference
    version: str | None
    model: str
    draft: str | None  # None for ar
    block_size: int | None  # the drafter's block; None for ar
    max_budget: int | None  # ddtree: the largest per-request budget; None for ar and dflash
    max_depth: int | None  # ddtree: the deepest per-request depth limit; None for ar and dflash
    settings: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False)
    auto_budgets: tuple[int, ...] = ()  # an SGLang DDTREE server's ddtree_auto_budgets: it chooses among them

    @property
    def label(self) -> str:
        """What it serves, e.g. "ddtree on sglang 0.5.15, block 16, budgets <= 63, depths <= 15"."""
        text = f"{self.method} on {self.engine}" + (f" {self.version}" if self.version else "")
        text += "" if self.block_size is None else f", block {self.block_size}"
        return text + ("" if self.max_budget is None else f", budgets <= {self.max_budget}, depths <= {self.max_depth}")

    def refusal(self, cell: Cell) -> str | None:
        """Why this server cannot serve `cell`, or None when it can."""
        if cell.method != self.method:
            return f"serves {self.method}"
        if cell.method != "ddtree":
            return None
        depth = self.block_size - 1 if cell.max_depth is None else cell.max_depth
        if cell.budget == AUTO_BUDGET:
            if self.engine == "sglang" and not self.auto_budgets:
                return f"budget {AUTO_BUDGET} needs a server started with SGLANG_DDTREE_BUDGET=auto"
            if self.max_budget < 1:
                return f"budget {AUTO_BUDGET} needs a server budget >= 1, not {self.max_budget}"
        elif self.auto_budgets:
            return f"serves budget {AUTO_BUDGET} only (its rounds choose among {list(self.auto_budgets)})"
        elif cell.budget > self.max_budget:
            return f"budget {cell.budget} > {self.max_budget}"
        if depth > self.max_depth:
            return f"depth {depth} > {self.max_depth}"
        return None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def describe(url: str, model_info: dict[str, Any], server_info: dict[str, Any]) -> RemoteServer:
    """The server behind the two documents; ValueError saying what is missing or not swept."""
    algorithm = str(server_info.get("speculative_algorithm") or "").upper() or None
    if algorithm not in ALGORITHMS:
        raise ValueError(f"serves {algorithm}, which ddbench does not sweep (only AR, DFLASH and DDTREE)")
    method = ALGORITHMS[algorithm]
    model = model_info.get("model_path") or server_info.get("model_path")
    if not model:
        raise ValueError("reports no model_path")
    block = server_info.get("ddtree_block_size")
    if method == "dflash" and block is None:
        block = server_info.get("speculative_dflash_block_size") or server_info.get("speculative_num_draft_tokens")
    if method != "ar" and not isinstance(block, int):
        raise ValueError(f"serves {algorithm} but reports no drafter block size")
    budget = depth = None
    if method == "ddtree":
        if not isinstance(server_info.get(PARAM_BUDGET), int) or PARAM_HOLD_CHAIN not in server_info:
            raise ValueError(f"serves DDTREE but reports no {PARAM_BUDGET} or {PARAM_HOLD_CHAIN} (an older plugin?)")
        budget = min(server_info[PARAM_BUDGET], server_info.get("ddtree_top_k") or server_info[PARAM_BUDGET])
        depth = server_info.get(PARAM_MAX_DEPTH) or block - 1
    settings = {
        key: value
        for key, value in server_info.items()
        if key in RECORDED_KEYS or key.startswith(("speculative_", "ddtree_"))
    }
    return RemoteServer(
        url=url,
        method=method,
        engine="reference" if server_info.get("engine") == REFERENCE_ENGINE else "sglang",
        version=server_info.get("version"),
        model=str(model),
        draft=None if method == "ar" else server_info.get("speculative_draft_model_path"),
        block_size=None if method == "ar" else block,
        max_budget=budget,
        max_depth=depth,
        settings=settings,
        auto_budgets=tuple(server_info.get("ddtree_auto_budgets") or ()) if method == "ddtree" else (),
    )


def probe(server: ServerURL, api_key: str | None) -> RemoteServer:
    """Ask the server what it is (module docstring); DDBenchError, one line naming the URL, if it does not
    answer, is no SGLang-compatible server, or serves another method than it was labelled with."""
    with httpx.Client(base_url=server.url, headers=auth_headers(api_key), timeout=TIMEOUT) as http:
        try:
            model_info = _get(http, "/model_info", "/get_model_info")
            found = describe(server.url, model_info, _get(http, "/server_info", "/get_server_info"))
            if server.method not in (None, found.method):
                raise DDBenchError(f"{server.url} is labelled {server.method} but serves {found.method}")
            _generate_one_token(http)
        except httpx.TransportError as error:
            raise DDBenchError(f"{server.url} does not answer ({type(error).__name__}: {error})") from error
        except ValueError as error:
            raise DDBenchError(f"{server.url} {error}") from error
    return found


def down(url: str, api_key: str | None) -> str | None:
    """Why `url` is not serving (it does not answer GET /health with 200), or None while it is."""
    try:
        status = httpx.get(url + "/health", headers=auth_headers(api_key), timeout=TIMEOUT).status_code
    except httpx.HTTPError as error:
        return f"{url} does not answer ({type(error).__name__}: {error})"
    return None if status == 200 else f"{url} answers GET /health with HTTP {status}"


def _get(http: httpx.Client, path: str, older: str) -> dict[str, Any]:
    """GET `path`, or `older` where `path` is unknown (404); ValueError unless a JSON object comes back."""
    response = http.get(path)
    if response.status_code == 404:
        response = http.get(older)
        if response.status_code == 404:
            raise ValueError(f"is no SGLang-compatible server: GET {path} and {older} answer HTTP 404")
        path = older
    data = _json(response, f"GET {path}")
    if not isinstance(data, dict):
        raise ValueError(f"is no SGLang-compatible server: GET {path} answers no JSON object")
    return data


def _generate_one_token(http: httpx.Client) -> None:
    """ValueError unless POST /generate answers one greedy token as SGLang does (a list of one: some versions)."""
    body = {"input_ids": [0], "sampling_params": {"temperature": 0.0, "max_new_tokens": 1}}
    answer = _json(http.post("/generate", json=body), "POST /generate")
    answer = answer[0] if isinstance(answer, list) and answer else answer
    if not (isinstance(answer, dict) and isinstance(answer.get("output_ids"), list) and "meta_info" in answer):
        raise ValueError("is no SGLang-compatible server: POST /generate answers no output_ids and meta_info")


def _json(response: httpx.Response, what: str) -> Any:
    """The JSON body of a 200 answer; ValueError naming `what` otherwise."""
    if response.status_code in (401, 403):
        raise ValueError(f"refuses {what} with HTTP {response.status_code} (a missing or wrong --api-key?)")
    if response.status_code != 200:
        raise ValueError(f"is no SGLang-compatible server: {what} answers HTTP {response.status_code}")
    try:
        return response.json()
    except ValueError:
        raise ValueError(f"is no SGLang-compatible server: {what} answers no JSON") from None

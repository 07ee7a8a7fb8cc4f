"""Offline baselines: the reference engine run as the DDTree / z-lab benchmark harnesses run it.

`run_baseline` decodes every prompt at batch 1 in-process (no server), as liranringel/ddtree
`benchmark.py` does: per prompt and turn, AR (the harness's `block_size=1` run), DFLASH and DDTree at
every budget on the same prompt ids; MT-Bench's turn 2 carries the *last* method's turn-1 answer; one
16-token "Warmup" prompt per method first; timings exclude prefill (the reference engine's
`decode_time`, which starts after the first draft pass). Its output is a `zlab.json` file:

    {
      "format": "ddbench-zlab/1",
      "harness": "offline batch-1, liranringel/ddtree benchmark.py semantics",
      "model": str, "draft": str, "block_size": int, "max_new_tokens": int,
      "environment": {...},                       # ddbench.env.environment_stamp()
      "cells": [
        {"dataset": str, "method": "ar" | "dflash" | "ddtree",
         "budget": int | null, "max_depth": int | null, "draft_temperature": float | null,
         "hold_chain": bool | null,               # false for ddtree (absent in older files: false)
         "temperature": float,
         "responses": [
           {"prompt_index": int, "turn": int,     # prompt of the dataset subset, 0-based turn
            "prompt_hash": str,                   # ddbench.harness.results.prompt_hash of the prompt ids
            "output_ids": [int, ...],             # generated ids, stop token included
            "acceptance_lengths": [int, ...],     # tau per round, bonus included; [] for ar
            "time_per_output_token": float,       # decode seconds / output tokens (prefill excluded)
            "ttft_s": float}]}]
    }

Derived per cell (`OfflineCell`): acceptance length pooled and per response (ddtree_core.metrics), the
tau histogram and per-depth acceptance (each round's tree taken to reach min(budget, block_size - 1)),
speedup = mean AR TPOT / mean TPOT (the harness's), and parity = share of outputs equal to AR's at
temperature 0. `offline_cells_from_pt` reads the harness's own `.pt` run files into the same cells.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddbench.config import DDBenchError, ddtree_hold_chain
from ddbench.harness.results import prompt_hash, write_json
from ddtree_core import metrics

FORMAT = "ddbench-zlab/1"


@dataclass(frozen=True)
class OfflineResponse:
    prompt_index: int | None  # None where the source does not say (a .pt file)
    turn: int | None
    prompt_hash: str
    output_ids: tuple[int, ...]
    acceptance_lengths: tuple[int, ...]  # tau per round; empty for AR
    time_per_output_token: float


@dataclass(frozen=True)
class OfflineCell:
    """One method setting on one dataset and temperature, with metrics derived from its responses."""

    dataset: str
    method: str
    budget: int | None
    max_depth: int | None
    draft_temperature: float | None
    hold_chain: bool | None  # False for ddtree (the harness holds no chain), None for ar and dflash
    temperature: float
    responses: tuple[OfflineResponse, ...]
    acceptance_length: float | None
    acceptance_length_per_response: float | None
    accept_histogram: tuple[float, ...]
    depth_acceptance: tuple[float | None, ...]
    speedup_vs_ar: float | None
    parity: float | None

    @property
    def key(self) -> tuple:
        setting = (self.method, self.budget, self.max_depth, self.draft_temperature, self.hold_chain)
        return (self.dataset, *setting, self.temperature, None)


def build_cells(raw: Sequence[dict[str, Any]], block_size: int | None) -> list[OfflineCell]:
    """OfflineCells from zlab.json-shaped cell dicts (responses as OfflineResponse), metrics included."""
    ar = {(c["dataset"], c["temperature"]): c["responses"] for c in raw if c["method"] == "ar"}
    return [_cell(c, ar.get((c["dataset"], c["temperature"])), block_size) for c in raw]


def _cell(raw: dict[str, Any], ar: Sequence[OfflineResponse] | None, block_size: int | None) -> OfflineCell:
    responses: tuple[OfflineResponse, ...] = tuple(raw["responses"])
    if raw["method"] == "ar":
        per_response = [[1] * len(r.output_ids) for r in responses]
    else:
        per_response = [list(r.acceptance_lengths) for r in responses]
    taus = [tau for rounds in per_response for tau in rounds]
    histogram = metrics.accept_length_histogram(taus)
    depth = _tree_depth(raw, block_size, len(histogram) - 1)
    per_depth = metrics.depth_acceptance(taus, depth) if depth > 0 else ()
    return OfflineCell(
        **{name: raw[name] for name in ("dataset", "method", "budget", "max_depth", "draft_temperature")},
        hold_chain=ddtree_hold_chain(raw["method"], raw.get("hold_chain")),
        temperature=float(raw["temperature"]),
        responses=responses,
        acceptance_length=_number(metrics.acceptance_length(taus)),
        acceptance_length_per_response=_number(metrics.acceptance_length_per_response(per_response)),
        accept_histogram=tuple(count / len(taus) for count in histogram) if taus else (),
        depth_acceptance=tuple(_number(value) for value in per_depth),
        speedup_vs_ar=_speedup(responses, ar),
        parity=_parity(responses, ar) if float(raw["temperature"]) == 0 and ar else None,
    )


def _tree_depth(raw: dict[str, Any], block_size: int | None, deepest: int) -> int:
    if raw["method"] == "ar":
        return 0
    limit = raw["max_depth"] or (block_size - 1 if block_size else deepest)
    if raw["method"] == "ddtree" and raw["budget"]:
        limit = min(limit, raw["budget"])
    return max(limit, deepest)


def _speedup(responses: Sequence[OfflineResponse], ar: Sequence[OfflineResponse] | None) -> float | None:
    if not ar or not responses:
        return None
    ours = sum(r.time_per_output_token for r in responses) / len(responses)
    theirs = sum(r.time_per_output_token for r in ar) / len(ar)
    return theirs / ours if ours > 0 else None


def _parity(responses: Sequence[OfflineResponse], ar: Sequence[OfflineResponse]) -> float | None:
    outputs = {r.prompt_hash: r.output_ids for r in ar}
    pairs = [(r.output_ids, outputs[r.prompt_hash]) for r in responses if r.prompt_hash in outputs]
    return sum(a == b for a, b in pairs) / len(pairs) if pairs else None


def _number(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def read_zlab_json(path: Path) -> list[OfflineCell]:
    """The cells of a zlab.json file (raises ValueError/KeyError/TypeError when malformed)."""
    import json

    data = json.loads(path.read_text())
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f'not a zlab.json file (expected "format": "{FORMAT}")')
    raw = []
    for cell in data["cells"]:
        responses = [
            OfflineResponse(
                prompt_index=int(r["prompt_index"]),
                turn=int(r["turn"]),
                prompt_hash=str(r["prompt_hash"]),
                output_ids=tuple(int(t) for t in r["output_ids"]),
                acceptance_lengths=tuple(int(t) for t in r["acceptance_lengths"]),
                time_per_output_token=float(r["time_per_output_token"]),
            )
            for r in cell["responses"]
        ]
        raw.append({**cell, "responses": responses})
    return build_cells(raw, data.get("block_size"))


def offline_cells_from_pt(path: Path) -> list[OfflineCell]:
    """The cells of a liranringel/ddtree `benchmark.py --save-path` file (prompt order unknown)."""
    import torch

    with torch.serialization.safe_globals([types.SimpleNamespace]):
        data = torch.load(path, map_location="cpu", weights_only=True)
    args, block_size = data["args"], int(data["block_size"])
    grouped: dict[str, list[OfflineResponse]] = {}
    for response in data["responses"]:
        for key, run in response.items():
            ids = [int(t) for t in run.output_ids[0].tolist()]
            prompt, generated = ids[: run.num_input_tokens], ids[run.num_input_tokens :]
            taus = () if key == "baseline" else tuple(int(t) for t in run.acceptance_lengths)
            grouped.setdefault(key, []).append(
                OfflineResponse(None, None, prompt_hash(prompt), tuple(generated), taus, run.time_per_output_token)
            )
    raw = [_pt_cell(key, responses, args) for key, responses in grouped.items()]
    return build_cells(raw, block_size)


def _pt_cell(key: str, responses: list[OfflineResponse], args: dict[str, Any]) -> dict[str, Any]:
    method, budget = {"baseline": ("ar", None), "dflash": ("dflash", None)}.get(key, ("ddtree", None))
    if method == "ddtree":
        if not key.startswith("ddtree_tb"):
            raise ValueError(f"unknown method key {key!r} in the .pt file")
        budget = int(key.removeprefix("ddtree_tb"))
    return {
        "dataset": args["dataset"],
        "method": method,
        "budget": budget,
        "max_depth": None,
        "draft_temperature": 1.0 if method == "ddtree" else None,
        "hold_chain": False if method == "ddtree" else None,
        "temperature": float(args["temperature"]),
        "responses": responses,
    }


def run_baseline(
    *,
    model: str,
    draft: str,
    prompts: dict[str, list],
    budgets: Sequence[int],
    temperatures: Sequence[float],
    max_new_tokens: int,
    device: str = "auto",
    dtype: str = "auto",
    on_request: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """Decode every prompt with every method in-process; returns the zlab.json document."""
    from ddbench.datasets import chat_messages
    from ddbench.env import environment_stamp
    from ddtree_core.reference import loading
    from ddtree_core.reference.decode import SpecConfig
    from ddtree_core.settings import TreeSettings

    models = loading.load_models(model, draft, dtype=dtype, device=device)
    if models.tokenizer is None:
        raise DDBenchError(f"{model} has no tokenizer")
    specs = [SpecConfig(method="ar"), SpecConfig(method="dflash")]
    specs += [SpecConfig(method="ddtree", tree=TreeSettings(budget, None)) for budget in budgets]
    stop = loading.eos_token_ids(models.target, models.tokenizer)
    cells = []
    for temperature in temperatures:
        runs = {id(spec): [] for spec in specs}
        decode = _decoder(models, stop, max_new_tokens, temperature)
        warmup = _encode(models.tokenizer, [{"role": "user", "content": "Warmup"}])
        for spec in specs:
            decode(warmup, spec, min(16, max_new_tokens))
        for dataset, items in prompts.items():
            for prompt in items:
                answers: list[str] = []
                for turn in range(len(prompt.turns)):
                    ids = _encode(models.tokenizer, chat_messages(prompt, answers))
                    for spec in specs:
                        generation = decode(ids, spec, max_new_tokens)
                        runs[id(spec)].append((dataset, _response(prompt.index, turn, ids, generation)))
                        on_request()
                    answers.append(models.tokenizer.decode(list(generation.tokens), skip_special_tokens=True))
        cells += _document_cells(specs, runs, temperature, prompts)
    block = models.drafter.block_size
    return {
        "format": FORMAT,
        "harness": "offline batch-1, liranringel/ddtree benchmark.py semantics",
        "model": model,
        "draft": draft,
        "block_size": block,
        "max_new_tokens": max_new_tokens,
        "environment": environment_stamp(),
        "cells": cells,
    }


def _decoder(models, stop: tuple[int, ...], max_new_tokens: int, temperature: float):
    from ddtree_core.reference.decode import SamplingConfig, generate
    from ddtree_core.reference.dflash import DFlashProposer

    def decode(ids: list[int], spec, limit: int):
        sampling = SamplingConfig(max_new_tokens=limit, temperature=temperature, stop_token_ids=stop)
        proposer = None if spec.method == "ar" else DFlashProposer(models.drafter, models.target)
        return generate(models.target, ids, sampling, spec, proposer=proposer, timing=True)

    return decode


def _encode(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    return list(tokenizer.encode(text))


def _response(index: int, turn: int, ids: list[int], generation) -> dict[str, Any]:
    return {
        "prompt_index": index,
        "turn": turn,
        "prompt_hash": prompt_hash(ids),
        "output_ids": list(generation.tokens),
        "acceptance_lengths": list(generation.accept_lengths),
        "time_per_output_token": generation.time_per_output_token,
        "ttft_s": generation.ttft,
    }


def _document_cells(specs, runs, temperature: float, prompts: dict[str, list]) -> list[dict[str, Any]]:
    cells = []
    for dataset in prompts:
        for spec in specs:
            ddtree = spec.method == "ddtree"
            cells.append(
                {
                    "dataset": dataset,
                    "method": spec.method,
                    "budget": spec.tree.budget if ddtree else None,
                    "max_depth": spec.tree.max_depth if ddtree else None,
                    "draft_temperature": spec.tree.draft_temperature if ddtree else None,
                    "hold_chain": spec.tree.hold_chain if ddtree else None,
                    "temperature": temperature,
                    "responses": [response for name, response in runs[id(spec)] if name == dataset],
                }
            )
    return cells


def write_baseline(path: Path, document: dict[str, Any]) -> None:
    write_json(path, document)

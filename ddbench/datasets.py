"""Benchmark prompts (GSM8K, HumanEval, MT-Bench), formatted exactly as the published baselines send them.

Acceptance length depends on the prompt text, so the strings below are those of the DDTree and z-lab
DFlash harnesses (`model/utils.py::load_and_process_dataset`), to the character:

    gsm8k      "{question}\\nPlease reason step by step, and put your final answer within \\\\boxed{}."
    humaneval  "Write a solution to the following problem and make sure that it passes the tests:\\n"
               "```python\\n{prompt}\\n```"
    mt-bench   the two user turns of a question, answered one after the other; turn 2's history holds
               the model's own turn-1 answer (`chat_messages`)

Sources, the first that works: a local mirror directory (the `data_dir` argument, else
$DDBENCH_DATA_DIR) holding gsm8k_test.jsonl, HumanEval.jsonl.gz and mt_bench_question.jsonl; else the
hub ids of `SOURCES`, after a reachability probe of a few seconds, so that an offline machine fails
at once with a message naming what was tried instead of retrying for minutes. A path to a JSONL file
with one {"prompt": str} or {"turns": [str, ...]} per line (optional "reference") is used verbatim.

Subsets follow DDTree: n < len(dataset) takes `dataset.shuffle(seed=0).select(range(n))`, otherwise the
whole dataset in its own order; HumanEval uses all 164 by default (`DEFAULT_NUM_PROMPTS`). Which prompts
are held out from drafter training is ddbench.heldout's to say.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

DATASET_NAMES = ("gsm8k", "humaneval", "mt-bench")
# Sample counts of DDTree's run_benchmark.sh: 128 where a dataset is larger, else all of it.
DEFAULT_NUM_PROMPTS = {"gsm8k": 128, "humaneval": 164, "mt-bench": 80}
SHUFFLE_SEED = 0
DATA_DIR_ENV = "DDBENCH_DATA_DIR"
_OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


class DatasetUnavailableError(RuntimeError):
    """Neither the local mirror nor the hub could provide a benchmark dataset."""


@dataclass(frozen=True)
class DatasetSource:
    """Where one benchmark dataset lives: a file of the local mirror, or a hub id, config and split."""

    mirror_file: str
    hub_id: str
    hub_config: str | None
    hub_split: str


SOURCES = {
    "gsm8k": DatasetSource("gsm8k_test.jsonl", "openai/gsm8k", "main", "test"),
    "humaneval": DatasetSource("HumanEval.jsonl.gz", "openai/openai_humaneval", None, "test"),
    "mt-bench": DatasetSource("mt_bench_question.jsonl", "HuggingFaceH4/mt_bench_prompts", None, "train"),
}


@dataclass(frozen=True)
class Prompt:
    """One benchmark item: the user turns to send, in order, and the dataset's reference answer."""

    dataset: str  # "gsm8k", "humaneval", "mt-bench", or the file name of a custom JSONL
    index: int  # 0-based row in the source, in the source's own order
    turns: tuple[str, ...]  # user messages, formatted as the baselines send them; MT-Bench has 2
    reference: tuple[str, ...] | None = None  # GSM8K answer, HumanEval canonical solution, MT-Bench refs

    def __post_init__(self) -> None:
        if not self.turns or not all(isinstance(turn, str) for turn in self.turns):
            raise ValueError(f"a prompt needs at least one string turn, got {self.turns!r}")
        if self.index < 0:
            raise ValueError(f"prompt index must be >= 0, got {self.index}")


def format_gsm8k(question: str) -> str:
    return question + "\nPlease reason step by step, and put your final answer within \\boxed{}."


def format_humaneval(prompt: str) -> str:
    return (
        f"Write a solution to the following problem and make sure that it passes the tests:\n```python\n{prompt}\n```"
    )


def _gsm8k_prompt(index: int, row: dict[str, Any]) -> Prompt:
    return Prompt("gsm8k", index, (format_gsm8k(row["question"]),), (row["answer"],))


def _humaneval_prompt(index: int, row: dict[str, Any]) -> Prompt:
    return Prompt("humaneval", index, (format_humaneval(row["prompt"]),), (row["canonical_solution"],))


def _mt_bench_prompt(index: int, row: dict[str, Any]) -> Prompt:
    turns = row.get("turns") or row["prompt"]  # the mirror says "turns", the hub copy "prompt"
    reference = tuple(row.get("reference") or ()) or None
    return Prompt("mt-bench", index, tuple(turns), reference)


_ROW_TO_PROMPT = {"gsm8k": _gsm8k_prompt, "humaneval": _humaneval_prompt, "mt-bench": _mt_bench_prompt}


def load_prompts(
    name: str,
    num_prompts: int | None = None,
    *,
    data_dir: str | Path | None = None,
    hub_timeout_s: float = 3.0,
) -> list[Prompt]:
    """The benchmark subset of `name`: `num_prompts` items (default `DEFAULT_NUM_PROMPTS`, custom files all).

    `name` is one of `DATASET_NAMES` or a path to a JSONL file; see the module docstring for sources.
    """
    prompts = load_all_prompts(name, data_dir=data_dir, hub_timeout_s=hub_timeout_s)
    if num_prompts is None:
        num_prompts = DEFAULT_NUM_PROMPTS.get(name, len(prompts))
    return select_subset(prompts, num_prompts)


def load_all_prompts(name: str, *, data_dir: str | Path | None = None, hub_timeout_s: float = 3.0) -> list[Prompt]:
    """Every item of `name`, in the source's own order (prompt.index == position)."""
    if name in SOURCES:
        rows = _load_rows(name, default_data_dir(data_dir), hub_timeout_s)
        return [_row_prompt(name, index, row) for index, row in enumerate(rows)]
    path = Path(name)
    if path.suffix == ".jsonl" or path.is_file():
        return read_jsonl_prompts(path)
    valid = ", ".join(DATASET_NAMES)
    raise ValueError(f"unknown dataset {name!r}: valid names are {valid}, or a path to a .jsonl file")


def _row_prompt(name: str, index: int, row: dict[str, Any]) -> Prompt:
    try:
        return _ROW_TO_PROMPT[name](index, row)
    except (KeyError, TypeError) as error:
        raise ValueError(f"{name} row {index}: unexpected record ({type(error).__name__}: {error})") from error


def default_data_dir(data_dir: str | Path | None = None) -> Path | None:
    """The local mirror to use: the argument if given, else $DDBENCH_DATA_DIR, else None (hub)."""
    chosen = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV) or None
    return None if chosen is None else Path(chosen)


def _load_rows(name: str, data_dir: Path | None, hub_timeout_s: float) -> Sequence[dict[str, Any]]:
    source = SOURCES[name]
    tried = []
    if data_dir is not None:
        path = data_dir / source.mirror_file
        if path.is_file():
            return _load_json_file(path)
        tried.append(f"local mirror {path}: no such file")
    else:
        tried.append(f"local mirror: none given (data_dir argument or ${DATA_DIR_ENV})")
    reason = hub_unreachable_reason(hub_timeout_s)
    if reason is None and not _have_datasets():
        reason = "the datasets package is not installed"
    if reason is None:
        import datasets

        try:
            return datasets.load_dataset(source.hub_id, source.hub_config, split=source.hub_split)
        except Exception as error:  # the hub raises many types; all mean "not from the hub"
            reason = f"{type(error).__name__}: {error}"
    config = f", config {source.hub_config}" if source.hub_config else ""
    tried.append(f"hub {source.hub_id}{config}, split {source.hub_split}: {reason}")
    raise DatasetUnavailableError(f"cannot load dataset {name!r}; tried: " + "; ".join(tried))


def hub_unreachable_reason(timeout_s: float = 3.0) -> str | None:
    """Why the Hugging Face hub cannot be used now, or None if a TCP connection to it opens in time."""
    for variable in _OFFLINE_ENV:
        if os.environ.get(variable, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return f"offline mode (${variable} is set)"
    from huggingface_hub import constants

    endpoint = urlparse(constants.ENDPOINT)
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or 443
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as error:
        return f"cannot connect to {host}:{port} within {timeout_s:g} s ({error})"


def _have_datasets() -> bool:
    return importlib.util.find_spec("datasets") is not None


def _load_json_file(path: Path) -> Sequence[dict[str, Any]]:
    """The rows of a mirror file, with `datasets` where it is installed, else with the json module
    (the same rows: the mirror files are plain JSON lines)."""
    if not _have_datasets():
        return [record for _, record in iter_jsonl(path)]
    import datasets

    try:
        # Not load_dataset("json", ...): that first sends a download-count request to the hub (3 s timeout).
        return datasets.Dataset.from_json(str(path))
    except datasets.exceptions.DatasetGenerationError as error:
        for _ in iter_jsonl(path):  # raises with the file and line of the first bad record
            pass
        raise ValueError(f"{path}: not readable as JSON lines ({error})") from error


def read_jsonl_prompts(path: str | Path) -> list[Prompt]:
    """Prompts from a JSONL file, one {"prompt": str} or {"turns": [str, ...]} per line, used verbatim."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prompt file {path} does not exist")
    prompts = []
    for line_number, record in iter_jsonl(path):
        turns = _record_turns(record, f"{path}:{line_number}")
        reference = record.get("reference")
        reference = (reference,) if isinstance(reference, str) else tuple(reference or ()) or None
        prompts.append(Prompt(path.name, len(prompts), turns, reference))
    if not prompts:
        raise ValueError(f"{path}: no prompts (the file holds no JSON lines)")
    return prompts


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, object) for each non-blank line; a bad line raises naming file and line."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        for line_number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{line_number}: invalid JSON ({error.msg})") from error
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{line_number}: expected a JSON object, got {type(record).__name__}")
            yield line_number, record


def _record_turns(record: dict[str, Any], where: str) -> tuple[str, ...]:
    turns = record.get("turns", record.get("prompt"))
    if isinstance(turns, str):
        turns = [turns]
    if not isinstance(turns, list) or not turns or not all(isinstance(turn, str) for turn in turns):
        raise ValueError(f'{where}: expected "prompt": str or "turns": [str, ...], got keys {sorted(record)}')
    return tuple(turns)


@functools.lru_cache(maxsize=16)
def shuffle_order(length: int, seed: int = SHUFFLE_SEED) -> tuple[int, ...]:
    """Source positions in the order of `Dataset.shuffle(seed)` for any dataset of `length` rows.

    That shuffle is numpy's default_rng(seed).permutation(length), computed here directly so that the
    order needs no `datasets` install (tests check the two agree).
    """
    return tuple(int(i) for i in np.random.default_rng(seed).permutation(length))


def select_subset(prompts: Sequence[Prompt], num_prompts: int) -> list[Prompt]:
    """DDTree's subset: the first `num_prompts` of the seed-0 shuffle if fewer than all, else all in order."""
    _check_whole_dataset(prompts)
    if num_prompts < 0:
        raise ValueError(f"num_prompts must be >= 0, got {num_prompts}")
    if num_prompts >= len(prompts):
        return list(prompts)
    return [prompts[position] for position in shuffle_order(len(prompts))[:num_prompts]]


def _check_whole_dataset(prompts: Sequence[Prompt]) -> None:
    for position, prompt in enumerate(prompts):
        if prompt.index != position:
            raise ValueError(f"expected a whole dataset in source order, but item {position} has index {prompt.index}")


def chat_messages(prompt: Prompt, turn_answers: Sequence[str] = ()) -> list[dict[str, str]]:
    """The messages for `apply_chat_template` that ask turn len(turn_answers) of `prompt`.

    Earlier turns come with the model's own answers (MT-Bench turn 2 sees its turn-1 answer); no system
    message, as in the baselines.
    """
    if len(turn_answers) >= len(prompt.turns):
        raise ValueError(f"{len(turn_answers)} answers given for a prompt of {len(prompt.turns)} turns")
    messages = []
    for turn, answer in zip(prompt.turns, turn_answers):
        messages += [{"role": "user", "content": turn}, {"role": "assistant", "content": answer}]
    messages.append({"role": "user", "content": prompt.turns[len(turn_answers)]})
    return messages

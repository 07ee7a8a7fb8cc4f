"""The held-out evaluation split of the builtin datasets: the prompts no drafter of ours may train on.

Membership is a property of a prompt's text, not of its position. A turn is held out when the hash of
its text (`text_hash`: sha256, first 16 hex digits, the text exactly as benchmarks send it, i.e.
`datasets.Prompt.turns`) is listed in heldout.json; a prompt is held out when every turn is. Reordering a
dataset, or a JSONL file holding the same prompts in another order, changes nothing.

The list holds every turn of the first EVAL_SIZES[name] prompts of DDTree's seed-0 shuffle
(`datasets.shuffle_order`), as `split_from_shuffle` computes it (a test checks that the file still equals
it): GSM8K 128 of 1319, HumanEval 64 of 164, MT-Bench 40 of 80 (both turns of each), and all 30 of
OOD_FILE, prompts written for this project outside the three datasets' formats (10 chat, 10 code, 10 math).
The testbed
drafter (`testbed.DRAFTER_DIR`) trained on every other prompt (`train_prompts`), so a benchmark of it is
clean exactly when every prompt it sends is held out; training refuses held-out text
(`check_training_texts`).

Example, with the offline mirror:

    >>> held = eval_prompts("humaneval")        # 64 prompts, in shuffle order: load_prompts("humaneval", 64)
    >>> is_held_out(held[0]), len(train_prompts("humaneval"))
    (True, 100)
    >>> check_training_texts(held[0].turns)
    HeldOutError: refusing to train on held-out evaluation prompts: 1 of humaneval (see ddbench.heldout)
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from ddbench.datasets import Prompt, load_all_prompts, load_prompts, shuffle_order

# Held-out prompts per builtin dataset: the first of the seed-0 shuffle; HASHES_FILE lists their turns.
EVAL_SIZES = {"gsm8k": 128, "humaneval": 64, "mt-bench": 40}
HASHES_FILE = Path(__file__).with_name("heldout.json")
# Out-of-distribution prompts (chat, code, math) written for this project, in none of the datasets' formats:
# every one is held out (HASHES_FILE's "ood"). `ddbench sweep --datasets ddbench/ood_prompts.jsonl` sends them.
OOD_FILE = Path(__file__).with_name("ood_prompts.jsonl")


class HeldOutError(ValueError):
    """Training was given held-out evaluation prompts."""


def text_hash(text: str) -> str:
    """The first 16 hex digits of the sha256 of `text` in UTF-8, as given (no normalization)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.cache
def _held_out_turns() -> dict[str, str]:
    """Held-out turn hash -> the builtin dataset it belongs to."""
    listed = json.loads(HASHES_FILE.read_text())
    return {digest: name for name, digests in listed.items() for digest in digests}


def held_out_dataset(text: str) -> str | None:
    """The builtin dataset whose held-out split has `text` as a turn, else None."""
    return _held_out_turns().get(text_hash(text))


def is_held_out(prompt: Prompt) -> bool:
    """Whether every turn of `prompt` is held-out text, whatever its source, index or neighbours."""
    return all(held_out_dataset(turn) is not None for turn in prompt.turns)


def eval_prompts(name: str, *, data_dir: str | Path | None = None) -> list[Prompt]:
    """The held-out prompts of `name` (a builtin dataset or a JSONL path), in the order of the seed-0 shuffle.

    For a builtin dataset these are its first EVAL_SIZES[name] in that order, which is DDTree's subset of
    that many: eval_prompts("gsm8k") == load_prompts("gsm8k", 128).
    """
    return [prompt for prompt in _shuffled(name, data_dir) if is_held_out(prompt)]


def train_prompts(name: str, *, data_dir: str | Path | None = None) -> list[Prompt]:
    """The prompts of `name` without a held-out turn, in the order of the seed-0 shuffle: what may be trained on.

    A prompt with held-out and other turns (no builtin dataset has one) is in neither this nor `eval_prompts`.
    """
    return [prompt for prompt in _shuffled(name, data_dir) if not any(map(held_out_dataset, prompt.turns))]


def _shuffled(name: str, data_dir: str | Path | None) -> list[Prompt]:
    prompts = load_all_prompts(name, data_dir=data_dir)
    return [prompts[position] for position in shuffle_order(len(prompts))]


def check_training_texts(texts: Iterable[str]) -> None:
    """Raise HeldOutError, one line naming each dataset and how many of `texts` are its held-out turns, if any is.

    Example: the formatted GSM8K question 264 and a new question raise
    "refusing to train on held-out evaluation prompts: 1 of gsm8k (see ddbench.heldout)".
    """
    found = Counter(name for name in map(held_out_dataset, texts) if name is not None)
    if found:
        counts = ", ".join(f"{count} of {name}" for name, count in sorted(found.items()))
        raise HeldOutError(f"refusing to train on held-out evaluation prompts: {counts} (see ddbench.heldout)")


def split_from_shuffle(data_dir: str | Path | None = None) -> dict[str, list[str]]:
    """The sorted turn hashes of the first EVAL_SIZES[name] prompts of each dataset's seed-0 shuffle (and under
    "ood", of every prompt of OOD_FILE): the content
    of HASHES_FILE, written once with `HASHES_FILE.write_text(json.dumps(split_from_shuffle(), indent=1) + "\\n")`."""
    split = {
        name: sorted(text_hash(turn) for prompt in load_prompts(name, size, data_dir=data_dir) for turn in prompt.turns)
        for name, size in EVAL_SIZES.items()
    }
    split["ood"] = sorted(text_hash(turn) for prompt in load_all_prompts(str(OOD_FILE)) for turn in prompt.turns)
    return split

"""Benchmark prompts: baseline formats written out literally, DDTree's subset rule, errors (held-out split:
test_heldout.py)."""

import gzip
import json
import socket
import time

import pytest

from ddbench.datasets import (
    DATASET_NAMES,
    DEFAULT_NUM_PROMPTS,
    DatasetUnavailableError,
    Prompt,
    chat_messages,
    hub_unreachable_reason,
    load_all_prompts,
    load_prompts,
    read_jsonl_prompts,
    select_subset,
    shuffle_order,
)

hf_datasets = pytest.importorskip("datasets")  # a dev dependency; the GPU image lacks it

GSM8K_0 = (
    "Janet\u2019s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for "
    "her friends every day with four. She sells the remainder at the farmers' market daily for $2 per fresh "
    "duck egg. How much in dollars does she make every day at the farmers' market?\n"
    "Please reason step by step, and put your final answer within \\boxed{}."
)
HUMANEVAL_0 = (
    "Write a solution to the following problem and make sure that it passes the tests:\n"
    "```python\n"
    "from typing import List\n"
    "\n"
    "\n"
    "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
    '    """ Check if in given list of numbers, are any two numbers closer to each other than\n'
    "    given threshold.\n"
    "    >>> has_close_elements([1.0, 2.0, 3.0], 0.5)\n"
    "    False\n"
    "    >>> has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)\n"
    "    True\n"
    '    """\n'
    "\n"
    "```"
)
MT_BENCH_0 = (
    "Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences "
    "and must-see attractions.",
    "Rewrite your previous response. Start every sentence with the letter A.",
)


@pytest.fixture(autouse=True)
def offline_hub(monkeypatch):
    """No test may reach the hub; a missing mirror must fail at once."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("DDBENCH_DATA_DIR", raising=False)


def _mirror_rows(data_dir, file_name):
    opener = gzip.open if file_name.endswith(".gz") else open
    with opener(data_dir / file_name, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


# ---- formats -------------------------------------------------------------------------------------------


def test_gsm8k_item_0_is_the_baseline_string(data_dir):
    prompt = load_all_prompts("gsm8k", data_dir=data_dir)[0]
    assert prompt.dataset == "gsm8k" and prompt.index == 0
    assert prompt.turns == (GSM8K_0,)
    assert prompt.turns[0].endswith("within \\boxed{}.") and "\\\\" not in prompt.turns[0]
    assert prompt.reference[0].endswith("#### 18")


def test_humaneval_item_0_is_the_baseline_string(data_dir):
    prompt = load_all_prompts("humaneval", data_dir=data_dir)[0]
    assert prompt.turns == (HUMANEVAL_0,)
    assert prompt.reference[0].startswith("    for idx, elem in enumerate(numbers):")


def test_mt_bench_item_0_has_two_turns(data_dir):
    prompts = load_all_prompts("mt-bench", data_dir=data_dir)
    assert prompts[0].turns == MT_BENCH_0
    assert prompts[0].reference is None
    assert all(len(prompt.turns) == 2 for prompt in prompts)


def test_every_mirror_row_becomes_one_prompt(data_dir):
    files = {
        "gsm8k": "gsm8k_test.jsonl",
        "humaneval": "HumanEval.jsonl.gz",
        "mt-bench": "mt_bench_question.jsonl",
    }
    for name, file_name in files.items():
        rows = _mirror_rows(data_dir, file_name)
        prompts = load_all_prompts(name, data_dir=data_dir)
        assert [prompt.index for prompt in prompts] == list(range(len(rows)))
        if name == "mt-bench":
            assert [prompt.turns for prompt in prompts] == [tuple(row["turns"]) for row in rows]
            with_reference = [i for i, row in enumerate(rows) if row.get("reference")]
            assert [prompt.index for prompt in prompts if prompt.reference] == with_reference
    assert len(load_all_prompts("gsm8k", data_dir=data_dir)) == 1319


def test_mirror_loading_opens_no_connection(data_dir, monkeypatch):
    lookups = []
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: lookups.append(args[:2]) or [])
    for name in DATASET_NAMES:
        load_all_prompts(name, data_dir=data_dir)
    assert lookups == []


def test_data_dir_comes_from_the_environment(data_dir, monkeypatch):
    monkeypatch.setenv("DDBENCH_DATA_DIR", str(data_dir))
    assert load_all_prompts("mt-bench")[0].turns == MT_BENCH_0


def test_jsonl_file_is_used_verbatim(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"prompt": "Say hi."}\n\n{"turns": ["One?", "Two?"], "reference": "ref"}\n')
    prompts = load_prompts(str(path))
    assert prompts == [
        Prompt("mine.jsonl", 0, ("Say hi.",)),
        Prompt("mine.jsonl", 1, ("One?", "Two?"), ("ref",)),
    ]


def test_chat_messages_carry_the_models_own_answers():
    prompt = Prompt("mt-bench", 0, ("Q1", "Q2"))
    assert chat_messages(prompt) == [{"role": "user", "content": "Q1"}]
    assert chat_messages(prompt, ["A1"]) == [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "Q2"},
    ]
    with pytest.raises(ValueError, match="2 answers given for a prompt of 2 turns"):
        chat_messages(prompt, ["A1", "A2"])


# ---- subsets and the held-out split --------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 7, 164, 1319], ids=lambda n: f"len{n}")
def test_shuffle_order_is_the_datasets_shuffle(length):
    rows = hf_datasets.Dataset.from_dict({"position": list(range(length))})
    assert shuffle_order(length) == tuple(rows.shuffle(seed=0, keep_in_memory=True)["position"])


@pytest.mark.parametrize("name", DATASET_NAMES)
def test_mirror_loads_the_same_without_the_datasets_package(name, data_dir, monkeypatch):
    expected = load_all_prompts(name, data_dir=data_dir)
    monkeypatch.setattr("ddbench.datasets._have_datasets", lambda: False)
    assert load_all_prompts(name, data_dir=data_dir) == expected


def test_gsm8k_subset_is_ddtrees_shuffle_seed_0(data_dir):
    prompts = load_prompts("gsm8k", data_dir=data_dir)
    assert len(prompts) == DEFAULT_NUM_PROMPTS["gsm8k"] == 128
    assert [prompt.index for prompt in prompts[:5]] == [264, 725, 996, 586, 1010]
    raw = hf_datasets.Dataset.from_json(str(data_dir / "gsm8k_test.jsonl"))
    questions = raw.shuffle(seed=0).select(range(128))["question"]
    assert [prompt.turns[0].split("\nPlease reason")[0] for prompt in prompts] == list(questions)
    assert load_prompts("gsm8k", data_dir=data_dir) == prompts


@pytest.mark.parametrize("name", DATASET_NAMES)
def test_whole_datasets_keep_their_order(name, data_dir):
    everything = load_all_prompts(name, data_dir=data_dir)
    assert load_prompts(name, len(everything), data_dir=data_dir) == everything
    assert load_prompts(name, 10**6, data_dir=data_dir) == everything
    if name != "gsm8k":  # HumanEval (164) and MT-Bench (80) default to all of it
        assert load_prompts(name, data_dir=data_dir) == everything


def test_smaller_subsets_are_shuffled(data_dir):
    assert [p.index for p in load_prompts("humaneval", 5, data_dir=data_dir)] == [139, 123, 105, 10, 148]
    assert [p.index for p in load_prompts("mt-bench", 5, data_dir=data_dir)] == [50, 5, 19, 66, 53]
    assert load_prompts("humaneval", 0, data_dir=data_dir) == []


def test_subset_needs_a_whole_dataset(data_dir):
    with pytest.raises(ValueError, match="whole dataset in source order"):
        select_subset(load_prompts("gsm8k", 10, data_dir=data_dir), 3)


# ---- errors --------------------------------------------------------------------------------------------


def test_unknown_dataset_lists_valid_names():
    with pytest.raises(ValueError, match="valid names are gsm8k, humaneval, mt-bench, or a path to a .jsonl"):
        load_prompts("gsm9k")


def test_missing_mirror_and_offline_hub_fail_fast_naming_both(tmp_path):
    start = time.perf_counter()
    with pytest.raises(DatasetUnavailableError) as caught:
        load_prompts("gsm8k", data_dir=tmp_path)
    assert time.perf_counter() - start < 5.0
    message = str(caught.value)
    assert f"local mirror {tmp_path / 'gsm8k_test.jsonl'}: no such file" in message
    assert "hub openai/gsm8k, config main, split test: offline mode ($HF_HUB_OFFLINE is set)" in message


def test_no_mirror_given_is_named():
    with pytest.raises(DatasetUnavailableError, match=r"none given \(data_dir argument or \$DDBENCH_DATA_DIR\)"):
        load_prompts("mt-bench")


def test_hub_probe_respects_offline_variables(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert hub_unreachable_reason() == "offline mode ($HF_DATASETS_OFFLINE is set)"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"prompt": "ok"}\n{"prompt": \n', r"bad\.jsonl:2: invalid JSON"),
        ('{"prompt": "ok"}\n\n["a list"]\n', r"bad\.jsonl:3: expected a JSON object, got list"),
        (
            '{"question": "no prompt"}\n',
            r"bad\.jsonl:1: expected \"prompt\": str or \"turns\": \[str, \.\.\.\]",
        ),
        ('{"turns": []}\n', r"bad\.jsonl:1: expected"),
        ('{"turns": ["a", 3]}\n', r"bad\.jsonl:1: expected"),
        ("\n", r"bad\.jsonl: no prompts"),
    ],
    ids=["bad-json", "not-object", "no-prompt", "empty-turns", "non-string-turn", "empty-file"],
)
def test_malformed_jsonl_names_file_and_line(tmp_path, text, error):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError, match=error):
        load_prompts(str(path))


def test_malformed_mirror_file_names_file_and_line(tmp_path):
    (tmp_path / "mt_bench_question.jsonl").write_text('{"turns": ["a", "b"]}\n{"turns": [\n')
    with pytest.raises(ValueError, match=r"mt_bench_question\.jsonl:2: invalid JSON"):
        load_prompts("mt-bench", data_dir=tmp_path)


def test_mirror_file_without_the_expected_field_is_named(tmp_path):
    (tmp_path / "gsm8k_test.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n{"prompt": "x"}\n')
    with pytest.raises(ValueError, match="gsm8k row 1: unexpected record"):
        load_prompts("gsm8k", data_dir=tmp_path)


def test_missing_jsonl_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.jsonl does not exist"):
        read_jsonl_prompts(tmp_path / "nothere.jsonl")


def test_prompt_rejects_empty_turns():
    with pytest.raises(ValueError, match="at least one string turn"):
        Prompt("x", 0, ())

"""The held-out split (ddbench.heldout): membership by text, training refuses it, testbed sweeps stay inside it."""

import json
import random
import shutil

import pytest
from typer.testing import CliRunner

from ddbench import heldout
from ddbench.cli import app
from ddbench.config import SweepSettings
from ddbench.datasets import (
    DATASET_NAMES,
    Prompt,
    format_gsm8k,
    load_all_prompts,
    load_prompts,
    read_jsonl_prompts,
)
from ddbench.harness import client
from ddbench.harness.cli import _machine_defaults
from ddbench.heldout import EVAL_SIZES, HASHES_FILE, eval_prompts, is_held_out, text_hash, train_prompts
from ddbench.testbed import target as testbed
from ddbench.testbed import train

REFUSAL = "refusing to train on held-out evaluation prompts: {} (see ddbench.heldout)\n"
WARNING = "warning: {}: {} of {} prompts are not held out from the testbed drafter's training (ddbench.heldout)"


def bundled_sweep_prompts(data_dir, **settings) -> dict[str, list[Prompt]]:
    """What an SGLang sweep of the bundled drafter over the three datasets sends (the CLI's defaults)."""
    values = {"engine": "sglang", "gpus": "0", "model": "m", "draft": str(testbed.DRAFTER_DIR)}
    values.update(datasets=",".join(DATASET_NAMES), data_dir=str(data_dir), **settings)
    return client.load_prompts(_machine_defaults(SweepSettings(**values)).build())


def test_hash_file_lists_the_first_prompts_of_the_seed0_shuffle(data_dir):
    listed = json.loads(HASHES_FILE.read_text())
    assert listed == heldout.split_from_shuffle(data_dir)
    sizes = {name: len(hashes) for name, hashes in listed.items()}
    assert sizes == {"gsm8k": 128, "humaneval": 64, "mt-bench": 80, "ood": 30}


def test_ood_prompts_are_held_out_and_refused_by_training(data_dir, tmp_path):
    ood = load_all_prompts(str(heldout.OOD_FILE))
    assert len(ood) == 30 and all(map(is_held_out, ood))
    assert {heldout.held_out_dataset(p.turns[0]) for p in ood} == {"ood"}
    with pytest.raises(heldout.HeldOutError, match="1 of ood"):
        heldout.check_training_texts(["a new question", ood[3].turns[0]])
    rows = tmp_path / "train.jsonl"
    args = ["--data-dir", str(data_dir), "--synthetic", "math=50,code=20,chat=50"]
    assert CliRunner().invoke(app, ["testbed", "train-prompts", str(rows), *args]).exit_code == 0
    written = [json.loads(line) for line in rows.read_text().splitlines()]
    assert sum(row["dataset"].startswith("synth-") for row in written) == 120
    assert not {text_hash(p.turns[0]) for p in ood} & {text_hash(row["prompt"]) for row in written}


@pytest.mark.parametrize("name", DATASET_NAMES)
def test_split_is_ddtrees_subset_and_the_rest(name, data_dir):
    held, trained = eval_prompts(name, data_dir=data_dir), train_prompts(name, data_dir=data_dir)
    assert held == load_prompts(name, EVAL_SIZES[name], data_dir=data_dir)
    assert all(map(is_held_out, held)) and not any(map(is_held_out, trained))
    assert sorted(p.index for p in held + trained) == list(range(len(load_all_prompts(name, data_dir=data_dir))))


def test_membership_follows_the_text_not_the_position(data_dir, tmp_path):
    """Every builtin prompt, shuffled into one file: the held-out ones are the same; an edited text is not held."""
    expected = {p.turns for name in DATASET_NAMES for p in eval_prompts(name, data_dir=data_dir)}
    everything = [p for name in DATASET_NAMES for p in load_all_prompts(name, data_dir=data_dir)]
    random.Random(1).shuffle(everything)
    path = tmp_path / "shuffled.jsonl"
    path.write_text("".join(json.dumps({"turns": list(p.turns)}) + "\n" for p in everything))
    assert {p.turns for p in read_jsonl_prompts(path) if is_held_out(p)} == expected
    assert {p.turns for p in eval_prompts(str(path))} == expected
    held = eval_prompts("gsm8k", data_dir=data_dir)[0]
    assert not is_held_out(Prompt("edited.jsonl", 0, (held.turns[0] + " ",)))
    assert not is_held_out(Prompt("mixed.jsonl", 0, (held.turns[0], "And now?")))


def test_training_data_never_reaches_a_default_sweep_of_the_testbed_drafter(data_dir, tmp_path, capsys):
    """The training set as training reads it (testbed train-prompts, then train.load_prompt_texts) shares no
    text with what a default sweep of the bundled drafter sends, on any dataset; that sweep warns of nothing."""
    rows = tmp_path / "train.jsonl"
    assert CliRunner().invoke(app, ["testbed", "train-prompts", str(rows), "--data-dir", str(data_dir)]).exit_code == 0
    trained = {text_hash(text) for text in train.load_prompt_texts(rows)}
    swept = bundled_sweep_prompts(data_dir)
    evaluated = {text_hash(turn) for prompts in swept.values() for prompt in prompts for turn in prompt.turns}
    assert trained.isdisjoint(evaluated)
    assert {label: len(prompts) for label, prompts in swept.items()} == EVAL_SIZES
    assert len(trained) == 1191 + 100 + 2 * 40 and len(evaluated) == 128 + 64 + 2 * 40
    assert client.held_out_datasets(swept) == dict.fromkeys(DATASET_NAMES, True)
    assert "warning" not in capsys.readouterr().err


def test_more_prompts_than_held_out_warn_once_per_dataset(data_dir, capsys):
    swept = bundled_sweep_prompts(data_dir, num_prompts=100)
    assert client.held_out_datasets(swept) == {"gsm8k": True, "humaneval": False, "mt-bench": False}
    warnings = [WARNING.format("humaneval", 36, 100), WARNING.format("mt-bench", 40, 80)]
    assert capsys.readouterr().err.splitlines() == warnings
    other = bundled_sweep_prompts(data_dir, num_prompts=100, draft="z-lab/Qwen3-8B-DFlash-b16")
    assert other == swept and capsys.readouterr().err == ""  # another drafter: same prompts, no warning


def test_testbed_drafter_is_known_by_its_weights(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(testbed.DRAFTER_DIR, copy)
    assert testbed.is_testbed_drafter(testbed.DRAFTER_DIR) and testbed.is_testbed_drafter(copy)
    (copy / "model.safetensors").write_bytes(b"other weights")
    assert not testbed.is_testbed_drafter(copy) and not testbed.is_testbed_drafter("z-lab/Qwen3-8B-DFlash-b16")


def test_drafter_training_refuses_held_out_prompts_and_writes_nothing(data_dir, tmp_path):
    gsm8k, mt_bench = eval_prompts("gsm8k", data_dir=data_dir), eval_prompts("mt-bench", data_dir=data_dir)
    rows = [{"prompt": gsm8k[0].turns[0]}, {"prompt": "A new question."}, {"prompt": gsm8k[5].turns[0]}]
    rows.append({"turns": list(mt_bench[0].turns)})  # training reads a record's first turn
    prompts, out = tmp_path / "train.jsonl", tmp_path / "drafter"
    prompts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = ["--target", str(tmp_path / "unused"), "--prompts", str(prompts), "--out", str(out), "--mask-token-id", "1"]
    result = CliRunner().invoke(app, ["testbed", "train", *args])
    assert result.exit_code == 2 and not out.exists()
    assert result.stderr == "error: " + REFUSAL.format("2 of gsm8k, 1 of mt-bench")


def test_train_prompts_refuses_held_out_prompts_and_writes_nothing(data_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(heldout, "train_prompts", heldout.eval_prompts)  # a split that hands training its eval part
    out = tmp_path / "train.jsonl"
    result = CliRunner().invoke(app, ["testbed", "train-prompts", str(out), "--data-dir", str(data_dir)])
    assert result.exit_code == 2 and not out.exists()
    assert result.stderr == "error: " + REFUSAL.format("128 of gsm8k, 64 of humaneval, 80 of mt-bench")


def test_gsm8k_train_questions_join_as_benchmark_prompts_and_held_out_ones_are_refused(data_dir, tmp_path):
    """--gsm8k-train: each question becomes a GSM8K prompt as the benchmark formats it (gzip read too); a
    held-out test question slipped into the file is refused, and a line without a question names the file."""
    import gzip

    questions = ["Ann has 3 apples and buys 4 more. How many apples does she have?", "What is 6 x 7?"]
    train_file = tmp_path / "gsm8k_train.jsonl.gz"
    with gzip.open(train_file, "wt") as f:
        f.writelines(json.dumps({"question": q, "answer": "#### 7"}) + "\n" for q in questions)
    rows = tmp_path / "train.jsonl"
    args = ["testbed", "train-prompts", str(rows), "--data-dir", str(data_dir), "--gsm8k-train", str(train_file)]
    assert CliRunner().invoke(app, args).exit_code == 0
    written = [json.loads(line) for line in rows.read_text().splitlines()]
    extra = [row for row in written if row["dataset"] == "gsm8k-train"]
    assert [row["prompt"] for row in extra] == [format_gsm8k(q) for q in questions]
    assert [row["index"] for row in extra] == [0, 1] and len(written) == 1191 + 100 + 2 * 40 + 2

    held = eval_prompts("gsm8k", data_dir=data_dir)[0]  # its raw question, in a "train" file
    raw = tmp_path / "leaky.jsonl"
    raw.write_text(json.dumps({"question": gsm8k_question(data_dir, held.index)}) + "\n")
    out = tmp_path / "leaky-out.jsonl"
    result = CliRunner().invoke(app, [*args[:2], str(out), *args[3:5], "--gsm8k-train", str(raw)])
    assert result.exit_code == 2 and not out.exists()
    assert result.stderr == "error: " + REFUSAL.format("1 of gsm8k")

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "ok?"}) + "\n" + json.dumps({"text": "no question"}) + "\n")
    result = CliRunner().invoke(app, [*args[:2], str(out), *args[3:5], "--gsm8k-train", str(bad)])
    assert result.exit_code == 2 and not out.exists()
    assert result.stderr == f'error: --gsm8k-train: {bad}:2: expected a "question" string, got keys [\'text\']\n'
    result = CliRunner().invoke(app, [*args[:2], str(out), *args[3:5], "--gsm8k-train", str(tmp_path / "none")])
    assert result.exit_code == 2 and result.stderr == f"error: --gsm8k-train: {tmp_path / 'none'} does not exist\n"


def gsm8k_question(data_dir, index: int) -> str:
    """The raw question of row `index` of the mirror's GSM8K test file."""
    with open(data_dir / "gsm8k_test.jsonl") as f:
        return json.loads(f.readlines()[index])["question"]

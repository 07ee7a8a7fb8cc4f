"""ddbench.check.replay: the reference engine recomputes an engine's greedy rounds on the engine's own text."""

import gzip
import json
import shutil

from typer.testing import CliRunner

from ddbench.check import replay
from ddbench.cli import app

runner = CliRunner()


def test_the_reference_engine_replays_its_own_rounds_exactly(swept, tiny_pair):
    rows = replay.run(swept, str(tiny_pair[0]), None, None)
    assert [(row["method"], row["budget"]) for row in rows] == [("dflash", ""), ("ddtree", 2), ("ddtree", 8)]
    for row in rows:
        assert row["responses"] == 4 and row["same_histogram"] == 4, row  # 3 prompts, one with a second turn
        assert row["engine_rounds"] == row["replay_rounds"] and row["relative_diff"] == 0.0
    written = []
    assert replay.run(swept, str(tiny_pair[0]), None, None, datasets=["nosuch"], on_cell=written.append) == []
    assert written == []
    only = replay.run(swept, str(tiny_pair[0]), None, 1, budgets=[8])
    assert [(row["method"], row["budget"], row["responses"]) for row in only] == [("ddtree", 8, 1)]


def test_bad_budgets_exit_2(swept, tiny_pair):
    result = runner.invoke(app, ["check", "replay", str(swept), "--model", str(tiny_pair[0]), "--budgets", "8,x"])
    assert result.exit_code == 2 and "--budgets takes integers" in result.stderr


def test_a_cell_with_other_rounds_fails_and_says_which(swept, tiny_pair, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(swept, out)
    path = next((out / "cells").glob("*ddtree-b8*.jsonl"))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0]["meta_info"]["spec_accept_histogram"][0] += 3  # an engine that spent three more rounds
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with gzip.open(path.with_name(path.name + ".gz"), "wt") as stream:  # read either way
        stream.write(path.read_text())
    path.unlink()
    result = runner.invoke(app, ["check", "replay", str(out), "--model", str(tiny_pair[0])])
    assert result.exit_code == 1, result.output
    lines = (out / "replay.md").read_text().splitlines()
    bad = [line for line in lines if "ddtree-b8" in line]
    assert len(bad) == 1 and "| 4 | 3 |" in bad[0] and "| -" in bad[0], bad
    assert all("+0.00%" in line for line in lines if "dflash" in line or "ddtree-b2" in line)


def test_not_a_results_folder_exits_2(tmp_path, tiny_pair):
    result = runner.invoke(app, ["check", "replay", str(tmp_path), "--model", str(tiny_pair[0])])
    assert (
        result.exit_code == 2
        and result.stderr.startswith("error: ")
        and "not a ddbench results folder" in result.stderr
    )


def test_a_later_turn_is_rebuilt_from_the_cells_own_answers(swept, tiny_pair, tmp_path):
    """The client sends turn t with the cell's own earlier answers, not AR's: AR answering otherwise changes
    nothing here (with AR's answers the rebuilt prompt's hash would not match)."""
    out = tmp_path / "run"
    shutil.copytree(swept, out)
    path = next((out / "cells").glob("*__ar__*.jsonl"))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    first_turn = next(r for r in records if r["turn"] == 0 and any(o["prompt_index"] == r["prompt_index"] and
                                                                    o["turn"] == 1 for o in records))  # fmt: skip
    first_turn["output_ids"] = first_turn["output_ids"][:1]  # another first answer
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = replay.run(out, str(tiny_pair[0]), None, None)
    assert all(row["responses"] == 4 and row["relative_diff"] == 0.0 for row in rows)

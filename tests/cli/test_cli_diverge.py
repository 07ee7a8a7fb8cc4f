"""ddbench check diverge: first divergences from AR and the target's logit gap there (near-tie or not)."""

import csv
import dataclasses
import json
import shutil

import pytest
import torch
from typer.testing import CliRunner

from ddbench.check import diverge
from ddbench.cli import app
from ddbench.harness.results import RequestRecord
from ddtree_core import metrics

runner = CliRunner()


def _record(cell_id: str, method: str, output_ids, *, prompt_hash: str = "h0", turn: int = 0) -> RequestRecord:
    return RequestRecord(
        cell_id=cell_id, dataset="d", method=method, budget=None, max_depth=None, draft_temperature=None,
        temperature=0.0, concurrency=1, prompt_index=0, turn=turn, prompt_hash=prompt_hash, prompt_tokens=3,
        completion_tokens=len(output_ids), output_ids=tuple(output_ids), text="", finish_reason="length",
        latency_s=0.0, ttft_s=None, itl_s=(), start_s=0.0, meta_info={},
    )  # fmt: skip


def test_analyse_reports_the_gap_at_the_first_divergence():
    ar = _record("ar", "ar", [5, 6, 7, 8])
    near = diverge.Pending(_record("x", "ddtree", [5, 6, 2, 2]), ar, metrics.first_divergence(ar.output_ids, [5, 6, 2]))
    far = diverge.Pending(_record("y", "ddtree", [5, 1]), ar, metrics.first_divergence(ar.output_ids, [5, 1]))
    contexts = []

    after = {5: {7: 3.0, 2: 2.9}, 4: {6: 4.0, 1: -1.0}}  # context length -> {token: logit}, others 0

    def next_logits(ids):
        contexts.append(ids)
        logits = torch.zeros(10)
        for token, value in after[len(ids)].items():
            logits[token] = value
        return logits

    rows = diverge.analyse([near, far], lambda record: [100, 101, 102], next_logits, tie_threshold=0.5)
    assert contexts == [[100, 101, 102, 5, 6], [100, 101, 102, 5]]
    assert (rows[0].position, rows[0].ar_token, rows[0].other_token) == (2, 7, 2)
    assert rows[0].gap == pytest.approx(0.1, abs=1e-6) and rows[0].near_tie and rows[0].preferred == "ar"
    assert (rows[1].position, rows[1].gap, rows[1].near_tie) == (1, 5.0, False)
    assert rows[1].top1_token == 6 and rows[1].top_margin == 4.0 and rows[1].preferred == "ar"


def test_pending_skips_identical_outputs_and_later_turns_whose_history_differs():
    from ddbench.config import Cell
    from ddbench.harness.results import CellResult

    def result(method, records):
        cell = Cell(dataset="d", method=method, budget=None, max_depth=None, draft_temperature=None,
                    temperature=0.0, concurrency=1)  # fmt: skip
        return CellResult(cell, "done", tuple(records), 1.0, None)

    ar = result("ar", [_record("ar", "ar", [1, 2]), _record("ar", "ar", [3], prompt_hash="h1", turn=1)])
    other = result("dflash", [_record("o", "dflash", [1, 4]), _record("o", "dflash", [3], prompt_hash="hX", turn=1)])
    same = result("ddtree", [_record("s", "ddtree", [1, 2])])
    pending, counts = diverge.pending_divergences([ar, other, same])
    assert [(p.record.cell_id, p.divergence.index) for p in pending] == [("o", 1)]
    assert counts[other.cell.cell_id] == {"compared": 1, "identical": 0, "history_differs": 1}
    assert counts[same.cell.cell_id] == {"compared": 1, "identical": 1, "history_differs": 0}


@pytest.fixture(scope="module")
def swept_small(tiny_pair, prompt_file, tmp_path_factory):
    from tests.cli.test_cli_sweep import sweep_args

    out = tmp_path_factory.mktemp("diverge") / "run"
    result = runner.invoke(app, sweep_args(tiny_pair, prompt_file, out))
    assert result.exit_code == 0, result.output
    return out


def test_a_run_at_parity_has_no_divergence(swept_small, tiny_pair):
    result = runner.invoke(app, ["check", "diverge", str(swept_small), "--model", str(tiny_pair[0])])
    assert result.exit_code == 0, result.output
    assert "0 divergences, 0 not near-ties" in result.output
    assert (swept_small / "divergences.md").exists()


def test_a_wrong_token_is_not_a_near_tie(swept_small, tiny_pair, tmp_path):
    """Put the target's least likely token into a DDTree output: diverge finds it and exits 1."""
    broken = tmp_path / "broken"
    shutil.copytree(swept_small, broken)
    path = next((broken / "cells").glob("*ddtree-b8*.jsonl"))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    victim = next(r for r in records if len(r["output_ids"]) >= 4 and r["turn"] == 0)
    manifest = json.loads((broken / "manifest.json").read_text())
    from transformers import AutoTokenizer

    builder = diverge.PromptBuilder(manifest["config"], AutoTokenizer.from_pretrained(tiny_pair[0]), [], None)
    ids = builder.input_ids(RequestRecord.from_dict(victim)) + victim["output_ids"][:3]
    logits = diverge.target_logits_fn(str(tiny_pair[0]))(ids)
    worst = int(logits.argmin())
    victim["output_ids"] = victim["output_ids"][:3] + [worst] + victim["output_ids"][4:]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))

    result = runner.invoke(app, ["check", "diverge", str(broken), "--model", str(tiny_pair[0])])
    assert result.exit_code == 1, result.output
    assert "1 divergences, 1 not near-ties" in result.output
    with open(broken / "divergences.csv") as stream:
        (row,) = list(csv.DictReader(stream))
    assert (int(row["position"]), int(row["other_token"]), row["near_tie"]) == (3, worst, "False")
    assert float(row["gap"]) == pytest.approx(float(logits.max() - logits.min()), abs=1e-4) and float(row["gap"]) > 1
    assert row["preferred"] == "ar"
    gap = f"{abs(float(row['gap'])):.3f}"
    assert f"| ddtree | 1 | {gap} | {gap} | 1 / 0 / 0 |" in (broken / "divergences.md").read_text()
    lenient = runner.invoke(
        app, ["check", "diverge", str(broken), "--model", str(tiny_pair[0]), "--tie-threshold", "1e9"]
    )
    assert lenient.exit_code == 0, lenient.output


def test_a_later_turn_is_rebuilt_from_its_own_cells_answers(swept_small, tiny_pair, tmp_path):
    """Two AR cells whose first answers differ (as AR's do at different loads on a GPU): a second-turn
    divergence of a DDTree cell at concurrency 1 is analysed on the prompt its client sent, which carried
    that cell's own first answer, not the answer of whichever AR cell was read last."""
    from ddbench.config import Cell

    run = tmp_path / "run"
    shutil.copytree(swept_small, run)
    manifest = json.loads((run / "manifest.json").read_text())
    ar_cell = next(Cell.from_dict(c) for c in manifest["cells"] if c["method"] == "ar")
    busy = dataclasses.replace(ar_cell, concurrency=2)
    manifest["cells"].append(busy.to_dict())
    (run / "manifest.json").write_text(json.dumps(manifest))
    records = [json.loads(line) for line in (run / "cells" / f"{ar_cell.cell_id}.jsonl").read_text().splitlines()]
    for record in records:  # AR at 2 in flight: another first answer, so another second-turn prompt
        record.update(cell_id=busy.cell_id, concurrency=2)
        if record["turn"] == 0 and record["prompt_index"] == 1:
            record["output_ids"] = record["output_ids"][:1] + [record["output_ids"][0]] * 3
        if record["turn"] == 1:
            record["prompt_hash"] = "another"
    (run / "cells" / f"{busy.cell_id}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "cells" / f"{busy.cell_id}.json").write_text((run / "cells" / f"{ar_cell.cell_id}.json").read_text())
    path = next((run / "cells").glob("*ddtree-b8*.jsonl"))
    ddtree = [json.loads(line) for line in path.read_text().splitlines()]
    victim = next(r for r in ddtree if r["turn"] == 1)
    victim["output_ids"] = victim["output_ids"][:1] + [(victim["output_ids"][1] + 1) % 100]
    path.write_text("".join(json.dumps(r) + "\n" for r in ddtree))

    result = runner.invoke(app, ["check", "diverge", str(run), "--model", str(tiny_pair[0]), "--tie-threshold", "1e9"])
    assert result.exit_code == 0, result.output
    with open(run / "divergences.csv") as stream:
        rows = [row for row in csv.DictReader(stream) if row["turn"] == "1"]
    assert len(rows) == 1 and int(rows[0]["position"]) == 1


def test_missing_model_exits_2(swept_small, tmp_path):
    result = runner.invoke(app, ["check", "diverge", str(swept_small), "--model", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "not found" in result.output

"""ddbench end to end through the CLI, with reference-engine servers over a tiny random model pair."""

import csv
import json
import shutil
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddbench.cli import app

runner = CliRunner()


def sweep_args(pair, prompts, out, *extra) -> list[str]:
    target, draft = pair
    return [
        "sweep",
        "--engine", "reference",
        "--model", str(target),
        "--draft", str(draft),
        "--datasets", str(prompts),
        "--budgets", "2,8",
        "--max-new-tokens", "8",
        "--out", str(out),
        *extra,
    ]  # fmt: skip


def summary_rows(folder: Path) -> list[dict]:
    with open(folder / "summary.csv") as stream:
        return list(csv.DictReader(stream))


def test_sweep_writes_every_cell(swept):
    rows = summary_rows(swept)
    settings = [(row["method"], row["budget"]) for row in rows]
    assert settings == [("ar", ""), ("dflash", ""), ("ddtree", "2"), ("ddtree", "8")]
    assert all(row["status"] == "done" and row["num_requests"] == "4" for row in rows)
    records = [json.loads(line) for line in (swept / "requests.jsonl").read_text().splitlines()]
    assert len(records) == 16  # 4 cells x (3 prompts + a second turn)
    assert {(r["prompt_index"], r["turn"]) for r in records} == {(0, 0), (1, 0), (1, 1), (2, 0)}
    assert all(len(r["output_ids"]) == r["completion_tokens"] <= 8 for r in records)
    manifest = json.loads((swept / "manifest.json").read_text())
    assert manifest["config"]["budgets"] == [2, 8] and "torch" in manifest["environment"]["packages"]
    assert manifest["held_out"] == {"tiny": False} and all(row["held_out"] == "False" for row in rows)


def test_cells_say_whether_their_prompts_were_held_out(tiny_pair, prompt_file, data_dir, tmp_path, monkeypatch):
    """A dataset of held-out prompts is flagged True in summary.csv and the manifest, one of other prompts
    False; with the testbed drafter (the tiny one stands in) the latter warns once on stderr."""
    from ddbench.heldout import eval_prompts
    from ddbench.testbed import target as testbed

    monkeypatch.setattr(testbed, "DRAFTER_DIR", tiny_pair[1])
    held = tmp_path / "held.jsonl"
    shortest = sorted(eval_prompts("gsm8k", data_dir=data_dir), key=lambda prompt: len(prompt.turns[0]))[:2]
    held.write_text("".join(json.dumps({"prompt": prompt.turns[0]}) + "\n" for prompt in shortest))
    out = tmp_path / "run"
    args = sweep_args(tiny_pair, f"{held},{prompt_file}", out, "--methods", "ar,dflash", "--max-new-tokens", "4")
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning")]
    assert warnings == ["warning: tiny: 3 of 3 prompts are not held out from the testbed drafter's training "
                        "(ddbench.heldout)"]  # fmt: skip
    assert [(row["dataset"], row["held_out"]) for row in summary_rows(out)] == [
        ("held", "True"), ("held", "True"), ("tiny", "False"), ("tiny", "False")
    ]  # fmt: skip
    assert json.loads((out / "manifest.json").read_text())["held_out"] == {"held": True, "tiny": False}


def test_greedy_speculative_outputs_equal_ar(swept):
    rows = summary_rows(swept)
    assert [row["parity"] for row in rows] == ["", "1.0", "1.0", "1.0"]
    assert rows[0]["speedup_vs_ar"] == "1.0" and rows[0]["acceptance_length"] == "1.0"
    for row in rows[1:]:
        assert float(row["acceptance_length"]) >= 1.0
        assert abs(sum(json.loads(row["accept_histogram"])) - 1.0) < 1e-9


def test_two_workers_ran_in_parallel(swept):
    done = [json.loads(path.read_text())["server"] for path in (swept / "cells").glob("*__c1.json")]
    by_slot = {}
    for server in done:  # each slot's busy span: its first server's launch to its last cell's end
        slot = Path(server["log"]).name.split("-")[0]
        first, last = by_slot.get(slot, (server["server_started"], server["finished"]))
        by_slot[slot] = (min(first, server["server_started"]), max(last, server["finished"]))
    assert sorted(by_slot) == ["slot0", "slot1"]
    (start0, end0), (start1, end1) = by_slot.values()
    assert start0 < end1 and start1 < end0  # the two spans intersect


def test_rerun_skips_finished_cells(swept, tiny_pair, prompt_file):
    before = (swept / "summary.csv").read_text()
    result = runner.invoke(app, sweep_args(tiny_pair, prompt_file, swept, "--workers", "2"))
    assert result.exit_code == 0, result.output
    assert "0 cells run, 4 already done" in result.output
    assert (swept / "summary.csv").read_text() == before


def test_dry_run_lists_what_is_left_and_writes_nothing(swept, tiny_pair, prompt_file, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(swept, out)
    before = sorted(path.relative_to(out) for path in out.rglob("*"))
    result = runner.invoke(app, sweep_args(tiny_pair, prompt_file, out, "--budgets", "2,4", "--dry-run"))
    assert result.exit_code == 0, result.output
    assert "1. reference-ddtree: 1 cell(s), tiny__ddtree-b4-dauto-dt1__t0__c1\n" in result.output
    assert "1 cells to run on 1 server start(s), 1 side by side; 3 already done" in result.output  # one CPU worker
    assert sorted(path.relative_to(out) for path in out.rglob("*")) == before
    fresh = runner.invoke(app, sweep_args(tiny_pair, prompt_file, tmp_path / "new", "--dry-run"))
    assert "4 cells to run on 3 server start(s)" in fresh.output  # one DDTree server: per-request budgets
    assert not (tmp_path / "new").exists()


def test_report_prints_tables_and_markdown(swept, tmp_path):
    result = runner.invoke(app, ["report", str(swept), "--markdown", str(tmp_path / "report.md")])
    assert result.exit_code == 0, result.output
    assert "tiny" in result.output and "DDTree b8" in result.output
    markdown = (tmp_path / "report.md").read_text()
    assert markdown.startswith("### tiny") and markdown.count("| DDTree b") == 2


def test_plot_writes_pngs(swept, tmp_path):
    result = runner.invoke(app, ["plot", str(swept), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    names = sorted(path.name for path in tmp_path.glob("*.png"))
    assert names == sorted(
        [
            "acceptance_vs_budget.png",
            "speedup_vs_budget.png",
            "throughput_vs_concurrency.png",
            "accept_histograms.png",
            "depth_acceptance.png",
            "latency_cdf.png",
        ]
    )
    assert all(path.read_bytes()[:4] == b"\x89PNG" for path in tmp_path.glob("*.png"))


def test_compare_against_itself_passes(swept):
    result = runner.invoke(app, ["compare", "--baseline", str(swept), str(swept)])
    assert result.exit_code == 0, result.output
    assert "4 of 4 matched cells within tolerance" in result.output


def test_compare_against_inflated_acceptance_fails(swept, tmp_path):
    inflated = tmp_path / "inflated"
    shutil.copytree(swept, inflated)
    for path in (inflated / "cells").glob("*ddtree*.jsonl"):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        for record in records:  # every round accepts one more draft token than it did
            record["meta_info"]["spec_accept_histogram"] = [0] + record["meta_info"]["spec_accept_histogram"]
        path.write_text("".join(json.dumps(record) + "\n" for record in records))
    markdown = tmp_path / "c.md"
    result = runner.invoke(app, ["compare", "--baseline", str(inflated), str(swept), "--markdown", str(markdown)])
    assert result.exit_code == 1, result.output
    assert "2 of 4 matched cells within tolerance" in result.output
    assert markdown.read_text().count("REGRESSION: acceptance, histogram") == 2


def strip_hold_chain(folder: Path) -> None:
    """Make `folder` look written before the hold_chain knob: no such key in the manifest, cells or records."""
    manifest = json.loads((folder / "manifest.json").read_text())
    for cell in manifest["cells"]:
        del cell["hold_chain"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    for path in (folder / "cells").glob("*.json"):
        done = json.loads(path.read_text())
        del done["cell"]["hold_chain"]
        path.write_text(json.dumps(done))
    for path in [*(folder / "cells").glob("*.jsonl"), folder / "requests.jsonl"]:
        records = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "hold_chain"}) + "\n" for r in records))


def test_held_chain_cells_extend_a_folder_written_before_the_knob(swept, tiny_pair, prompt_file, tmp_path):
    """--hold-chain 0,1 into an older folder: its cells stay done under their ids (AR and DFLASH are not
    rerun) and read as not held; the held cell gets its own id, label and records."""
    out = tmp_path / "run"
    shutil.copytree(swept, out)
    strip_hold_chain(out)
    result = runner.invoke(app, sweep_args(tiny_pair, prompt_file, out, "--budgets", "3", "--hold-chain", "0,1"))
    assert result.exit_code == 0, result.output
    assert "2 cells run, 2 already done" in result.output and "DDTree b3+chain" in result.output
    rows = summary_rows(out)
    assert [row["cell_id"].split("__")[1] for row in rows] == [
        "ar", "dflash", "ddtree-b2-dauto-dt1", "ddtree-b8-dauto-dt1", "ddtree-b3-dauto-dt1",
        "ddtree-b3-dauto-dt1-chain",
    ]  # fmt: skip
    assert [row["hold_chain"] for row in rows] == ["", "", "False", "False", "False", "True"]
    assert [row["parity"] for row in rows] == ["", "1.0", "1.0", "1.0", "1.0", "1.0"]
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    held = {r["cell_id"].split("__")[1] for r in records if r.get("hold_chain")}
    assert held == {"ddtree-b3-dauto-dt1-chain"} and len(records) == 6 * 4
    plots = runner.invoke(app, ["plot", str(out), "--out", str(tmp_path / "plots")])
    assert plots.exit_code == 0, plots.output
    assert (tmp_path / "plots" / "speedup_vs_budget.png").read_bytes()[:4] == b"\x89PNG"


def test_repeats_extend_a_finished_sweep_and_resume_pass_by_pass(swept, tiny_pair, prompt_file, tmp_path):
    """--repeats 2 into a folder of one pass runs pass 2 alone, under -r2 ids, each cell's parity against the AR
    cell of its repeat; the report and summary_repeats.csv give the medians; a partly finished pass resumes."""
    out = tmp_path / "run"
    shutil.copytree(swept, out)
    repeat_args = sweep_args(tiny_pair, prompt_file, out, "--repeats", "2")
    plan = runner.invoke(app, [*repeat_args, "--dry-run"])
    assert plan.exit_code == 0, plan.output
    assert "pass 2 of 2:\n  1. " in plan.output and "pass 1 of 2" not in plan.output
    assert "4 cells to run on 3 server start(s), 1 side by side; 4 already done" in plan.output
    result = runner.invoke(app, repeat_args)
    assert result.exit_code == 0, result.output
    assert "4 cells run, 4 already done" in result.output and "tiny: median over repeats" in result.output
    rows = summary_rows(out)
    assert [row["repeat"] for row in rows] == ["1"] * 4 + ["2"] * 4
    assert [row["cell_id"] for row in rows[4:]] == [row["cell_id"] + "-r2" for row in rows[:4]]
    assert [row["parity"] for row in rows] == ["", "1.0", "1.0", "1.0"] * 2
    with open(out / "summary_repeats.csv") as stream:
        medians = list(csv.DictReader(stream))
    assert [(row["cell_id"], row["repeats"]) for row in medians] == [(row["cell_id"], "2") for row in rows[:4]]
    compared = runner.invoke(app, ["compare", "--baseline", str(swept), str(out), "--no-speed"])
    assert compared.exit_code == 0 and "4 of 4 matched cells within tolerance" in compared.output
    (out / "cells" / f"{rows[7]['cell_id']}.json").unlink()  # as if stopped before its last cell
    plan = runner.invoke(app, [*repeat_args, "--dry-run"])
    assert f"pass 2 of 2:\n  1. reference-ddtree: 1 cell(s), {rows[7]['cell_id']}\n" in plan.output
    rerun = runner.invoke(app, repeat_args)
    assert rerun.exit_code == 0 and "1 cells run, 7 already done" in rerun.output


def test_repeats_dry_run_lists_the_passes_and_zero_exits_2(tiny_pair, prompt_file, tmp_path):
    out = tmp_path / "run"
    plan = runner.invoke(app, sweep_args(tiny_pair, prompt_file, out, "--repeats", "3", "--dry-run"))
    assert plan.exit_code == 0, plan.output
    lines = plan.output.splitlines()
    assert [line for line in lines if line.startswith("pass")] == ["pass 1 of 3:", "pass 2 of 3:", "pass 3 of 3:"]
    assert lines[lines.index("pass 3 of 3:") + 1].startswith("  7. ")  # start order runs on across passes
    assert "12 cells to run on 9 server start(s), 1 side by side; 0 already done" in plan.output
    bad = runner.invoke(app, sweep_args(tiny_pair, prompt_file, out, "--repeats", "0"))
    assert bad.exit_code == 2 and bad.stderr == "error: repeats must be an integer >= 1, got 0\n"
    assert not out.exists()
    assert "--repeats" in runner.invoke(app, ["sweep", "--help"]).output


def test_unknown_dataset_exits_2_and_writes_nothing(tiny_pair, tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, sweep_args(tiny_pair, "nosuch", out))
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0 and "unknown dataset 'nosuch'" in result.stderr
    missing = runner.invoke(app, sweep_args(tiny_pair, tmp_path / "missing.jsonl", out))
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    assert not out.exists()


@pytest.mark.parametrize("budgets", ["0", "-3", "abc", "8,1.5"])
def test_bad_budgets_exit_2_with_one_line_naming_the_flag(tiny_pair, prompt_file, tmp_path, budgets):
    result = runner.invoke(app, sweep_args(tiny_pair, prompt_file, tmp_path / "run", "--budgets", budgets))
    assert result.exit_code == 2
    bad = budgets.split(",")[-1]
    assert result.stderr == f"error: --budgets (`budgets` in a config): takes integers >= 1 or auto, got '{bad}'\n"
    assert not (tmp_path / "run").exists()


def test_budget_auto_on_sglang_plans_an_auto_server(tiny_pair, prompt_file, tmp_path, monkeypatch):
    """On SGLang (counted as installed) --budgets auto is taken: a dry run plans its cells on a server of their
    own, SGLANG_DDTREE_BUDGET=auto, beside the fixed budget's, and starts nothing."""
    monkeypatch.setattr("ddbench.env.sglang_available", lambda: True)
    args = sweep_args(tiny_pair, prompt_file, tmp_path / "run", "--budgets", "auto,8")
    args[args.index("reference")] = "sglang"
    result = runner.invoke(app, [*args, "--gpus", "0", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "sglang-ddtree-bauto" in result.output and "sglang-ddtree-b8" in result.output
    assert "'auto'" in runner.invoke(app, ["sweep", "--help"]).output


def test_budget_auto_cell_on_the_reference_engine(swept, tiny_pair, prompt_file, tmp_path):
    """--budgets auto,2,8 into a finished 2,8 sweep runs the auto cell alone, on a DDTree server started with
    budget 8 (auto chooses under it): labelled auto everywhere, greedy outputs equal AR's, tau within the
    block; report, compare, recommend and plot read the mixed budget column."""
    out = tmp_path / "run"
    shutil.copytree(swept, out)
    result = runner.invoke(app, sweep_args(tiny_pair, prompt_file, out, "--budgets", "auto,2,8"))
    assert result.exit_code == 0, result.output
    assert "1 cells run, 4 already done" in result.output and "DDTree auto" in result.output
    rows = summary_rows(out)
    auto = rows[-1]
    assert [row["budget"] for row in rows] == ["", "", "2", "8", "auto"]
    assert auto["cell_id"] == "tiny__ddtree-bauto-dauto-dt1__t0__c1" and auto["status"] == "done"
    assert auto["parity"] == "1.0" and 1.0 <= float(auto["acceptance_length"]) <= 4  # block 4
    done = json.loads((out / "cells" / f"{auto['cell_id']}.json").read_text())
    assert done["cell"]["budget"] == "auto" and done["server"]["label"] == "reference-ddtree-b8-dauto-dt1"
    settings = done["server"]["settings"]  # what the reference server says of itself
    assert settings["ddtree_budget"] == 8 and "draft_vocab" in settings and settings["dtype"] == "float32"
    records = [json.loads(line) for line in (out / "cells" / f"{auto['cell_id']}.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all(record["budget"] == "auto" for record in records)
    assert all(0 < record["meta_info"]["ddtree_mean_tree_nodes"] <= 8 for record in records)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["budgets"] == ["auto", 2, 8] and manifest["cells"][-1]["budget"] == "auto"
    report = runner.invoke(app, ["report", str(out), "--markdown", str(tmp_path / "report.md")])
    text = (tmp_path / "report.md").read_text()  # the fastest DDTree row carries a " *"
    assert report.exit_code == 0 and ("| DDTree auto |" in text or "| DDTree auto * |" in text)
    itself = runner.invoke(app, ["compare", "--baseline", str(out), str(out)])
    assert itself.exit_code == 0 and "DDTree auto" in itself.output
    assert "5 of 5 matched cells within tolerance" in itself.output
    against = runner.invoke(app, ["compare", "--baseline", str(swept), str(out), "--no-speed"])
    assert against.exit_code == 0 and "4 of 4 matched cells within tolerance" in against.output
    advice = runner.invoke(app, ["model", "recommend", str(out)])
    assert advice.exit_code == 0, advice.output
    plots = runner.invoke(app, ["plot", str(out), "--out", str(tmp_path / "plots")])
    assert plots.exit_code == 0, plots.output
    assert (tmp_path / "plots" / "speedup_vs_budget.png").read_bytes()[:4] == b"\x89PNG"


def test_folder_of_another_sweep_is_refused(swept, tiny_pair, prompt_file):
    before = (swept / "manifest.json").read_text()
    result = runner.invoke(app, sweep_args(tiny_pair, prompt_file, swept, "--max-new-tokens", "9"))
    assert result.exit_code == 2 and "max_new_tokens=8" in result.stderr
    assert (swept / "manifest.json").read_text() == before


def test_malformed_baseline_exits_2(swept, tmp_path):
    bad = tmp_path / "zlab.json"
    bad.write_text('{"format": "ddbench-zlab/1", "cells": [{"dataset": "tiny"}]}')
    result = runner.invoke(app, ["compare", "--baseline", str(bad), str(swept)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: malformed baseline") and result.stderr.count("\n") == 1
    garbage = tmp_path / "printout.txt"
    garbage.write_text("nothing useful\n")
    assert runner.invoke(app, ["compare", "--baseline", str(garbage), str(swept)]).exit_code == 2


@pytest.mark.slow
def test_dead_server_costs_its_cells_and_exits_2(tiny_pair, prompt_file, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_pair[0], broken)
    (broken / "model.safetensors").unlink()  # the tokenizer loads, the server dies loading weights
    out = tmp_path / "run"
    result = runner.invoke(app, sweep_args((broken, tiny_pair[1]), prompt_file, out, "--budgets", "2"))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1].startswith("error: 3 cell(s) failed, rerun to retry; first: tiny__ar")
    failures = [json.loads(path.read_text()) for path in (out / "cells").glob("*.failure.json")]
    assert len(failures) == 3 and all("server did not start" in f["error"] for f in failures)


@pytest.mark.slow
def test_server_killed_mid_sweep_costs_its_cells_and_rerun_completes(tiny_pair, prompt_file, tmp_path):
    import os
    import signal

    out = tmp_path / "run"
    killed = []

    def kill_ddtree_server():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for pid_file in (out / "logs").glob("*ddtree*.pid") if (out / "logs").exists() else ():
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
                killed.append(pid_file.name)
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=kill_ddtree_server)
    watcher.start()
    first = runner.invoke(app, sweep_args(tiny_pair, prompt_file, out))
    watcher.join()
    assert killed and first.exit_code == 2
    statuses = {row["cell_id"].split("__")[1]: row["status"] for row in summary_rows(out)}
    assert statuses == {
        "ar": "done",
        "dflash": "done",
        "ddtree-b2-dauto-dt1": "failed",
        "ddtree-b8-dauto-dt1": "failed",
    }
    second = runner.invoke(app, sweep_args(tiny_pair, prompt_file, out))
    assert second.exit_code == 0, second.output
    assert "2 cells run, 2 already done" in second.output
    assert [row["status"] for row in summary_rows(out)] == ["done"] * 4
    assert not list((out / "cells").glob("*.failure.json"))


@pytest.mark.slow
def test_server_dying_during_a_cell_costs_that_cell_only(tiny_pair, prompt_file, tmp_path):
    """The DDTree server dies as its first cell starts: that cell fails, a new server runs the next."""
    import os
    import signal

    from ddbench.config import build_config
    from ddbench.harness.runner import run_sweep

    out = tmp_path / "run"
    values = dict(engine="reference", model=str(tiny_pair[0]), draft=str(tiny_pair[1]), datasets=str(prompt_file))
    config = build_config({**values, "budgets": "2,8", "max_new_tokens": 8, "out": str(out)}, {})

    class KillFirstTreeServer:
        killed = []

        def cells_planned(self, num_cells):
            pass

        def cell_started(self, cell, num_requests):
            if cell.method == "ddtree" and not self.killed:
                (pid_file,) = (out / "logs").glob("*ddtree*.pid")
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
                self.killed.append(cell.cell_id)

        def request_done(self, cell):
            pass

        def cell_finished(self, cell, error):
            pass

    outcome = run_sweep(config, KillFirstTreeServer())
    assert KillFirstTreeServer.killed == ["tiny__ddtree-b2-dauto-dt1__t0__c1"]
    assert outcome.done == 3 and len(outcome.failed) == 1
    assert outcome.failed[0].startswith("tiny__ddtree-b2-dauto-dt1__t0__c1: server died")
    rerun = run_sweep(config)
    assert (rerun.done, rerun.skipped, rerun.failed) == (1, 3, ())


def test_offline_baseline_agrees_with_the_served_sweep(swept, tiny_pair, prompt_file, tmp_path):
    """`ddbench baseline` (in-process, harness semantics) and the server sweep see the same tokens."""
    zlab = tmp_path / "zlab.json"
    target, draft = tiny_pair
    args = ["baseline", "--model", str(target), "--draft", str(draft), "--datasets", str(prompt_file)]
    result = runner.invoke(app, [*args, "--budgets", "2,8", "--max-new-tokens", "8", "--out", str(zlab)])
    assert result.exit_code == 0, result.output
    document = json.loads(zlab.read_text())
    assert document["format"] == "ddbench-zlab/1" and document["block_size"] == 4
    methods = [(cell["method"], cell["budget"]) for cell in document["cells"]]
    assert methods == [("ar", None), ("dflash", None), ("ddtree", 2), ("ddtree", 8)]
    assert [cell["hold_chain"] for cell in document["cells"]] == [None, None, False, False]
    response = document["cells"][3]["responses"][0]
    assert sum(response["acceptance_lengths"]) >= len(response["output_ids"]) - 1  # the first token is prefill's
    assert response["time_per_output_token"] > 0
    compared = runner.invoke(app, ["compare", "--baseline", str(zlab), str(swept), "--no-speed"])
    assert compared.exit_code == 0, compared.output
    assert "4 of 4 matched cells within tolerance" in compared.output
    assert compared.output.count("1.000") >= 4  # every cell's outputs match the baseline's


@pytest.mark.slow
def test_serve_runs_one_server_until_interrupted(tiny_pair, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from ddbench.harness.server import free_port

    port, log = free_port(), tmp_path / "serve.log"
    target, draft = tiny_pair
    command = [sys.executable, "-m", "ddbench.cli", "serve", "--engine", "reference", "--method", "dflash"]
    command += ["--model", str(target), "--draft", str(draft), "--port", str(port), "--log", str(log)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        banner = process.stdout.readline()
        assert f"reference-dflash serving at http://127.0.0.1:{port}" in banner
        import httpx

        body = {"text": "Hi", "sampling_params": {"temperature": 0, "max_new_tokens": 4}}
        answer = httpx.post(f"http://127.0.0.1:{port}/generate", json=body, timeout=60).json()
        assert answer["meta_info"]["completion_tokens"] == 4 and answer["meta_info"]["spec_verify_ct"] >= 1
    finally:
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(timeout=60) == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)


def test_free_port_leaves_room_for_sglang_derived_ports():
    """SGLang refuses --port above 55535 (its gRPC port is --port + 10000)."""
    from ddbench.harness.server import PORT_RANGE, free_port

    ports = {free_port() for _ in range(50)}
    assert all(PORT_RANGE[0] <= port < PORT_RANGE[1] for port in ports)
    assert max(ports) + 10000 <= 65535


def test_server_ports_stay_below_the_ephemeral_ports():
    """A checked-free port inside the ephemeral range can be taken by an outgoing connection before the
    server binds it (seen as 'Address already in use' with two reference servers side by side)."""
    from ddbench.harness.server import PORT_RANGE

    ranges = Path("/proc/sys/net/ipv4/ip_local_port_range")
    ephemeral = int(ranges.read_text().split()[0]) if ranges.exists() else 32768
    assert PORT_RANGE[1] + 10000 <= ephemeral


def test_model_without_draft_and_missing_folders_exit_2_with_one_line(tiny_pair, tmp_path):
    target, drafter = tiny_pair
    cases = [
        (["--model", str(target)], f"error: --model {target} needs --draft (its DFlash drafter)"),
        (["--model", str(tmp_path / "nope"), "--draft", str(drafter)], f"error: --model {tmp_path / 'nope'}: no such"),
        (["--model", str(target), "--draft", "./nope"], "error: --draft ./nope: no such folder"),
    ]
    for flags, message in cases:
        result = runner.invoke(app, ["sweep", "--engine", "reference", "--dry-run", *flags])
        assert result.exit_code == 2 and result.stderr.startswith(message), result.output
        assert len(result.stderr.strip().splitlines()) == 1


def test_baseline_refuses_to_replace_a_file(tiny_pair, tmp_path):
    target, drafter = tiny_pair
    out = tmp_path / "zlab.json"
    out.write_text("{}")
    result = runner.invoke(app, ["baseline", "--model", str(target), "--draft", str(drafter), "--out", str(out)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {out} exists; choose another --out or pass --overwrite"
    assert out.read_text() == "{}"


def test_baseline_refuses_budget_auto(tiny_pair, prompt_file, tmp_path):
    target, drafter = tiny_pair
    out = tmp_path / "zlab.json"
    args = ["baseline", "--model", str(target), "--draft", str(drafter), "--datasets", str(prompt_file)]
    result = runner.invoke(app, [*args, "--budgets", "auto,2", "--out", str(out)])
    assert result.exit_code == 2 and not out.exists()
    assert result.stderr == "error: --budgets auto: a baseline runs fixed budgets only (ddbench sweep runs auto)\n"


def test_piped_progress_prints_a_line_per_finished_cell():
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from ddbench.harness.progress import RichProgress

    stream = io.StringIO()
    with RichProgress(Console(file=stream, width=200)) as progress:
        progress.cells_planned(2)
        for cell_id, error in (("a__ar__t0__c1", None), ("a__dflash__t0__c1", "boom")):
            cell = SimpleNamespace(cell_id=cell_id)
            progress.cell_started(cell, 3)
            progress.cell_finished(cell, error)
    lines = stream.getvalue().splitlines()
    assert any(line.startswith("cell 1/2 done: a__ar__t0__c1 (0:00:0") for line in lines)
    assert any(line.startswith("cell 2/2 failed: a__dflash__t0__c1 (") for line in lines)

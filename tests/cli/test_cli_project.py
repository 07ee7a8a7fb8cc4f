"""ddbench model project: verify cost curves of one GPU scaled to another by roofline floors, combined with acceptance.

The literal cost folder below has the tiny preset's shapes (2 layers) and these times (ms, on the H200):

    batch   T:  1          16         32         64          (time_ms / body_ms)
    1           10 / 9     12 / 10    14 / 12    20 / 17
    4           12 / 11    16 / 14    24 / 21    40 / 36

With --bandwidth 2.4e12 --flops 494.5e12 (half the H200's both) every floor doubles, so every projected time
is twice the measured one, and with --draft-layers 1 the drafter is (body_16 / 2 + time_16 - body_16) x 2.
"""

import csv
import dataclasses
import json

import pytest
from typer.testing import CliRunner

from ddbench.cli import app
from ddbench.config import Cell, DDBenchError
from ddbench.harness.results import RequestRecord, RunFolder, write_json
from ddbench.kernels import kernel_bench
from ddbench.model import cost_bench
from ddbench.model import project as projection

runner = CliRunner()
TINY = cost_bench.PRESETS["tiny"]
HALF_H200 = ["--bandwidth", "2.4e12", "--flops", "494.5e12"]  # every floor x 2
TIMES = {1: {1: (10, 9), 16: (12, 10), 32: (14, 12), 64: (20, 17)}, 4: {1: (12, 11), 16: (16, 14), 32: (24, 21),
                                                                          64: (40, 36)}}  # fmt: skip
ACCEPTANCE = {
    "source": "hand-made table for the tests",
    "datasets": {"gsm8k": {"dflash": 4, "ddtree": {"31": 6, "47": 7, "63": 8, "127": 9}}, "humaneval": {"dflash": 3}},
}
LABEL = "PROJECTION (not measured on NVIDIA RTX PRO 6000 Blackwell)"


def write_cost(root, times=TIMES, device="NVIDIA H200"):
    """cells.csv and run.json as cost_bench.write_results writes them (floors of the H200 defaults)."""
    root.mkdir(parents=True, exist_ok=True)
    config = dataclasses.replace(cost_bench.full_config("cpu", 0), preset="tiny", layers=2, dtype="bfloat16",
                                 batches=tuple(times), nodes=tuple(w - 1 for w in times[1]), prefix=16)  # fmt: skip
    rows = []
    for batch, by_width in times.items():
        for width, (time_ms, body_ms) in by_width.items():
            floor = cost_bench.floors(TINY, batch, width, 16, 2, 4.8e12, 989e12)
            rows.append(cost_bench.CellResult(
                batch, width - 1, width, 16, time_ms, body_ms, time_ms, batch * width / time_ms * 1e3,
                floor.weight_bytes / 1e9, floor.kv_bytes / 1e9, floor.bytes_ms, floor.flops_ms, floor.floor_ms,
                "bytes", time_ms / floor.floor_ms, None, 0.001, True, False, "",
            ))  # fmt: skip
    rows.append(dataclasses.replace(rows[-1], batch=8, time_ms=None, body_ms=None, note="skipped: needs ~200 GiB"))
    cost_bench.write_results(root, config, None, {"git_sha": "test"}, rows)
    record = json.loads((root / "run.json").read_text())
    (root / "run.json").write_text(json.dumps({**record, "device": device}))
    return root


def write_acceptance(path, table=ACCEPTANCE):
    path.write_text(json.dumps(table))
    return path


def invoke(tmp_path, *args, acceptance=ACCEPTANCE):
    cost = write_cost(tmp_path / "cost")
    accept = write_acceptance(tmp_path / "acceptance.json", acceptance)
    out = tmp_path / "out"
    result = runner.invoke(app, ["model", "project", "--cost", str(cost), "--acceptance", str(accept), "--out",
                                 str(out), "--draft-layers", "1", *HALF_H200, *args])  # fmt: skip
    return result, out


def read_rows(out):
    with open(out / "projection.csv", newline="") as handle:
        return {(r["dataset"], int(r["concurrency"]), r["method"], r["budget"]): r for r in csv.DictReader(handle)}


def test_floor_ratio_of_a_literal_cell():
    # tiny shape, B = 1, T = 8, prefix 16, bf16: weights 106,496 x 2 B + KV 2 x 2 layers x 2 heads x 24 x 16 x 2 B
    weight_bytes, kv_bytes = 212_992, 6_144
    flops = 2 * 106_496 * 8 + 4 * 2 * 8 * 24 * 4 * 16  # matmuls + dense attention = 1,802,240
    run = projection.CostRun(None, "NVIDIA H200", "tiny", TINY, 2, ())
    cell = projection.CostCell(1, 8, 16, 1.0, 0.5)
    h200 = projection.GPUS["h200"]
    source_floor = (weight_bytes + kv_bytes) / 4.8e12  # bytes-bound on the H200
    half_bandwidth = projection.GpuSpec("x", 2.4e12, 989e12, "")
    assert projection.floor_ratio(run, cell, h200, half_bandwidth) == pytest.approx(2.0)
    slow_math = projection.GpuSpec("x", 4.8e12, 1e12, "")  # flops-bound there: the larger floor counts
    assert projection.floor_ratio(run, cell, h200, slow_math) == pytest.approx(flops / 1e12 / source_floor)
    assert flops / 1e12 / source_floor == pytest.approx(39.477, abs=1e-3)


def test_projection_by_hand_and_best_budget_per_concurrency(tmp_path):
    result, out = invoke(tmp_path)
    assert result.exit_code == 0, result.output
    rows = read_rows(out)
    # B = 1: draft (10 / 2 + 2) x 2 = 14 ms; verify T=1 20, T=16 24, T=32 28, T=48 34 (interpolated), T=64 40
    # B = 4: draft (14 / 2 + 2) x 2 = 18 ms; verify T=1 24, T=16 32, T=32 48, T=48 64, T=64 80
    expected = {
        (1, "ar", ""): 1 / 20e-3, (1, "dflash", ""): 4 / 38e-3, (1, "ddtree", "31"): 6 / 42e-3,
        (1, "ddtree", "47"): 7 / 48e-3, (1, "ddtree", "63"): 8 / 54e-3,
        (4, "ar", ""): 4 / 24e-3, (4, "dflash", ""): 16 / 50e-3, (4, "ddtree", "31"): 24 / 66e-3,
        (4, "ddtree", "47"): 28 / 82e-3, (4, "ddtree", "63"): 32 / 98e-3,
    }  # fmt: skip
    gsm8k = {key[1:]: row for key, row in rows.items() if key[0] == "gsm8k"}
    assert set(gsm8k) == set(expected)  # budget 127 (T = 128) lies beyond the widest measured T
    for key, tokens_per_s in expected.items():
        assert float(gsm8k[key]["tokens_per_s"]) == pytest.approx(tokens_per_s), key
    assert float(gsm8k[(1, "ddtree", "63")]["draft_ms"]) == pytest.approx(14.0)
    assert float(gsm8k[(4, "ddtree", "47")]["verify_ms"]) == pytest.approx(64.0)
    assert float(gsm8k[(4, "ddtree", "31")]["tokens_per_s_per_request"]) == pytest.approx(6 / 66e-3)
    assert float(gsm8k[(1, "ddtree", "63")]["vs_dflash"]) == pytest.approx((8 / 54) / (4 / 38))
    assert float(gsm8k[(1, "ddtree", "63")]["vs_ar"]) == pytest.approx((8 / 54) / (1 / 20))
    assert [gsm8k[(1, "ddtree", b)]["interpolated"] for b in ("31", "47", "63")] == ["False", "True", "False"]
    assert {r["tau_source"] for r in gsm8k.values()} == {"definition", "file"}
    assert {key[2] for key in rows if key[0] == "humaneval"} == {"ar", "dflash"}
    markdown = (out / "projection.md").read_text()
    assert "| 1 | 63 | 8.00 | 148 | 105 | 50 | 1.41x | 2.96x |" in markdown  # the best budget falls with load
    assert "| 4 | 31 | 6.00 | 364 | 320 | 167 | 1.14x | 2.18x |" in markdown
    assert "budget 127 (T = 128) not projected at B = 1, 4: outside the measured widths" in markdown
    assert "budget 47 (T = 48) interpolated linearly in T between measured widths at B = 1, 4" in markdown
    assert "no DDTree tau per budget for humaneval in the acceptance table, so DDTree cannot be" in result.stdout


def test_overhead_adds_to_each_method_round(tmp_path):
    result, out = invoke(tmp_path, "--overhead-ms", "ar=2,ddtree=6")
    assert result.exit_code == 0, result.output
    rows = read_rows(out)
    # the hand-computed rounds of the test above, plus 2 ms per AR step and 6 ms per DDTree round
    assert float(rows[("gsm8k", 1, "ar", "")]["tokens_per_s"]) == pytest.approx(1 / 22e-3)
    assert float(rows[("gsm8k", 1, "dflash", "")]["tokens_per_s"]) == pytest.approx(4 / 38e-3)
    assert float(rows[("gsm8k", 4, "ddtree", "63")]["tokens_per_s"]) == pytest.approx(32 / 104e-3)
    assert float(rows[("gsm8k", 4, "ddtree", "63")]["overhead_ms"]) == 6.0
    assert float(rows[("gsm8k", 4, "dflash", "")]["overhead_ms"]) == 0.0
    assert "host time: added per round, unscaled (--overhead-ms): ar 2 ms, ddtree 6 ms" in result.stdout


def test_no_interpolate_skips_unmeasured_widths(tmp_path):
    result, out = invoke(tmp_path, "--no-interpolate")
    assert result.exit_code == 0, result.output
    assert {key[3] for key in read_rows(out) if key[2] == "ddtree"} == {"31", "63"}
    assert "budget 47 (T = 48) not projected at B = 1, 4: not measured (--no-interpolate)" in result.stdout


def test_every_output_is_labelled_a_projection_and_names_its_inputs(tmp_path):
    result, out = invoke(tmp_path)
    assert result.exit_code == 0, result.output
    with open(out / "projection.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and all(r["projection"] == LABEL for r in rows)
    assert {r["cost_run"] for r in rows} == {str(tmp_path / "cost")}
    assert {r["acceptance_source"] for r in rows} == {"hand-made table for the tests"}
    markdown = (out / "projection.md").read_text()
    assert markdown.startswith(f"# {LABEL}") and markdown.count(LABEL) >= 5  # the title and every table
    assert f"cost run: {tmp_path / 'cost'} (device NVIDIA H200" in markdown
    assert "acceptance: hand-made table for the tests" in markdown
    assert "no --kernels: the DDTree tree round costs 0 ms here" in markdown
    assert "target GPU: NVIDIA RTX PRO 6000 Blackwell, 2.4 TB/s, 494.5 TFLOP/s" in markdown
    assert "overridden: --bandwidth 2.4e+12, --flops 4.945e+14" in markdown
    assert result.stdout.startswith(LABEL) and result.stdout.count(LABEL) == 3  # title + two dataset tables


def write_kernels(root):
    """kernel_bench cells.csv: triton rounds at vocab 64 (the nearest to the tiny vocab 512), and decoys."""
    root.mkdir()
    fields = [f.name for f in dataclasses.fields(kernel_bench.CellResult)]
    rounds = [(64, "triton", 1, 31, 100.0), (64, "triton", 1, 63, 300.0), (64, "triton", 4, 31, 200.0),
              (64, "triton", 4, 63, 600.0), (64, "torch", 1, 31, 9e3), (32000, "triton", 1, 31, 5e3),
              (64, "triton", 4, 127, None)]  # fmt: skip
    with open(root / "cells.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for vocab, impl, batch, budget, us in rounds:
            blank = {name: "" for name in fields}
            writer.writerow({**blank, "batch": batch, "budget": budget, "vocab": vocab, "impl": impl,
                             "round_us": "" if us is None else us, "note": "" if us else "error: x"})  # fmt: skip
    return root


def test_tree_round_interpolated_and_scaled_by_bandwidth(tmp_path):
    tree = projection.load_tree_times(write_kernels(tmp_path / "kernels"), "triton", TINY.vocab)
    assert (tree.vocab, tree.round_us) == (64, {1: {31: 100.0, 63: 300.0}, 4: {31: 200.0, 63: 600.0}})
    assert tree.us(1, 47) == pytest.approx(200.0)
    assert tree.us(2, 47) == pytest.approx(200.0 + (400.0 - 200.0) / 3)  # budget first, then batch
    assert tree.us(8, 127) == pytest.approx(600.0) and not tree.covers(8, 127) and tree.covers(2, 47)
    result, out = invoke(tmp_path, "--kernels", str(tmp_path / "kernels"))
    assert result.exit_code == 0, result.output
    rows = read_rows(out)
    assert float(rows[("gsm8k", 1, "ddtree", "47")]["tree_ms"]) == pytest.approx(0.4)  # 200 us x 4.8 / 2.4
    assert float(rows[("gsm8k", 4, "ddtree", "63")]["tree_ms"]) == pytest.approx(1.2)
    assert float(rows[("gsm8k", 1, "ddtree", "63")]["tokens_per_s"]) == pytest.approx(8 / 54.6e-3)
    assert float(rows[("gsm8k", 1, "dflash", "")]["tree_ms"]) == 0.0
    assert "tree round: " + str(tmp_path / "kernels") + " (triton, vocab 64)" in result.stdout


def write_results(root, taus):
    """A results folder whose cells have pooled tau = 120 completion tokens / spec_verify_ct rounds.
    taus: {(method, budget, max_depth, concurrency[, held chain]): tau}."""
    folder, cells = RunFolder(root), []
    for (method, budget, depth, concurrency, *held), tau in taus.items():
        dt = 1.0 if method == "ddtree" else None
        cell = Cell("gsm8k", method, budget, depth, dt, 0.0, concurrency, hold_chain=bool(held) if dt else None)
        record = RequestRecord(
            cell_id=cell.cell_id, **cell.to_dict(), prompt_index=0, turn=0, prompt_hash="h", prompt_tokens=3,
            completion_tokens=120, output_ids=(1,) * 120, text="", finish_reason="length", latency_s=1.0,
            ttft_s=None, itl_s=(), start_s=0.0, meta_info={"spec_verify_ct": round(120 / tau)},
        )  # fmt: skip
        folder.write_cell(cell, [record], 1.0, {"block_size": 16})
        cells.append(cell.to_dict())
    write_json(folder.manifest, {"config": {"engine": "reference"}, "cells": cells})
    return root


MEASURED = {("ar", None, None, 1): 1.0, ("dflash", None, None, 4): 3.0, ("dflash", None, None, 1): 2.0,
            ("ddtree", 31, None, 1, True): 5.0, ("ddtree", 31, None, 1): 4.0, ("ddtree", 63, None, 1): 6.0,
            ("ddtree", 63, 3, 1): 2.4}  # fmt: skip


def test_acceptance_measured_in_a_results_folder(tmp_path):
    results = write_results(tmp_path / "run", MEASURED)
    table = projection.measured_acceptance(results, 0.0)
    assert table.dflash == {"gsm8k": 2.0}  # the lowest concurrency; depth-limited and held cells left out
    assert table.ddtree == {"gsm8k": {31: 4.0, 63: 6.0}} and table.origin == "measured"
    assert "concurrency 1 (lowest of 1, 4)" in table.source
    cost = write_cost(tmp_path / "cost")
    args = ["model", "project", "--cost", str(cost), "--acceptance-from", str(results), "--out", str(tmp_path / "out"),
            "--draft-layers", "1", *HALF_H200]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = read_rows(tmp_path / "out")
    assert float(rows[("gsm8k", 1, "dflash", "")]["tokens_per_s"]) == pytest.approx(2 / 38e-3)
    assert float(rows[("gsm8k", 4, "ddtree", "31")]["tokens_per_s"]) == pytest.approx(16 / 66e-3)
    assert rows[("gsm8k", 4, "ddtree", "31")]["tau_source"] == "measured"


def test_ddtree_gain_derives_only_empty_tables_and_says_so(tmp_path):
    results = write_results(tmp_path / "run", MEASURED)
    table = {"source": "published.", "datasets": {"gsm8k": {"dflash": 6, "ddtree": {}},
                                                   "humaneval": {"dflash": 3, "ddtree": {"31": 5}}}}  # fmt: skip
    result, out = invoke(tmp_path, "--ddtree-gain-from", str(results), acceptance=table)
    assert result.exit_code == 0, result.output
    rows = read_rows(out)
    assert float(rows[("gsm8k", 1, "ddtree", "31")]["tau"]) == pytest.approx(12.0)  # 6 x 4 / 2
    assert float(rows[("gsm8k", 1, "ddtree", "63")]["tau"]) == 16.0  # 6 x 6 / 2 = 18, capped at the block
    assert rows[("gsm8k", 1, "ddtree", "31")]["tau_source"] == "derived"
    assert rows[("humaneval", 1, "ddtree", "31")]["tau_source"] == "file"  # a given table is kept
    assert float(rows[("humaneval", 1, "ddtree", "31")]["tau"]) == 5.0
    source = rows[("gsm8k", 1, "ar", "")]["acceptance_source"]
    assert source.startswith("published. DDTree tau DERIVED (not published) for gsm8k: the DFlash tau above x")
    assert f"measured in {results}" in source and source.endswith("capped at 16")


def test_cost_bench_smoke_output_projects(tmp_path):
    config = cost_bench.smoke_config("cpu", 0)
    cost_bench.run(config, tmp_path / "cost", echo=lambda line: None)
    table = {"source": "t", "datasets": {"gsm8k": {"dflash": 2.5, "ddtree": {"3": 3.0, "5": 3.5}}}}
    args = ["model", "project", "--cost", str(tmp_path / "cost"), "--acceptance",
            str(write_acceptance(tmp_path / "a.json", table)), "--out", str(tmp_path / "out"), "--block", "4",
            "--draft-layers", "1"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = read_rows(tmp_path / "out")
    settings = (("ar", ""), ("dflash", ""), ("ddtree", "3"), ("ddtree", "5"))
    assert {(b, m, n) for _, b, m, n in rows} == {(b, m, n) for b in config.batches for m, n in settings}
    assert all(float(r["tokens_per_s"]) > 0 for r in rows.values())
    assert "the cost run was measured on 'cpu', not on NVIDIA H200" in result.stdout


def test_builtin_gpus_and_overrides():
    assert (projection.GPUS["h200"].bandwidth, projection.GPUS["h200"].flops) == (4.8e12, 989e12)
    assert (projection.GPUS["rtx-pro-6000"].bandwidth, projection.GPUS["rtx-pro-6000"].flops) == (1.792e12, 500e12)
    assert projection.gpu("rtx-pro-6000", flops=250e12).flops == 250e12
    with pytest.raises(DDBenchError, match="--bandwidth must be > 0"):
        projection.gpu("h200", bandwidth=0.0)


def test_published_qwen3_8b_table_has_no_invented_ddtree_values():
    from pathlib import Path

    path = Path(__file__).parents[2] / "configs" / "acceptance" / "published-qwen3-8b.json"
    table = projection.load_acceptance(path)
    assert table.dflash["gsm8k"] == 6.55 and table.dflash["mt-bench"] == 4.25  # anchors.md section 1.4
    assert all(not budgets for budgets in table.ddtree.values())


def _break_csv(tmp_path):
    cost = write_cost(tmp_path / "cost")
    text = (cost / "cells.csv").read_text().replace("time_ms", "time")
    (cost / "cells.csv").write_text(text)


@pytest.mark.parametrize(
    "setup, args, message",
    [
        (None, ["--cost", "nosuch"], "no such cost run record"),
        (_break_csv, [], "malformed cost run"),
        (lambda p: (p / "cost" / "run.json").write_text("{"), [], "malformed cost run record"),
        (lambda p: (p / "acceptance.json").write_text("not json"), [], "malformed acceptance file"),
        (lambda p: write_acceptance(p / "acceptance.json", {"datasets": {}}), [], 'non-empty "source"'),
        (lambda p: write_acceptance(p / "acceptance.json", {"source": "s", "datasets": {"g": {"dflash": 0.5}}}), [],
         "tau must be a number >= 1"),
        (lambda p: write_acceptance(p / "acceptance.json", {"source": "s", "datasets": {"g": {"dflash": 2,
         "ddtree": {"x": 3}}}}), [], "budgets must be integers"),
        (lambda p: write_acceptance(p / "acceptance.json", {"source": "s", "datasets": {"g": {"dflash": 17}}}), [],
         "exceeds the block size 16"),
        (None, ["--acceptance-from", "."], "exactly one of --acceptance FILE and --acceptance-from"),
        (None, ["--target-gpu", "a100"], "unknown GPU 'a100'"),
        (None, ["--draft-layers", "0"], "--draft-layers must be >= 1"),
        (lambda p: write_kernels(p / "kernels"), ["--kernels", "kernels", "--kernel-impl", "cuda"],
         "no timed cuda round"),
        (None, ["--kernels", "."], "no cells.csv (not a `ddbench kernels bench` output folder)"),
        (None, ["--ddtree-gain-from", "."], "is not a ddbench results folder"),
        (None, ["--overhead-ms", "ar=fast"], "--overhead-ms wants METHOD=MS"),
        (None, ["--overhead-ms", "eagle=1"], "--overhead-ms takes ms >= 0 for ar, dflash, ddtree"),
        (None, ["--overhead-ms", "ar=-1"], "--overhead-ms takes ms >= 0"),
    ],
    ids=["no-cost", "cost-columns", "run-json", "acceptance-json", "no-source", "tau-below-1", "budget-key",
         "tau-above-block", "two-acceptances", "gpu", "draft-layers", "kernel-impl", "no-kernels", "gain-folder",
         "overhead-text", "overhead-method", "overhead-negative"],
)  # fmt: skip
def test_bad_input_exits_2_with_one_line(tmp_path, monkeypatch, setup, args, message):
    write_cost(tmp_path / "cost")
    write_acceptance(tmp_path / "acceptance.json")
    if setup is not None:
        setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    base = {"--cost": "cost", "--acceptance": "acceptance.json", "--out": "out"}
    given = dict(zip(args[::2], args[1::2]))
    argv = [item for key, value in {**base, **given}.items() for item in (key, value)]
    result = runner.invoke(app, ["model", "project", *argv])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr
    assert not (tmp_path / "out").exists()


def test_moe_shape_reads_the_experts_its_tokens_reach():
    moe, dense = cost_bench.MOE_PRESETS["qwen3-coder-30b-a3b"], cost_bench.PRESETS["qwen3-8b"]
    assert abs(moe.matmul_params / 1e9 - 30.2) < 0.1 and abs(moe.active_params / 1e9 - 3.04) < 0.01
    coverage = [moe.experts_read(n) for n in (1, 16, 64, 4096)]
    assert coverage[0] == 8 and 82 < coverage[1] < 83 and coverage[2] > 125 and coverage[3] == pytest.approx(128)
    assert moe.read_params(1) == moe.active_params and moe.read_params(4096) == pytest.approx(moe.matmul_params)
    assert dense.read_params(1) == dense.read_params(512) == dense.active_params == dense.matmul_params


def test_sglang_decode_steps_become_a_cost_run_that_projects(tmp_path):
    from ddbench.model import cost_sglang

    steps = {n: 1.0 + 0.01 * n for n in (1, 4, 16, 32, 64, 128, 256, 512, 1024)}  # seconds x 1e-3 below
    lines = [{"run_name": "x", "batch_size": n, "input_len": 32, "output_len": 8, "median_decode_latency": ms / 1e3}
             for n, ms in steps.items()] + [{"batch_size": 2048, "input_len": 32, "output_len": 8}]  # fmt: skip
    source = tmp_path / "moe.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    rows = cost_sglang.convert(source, "qwen3-coder-30b-a3b", "NVIDIA H200", tmp_path / "cost", (1, 4, 16), (1, 16, 64),
                               graph_max=256)  # fmt: skip
    assert {(r["batch"], r["width"]) for r in rows} == {(b, w) for b in (1, 4, 16) for w in (1, 16, 64)}
    assert {(r["batch"], r["width"]) for r in rows if not r["graph"]} == {(16, 64)}  # 1,024 tokens > 256
    assert all(r["over_floor"] == pytest.approx(r["time_ms"] / r["floor_ms"]) and r["floor_ms"] > 0 for r in rows)
    assert all(r["time_ms"] == pytest.approx(steps[r["batch"] * r["width"]]) and 0 < r["body_ms"] < r["time_ms"]
               for r in rows)  # fmt: skip
    run = projection.load_cost(tmp_path / "cost")
    assert run.shape.experts == 128 and run.preset == "qwen3-coder-30b-a3b" and len(run.cells) == len(rows)
    table = {"source": "t", "datasets": {"humaneval": {"dflash": 5.0, "ddtree": {"15": 5.5, "63": 7.0}}}}
    args = ["model", "project", "--cost", str(tmp_path / "cost"), "--acceptance",
            str(write_acceptance(tmp_path / "a.json", table)), "--out", str(tmp_path / "out"), "--block", "16",
            "--draft-layers", "1"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert {m for _, _, m, _ in read_rows(tmp_path / "out")} == {"ar", "dflash", "ddtree"}
    assert "B x T = 16x64 ran without a CUDA graph" in (tmp_path / "out" / "projection.md").read_text()
    with pytest.raises(DDBenchError, match="no decode timing"):
        source.write_text(json.dumps(lines[-1]) + "\n")
        cost_sglang.decode_times(source)

"""`ddbench model calibrate`: a verify cost table for budget=auto, written once, used by the reference server
where it fits the target and ignored with a warning where it does not."""

import json
import logging

import torch
from typer.testing import CliRunner

from ddbench.cli import app
from ddtree_core.policy import auto_budgets
from ddtree_core.reference import server
from ddtree_core.reference.decode import SpecConfig
from ddtree_core.settings import TreeSettings


def calibrate(*args: str):
    return CliRunner().invoke(app, ["model", "calibrate", *args], prog_name="ddbench")


def test_writes_the_widths_auto_weighs_with_the_identity_and_keeps_an_existing_file(tiny_pair, tmp_path):
    target, _ = tiny_pair
    out = tmp_path / "cost.json"
    args = ["--model", str(target), "--out", str(out), "--budget", "8", "--device", "cpu", "--dtype", "float32"]
    result = calibrate(*args, "--threads", "1", "--context", "8", "--repeats", "1")
    assert result.exit_code == 0, result.output
    table = json.loads(out.read_text())
    assert table["tokens"] == [1] + [b + 1 for b in auto_budgets(8)] and all(ms > 0 for ms in table["ms"])
    assert table["threads"] == 1 and table["dtype"] == "float32" and table["device"] == "cpu"
    assert table["hidden_size"] == 64 and table["context"] == 8 and table["repeats"] == 1
    again = calibrate(*args)
    assert again.exit_code == 2 and again.stderr.strip() == f"error: --out {out} exists (--force replaces it)"
    assert json.loads(out.read_text()) == table  # untouched
    bad = calibrate("--model", str(target), "--out", str(tmp_path / "x.json"), "--budget", "0")
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and "--budget" in bad.stderr


def test_the_reference_server_uses_a_fitting_table_and_measures_past_another(tiny_pair, tmp_path, caplog, monkeypatch):
    target, draft = tiny_pair
    out = tmp_path / "cost.json"
    threads = torch.get_num_threads()
    args = ["--model", str(target), "--out", str(out), "--budget", "8", "--device", "cpu", "--dtype", "float32"]
    assert calibrate(*args, "--threads", str(threads), "--context", "8", "--repeats", "1").exit_code == 0
    torch.set_num_threads(threads)
    spec = SpecConfig(method="ddtree", tree=TreeSettings(8, None))
    measured = []
    from ddtree_core.reference import cost as cost_module

    real = cost_module.measure_verify_cost
    monkeypatch.setattr(cost_module, "measure_verify_cost", lambda *a, **k: measured.append(1) or real(*a, **k))
    with caplog.at_level(logging.INFO, logger=server.logger.name):
        engine = server.load_engine(str(target), str(draft), spec, dtype="float32", device="cpu", cost_table=str(out))
    assert measured == [] and engine.auto.cost.tokens == tuple(json.loads(out.read_text())["tokens"])
    assert f"from {out}" in caplog.text
    table = json.loads(out.read_text())
    out.write_text(json.dumps({**table, "threads": threads + 1}))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=server.logger.name):
        server.load_engine(str(target), str(draft), spec, dtype="float32", device="cpu", cost_table=str(out))
    assert measured == [1]
    assert f"{out} was measured for threads {threads + 1}, this process has {threads}" in caplog.text

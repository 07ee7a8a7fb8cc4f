"""The top-K launch sweep: every launch gives the torch path's lists; best.csv picks the fastest per method."""

import csv

import pytest
import typer

from ddbench.kernels import kernel_bench, topk_tune
from ddtree_core.kernels import topk_radix


@pytest.mark.filterwarnings("ignore:All-NaN slice:RuntimeWarning")  # numpy's max of the padding (interpreter)
def test_sweep_checks_every_launch_against_the_torch_path(tmp_path, monkeypatch):
    monkeypatch.setattr(topk_tune, "LENGTH", 2)  # rows per request: 2 keep the interpreter quick
    rows = topk_tune.run(tmp_path, batches=[1], vocabs=[200], ks=[3], tiles=[64], chunk_counts=[1, 2],
                         warp_counts=[4, 2], groups=[8, 16], select_warps=[4], blocks=[64], log_bins=[8],
                         gathers=[32], registers=[64],
                         extra=[{"select_warps": 2, "group": 16, "super_group": 2, "tiled": 1},
                                {"emit": 4, "emit_warps": 2, "union_tiles": 2}])  # fmt: skip
    a = "auto"
    assert [(r["method"], *(r[p] for p in topk_tune.PARAMS)) for r in rows] == [
        ("radix", a, a, a, a, a, a, a, a, a, a, a, a, a, a, a),
        ("radix-scan", a, a, a, a, a, a, a, a, a, a, a, a, a, a, a),
        ("radix", 64, 1, 4, a, a, a, a, a, a, a, a, a, a, a, a),
        ("radix", 64, 1, 2, a, a, a, a, a, a, a, a, a, a, a, a),
        ("radix", 64, 2, 4, a, a, a, a, a, a, a, a, a, a, a, a),
        ("radix", 64, 2, 2, a, a, a, a, a, a, a, a, a, a, a, a),
        ("radix", a, a, a, 8, a, 4, a, a, a, a, a, a, a, a, a), ("radix", a, a, a, 16, a, 4, a, a, a, a, a, a, a, a, a),
        ("radix", a, a, a, a, a, a, 64, a, 8, a, a, a, a, a, a),
        ("radix", a, a, a, a, a, a, a, 32, a, a, a, a, a, a, a),
        ("radix", a, a, a, a, a, a, a, a, a, 64, a, a, a, a, a),
        ("radix", a, a, a, a, a, a, a, a, a, a, 64, a, a, a, a),
        ("radix", a, a, a, a, a, a, a, a, a, 64, 64, a, a, a, a),
        ("radix", a, a, a, 16, 2, 2, a, a, a, a, a, 1, a, a, a),
        ("radix", a, a, a, a, a, a, a, a, a, a, a, a, 4, 2, 2),
    ]  # fmt: skip
    assert all(r["equal"] is True and r["us"] > 0 for r in rows), [r["note"] for r in rows]
    assert [r["settled"] for r in rows if r.get("emit") == 4] == [1.0]  # 2 rows, both settled by the union
    with open(tmp_path / "best.csv") as stream:
        best = list(csv.DictReader(stream))
    assert [b["method"] for b in best] == ["radix", "radix-scan"]
    for b in best:
        mine = [r for r in rows if r["method"] == b["method"]]
        fastest = min(mine, key=lambda r: r["us"])
        assert [b[p] for p in topk_tune.PARAMS] == [str(fastest[p]) for p in topk_tune.PARAMS]
        assert (float(b["us"]), float(b["auto_us"])) == (fastest["us"], mine[0]["us"])


def test_parse_launches():
    parse = kernel_bench.parse_launches
    assert parse(" select_warps=2 ; select_warps=2,select_registers=64;", topk_tune.PARAMS) == [
        {"select_warps": 2}, {"select_warps": 2, "select_registers": 64}]  # fmt: skip
    assert parse("", topk_tune.PARAMS) == []
    assert parse("FCH=0,SORT_SURVIVORS=0;SORT_SURVIVORS=1", ("FCH", "SORT_SURVIVORS"), ("SORT_SURVIVORS",)) == [
        {"FCH": 0, "SORT_SURVIVORS": False}, {"SORT_SURVIVORS": True}]  # fmt: skip
    for bad in ("warp=2", "select_warps=two", "select_warps", "select_warps=2,"):
        with pytest.raises(typer.BadParameter, match="key=value"):
            parse(bad, topk_tune.PARAMS)
    with pytest.raises(typer.BadParameter, match="0 or 1 for SORT_SURVIVORS"):
        parse("SORT_SURVIVORS=2", ("SORT_SURVIVORS",), ("SORT_SURVIVORS",))


def test_best_ignores_unequal_or_failed_launches():
    def row(method, tile, chunks, warps, group, us, equal):
        radix_params = ("super_group", "select_warps", "block", "gather", "log_bins", "scan_registers",
                        "select_registers", "tiled", "emit", "emit_warps", "union_tiles")
        radix = {p: "" if group == "" else "auto" for p in radix_params}
        return {"method": method, "batch": 1, "vocab": 9, "k": 2, "tile": tile, "chunks": chunks, "warps": warps,
                "group": group, **radix, "us": us, "equal": equal}  # fmt: skip

    rows = [
        row("radix", "auto", "auto", "auto", "auto", 4.0, True),
        row("radix", 64, 1, 4, "auto", 1.0, False),
        row("radix", 128, 2, 4, "auto", "", ""),
        row("radix", "auto", "auto", "auto", 32, 2.0, True),
        row("radix-scan", "auto", "auto", "auto", "auto", 1.5, True),
    ]
    assert topk_tune.best_rows(rows) == [
        {"method": "radix", "batch": 1, "vocab": 9, "k": 2, "tile": "auto", "chunks": "auto", "warps": "auto",
         "group": 32, "super_group": "auto",
         "select_warps": "auto", "block": "auto", "gather": "auto", "log_bins": "auto",
         "scan_registers": "auto", "select_registers": "auto", "tiled": "auto", "emit": "auto", "emit_warps": "auto",
         "union_tiles": "auto", "us": 2.0, "auto_us": 4.0},
        {"method": "radix-scan", "batch": 1, "vocab": 9, "k": 2, "tile": "auto", "chunks": "auto", "warps": "auto",
         "group": "auto", "super_group": "auto",
         "select_warps": "auto", "block": "auto", "gather": "auto", "log_bins": "auto",
         "scan_registers": "auto", "select_registers": "auto", "tiled": "auto", "emit": "auto", "emit_warps": "auto",
         "union_tiles": "auto", "us": 1.5, "auto_us": 1.5},
    ]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_phases_on_cuda(tmp_path):
    topk_tune.run(tmp_path, batches=[1], vocabs=[3000], ks=[64], tiles=[], chunk_counts=[],
                  extra=[{"super_group": 1, "select_warps": 4}])  # fmt: skip
    with open(tmp_path / "phases.csv") as stream:
        rows = list(csv.DictReader(stream))
    for label in ("default", "super_group=1,select_warps=4"):
        phases = {r["phase"]: float(r["us"]) for r in rows if r["launch"] == label}
        assert set(phases) == {*topk_radix.SELECT_PHASES, "total"} and phases["total"] > 0

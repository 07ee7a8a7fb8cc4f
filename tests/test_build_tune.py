"""The tree-build launch sweep: every launch builds the default's trees; best.csv picks the fastest equal one."""

import csv

import pytest
import torch

from ddbench.kernels import build_tune


def test_sweep_times_every_launch_and_checks_its_trees(tmp_path, monkeypatch):
    monkeypatch.setattr(build_tune, "LENGTH", 3)  # draft positions: 3 keep the interpreter quick
    rows = build_tune.run(tmp_path, cells=[(2, 6)], scales=[12.0], vocab=50, warps=[4, 2], hist_bins=[2, 2048],
                          log_bins=[4], depths=[1, 2, 3], qch=[2], chunk=[16], counted_ranks=True,
                          extra=[{"FINE_BITS": 0, "SORT_SURVIVORS": False, "FCH": 0}, {"FCH": 0},
                                 {"TAILS": True}])  # fmt: skip
    a = "auto"
    assert [(r["max_depth"], *(r[k] for k in build_tune.KEYS)) for r in rows] == [
        (3, a, a, a, a, a, a, a, a, a, a, a, a, a, a),
        (3, 4, 2, a, a, a, a, a, a, a, a, a, a, a, a),
        (3, 4, 2048, a, a, a, a, a, a, a, a, a, a, a, a),
        (3, 2, 2, a, a, a, a, a, a, a, a, a, a, a, a),
        (3, 2, 2048, a, a, a, a, a, a, a, a, a, a, a, a),
        (3, a, a, 4, a, a, a, a, a, a, a, a, a, a, a),
        (3, a, a, a, 2, a, a, a, a, a, a, a, a, a, a),
        (3, a, a, a, a, 16, a, a, a, a, a, a, a, a, a),
        (3, a, a, a, a, a, False, a, a, a, a, a, a, a, a),
        (3, a, a, a, a, a, a, 0, False, 0, a, a, a, a, a),
        (3, a, a, a, a, a, a, a, a, 0, a, a, a, a, a),
        (3, a, a, a, a, a, a, a, a, a, a, True, a, a, a),
        (1, a, a, a, a, a, a, a, a, a, a, a, a, a, a),
        (2, a, a, a, a, a, a, a, a, a, a, a, a, a, a),
    ]  # fmt: skip  (depth 3 = LENGTH: the full build, timed once)
    assert all(r["equal"] is True and r["us"] > 0 for r in rows), [r["note"] for r in rows]
    assert [r["mean_depth"] for r in rows[-2:]] == [1.0, 2.0] and rows[0]["mean_depth"] == 3.0  # sharp drafts
    with open(tmp_path / "best.csv") as stream:
        (best,) = list(csv.DictReader(stream))
    fastest = min(rows[:12], key=lambda r: r["us"])  # full-depth rows only
    assert (float(best["us"]), float(best["default_us"])) == (fastest["us"], rows[0]["us"])


def test_best_skips_unequal_and_failed_launches():
    def row(warps, us, equal):
        return {"batch": 1, "budget": 8, "logit_scale": 4.0, "max_depth": 16, "num_warps": warps, "HIST_BINS": "auto",
                "LOG_BINS": "auto", "QCH": "auto", "CHUNK": "auto", "SORT_RANKS": "auto", "FINE_BITS": "auto",
                "SORT_SURVIVORS": "auto", "FCH": "auto", "CUT": "auto", "TAILS": "auto", "TB": "auto", "FS": "auto",
                "FR": "auto", "us": us, "equal": equal}  # fmt: skip

    shallow = {**row(1, 0.5, True), "max_depth": 2}  # a depth-limited row is no launch candidate
    best = build_tune.best_rows(
        [row("auto", 9.0, True), row(2, 1.0, False), row(4, "", ""), row(8, 5.0, True), shallow]
    )
    assert [(b["num_warps"], b["us"], b["default_us"]) for b in best] == [(8, 5.0, 9.0)]


def test_keys_are_the_builds_launch_keys():
    from ddtree_core.kernels import tree_build

    assert sorted(build_tune.KEYS) == sorted(tree_build.LAUNCH_KEYS)


def test_bad_cells_are_refused():
    with pytest.raises(Exception, match="BATCHxBUDGET"):
        build_tune._cells("1x256,64")


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_phases_on_cuda(tmp_path):
    build_tune.run(tmp_path, cells=[(2, 64)], scales=[4.0], vocab=3000, warps=[], hist_bins=[], log_bins=[],
                   extra=[{"FINE_BITS": 0}, {"SORT_SURVIVORS": False, "FCH": 0}])  # fmt: skip
    with open(tmp_path / "phases.csv") as stream:
        rows = list(csv.DictReader(stream))
    for label in ("default", "FINE_BITS=0", "SORT_SURVIVORS=False,FCH=0"):
        phases = {r["phase"]: float(r["us"]) for r in rows if r["launch"] == label}
        assert {"level0.expand", "final.rank", "total"} <= set(phases) and phases["total"] > 0


def test_cells_time_the_kernel_benchmarks_drafts(tmp_path, monkeypatch):
    """The same tensors as kernel_bench's cell at the same seed, batch and vocabulary (kernel_bench.draft_logits)."""
    from ddbench.kernels import kernel_bench

    seen = []
    monkeypatch.setattr(build_tune, "LENGTH", 3)

    def recorded(*args):
        seen.append(kernel_bench.draft_logits(*args))
        return seen[-1]

    monkeypatch.setattr(build_tune, "draft_logits", recorded)
    build_tune.run(tmp_path, cells=[(2, 4)], scales=[4.0], vocab=40, warps=[], hist_bins=[], log_bins=[], seed=5)
    (logits,) = seen
    assert torch.equal(logits, kernel_bench.draft_logits(2, 3, 40, 4.0, 5, "cpu"))
    assert not torch.equal(logits, kernel_bench.draft_logits(2, 3, 40, 4.0, 6, "cpu"))

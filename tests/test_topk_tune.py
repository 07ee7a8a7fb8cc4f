"""The top-K launch sweep: every configuration gives the default's lists; best.csv picks the fastest."""

import csv

from ddbench import topk_tune


def test_sweep_checks_every_configuration_against_the_default(tmp_path):
    rows = topk_tune.run(tmp_path, batches=[1], vocabs=[200], ks=[3], tiles=[64], chunk_counts=[1, 2],
                         warp_counts=[4, 2])  # fmt: skip
    assert [(r["tile"], r["chunks"], r["warps"]) for r in rows] == [
        ("auto", "auto", "auto"), (64, 1, 4), (64, 1, 2), (64, 2, 4), (64, 2, 2)
    ]  # fmt: skip
    assert all(r["equal"] is True and r["us"] > 0 for r in rows)
    with open(tmp_path / "best.csv") as stream:
        (best,) = list(csv.DictReader(stream))
    fastest = min(rows, key=lambda r: r["us"])
    expected = (str(fastest["tile"]), str(fastest["chunks"]), str(fastest["warps"]), fastest["us"])
    assert (best["tile"], best["chunks"], best["warps"], float(best["us"])) == expected


def test_best_ignores_unequal_or_failed_configurations():
    rows = [
        {"batch": 1, "vocab": 9, "k": 2, "tile": "auto", "chunks": "auto", "warps": "auto", "us": 5.0, "equal": True},
        {"batch": 1, "vocab": 9, "k": 2, "tile": 64, "chunks": 1, "warps": 4, "us": 1.0, "equal": False},
        {"batch": 1, "vocab": 9, "k": 2, "tile": 128, "chunks": 2, "warps": 4, "us": "", "equal": ""},
        {"batch": 1, "vocab": 9, "k": 2, "tile": 128, "chunks": 1, "warps": 8, "us": 3.0, "equal": True},
    ]
    assert topk_tune.best_rows(rows) == [
        {"batch": 1, "vocab": 9, "k": 2, "tile": 128, "chunks": 1, "warps": 8, "us": 3.0, "auto_us": 5.0}
    ]

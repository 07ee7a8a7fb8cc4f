"""scripts/kernel_ab.py: the medians per version over the timed passes (warm-up passes left out) and new / old."""

import csv
import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "kernel_ab.py"
spec = importlib.util.spec_from_file_location("kernel_ab", SCRIPT)
kernel_ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernel_ab)

FIELDS = ["batch", "budget", "vocab", "impl", "topk_us", "build_us", "mask_us", "walk_us", "round_us",
          "round_graph8_us", "mean_nodes"]  # fmt: skip


def write_pass(folder: Path, round_us: float) -> None:
    folder.mkdir(parents=True)
    with open(folder / "cells.csv", "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=FIELDS)
        writer.writeheader()
        row = dict(batch=64, budget=256, vocab=152064, impl="triton", topk_us=round_us - 60, build_us=34, mask_us=12)
        writer.writerow(row | dict(walk_us=5, round_us=round_us, round_graph8_us=round_us - 3, mean_nodes=256))


def test_medians_per_version_leave_the_warm_up_out(tmp_path, capsys):
    for name, value in [("warm-old", 999.0), ("old-1", 300.0), ("old-2", 310.0), ("old-3", 305.0),
                        ("warm-new", 999.0), ("new-1", 290.0), ("new-2", 296.0), ("new-10", 293.0)]:  # fmt: skip
        write_pass(tmp_path / name, value)
    (tmp_path / "new-1.log").write_text("a log beside the folder")
    kernel_ab.main(tmp_path)
    rows = list(csv.DictReader(open(tmp_path / "summary.csv")))
    assert [(row["version"], row["passes"], float(row["round_us"])) for row in rows] == [
        ("old", "3", 305.0), ("new", "3", 293.0)
    ]  # fmt: skip
    printed = capsys.readouterr().out
    assert "| 64 | 256 | 152064 | triton | new | 290.0 / 296.0 / 293.0 | 293.0 |" in printed  # pass order: 1, 2, 10
    assert f"new / old, batch 64, budget 256, vocab 152064, triton: {293 / 305:.3f}" in printed

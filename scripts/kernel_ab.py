"""The table of a scripts/kernel_ab.sh run: per configuration, each version's round per timed pass and the medians.

    python3 scripts/kernel_ab.py OUT

Reads OUT/{old,new}-N/cells.csv (N = 1, 2, ...; the untimed warm-* passes are left out) and prints, per batch,
budget, vocabulary and impl, one markdown row per version: the round (us, CUDA-graph replay) of each pass, its
median, the median of the graph of 8 rounds (per round), the stages' medians (top-K, build, mask, walk) and
mean_nodes (the same trees in both versions, or the comparison means nothing); then new / old of the round's
medians. Writes the rows to OUT/summary.csv too. Example row:

| 64 | 256 | 152064 | triton | old | 120.1 / 119.8 / 120.3 | 120.1 | 117.9 | 80.2 / 30.1 / 5.0 / 4.9 | 249.7 |
"""

import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

STAGES = ("topk_us", "build_us", "mask_us", "walk_us")


def passes(out: Path) -> dict[tuple, dict[str, list[dict]]]:
    """(batch, budget, vocab, impl) -> version -> that version's rows, one per finished timed pass, in pass order."""
    found: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for version in ("old", "new"):
        folders = [path for path in out.glob(f"{version}-[0-9]*") if path.is_dir()]
        folders.sort(key=lambda path: int(path.name.split("-")[1]))
        for folder in folders:
            if not (folder / "cells.csv").is_file():
                continue
            with open(folder / "cells.csv", newline="") as stream:
                for row in csv.DictReader(stream):
                    key = (int(row["batch"]), int(row["budget"]), int(row["vocab"]), row["impl"])
                    found[key][version].append(row)
    return found


def median(rows: list[dict], column: str) -> float | None:
    values = [float(row[column]) for row in rows if row.get(column) not in (None, "", "None")]
    return statistics.median(values) if values else None


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main(out: Path) -> None:
    head = ["batch", "budget", "vocab", "impl", "version", "round per pass (us)", "median", "graph of 8",
            "top-K / build / mask / walk", "mean nodes"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    table, ratios = [], []
    for key, versions in sorted(passes(out).items()):
        for version in ("old", "new"):
            rows = versions.get(version, [])
            if not rows:
                continue
            record = dict(zip(("batch", "budget", "vocab", "impl"), key), version=version, passes=len(rows))
            record["round_us"] = median(rows, "round_us")
            record["round_graph8_us"] = median(rows, "round_graph8_us")
            record.update({stage: median(rows, stage) for stage in STAGES})
            record["mean_nodes"] = median(rows, "mean_nodes")
            table.append(record)
            cells = [*(str(part) for part in key), version, " / ".join(fmt(median([row], "round_us")) for row in rows),
                     fmt(record["round_us"]), fmt(record["round_graph8_us"]),
                     " / ".join(fmt(record[stage]) for stage in STAGES), fmt(record["mean_nodes"])]
            print("| " + " | ".join(cells) + " |")
        old, new = (median(versions.get(v, []), "round_us") for v in ("old", "new"))
        if old and new:
            ratios.append(f"new / old, batch {key[0]}, budget {key[1]}, vocab {key[2]}, {key[3]}: {new / old:.3f}")
    print("\n".join(["", *ratios]))
    if table:
        with open(out / "summary.csv", "w", newline="") as stream:
            writer = csv.DictWriter(stream, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)


if __name__ == "__main__":
    main(Path(sys.argv[1]))

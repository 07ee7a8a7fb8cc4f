"""Settings pooled over several one-pass sweep folders: median (min-max) tokens/s and speedup against AR.

    python scripts/pool_runs.py results/testbed/cpu-engine-thread-2026-12-07/new-{1,2,3}

Reads each folder's summary.csv (one row per cell, `ddbench sweep`) and prints one markdown row per dataset,
method and budget: the median and range over the folders of tokens/s and of speedup_vs_ar (each against the AR
cell of its own folder), the parities seen and the median tau. Where a folder keeps its requests
(requests.jsonl or requests.jsonl.gz), a second table gives the median ms per round of each stage, from each
response's `ddtree_stage_times` (seconds) over its `ddtree_num_rounds`, over every response of the setting.
"""

import csv
import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

STAGES = ("draft", "tree_build", "verify", "commit")


def setting(method: str, budget) -> str:
    return method if method != "ddtree" else f"b{budget}"


def span(values: list[float], digits: int) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def requests(folder: Path) -> list[dict]:
    for name, opener in (("requests.jsonl", open), ("requests.jsonl.gz", gzip.open)):
        if (folder / name).exists():
            with opener(folder / name, "rt") as stream:
                return [json.loads(line) for line in stream]
    return []


def main(folders: list[str]) -> None:
    cells, stages = defaultdict(list), defaultdict(list)
    for folder in map(Path, folders):
        with open(folder / "summary.csv", newline="") as stream:
            for row in csv.DictReader(stream):
                if row["status"] == "done":
                    cells[(row["dataset"], setting(row["method"], row["budget"]))].append(row)
        for record in requests(folder):
            meta = record.get("meta_info") or {}
            times, rounds = meta.get("ddtree_stage_times"), meta.get("ddtree_num_rounds")
            if times and rounds and record["method"] != "ar":
                key = (record["dataset"], setting(record["method"], record["budget"]))
                stages[key].append({stage: 1000 * times[stage] / rounds for stage in STAGES})
    print("| dataset | setting | n | tokens/s | speedup vs AR | parity | tau |")
    print("|---|---|---|---|---|---|---|")
    for (dataset, name), rows in cells.items():
        parity = sorted({row["parity"] or "-" for row in rows})
        tau = statistics.median(float(row["acceptance_length"] or 0) for row in rows)
        tokens, speedup = ([float(row[c]) for row in rows] for c in ("tokens_per_s", "speedup_vs_ar"))
        columns = [dataset, name, str(len(rows)), span(tokens, 1), span(speedup, 2), ", ".join(parity), f"{tau:.2f}"]
        print("| " + " | ".join(columns) + " |")
    if stages:
        print("\n| dataset | setting | responses | " + " | ".join(f"{s} ms/round" for s in STAGES) + " |")
        print("|---|---|---|" + "---|" * len(STAGES))
        for (dataset, name), rows in stages.items():
            medians = " | ".join(f"{statistics.median(r[s] for r in rows):.1f}" for s in STAGES)
            print(f"| {dataset} | {name} | {len(rows)} | {medians} |")


if __name__ == "__main__":
    main(sys.argv[1:])

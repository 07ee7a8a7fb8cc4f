"""The budgets a `budget=auto` server's rounds took: each cell's responses' `ddtree_budget_histogram`, summed.

    python scripts/budget_histograms.py results/sglang/auto-h100-2026-12-07/cells/*bauto*.jsonl

One markdown row per cell file (plain or .gz): its responses with a histogram, and the rounds at each budget.
"""

import gzip
import json
import sys
from collections import Counter
from pathlib import Path


def main(paths: list[str]) -> None:
    rows = []
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as stream:
            records = [json.loads(line) for line in stream]
        histograms = [(r.get("meta_info") or {}).get("ddtree_budget_histogram") for r in records]
        total = Counter()
        for histogram in filter(None, histograms):
            total.update({int(budget): rounds for budget, rounds in histogram.items()})
        rows.append((Path(path).name, sum(h is not None for h in histograms), total))
    budgets = sorted({budget for _, _, total in rows for budget in total})
    print("| cell | responses | " + " | ".join(f"b{b} rounds" for b in budgets) + " |")
    print("|---|---|" + "---|" * len(budgets))
    for name, responses, total in rows:
        print(f"| {name} | {responses} | " + " | ".join(str(total[b]) for b in budgets) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])

"""The acceptance gain DDTree needs to match DFLASH, per budget and concurrency, from a projection.csv.

    python scripts/break_even.py results/projection/rtx-pro-6000-qwen3-8b/projection.csv

Tokens/s = B x tau / round, so DDTree at budget N ties DFLASH when tau(N) / tau(DFlash) equals
round(N) / round(DFlash): the ratio of the projected rounds (draft + tree + verify), which depends on the
cost curves alone, not on any acceptance figure. Host time outside the kernels is not in the rounds.
"""

import csv
import sys
from collections import defaultdict


def main(path: str) -> None:
    rounds, dataset = defaultdict(dict), None
    for row in csv.DictReader(open(path)):
        dataset = dataset or row["dataset"]
        if row["dataset"] != dataset or row["method"] == "ar":
            continue
        key = "dflash" if row["method"] == "dflash" else int(row["budget"])
        rounds[int(row["concurrency"])][key] = float(row["round_ms"])
    budgets = sorted({k for per in rounds.values() for k in per if k != "dflash"})
    print("| concurrency | DFLASH round ms | " + " | ".join(f"b{b}" for b in budgets) + " |")
    print("|---" * (len(budgets) + 2) + "|")
    for conc, per in sorted(rounds.items()):
        gains = [f"{per[b] / per['dflash']:.2f}x" if b in per else "-" for b in budgets]
        print(f"| {conc} | {per['dflash']:.1f} | " + " | ".join(gains) + " |")


if __name__ == "__main__":
    main(sys.argv[1])

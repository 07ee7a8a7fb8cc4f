"""The campaign table of sweep folders: tokens/s and tau per point, the best DDTree budget against DFLASH and AR.

    python scripts/ratio_table.py RUN [RUN ...]

Reads each folder's summary_repeats.csv (medians over repeats, as `ddbench report` prints them) and prints
one markdown row per dataset, temperature and concurrency: AR's tokens/s, DFLASH's and each DDTree
budget's, tau in brackets, "(n=K)" where a setting has fewer finished repeats than the most in its
folder; then the best DDTree budget by tokens/s, its median's ratio to DFLASH's median (with the bound
min/max .. max/min over the repeats in brackets) and to AR's. Where the folders hold budget-auto cells
(SGLANG_DDTREE_BUDGET=auto), an `auto` column follows the budgets, and two more the rows: auto's median over
DFLASH's (bound as above) and over the best fixed budget's. Example row:

| gsm8k | 0 | 1 | 210.4 | 313.8 (2.12) | 359.8 (2.60) | **386.4** (3.02) | 310.3 (3.37) | b63 | 1.23 (1.21-1.25) | 1.84
"""

import csv
import sys
from collections import defaultdict
from pathlib import Path


def rows(folder: str) -> list[dict]:
    """The finished settings of a folder, each marked `short` when it has fewer repeats than the most there."""
    with open(Path(folder) / "summary_repeats.csv", newline="") as stream:
        found = [row for row in csv.DictReader(stream) if row["status"] == "done" and row["hold_chain"] != "True"]
    most = max(int(row["repeats"]) for row in found)
    for row in found:
        row["short"] = int(row["repeats"]) < most
    return found


def tps(row: dict, column: str = "tokens_per_s") -> float:
    return float(row[column])


def cell(row: dict | None, best: bool) -> str:
    """'386.4 (3.02)': tokens/s and tau (none for AR), bold when best, '(n=K)' when short of repeats."""
    if row is None:
        return "-"
    text = f"**{tps(row):.1f}**" if best else f"{tps(row):.1f}"
    text += "" if row["method"] == "ar" else f" ({float(row['acceptance_length']):.2f})"
    return text + (f" (n={row['repeats']})" if row["short"] else "")


def main(folders: list[str]) -> None:
    points: dict[tuple, dict] = defaultdict(dict)
    for folder in folders:
        for row in rows(folder):
            key = (row["dataset"], float(row["temperature"]), int(row["concurrency"]))
            budget = row["budget"]
            points[key][row["method"] if row["method"] != "ddtree" else budget if budget == "auto" else int(budget)] = (
                row
            )
    budgets = sorted({name for point in points.values() for name in point if isinstance(name, int)})
    auto = any("auto" in point for point in points.values())
    head = ["dataset", "T", "in flight", "AR", "DFLASH", *(f"b{b}" for b in budgets), *(["auto"] if auto else [])]
    head += ["best", "best / DFLASH (bound)", "best / AR", *(["auto / DFLASH (bound)", "auto / best"] if auto else [])]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for (dataset, temperature, concurrency), point in sorted(points.items()):
        best = max((b for b in budgets if b in point), key=lambda b: tps(point[b]))
        top, dflash, ar = point[best], point["dflash"], point["ar"]
        cells = [dataset, f"{temperature:g}", str(concurrency), cell(ar, False), cell(dflash, False)]
        cells += [cell(point.get(b), b == best) for b in budgets] + ([cell(point.get("auto"), False)] if auto else [])
        cells += [f"b{best}", ratio(top, dflash), f"{tps(top) / tps(ar):.2f}"]
        if auto:
            cells += (
                [ratio(point["auto"], dflash), f"{tps(point['auto']) / tps(top):.2f}"]
                if "auto" in point
                else ["-", "-"]
            )
        print("| " + " | ".join(cells) + " |")


def ratio(row: dict, base: dict) -> str:
    """'1.23 (1.21-1.25)': the medians' ratio, and the slowest / fastest .. fastest / slowest repeats'."""
    low = tps(row, "tokens_per_s_min") / tps(base, "tokens_per_s_max")
    high = tps(row, "tokens_per_s_max") / tps(base, "tokens_per_s_min")
    return f"{tps(row) / tps(base):.2f} ({low:.2f}-{high:.2f})"


if __name__ == "__main__":
    main(sys.argv[1:])

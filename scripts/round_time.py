"""Wall time per speculative round of each cell of a ddbench summary.csv.

    python scripts/round_time.py results/sglang/h200-2026-11-29/parity-p1/summary.csv

ms per round = wall_s x concurrency / rounds, rounds = completion_tokens / acceptance_length (pooled tau,
bonus included): the time one request waits per round, HTTP and scheduling included. AR rounds are tokens.
"""

import csv
import sys


def main(path: str) -> None:
    print("| dataset | method | budget | concurrency | tau | ms per round |")
    print("|---|---|---|---|---|---|")
    for row in csv.DictReader(open(path)):
        if row["status"] != "done" or not row["acceptance_length"]:
            continue
        tau, tokens = float(row["acceptance_length"]), int(row["completion_tokens"])
        ms = 1e3 * float(row["wall_s"]) * int(row["concurrency"]) / (tokens / tau)
        budget = (row["budget"] or "-") + ("+chain" if row.get("hold_chain") == "True" else "")
        print(f"| {row['dataset']} | {row['method']} | {budget} | {row['concurrency']} | {tau:.2f} | {ms:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1])

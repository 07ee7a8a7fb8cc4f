"""How many greedy outputs two servers share, from trace_rounds.py's PREFIX-outputs.jsonl files.

    python scripts/same_outputs.py rounds/ddtree-b15-outputs.jsonl rounds/ddtree-b15-fold-outputs.jsonl

Requests are matched on (concurrency, burst, prompt). At one request in flight two servers running the same
numerics (the folded and the eager draft side, say) must agree on every output; with many in flight, batch
composition changes bf16 rounding and near-ties may part.
"""

import json
import sys
from collections import defaultdict


def load(path: str) -> dict[tuple, str]:
    with open(path) as f:
        return {(r["concurrency"], r["burst"], r["prompt"]): r["text"] for r in map(json.loads, f)}


def main(a: str, b: str) -> None:
    left, right = load(a), load(b)
    same, total = defaultdict(int), defaultdict(int)
    for key in left.keys() & right.keys():
        total[key[0]] += 1
        same[key[0]] += left[key] == right[key]
    for concurrency in sorted(total):
        print(f"concurrency {concurrency}: {same[concurrency]} of {total[concurrency]} outputs identical")


if __name__ == "__main__":
    main(*sys.argv[1:3])

"""How many requests two ddbench cells answered alike: identical output ids, and equal SGLang
`spec_accept_length` (the request's mean acceptance length).

    python scripts/same_cells.py chain/cells/gsm8k__dflash__t0__c1.jsonl.gz \
        chain/cells/gsm8k__ddtree-b15-dauto-dt1-chain__t0__c1.jsonl.gz

Requests are matched on (prompt index, turn). A tree that holds the chain at budget = depth is DFLASH's
tree, so at one request in flight both must agree on every request.
"""

import gzip
import json
import sys


def load(path: str) -> dict[tuple, dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return {(r["prompt_index"], r["turn"]): r for r in map(json.loads, f)}


def main(a: str, b: str) -> None:
    left, right = load(a), load(b)
    keys = sorted(left.keys() & right.keys())
    same = sum(left[k]["output_ids"] == right[k]["output_ids"] for k in keys)
    tau = sum(left[k]["meta_info"].get("spec_accept_length") == right[k]["meta_info"].get("spec_accept_length")
              for k in keys)  # fmt: skip
    print(f"{len(keys)} requests: {same} identical outputs, {tau} equal spec_accept_length")


if __name__ == "__main__":
    main(*sys.argv[1:3])

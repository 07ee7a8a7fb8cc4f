"""The top-K of one request (16 rows of 152,064 bf16 logits, K = 256) under selection-kernel variants picked by
environment variables: for each, whether its lists equal the fused kernel's, the share of rows the tiles'
candidates settled, the whole call (CUDA-graph replays) and the selection program's phases. Writes union.csv.

    python3 union_check.py OUT.csv 'name:VAR=1,VAR2=2;name2:...'
"""

import csv
import os
import sys

import torch

from ddbench.kernel_bench import draft_logits, graph_seconds, settled_share
from ddbench.topk_tune import phases
from ddtree_core.kernels import topk, topk_radix

K, VOCAB = 256, 152064
out, spec = sys.argv[1], sys.argv[2]
variants = []
for part in spec.split(";"):
    name, _, pairs = part.partition(":")
    variants.append((name, dict(p.split("=") for p in pairs.split(",") if p)))
known = {key for _, env in variants for key in env}
logits = draft_logits(1, 16, VOCAB, 4.0, 0, "cuda")
expected = topk.draft_topk(logits, K, 1.0)
rows = []
for name, env in variants:
    for key in known:
        os.environ.pop(key, None)
    os.environ.update(env)
    got = topk_radix.draft_topk(logits, K, 1.0)
    equal = torch.equal(got.token_ids, expected.token_ids) and torch.allclose(
        got.log_probs, expected.log_probs, rtol=0, atol=1e-5
    )
    row = {"variant": name, "equal": equal, "settled": settled_share(logits, K)}
    row["call_us"] = round(graph_seconds(lambda: topk_radix.draft_topk(logits, K, 1.0), 0.2) * 1e6, 2)
    row |= {phase: round(us, 2) for phase, us in phases(logits, K).items()}
    print(row, flush=True)
    rows.append(row)
with open(out, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)

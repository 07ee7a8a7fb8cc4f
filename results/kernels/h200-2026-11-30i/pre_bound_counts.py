"""How many survivors PRE_BOUND's cut leaves, level by level, on a CPU under the Triton interpreter (no timing).

    TRITON_INTERPRET=1 python results/kernels/h200-2026-11-30i/pre_bound_counts.py

For kernel_bench's drafts (one request, 16 positions, vocab 152,064, a CPU draw of randn x 12 and x 4) at budget
256, builds with PRE_BOUND (and with SORT_SURVIVORS off too) while wrapping the build's `_compact_below`: each
level that takes the cut prints its survivors (n_valid) and how many lie below `_survivor_bound` (kept; one sort
when at most the block of ranks, cap); the final cut prints the pool and its part below the last bound.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402, F401 - the interpreter's rewritten wrappers look tl up here

from ddbench.kernel_bench import draft_logits  # noqa: E402
from ddtree_core.kernels import tree_build  # noqa: E402
from ddtree_core.tree import draft_topk  # noqa: E402

compact_below = tree_build._compact_below


def value(x) -> int:
    return int(np.asarray(x.handle.data).reshape(-1)[0]) if hasattr(x, "handle") else int(x)


@triton.jit
def counted_compact_below(src_key, src_pk, n, bound, dst_key, dst_pk, cap, FROM_POOL, CHUNK):
    kept = compact_below(src_key, src_pk, n, bound, dst_key, dst_pk, cap, FROM_POOL, CHUNK)
    where = "final cut: pool" if FROM_POOL else "level cut: n_valid"
    print(f"    {where} {value(n)}, kept {value(kept)}, cap {value(cap)}")
    return kept


tree_build._compact_below = counted_compact_below
for scale in (12.0, 4.0):
    topk = draft_topk(draft_logits(1, 16, 152064, scale, 0, "cpu"), 256, impl="torch")
    for launch in ({"PRE_BOUND": True}, {"PRE_BOUND": True, "SORT_SURVIVORS": False}):
        print(f"logit scale {scale}, {launch}")
        tree = tree_build.build_tree_from_topk(topk, 256, 16, 256, launch=launch)
        print(f"    depth {int(tree.depths.max())}")

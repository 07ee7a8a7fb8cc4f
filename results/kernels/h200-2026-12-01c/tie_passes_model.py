"""A Python model of TAILS' tie passes (`tree_build._pop_order`) over the reference tree's nodes, on the CPU: how
many passes the order takes with and without anchors, for a draw like the kernel benchmark's chain-like drafts.

    python3 results/kernels/h200-2026-12-01c/tie_passes_model.py

The nodes are the reference tree's N best (N = 256, 409), listed in a shuffled order; groups share (score, depth); a
pass sorts each group by (place of the parent, or of the anchor, in the last order; rank), and the count includes
the pass that finds the order standing still. Each run checks that the order it ends at is the pop order.
"""

import random

from ddbench.kernel_bench import draft_logits
from ddtree_core.tree import build_tree_from_topk, draft_topk


def passes(nodes: int, anchors: bool) -> tuple[int, int]:
    lists = draft_topk(draft_logits(1, 16, 152064, 12.0, 0, "cpu").float(), 256, impl="reference")
    tree = build_tree_from_topk(lists, nodes, max_depth=16, max_budget=nodes, impl="reference")
    n = int(tree.num_nodes[0])
    score, depth = tree.scores[0, : n + 1].tolist(), tree.depths[0, : n + 1].tolist()
    parent, rank = tree.parents[0, : n + 1].tolist(), tree.ranks[0, : n + 1].tolist()
    shuffled = list(range(1, n + 1))
    random.Random(1).shuffle(shuffled)
    entry = {v: i for i, v in enumerate(shuffled)}
    order = sorted(range(1, n + 1), key=lambda v: (-score[v], depth[v], entry[v]))
    group, members = {}, {}
    for v in order:
        group[v] = len(members) - 1 + ((score[v], depth[v]) not in members)
        members.setdefault((score[v], depth[v]), []).append(v)
    follows = {}
    for vs in members.values():
        ok = len({group.get(parent[v], -1) for v in vs}) == 1 and all(rank[v] == 0 and parent[v] != 0 for v in vs)
        follows.update({v: ok and anchors for v in vs})

    def anchor(v: int) -> int:
        while follows.get(v, False):
            v = parent[v]
        return v

    up = {v: (anchor(parent[v]), 0) if follows[v] else (parent[v], rank[v]) for v in order}
    place = {0: 0} | {v: i + 1 for i, v in enumerate(order)}
    count = 0
    while True:
        new = sorted(order, key=lambda v: (group[v], place[up[v][0]], up[v][1]))
        count += 1
        moved = sum(a != b for a, b in zip(new, order))
        order = new
        place.update({v: i + 1 for i, v in enumerate(order)})
        if moved == 0:
            break
    assert order == list(range(1, n + 1)), "the passes ended away from the pop order"
    return count, sum(len(vs) for vs in members.values() if len(vs) > 1)


def main() -> None:
    for nodes in (256, 409):
        for anchors in (False, True):
            count, tied = passes(nodes, anchors)
            print(f"{nodes} best nodes ({tied} in tie groups), anchors {anchors}: {count} passes")


if __name__ == "__main__":
    main()

"""Counts behind the TAILS notes, on the CPU (TRITON_INTERPRET=1), for drafts drawn like the kernel benchmark's
(`draft_logits` on the CPU: the same law, not the GPU's tensors):

1. per request, the most heads (steps of rank >= 1) on any path of the reference tree;
2. for one batch-1, budget-256 request at x 12, what the build by deviations does: each level's parents, the steps
   of its 64 x 16 tile, and the tie passes of the pop order (a copy of tree_build with prints added, built in a
   temporary folder; the repository's file is not touched). It reads the kernel of this folder's commit and the one
   of h200-2026-12-01c (whose heads' tiles step over listed parents).

    TRITON_INTERPRET=1 python3 results/kernels/h200-2026-12-01b/cpu_counts.py
"""

import importlib.util
import pathlib
import sys
import tempfile

import torch

from ddbench.kernel_bench import draft_logits
from ddtree_core.kernels import tree_build
from ddtree_core.tree import build_tree, draft_topk

LENGTH, VOCAB = 16, 152064


def most_heads(scale: float, batch: int, budget: int) -> list[int]:
    tree = build_tree(draft_logits(batch, LENGTH, VOCAB, scale, 0, "cpu").float(), budget, impl="reference")
    counts = []
    for row in range(batch):
        heads = [0] * (int(tree.num_nodes[row]) + 1)
        for node in range(1, len(heads)):
            heads[node] = heads[int(tree.parents[row, node])] + (int(tree.ranks[row, node]) > 0)
        counts.append(max(heads))
    return counts


def printing_copy():
    """tree_build with a print after each tile step, each level and each tie pass."""
    source = pathlib.Path(tree_build.__file__).read_text()
    step = "                r0 += RB\n            q0 += PB\n"  # the heads' tile loop since h200-2026-12-01c
    if step not in source:  # the kernel this folder measured (820bf9c and before)
        step = "            r0 += RB\n        p0 += PB\n"
    first, _, rest = step.partition("\n")
    inserts = [
        (step, first + "\n" + first.replace("r0 += RB", "tl.device_print('step', n)") + "\n" + rest),
        ("            passes += 1\n", "            passes += 1\n            tl.device_print('tie pass', moved)\n"),
        ("        first = heads\n        end = n\n", "        tl.device_print('level parents', end - first)\n"
         "        first = heads\n        end = n\n"),
    ]  # fmt: skip
    for old, new in inserts:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    path = pathlib.Path(tempfile.mkdtemp()) / "tree_build_printing.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("tree_build_printing", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    for scale, batch, budget in ((12.0, 1, 256), (4.0, 1, 256), (12.0, 4, 64), (4.0, 4, 64)):
        print(f"x{scale:g} batch {batch} budget {budget}: most heads on a path {most_heads(scale, batch, budget)}")
    lists = draft_topk(draft_logits(1, LENGTH, VOCAB, 12.0, 0, "cpu").float(), 256, impl="reference")
    paths = torch.zeros(1, dtype=torch.int32)
    print("x12 batch 1 budget 256, the build by deviations:", flush=True)
    printing_copy().build_tree_from_topk(lists, 256, LENGTH, 256, launch={"TAILS": True}, paths=paths)
    print(f"built by deviations: {paths.tolist()}")


if __name__ == "__main__":
    main()

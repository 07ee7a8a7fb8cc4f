"""Where a TAILS build's time goes, stamp by stamp, on the H200 (a copy of tree_build with more stamps; the
repository's file is not touched):

    python3 results/kernels/h200-2026-12-01c/fine_stamps.py BATCHxBUDGET SCALE [launch]

For kernel_bench's drafts (16 positions, vocab 152,064, seed 0) it builds three times with TAILS on, every program
stamping (slots 10 + 4 * level + 0/1/2) after each level's heads, chains and bound, and (slots 40, 41, 42 + pass)
after the pop order's first sort, its anchors, and each tie pass, then prints each stamp's mean us per request
since the stamp before it (cycles converted at the rate the global timer measured), in time order.
"""

import importlib.util
import pathlib
import sys
import tempfile

import torch

from ddbench.build_tune import FLAGS
from ddbench.kernel_bench import draft_logits, parse_launches
from ddtree_core.kernels import topk, tree_build

LENGTH = 16
NAMES = {0: "heads", 1: "chains", 2: "bound"}


def stamped_copy():
    source = pathlib.Path(tree_build.__file__).read_text()
    inserts = [
        ("    first = zero\n    end = max_depth  # level 0's parents",
         "    lev = zero\n    first = zero\n    end = max_depth  # level 0's parents"),
        ("                        pool_depth, pool_size, cand_pk, TB, RB, FS)  # fmt: skip\n        tl.debug_barrier()\n",
         "                        pool_depth, pool_size, cand_pk, TB, RB, FS)  # fmt: skip\n        tl.debug_barrier()\n"
         "        _stamp(clock_row, 10 + 4 * lev, PROFILE)\n"),
        ("                             pool_depth, pool_size, TB, FD)  # fmt: skip\n        tl.debug_barrier()\n",
         "                             pool_depth, pool_size, TB, FD)  # fmt: skip\n        tl.debug_barrier()\n"
         "        _stamp(clock_row, 11 + 4 * lev, PROFILE)\n"),
        ("        first = heads\n        end = n\n",
         "        _stamp(clock_row, 12 + 4 * lev, PROFILE)\n        lev += 1\n        first = heads\n        end = n\n"),
        ("node_of, inv, FS: tl.constexpr,\n):", "node_of, inv, FS: tl.constexpr, clock_row,\n    PROFILE: tl.constexpr,\n):"),
        ("node_of, inv,\n                                 FS)  # fmt: skip",
         "node_of, inv,\n                                 FS, clock_row, PROFILE)  # fmt: skip"),
        ("    later = (offs >= 1) & m\n    start =", "    _stamp(clock_row, 40, PROFILE)\n    later = (offs >= 1) & m\n    start ="),
        ("        moved = count\n", "        _stamp(clock_row, 41, PROFILE)\n        moved = count\n"),
        ("            passes += 1\n", "            _stamp(clock_row, 42 + passes, PROFILE)\n            passes += 1\n"),
    ]  # fmt: skip
    for old, new in inserts:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    path = pathlib.Path(tempfile.mkdtemp()) / "tree_build_stamped.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("tree_build_stamped", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def label(slot: int) -> str:
    if 10 <= slot < 40:
        return f"level{(slot - 10) // 4}.{NAMES.get((slot - 10) % 4, '?')}"
    return {2: "chain+start", 3: "levels", 4: "compact", 5: "pop order", 40: "pop.first_sort",
            41: "pop.anchors"}.get(slot, f"pop.pass{slot - 42}" if 42 <= slot < 66 else f"slot{slot}")


def main(cell: str, scale: str, text: str = "TAILS=1") -> None:
    batch, budget = (int(x) for x in cell.split("x"))
    module = stamped_copy()
    (launch,) = parse_launches(text, tree_build.LAUNCH_KEYS, FLAGS)
    lists = topk.draft_topk(draft_logits(batch, LENGTH, 152064, float(scale), 0, "cuda"), budget, 1.0)
    slots = tree_build.clock_slots(LENGTH)
    expected = tree_build.build_tree_from_topk(lists, budget, LENGTH, budget)
    for _ in range(3):
        clock = torch.zeros(batch, slots, dtype=torch.int64, device="cuda")
        tree = module.build_tree_from_topk(lists, budget, LENGTH, budget, launch=launch, clock=clock)
    torch.cuda.synchronize()
    equal = all(torch.equal(getattr(tree, f), getattr(expected, f)) for f in ("token_ids", "parents", "scores"))
    stamps = clock.double().cpu()
    ns_per_cycle = (stamps[:, -1] - stamps[:, 0]) / (stamps[:, -2] - stamps[:, 1])
    row = stamps[0]
    written = [s for s in range(2, slots - 2) if row[s] >= row[1]]
    written.sort(key=lambda s: row[s])
    print(f"{cell} x{scale} {text}: total {float((stamps[:, -1] - stamps[:, 0]).mean()) / 1e3:.1f} us, "
          f"equal {equal}")  # fmt: skip
    before = 1
    for s in written:
        us = float(((stamps[:, s] - stamps[:, before]) * ns_per_cycle).mean()) / 1e3
        print(f"  {label(s):16s} {us:6.2f}")
        before = s


if __name__ == "__main__":
    main(*sys.argv[1:])

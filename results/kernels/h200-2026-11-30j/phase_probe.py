"""The build's phases for a few launches, printed as each one finishes (one compile per launch: stamped builds only).

    python3 results/kernels/h200-2026-11-30j/phase_probe.py OUT.csv BATCHxBUDGET SCALE 'launch;launch;...'

A launch is key=value pairs of tree_build.LAUNCH_KEYS ('' the default). For kernel_bench's drafts (16 positions,
vocab 152,064, seed 0), each launch builds three times with every program stamping its phases (`clock`), checks the
trees against the default launch's, and prints the mean us per request of the last build: the sums of each phase
over the levels, the final selection, and the total (the global timer). OUT.csv gets every phase.
"""

import csv
import sys

import torch

from ddbench.build_tune import FLAGS
from ddbench.kernel_bench import draft_logits, parse_launches
from ddtree_core.kernels import topk, tree_build

LENGTH = 16


def main(out: str, cell: str, scale: str, text: str) -> None:
    batch, budget = (int(x) for x in cell.split("x"))
    lists = topk.draft_topk(draft_logits(batch, LENGTH, 152064, float(scale), 0, "cuda"), budget, 1.0)
    launches = [{}] + parse_launches(text, tree_build.LAUNCH_KEYS, FLAGS)
    clock = torch.zeros(batch, tree_build.clock_slots(LENGTH), dtype=torch.int64, device="cuda")
    rows, expected = [], None
    for launch in launches:
        for _ in range(3):
            tree = tree_build.build_tree_from_topk(lists, budget, LENGTH, budget, launch=launch, clock=clock)
        torch.cuda.synchronize()
        fields = ("token_ids", "parents", "depths", "num_nodes", "scores")
        expected = expected or tree
        equal = all(torch.equal(getattr(tree, f), getattr(expected, f)) for f in fields)
        times = tree_build.phase_times(clock, LENGTH)
        label = ",".join(f"{k}={v}" for k, v in launch.items()) or "default"
        sums = {p: sum(us for name, us in times.items() if name.endswith("." + p) and name.startswith("level"))
                for p in tree_build.PHASES}  # fmt: skip
        final = sum(us for name, us in times.items() if name.startswith("final"))
        levels = sum(name.endswith(".expand") for name in times)
        print(f"{cell} x{scale} {label}: total {times['total']:.1f} us, levels {levels} "
              + " ".join(f"{p} {us:.1f}" for p, us in sums.items()) + f" final {final:.1f}, equal {equal}",
              flush=True)  # fmt: skip
        rows += [{"cell": cell, "scale": scale, "launch": label, "phase": n, "us": round(us, 2)}
                 for n, us in times.items()]  # fmt: skip
    with open(out, "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main(*sys.argv[1:])

"""Does the build run slower after the top-K's stream of logits? Graph replays, per cell and launch.

    python3 results/kernels/h200-2026-12-01d/l2_probe.py BATCHxBUDGET SCALE 'launch;launch;...'

For kernel_bench's drafts (16 positions, vocab 152,064, seed 0) and each launch ('' the default; key=value pairs of
tree_build.LAUNCH_KEYS), prints the mean us of CUDA-graph replays of: the build alone, the top-K alone, the top-K then
the build, a 256 MB memset (more than the L2) alone and then the build; and the build's share of the last two pairs
(the pair less its first part). A build that costs more after the top-K or the memset than alone is paying for what
the stream pushed out of the L2 (its code, its scratch, its inputs) or for the clocks that stream left.
"""

import sys

import torch

from ddbench.build_tune import FLAGS
from ddbench.kernel_bench import draft_logits, graph_seconds, parse_launches
from ddtree_core.kernels import tree_build
from ddtree_core.tree import draft_topk

LENGTH = 16


def main(cell: str, scale: str, text: str) -> None:
    batch, budget = (int(x) for x in cell.split("x"))
    logits = draft_logits(batch, LENGTH, 152064, float(scale), 0, "cuda")
    lists = draft_topk(logits, budget, impl="triton")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for launch in [{}] + parse_launches(text, tree_build.LAUNCH_KEYS, FLAGS):
        def build():
            return tree_build.build_tree_from_topk(lists, budget, LENGTH, budget, launch=launch)

        def topk_build():
            return tree_build.build_tree_from_topk(draft_topk(logits, budget, impl="triton"), budget, LENGTH, budget,
                                                   launch=launch)

        def flush_build():
            flush.zero_()
            return build()

        us = {name: graph_seconds(fn, 0.3) * 1e6 for name, fn in (
            ("build", build), ("topk", lambda: draft_topk(logits, budget, impl="triton")), ("topk+build", topk_build),
            ("memset", flush.zero_), ("memset+build", flush_build))}
        label = ",".join(f"{k}={v}" for k, v in launch.items()) or "default"
        print(f"{cell} x{scale} {label}: " + ", ".join(f"{k} {v:.1f}" for k, v in us.items())
              + f"; build after top-K {us['topk+build'] - us['topk']:.1f}, after memset "
              f"{us['memset+build'] - us['memset']:.1f}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])

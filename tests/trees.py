"""Shared test material: the worked-example tree, seeded random trees, the case grid, a CUDA-graph replayer."""

import dataclasses

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ddtree_core import DraftTopK, build_tree, build_tree_from_topk

IMPLS = ["reference", "torch"]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
TENSOR_FIELDS = ("token_ids", "parents", "depths", "num_nodes", "scores", "ranks")
CASES = [
    pytest.param(budget, depth, id=f"n{budget}-d{depth}")
    for budget, depth in [(1, 1), (1, 16), (2, 3), (5, 2), (8, 8), (16, 4), (33, 16), (64, 6), (256, 1), (256, 16)]
] + [pytest.param([0, 7, 256, 40], 16, id="mixed-d16"), pytest.param([3, 1, 12], 5, id="mixed-d5")]


def worked_example_topk() -> DraftTopK:
    # root ─┬─ 10 ─┬─ 12        nodes: 1=10, 2=12, 3=13, 4=11; scores -0.1, -0.3, -2.0, -2.5
    #       │      └─ 13
    #       └─ 11
    return DraftTopK(torch.tensor([[[-0.1, -2.5], [-0.2, -1.9]]]), torch.tensor([[[10, 11], [12, 13]]]))


def worked_example_tree():
    return build_tree_from_topk(worked_example_topk(), 4, impl="reference")


def random_tree(budget, depth, seed=0, vocab=300):
    """Reference trees of 3 requests (or one per budget in a list); sharper rows give deeper trees."""
    batch = len(budget) if isinstance(budget, list) else 3
    generator = torch.Generator().manual_seed(seed)
    scale = torch.linspace(1.0, 8.0, batch).view(-1, 1, 1)
    logits = torch.randn(batch, depth, vocab, generator=generator) * scale
    budget = torch.tensor(budget) if isinstance(budget, list) else budget
    return build_tree(logits, budget, impl="reference")


def assert_same(out, ref):
    """Every field of two frozen dataclasses equal: tensors by dtype, shape and value (floats by bit
    pattern: -0.0 differs from 0.0 and NaN matches only itself), other fields by ==."""
    for field in dataclasses.fields(ref):
        x, y = getattr(out, field.name), getattr(ref, field.name)
        if isinstance(y, torch.Tensor):
            assert x.dtype == y.dtype and x.shape == y.shape, (field.name, x.dtype, x.shape, y.dtype, y.shape)
            same = torch.eq(x.view(torch.int32), y.view(torch.int32)) if x.is_floating_point() else torch.eq(x, y)
            where = (~same).nonzero()[:5].tolist()
            assert bool(same.all()), f"{field.name} differs at {where}: {x[~same][:5]} vs {y[~same][:5]}"
        else:
            assert x == y, field.name


def tree_to(tree, device):
    return dataclasses.replace(tree, **{name: getattr(tree, name).to(device) for name in TENSOR_FIELDS})


def capture_cuda_graph(fn):
    """Run `fn` eagerly with host syncs forbidden, then capture it in a CUDA graph: (graph, its outputs)."""
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.cuda.stream(stream):
            fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def replay_in_cuda_graph(fn):
    """capture_cuda_graph, one replay, and the outputs it wrote."""
    graph, out = capture_cuda_graph(fn)
    graph.replay()
    torch.cuda.synchronize()
    return out


def guided_targets(tree, generator, vocab=None, stray=0.2):
    """The target's token at each node: a child's token, or (with probability `stray`, or at a leaf) a
    token no node has (10_000), or with `vocab` a random vocabulary token, so walks go deep and stop early."""
    if vocab is None:
        target = torch.full(tree.parents.shape, 10_000, dtype=torch.int64)
    else:
        target = torch.randint(0, vocab, tree.parents.shape, generator=generator)
    parents, tokens = tree.parents.tolist(), tree.token_ids.tolist()
    for b, row in enumerate(parents):
        children = {}
        for node in range(1, len(row)):
            if row[node] >= 0:
                children.setdefault(row[node], []).append(tokens[b][node - 1])
        for node, options in children.items():
            draw = float(torch.rand((), generator=generator))
            if draw >= stray:  # mostly the rank-0 child, whose subtree is the deepest, else any child
                pick = 0 if draw < 0.8 else int(torch.randint(0, len(options), (), generator=generator))
                target[b, node] = options[pick]
    return target


class RecordOps(TorchDispatchMode):
    """Records the name of every torch op dispatched inside it (`names`), running each as usual."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))

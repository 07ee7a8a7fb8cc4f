"""The batched torch path on a CUDA device: equal to the reference, capturable, free of host syncs."""

import pytest
import torch
from trees import assert_same

from ddtree_core import build_tree, build_tree_from_topk, draft_topk
from ddtree_core.verify import follow_tree

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("impl", ["torch", "triton"])
@pytest.mark.parametrize(
    "batch, vocab, budgets", [(1, 152064, [256]), (8, 32000, [64, 1, 16, 64, 0, 3, 64, 33]), (2, 4096, [1024, 700])]
)
def test_cuda_equals_reference(impl, batch, vocab, budgets):
    if impl == "triton":
        pytest.importorskip("triton")
    generator = torch.Generator(device="cuda").manual_seed(batch)
    logits = (torch.randn(batch, 16, vocab, device="cuda", generator=generator) * 4).bfloat16()
    budget = torch.tensor(budgets, device="cuda")
    # Token ids are exact for every impl; the Triton top-k's logsumexp may differ from torch's in the
    # last bit, so each tree is checked against the reference built from the same top-K lists.
    k = min(max(budgets), vocab)
    topk = draft_topk(logits, k, impl=impl)
    assert torch.equal(topk.token_ids, draft_topk(logits, k, impl="reference").token_ids)
    reference = build_tree_from_topk(topk, budget, impl="reference")
    tree = build_tree(logits, budget, impl=impl)
    assert_same(tree, reference)
    held = torch.arange(batch, device="cuda") % 2 == 0
    assert_same(
        build_tree(logits, budget, hold_chain=held, impl=impl),
        build_tree_from_topk(topk, budget, hold_chain=held, impl="reference"),
    )
    target = torch.randint(0, vocab, reference.parents.shape, device="cuda", generator=generator)
    target[:, 0] = reference.token_ids[:, 0]  # follow at least the first child
    assert_same(follow_tree(tree, target, impl=impl), follow_tree(reference, target, impl="reference"))


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_round_captures_in_a_cuda_graph_without_syncs(impl):
    if impl == "triton":
        pytest.importorskip("triton")
    batch, length, vocab, budget = 4, 16, 32000, 64
    logits = torch.randn(batch, length, vocab, device="cuda").bfloat16()
    target = torch.randint(0, vocab, (batch, budget + 1), device="cuda")

    def round_():
        topk = draft_topk(logits, budget, impl=impl)
        tree = build_tree_from_topk(topk, budget, impl=impl)
        return tree, follow_tree(tree, target, impl=impl)

    torch.cuda.synchronize()
    round_()  # warm-up: caches, Triton compilation
    torch.cuda.set_sync_debug_mode("error")
    try:
        round_()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        round_()
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        captured_tree, captured_walk = round_()
    logits.copy_(torch.randn_like(logits.float()).bfloat16())
    target.copy_(torch.randint_like(target, vocab))
    graph.replay()
    eager_tree, eager_walk = round_()
    assert_same(captured_tree, eager_tree)
    assert_same(captured_walk, eager_walk)

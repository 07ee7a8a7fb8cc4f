"""The draft head folded into SGLang's draft CUDA graph equals the eager worker's round tensors."""

import pytest
import torch
from trees import capture_cuda_graph

from ddtree_core.settings import TreeSettings
from ddtree_core.sglang import rounds
from ddtree_core.sglang.config import DDTreeConfigError, ServerSettings
from ddtree_core.sglang.draft_head import DraftHead, enabled

HIDDEN, VOCAB = 16, 40


def make_head(budget=8, max_bs=4, depth=5):
    settings = ServerSettings(block_size=6, tree=TreeSettings(budget, depth, 1.0))
    weight = torch.randn(VOCAB, HIDDEN, generator=torch.Generator().manual_seed(1))
    logits_fn = lambda hidden: hidden @ weight.T  # noqa: E731 - the target head
    head = DraftHead(settings, logits_fn, hidden_size=HIDDEN, max_bs=max_bs, device="cpu", dtype=torch.float32)
    return head, settings, logits_fn


def eager_round(settings, logits_fn, hidden, request_settings):
    """What the worker computes without the head, for the same inputs."""
    bs, depth = len(request_settings), settings.tree_depth
    block = hidden.view(bs, settings.block_size, -1)[:, 1 : 1 + depth]
    logits = logits_fn(block.reshape(bs * depth, -1)).view(bs, depth, -1)
    limits = rounds.request_limits(request_settings, settings, hidden.device)
    return rounds.draft_tree(logits, settings, limits)


def assert_round_equal(got, expected):
    (topk, tree), (topk_e, tree_e) = got, expected
    assert torch.equal(topk.token_ids, topk_e.token_ids) and torch.equal(topk.log_probs, topk_e.log_probs)
    for name in ("token_ids", "parents", "depths", "num_nodes", "scores", "ranks"):
        assert torch.equal(getattr(tree, name), getattr(tree_e, name)), name
    assert tree.max_depth == tree_e.max_depth


@pytest.mark.parametrize("bs", [1, 3, 4])
def test_head_equals_the_eager_round(bs):
    head, settings, logits_fn = make_head()
    generator = torch.Generator().manual_seed(bs)
    hidden = torch.randn(bs * settings.block_size, HIDDEN, generator=generator)
    mixed = [(8, 5, 1.0, True), (3, 2, 0.5, False), (0, 5, 1.0, True), (8, 1, 2.0, True)][:bs]
    requests = [TreeSettings(b, d, t, hold_chain=h) for b, d, t, h in mixed]
    head.load(requests)
    head(hidden)
    assert_round_equal(head.outputs(bs), eager_round(settings, logits_fn, hidden, requests))


def test_limits_follow_the_requests_from_round_to_round():
    """A row's limits change with its request; a smaller batch reads only its own rows."""
    head, settings, logits_fn = make_head()
    generator = torch.Generator().manual_seed(7)
    rounds_inputs = [
        [TreeSettings(2, 5, 1.0)] * 4,
        [settings.request_defaults(), TreeSettings(5, 3, 0.7)],
        [TreeSettings(8, 5, 1.0, hold_chain=True), settings.request_defaults()],
        [settings.request_defaults()] * 3,
    ]
    for requests in rounds_inputs:
        bs = len(requests)
        hidden = torch.randn(bs * settings.block_size, HIDDEN, generator=generator)
        head.load(requests)
        head(hidden)
        assert_round_equal(head.outputs(bs), eager_round(settings, logits_fn, hidden, requests))
        assert head.outputs(bs)[1].num_nodes.tolist() == [min(r.budget, 8) for r in requests]


def test_batch_above_the_maximum_is_refused():
    head, settings, _ = make_head(max_bs=2)
    with pytest.raises(ValueError, match="exceeds the captured maximum 2"):
        head.load([settings.request_defaults()] * 3)


def test_knob_values():
    assert enabled({}) is None and enabled({"SGLANG_DDTREE_DRAFT_GRAPH": " "}) is None  # TP = 1 folds, TP > 1 not
    assert enabled({"SGLANG_DDTREE_DRAFT_GRAPH": "1"}) is True and enabled({"SGLANG_DDTREE_DRAFT_GRAPH": "on"})
    assert enabled({"SGLANG_DDTREE_DRAFT_GRAPH": "0"}) is False
    assert enabled({"SGLANG_DDTREE_DRAFT_GRAPH": "off"}) is False
    with pytest.raises(DDTreeConfigError, match="SGLANG_DDTREE_DRAFT_GRAPH must be 0 or 1"):
        enabled({"SGLANG_DDTREE_DRAFT_GRAPH": "2"})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_head_replays_in_a_cuda_graph_with_new_inputs():
    """Captured once at batch 4 (as SGLang's draft graph runner does), replayed for another round's inputs."""
    settings = ServerSettings(block_size=16, tree=TreeSettings(64, 15, 1.0))
    weight = torch.randn(4096, 64, device="cuda", generator=torch.Generator("cuda").manual_seed(0)).bfloat16()
    logits_fn = lambda hidden: hidden @ weight.T  # noqa: E731
    head = DraftHead(settings, logits_fn, hidden_size=64, max_bs=8, device="cuda", dtype=torch.bfloat16)
    hidden = torch.zeros(4 * 16, 64, device="cuda", dtype=torch.bfloat16)
    defaults = settings.request_defaults()
    head.load([defaults] * 4)
    graph, _ = capture_cuda_graph(lambda: head(hidden))  # after a sync-free eager run
    requests = [defaults, TreeSettings(15, 15, 1.0), TreeSettings(64, 3, 0.5), TreeSettings(0, 15, 1.0)]
    hidden.copy_(torch.randn(4 * 16, 64, device="cuda").bfloat16())
    head.load(requests)
    graph.replay()
    torch.cuda.synchronize()
    assert_round_equal(head.outputs(4), eager_round(settings, logits_fn, hidden, requests))

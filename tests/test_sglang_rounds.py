"""The SGLang plugin's round tensors and statistics path, on the CPU without SGLang.

Oracles: the worked-example tree drawn by hand, per-request trees built one at a time by the host
reference, the library's KV compaction plan and metrics functions.
"""

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from trees import guided_targets, random_tree, worked_example_topk

from ddtree_core import build_tree, build_tree_from_topk
from ddtree_core.encoding import to_retrive
from ddtree_core.kv import apply_plan, compaction_plan
from ddtree_core.mask import flat_verify_mask
from ddtree_core.metrics import SUMMARY_KEYS, round_stats, summarize, target_token_ranks
from ddtree_core.settings import TreeSettings
from ddtree_core.sglang import plugin
from ddtree_core.sglang.config import ServerSettings
from ddtree_core.sglang.rounds import (
    committed_path,
    draft_block_inputs,
    draft_tree,
    request_limits,
    round_stats_from_row,
    round_stats_rows,
    round_tail,
    summary_from_rows,
    verify_batch,
)
from ddtree_core.verify import emitted_tokens, follow_tree

# The worked example (trees.py) verified 6 wide: root, 10, 12, 13, 11, then one padding column.
#   root ─┬─ 10 ─┬─ 12
#         │      └─ 13
#         └─ 11
WIDTH = 6


def worked_tree(batch=1):
    topk = worked_example_topk()
    topk = dataclasses.replace(
        topk, log_probs=topk.log_probs.expand(batch, -1, -1), token_ids=topk.token_ids.expand(batch, -1, -1)
    )
    return build_tree_from_topk(topk, 4, max_budget=WIDTH - 1, impl="reference")


def test_verify_batch_worked_example():
    tree = worked_tree()
    verify = verify_batch(tree, torch.tensor([7]), torch.tensor([3]), 3, impl="reference")
    assert verify.tokens.tolist() == [[7, 10, 12, 13, 11, 7]]  # root and padding carry the bonus
    assert verify.positions.tolist() == [[3, 4, 5, 5, 4, 3]]
    rows = verify.custom_mask.view(WIDTH, 3 + WIDTH).int().tolist()
    assert rows == [
        [1, 1, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 1, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 1, 0],
        [1, 1, 1, 0, 0, 0, 0, 0, 1],  # padding: the prefix and itself only
    ]


@pytest.mark.parametrize("impl", ["reference", "torch"])
def test_verify_mask_matches_the_library_layout(impl):
    tree = worked_tree(batch=2)
    prefix = torch.tensor([3, 5])
    verify = verify_batch(tree, torch.tensor([7, 8]), prefix, 8, impl=impl)
    assert torch.equal(verify.custom_mask, flat_verify_mask(tree, prefix, 8, impl="reference"))
    assert verify.custom_mask.shape == (WIDTH * 8 + 2 * WIDTH * WIDTH,)


def test_committed_path_hand_drawn():
    tree = worked_tree(batch=2)
    target = torch.tensor([[10, 13, 7, 7, 7, 7], [99, 0, 0, 0, 0, 0]])  # root→10→13, bonus 7 | no match
    walk = follow_tree(tree, target, impl="reference")
    slots = 200 + torch.arange(2 * WIDTH).view(2, WIDTH)  # request b's column c writes KV slot 200 + 6b + c
    path = committed_path(tree, walk, torch.tensor([3, 10]), cache_loc=slots)
    assert path.accept_index.tolist() == [[0, 1, 3], [6, -1, -1]]
    assert path.hidden_rows.tolist() == [[0, 1, 3], [6, 6, 6]]
    assert path.positions.tolist() == [[3, 4, 5], [10, 11, 12]]
    assert path.out_tokens.tolist() == [[10, 13, 7], [99, 0, 0]]
    # verify slot k <- the slot of path node k: node 3's KV moves to slot 2; padding pairs are 0 -> 0
    assert path.kv_dst.tolist() == [[200, 201, 202], [206, 0, 0]]
    assert path.kv_src.tolist() == [[200, 201, 203], [206, 0, 0]]
    assert path.kv_dst.dtype == path.kv_src.dtype == torch.int64
    assert path.commit_lens.tolist() == [3, 1] and path.commit_lens.dtype == torch.int32
    assert path.new_seq_lens.tolist() == [6, 11]


def test_committed_path_moves_what_the_compaction_plan_moves():
    tree = worked_tree(batch=2)
    walk = follow_tree(tree, torch.tensor([[11, 0, 0, 0, 5, 0], [10, 12, 42, 0, 0, 0]]), impl="reference")
    slots = torch.arange(100, 100 + 2 * WIDTH).view(2, WIDTH)
    path = committed_path(tree, walk, torch.tensor([0, 0]), cache_loc=slots)
    plan = compaction_plan(walk.accepted, walk.accept_lens, slots, impl="reference")
    on_path = path.accept_index >= 0
    # SGLang's move reads out_cache_loc[accept_index] and writes the first accept_len verify slots.
    assert torch.equal(slots.reshape(-1)[path.accept_index.clamp(min=0)][on_path], plan.src[on_path])
    assert torch.equal(plan.dst[on_path], slots[:, : path.accept_index.shape[1]][on_path])
    # The move's own slot pairs: the plan's on the path, SGLang's dummy slot 0 past it.
    assert torch.equal(path.kv_src, torch.where(on_path, plan.src, 0))
    assert torch.equal(path.kv_dst, torch.where(on_path, plan.dst, 0))


def chunked_move(pool, dst, src, chunk):
    """SGLang's move_kv_cache on a toy pool: chunks of `chunk` pairs in order, each gathering its sources
    before scattering (its Triton copy per <= 256 pairs; chunk >= len: the native index-copy)."""
    for start in range(0, len(dst), chunk):
        pool[dst[start : start + chunk]] = pool[src[start : start + chunk]]
    return pool


@pytest.mark.parametrize("seed", [0, 1, 2, 7])
def test_kv_pairs_leave_the_compacted_cache(seed):
    """Moving kv_src -> kv_dst, in one gather-scatter or chunk by chunk down to one pair at a time, leaves
    the KV pool as the library's compaction plan does: overlapping sources and destinations are safe.
    (The same pairs moved one at a time in reverse order fail these seeds.)"""
    generator = torch.Generator().manual_seed(seed)
    tree = random_tree([40, 1, 15, 90, 7], 8, seed=seed, vocab=20)
    walk = follow_tree(tree, guided_targets(tree, generator, stray=0.1), impl="reference")
    # Some pair reads a slot that a later pair writes: path node j > k lies inside the committed prefix.
    steps = torch.arange(walk.accepted.shape[1])
    assert bool(((walk.accepted > steps) & (walk.accepted < walk.accept_lens.unsqueeze(1))).any())
    slots = (torch.randperm(1000, generator=generator)[: tree.parents.numel()] + 1).view_as(tree.parents)
    path = committed_path(tree, walk, torch.zeros(tree.batch_size), cache_loc=slots)
    pool = torch.randn(1001, 3, generator=generator)
    expected = apply_plan(pool.clone(), compaction_plan(walk.accepted, walk.accept_lens, slots, impl="reference"))
    dst, src = path.kv_dst.reshape(-1), path.kv_src.reshape(-1)
    for chunk in (1, 2, 5, len(dst)):
        assert torch.equal(chunked_move(pool.clone(), dst, src, chunk), expected), chunk


SERVER = ServerSettings(block_size=6, tree=TreeSettings(8, 4, 0.8))  # D = 4, W = 9


def padded_single_tree(logits, budget, depth, temperature):
    """One request's tree built alone by the host reference, padded to the server's width."""
    scaled = logits.float() / torch.tensor(temperature)
    tree = build_tree(scaled, budget, max_depth=depth, draft_temperature=1.0, impl="reference")
    pad = SERVER.verify_width - tree.width

    def widen(x, fill):
        return torch.nn.functional.pad(x, (0, pad), value=fill)

    return {
        "token_ids": widen(tree.token_ids, -1),
        "parents": widen(tree.parents, -1),
        "depths": widen(tree.depths, -1),
        "ranks": widen(tree.ranks, -1),
        "scores": widen(tree.scores, float("-inf")),
        "num_nodes": tree.num_nodes,
    }


@pytest.mark.parametrize("impl", ["reference", "torch"])
def test_per_request_limits_give_each_request_its_own_tree(impl):
    logits = torch.randn(4, SERVER.tree_depth, 50, generator=torch.Generator().manual_seed(3)) * 3
    requests = [
        TreeSettings(8, 4, 0.8),
        TreeSettings(6, 1, 0.5),
        TreeSettings(5, 2, 0.3),
        TreeSettings(0, 1, 2.0),
    ]
    limits = request_limits(requests, SERVER, torch.device("cpu"))
    topk, tree = draft_tree(logits, SERVER, limits, impl=impl)
    assert tree.width == SERVER.verify_width and tree.max_depth == SERVER.tree_depth
    assert topk.log_probs.shape == (4, SERVER.tree_depth, SERVER.top_k)
    unlimited = draft_tree(logits, SERVER, request_limits([TreeSettings(8, 4, 0.3)] * 4, SERVER, "cpu"))[1]
    assert unlimited.depths[2].max() > 2  # the depth limits below bind
    for b, request in enumerate(requests):
        single = padded_single_tree(logits[b : b + 1], request.budget, request.max_depth, request.draft_temperature)
        for name, expected in single.items():
            got = getattr(tree, name)[b : b + 1]
            if name == "scores":
                torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
            else:
                assert torch.equal(got, expected), (b, name, got, expected)


def test_server_defaults_build_the_plain_tree():
    logits = torch.randn(2, SERVER.tree_depth, 50, generator=torch.Generator().manual_seed(4))
    assert request_limits([SERVER.request_defaults()] * 2, SERVER, torch.device("cpu")) is None
    _, tree = draft_tree(logits, SERVER, None, impl="reference")
    plain = build_tree(logits, SERVER.tree.budget, max_depth=SERVER.tree_depth, draft_temperature=0.8, impl="reference")
    assert torch.equal(tree.parents[:, : plain.width], plain.parents)
    assert torch.equal(tree.token_ids[:, : plain.width - 1], plain.token_ids)
    assert (tree.parents[:, plain.width :] == -1).all()


def test_request_limits_tensors():
    limits = request_limits([TreeSettings(8, 4, 0.8), TreeSettings(2, 1, 1.5)], SERVER, torch.device("cpu"))
    assert limits.budgets.tolist() == [8, 2] and limits.budgets.dtype == torch.int64
    assert limits.max_depths.tolist() == [4, 1] and limits.max_depths.dtype == torch.int64
    assert limits.draft_temperatures.tolist() == [0.800000011920929, 1.5]
    assert limits.draft_temperatures.dtype == torch.float32


def first_child_targets(tree, follow):
    """Target tokens that follow each node's first child in the requests marked `follow`, else a
    token no node carries."""
    first = to_retrive(tree, impl="reference").retrive_next_token
    tokens = tree.node_token_ids().gather(1, first.clamp(min=0))
    miss = torch.full_like(tokens, 10_000)
    return torch.where((first >= 0) & torch.tensor(follow).unsqueeze(1), tokens, miss)


def stats_round():
    logits = torch.randn(3, SERVER.tree_depth, 50, generator=torch.Generator().manual_seed(5)) * 4
    topk, tree = draft_tree(logits, SERVER, None, impl="reference")
    walk = follow_tree(tree, first_child_targets(tree, [True, False, True]), impl="reference")
    return topk, tree, walk


def test_stats_rows_decode_to_the_library_round_stats():
    topk, tree, walk = stats_round()
    rows = round_stats_rows(tree, walk, topk, impl="reference")
    assert rows.dtype == torch.int32 and rows.shape == (3, 5 + SERVER.tree_depth)
    ranks = target_token_ranks(topk.token_ids, emitted_tokens(tree, walk), walk.accept_lens, impl="reference")
    expected = round_stats(tree, walk.accept_lens, ranks, SERVER.top_k)
    assert [round_stats_from_row(row) for row in rows.tolist()] == expected
    assert walk.accept_lens.tolist()[1] == 1 and max(walk.accept_lens.tolist()) > 2  # the rounds differ


def test_summary_from_rows_is_the_library_summary():
    topk, tree, walk = stats_round()
    rows = round_stats_rows(tree, walk, topk).tolist()
    summary = summary_from_rows(rows)
    assert tuple(summary) == SUMMARY_KEYS
    assert summary == summarize([[round_stats_from_row(row) for row in rows]]).to_dict()
    assert summary["ddtree_num_rounds"] == 3 and summary["ddtree_num_responses"] == 1


class FakeReq:
    """What the scheduler hook reads of SGLang's Req."""

    def __init__(self):
        self.output_ids = [1]  # the prefill's token
        self.finished_len = None
        self.customized_info = None

    @property
    def output_ids_through_stop(self):
        return self.output_ids if self.finished_len is None else self.output_ids[: self.finished_len]

    def finished(self):
        return self.finished_len is not None


def test_round_rows_reach_meta_info_as_the_summary():
    topk, tree, walk = stats_round()
    result = SimpleNamespace(ddtree_stats=round_stats_rows(tree, walk, topk))
    req = FakeReq()
    req.output_ids += [2, 3, 4]
    plugin._collect_round(None, None, req, None, result, 0, None)
    assert req.customized_info is None  # nothing travels before the request finishes
    req.output_ids += [5, 6, 7]
    req.finished_len = 6  # a stop inside the second round's tokens
    plugin._collect_round(None, None, req, None, result, 2, None)
    values = req.customized_info[plugin.ROUNDS_KEY]
    assert len(values) == 6 and values[:-1] == [None] * 5  # aligned to the emitted tokens
    rows = result.ddtree_stats.tolist()
    assert values[-1] == [rows[0], rows[2]]

    meta_info = {"completion_tokens": 6, plugin.ROUNDS_KEY: [None, None] + [values[-1]]}
    plugin._add_summary(None, None, meta_info, None, 0)
    assert plugin.ROUNDS_KEY not in meta_info and meta_info["completion_tokens"] == 6
    assert {k: meta_info[k] for k in SUMMARY_KEYS} == summary_from_rows([rows[0], rows[2]])
    assert meta_info["ddtree_num_rounds"] == 2


def test_round_budgets_reach_meta_info_and_feed_the_auto_policy():
    """An auto server's rounds: each request-round's expectations go to the installed policy, and a finished
    request's meta_info counts its rounds per budget."""
    from ddtree_core.policy import CostTable, LaggedAuto
    from ddtree_core.sglang import auto

    topk, tree, walk = stats_round()
    rows = round_stats_rows(tree, walk, topk)
    expected = torch.tensor([[1.0, 2.0]] * rows.shape[0])
    policy = LaggedAuto(CostTable((16,), (1.0,)), (15, 63), 16)
    auto.install(policy)
    try:
        req = FakeReq()
        for budget in (63, 15, 63):
            req.output_ids += [2, 3]
            req.finished_len = len(req.output_ids) if budget == 63 and len(req.output_ids) > 3 else None
            result = SimpleNamespace(ddtree_stats=rows, ddtree_budget=budget, ddtree_expected=expected)
            plugin._collect_round(None, None, req, None, result, 0, None)
    finally:
        auto.install(None)
    assert policy.means[63] / policy.weight == pytest.approx(2.0) and policy.predicted > 0
    meta_info = {plugin.BUDGETS_KEY: req.customized_info[plugin.BUDGETS_KEY]}
    plugin._add_summary(None, None, meta_info, None, 0)
    assert meta_info == {plugin.BUDGET_HISTOGRAM: {"63": 2, "15": 1}}


def test_hooks_leave_other_results_alone():
    req = FakeReq()
    plugin._collect_round(None, None, req, None, SimpleNamespace(), 0, None)
    assert req.customized_info is None and not hasattr(req, "_ddtree_round_rows")
    meta_info = {"completion_tokens": 3}
    plugin._add_summary(None, None, meta_info, None, 0)
    assert meta_info == {"completion_tokens": 3}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("per_request", [False, True], ids=["server-defaults", "per-request"])
def test_worker_round_tensors_never_sync_on_cuda(per_request):
    """Everything the worker computes between the drafter's logits and SGLang's KV helpers, under
    torch.cuda.set_sync_debug_mode("error"): a host sync would stall overlap scheduling every round."""
    server = ServerSettings(block_size=16, tree=TreeSettings(64, 15, 1.0))
    batch, vocab = 4, 49152
    logits = torch.randn(batch, server.tree_depth, vocab, device="cuda").bfloat16()
    bonus = torch.randint(0, vocab, (batch,), device="cuda")
    prefix = torch.tensor([100, 7, 300, 42], device="cuda")
    settings = [TreeSettings(budget, 15, 1.0) for budget in (64, 15, 32, 1)]
    req_to_token = torch.arange(8 * 1024, dtype=torch.int32, device="cuda").view(8, 1024)
    pools = torch.tensor([3, 0, 7, 5], dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        _, _, slots, _ = draft_block_inputs(
            bonus, prefix, pools, req_to_token, block=16, width=server.verify_width, mask_token_id=3
        )
        limits = request_limits(settings, server, "cuda") if per_request else None
        topk, tree = draft_tree(logits, server, limits)
        verify = verify_batch(tree, bonus, prefix, prefix_total=449)
        target = torch.randint(0, vocab, verify.tokens.shape, device="cuda")
        walk, path, rows = round_tail(tree, target, topk, prefix, cache_loc=slots)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert rows.shape == (batch, 5 + server.tree_depth) and path.new_seq_lens.device.type == "cuda"
    expected = verify_batch(tree, bonus, prefix, prefix_total=449, impl="torch")  # the fused kernel's contract
    assert torch.equal(verify.custom_mask, expected.custom_mask) and torch.equal(verify.tokens, expected.tokens)
    assert slots[1, :3].tolist() == [7, 8, 9]  # req_to_token[0, 7 + i]

"""kernels/round_inputs.py against the torch composition in rounds.py (Triton interpreter on the CPU)."""

import pytest
import torch
from test_sglang_rounds import WIDTH, worked_tree
from trees import RecordOps

from ddtree_core.settings import TreeSettings
from ddtree_core.sglang.config import ServerSettings
from ddtree_core.sglang.rounds import draft_block_inputs, draft_tree, request_limits, verify_batch

pytest.importorskip("triton")


def test_verify_batch_worked_example_triton():
    tree = worked_tree()
    verify = verify_batch(tree, torch.tensor([7]), torch.tensor([3]), 3, impl="triton")
    assert verify.tokens.tolist() == [[7, 10, 12, 13, 11, 7]]
    assert verify.positions.tolist() == [[3, 4, 5, 5, 4, 3]]
    rows = verify.custom_mask.view(WIDTH, 3 + WIDTH).int().tolist()
    assert rows[3] == [1, 1, 1, 1, 1, 0, 1, 0, 0]  # 13 sees the prefix, the root, 10 and itself
    assert rows[5] == [1, 1, 1, 0, 0, 0, 0, 0, 1]  # padding: the prefix and itself only


@pytest.mark.parametrize(
    ("batch", "budget", "vocab", "prefixes", "extra"),
    [
        (1, 15, 50, [0], 0),
        (3, 24, 97, [5, 0, 300], 0),
        (4, 40, 61, [17, 1, 64, 2], 9),  # host prefix total above the device sum: the tail is 1s
        (2, 7, 300, [260, 3], 0),
    ],
)
def test_verify_batch_triton_equals_torch(batch, budget, vocab, prefixes, extra):
    generator = torch.Generator().manual_seed(batch * 1000 + budget)
    server = ServerSettings(block_size=16, tree=TreeSettings(budget, 15, 1.0))
    logits = torch.randn(batch, server.tree_depth, vocab, generator=generator) * 3
    settings = [server.request_defaults()] * batch
    if batch > 2:  # per-request budgets leave padding columns
        settings[1] = TreeSettings(budget=max(1, budget // 3), max_depth=3, draft_temperature=0.7)
    _, tree = draft_tree(logits, server, request_limits(settings, server, "cpu"), impl="torch")
    bonus = torch.randint(0, vocab, (batch,), generator=generator)
    prefix = torch.tensor(prefixes)
    total = sum(prefixes) + extra
    expected = verify_batch(tree, bonus, prefix, total, impl="torch")
    fused = verify_batch(tree, bonus, prefix, total, impl="triton")
    assert torch.equal(fused.tokens, expected.tokens)
    assert torch.equal(fused.positions, expected.positions)
    assert fused.custom_mask.shape == expected.custom_mask.shape
    assert torch.equal(fused.custom_mask, expected.custom_mask)


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_draft_block_inputs(impl):
    req_to_token = torch.arange(4 * 100, dtype=torch.int32).view(4, 100) + 1000
    bonus = torch.tensor([5, 6, 7])
    prefix = torch.tensor([0, 10, 40], dtype=torch.int32)
    pools = torch.tensor([2, 0, 3], dtype=torch.int32)
    ids, positions, cache_loc, block_loc = draft_block_inputs(
        bonus, prefix, pools, req_to_token, block=4, width=6, mask_token_id=99, impl=impl
    )
    assert ids.tolist() == [[5, 99, 99, 99], [6, 99, 99, 99], [7, 99, 99, 99]]
    assert positions.tolist() == [[0, 1, 2, 3], [10, 11, 12, 13], [40, 41, 42, 43]]
    assert cache_loc.tolist() == [
        [1200, 1201, 1202, 1203, 1204, 1205],
        [1010, 1011, 1012, 1013, 1014, 1015],
        [1340, 1341, 1342, 1343, 1344, 1345],
    ]
    assert block_loc.tolist() == [row[:4] for row in cache_loc.tolist()] and block_loc.is_contiguous()
    assert ids.dtype == positions.dtype == cache_loc.dtype == block_loc.dtype == torch.int64


def test_fused_inputs_are_one_launch_each(monkeypatch):
    """Each fused call's torch work is allocating its outputs; its compute is one launch (recorded, not
    run). The torch compositions they replace dispatch a dozen ops or more, one launch each on a GPU."""
    from ddtree_core.kernels import round_inputs as kernel

    launches = []
    record = {(1,): lambda *args, **kwargs: launches.append(args)}
    monkeypatch.setattr(kernel, "_verify_kernel", {(2, 1): record[(1,)]})
    monkeypatch.setattr(kernel, "_draft_block_kernel", {(2,): record[(1,)]})
    tree, bonus, prefix = worked_tree(batch=2), torch.tensor([7, 8]), torch.tensor([3, 5])
    req_to_token = torch.arange(200, dtype=torch.int32).view(2, 100)
    pools = torch.tensor([1, 0])
    with RecordOps() as ops:
        verify_batch(tree, bonus, prefix, 8, impl="triton")
        draft_block_inputs(bonus, prefix, pools, req_to_token, block=4, width=WIDTH, mask_token_id=9, impl="triton")
    assert len(launches) == 2
    assert set(ops.names) <= {"empty", "view", "detach"}, ops.names  # allocations and aliases only
    with RecordOps() as ops:
        verify_batch(tree, bonus, prefix, 8, impl="torch")
        draft_block_inputs(bonus, prefix, pools, req_to_token, block=4, width=WIDTH, mask_token_id=9, impl="torch")
    assert len(ops.names) > 20

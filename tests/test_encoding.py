"""Encodings: hand-drawn trees, round trips, torch == reference, and SGLang's greedy verify walk."""

import dataclasses

import pytest
import torch
from trees import (
    CASES,
    IMPLS,
    TENSOR_FIELDS,
    guided_targets,
    needs_cuda,
    random_tree,
    replay_in_cuda_graph,
    worked_example_tree,
)

from ddtree_core.encoding import (
    RetriveArrays,
    from_paths,
    from_retrive,
    positions,
    to_paths,
    to_retrive,
)
from ddtree_core.verify import follow_tree

# Two requests padded to W = 6: the worked example (4 nodes) and a chain root ─ x ─ y (2 nodes).
PADDED_PATHS = [[(), (0,), (0, 0), (0, 1), (1,)], [(), (0,), (0, 0)]]


def test_worked_example_paths():
    assert to_paths(worked_example_tree()) == [[(), (0,), (0, 0), (0, 1), (1,)]]


@pytest.mark.parametrize("impl", IMPLS)
def test_worked_example_retrive(impl):
    arrays = to_retrive(worked_example_tree(), impl=impl)
    assert arrays.retrive_index.tolist() == [[0, 1, 2, 3, 4]]
    assert arrays.retrive_next_token.tolist() == [[1, 2, -1, -1, -1]]
    assert arrays.retrive_next_sibling.tolist() == [[-1, 4, 3, -1, -1]]


@pytest.mark.parametrize("impl", IMPLS)
def test_padded_batch_retrive(impl):
    tree = from_paths(PADDED_PATHS, width=6)
    assert tree.parents.tolist() == [[-1, 0, 1, 1, 0, -1], [-1, 0, 1, -1, -1, -1]]
    assert tree.depths.tolist() == [[0, 1, 2, 2, 1, -1], [0, 1, 2, -1, -1, -1]]
    assert tree.ranks.tolist() == [[-1, 0, 0, 1, 1, -1], [-1, 0, 0, -1, -1, -1]]
    assert tree.num_nodes.tolist() == [4, 2]
    assert tree.max_depth == 2
    arrays = to_retrive(tree, impl=impl)
    assert arrays.retrive_index.tolist() == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]]
    assert arrays.retrive_next_token.tolist() == [[1, 2, -1, -1, -1, -1], [1, 2, -1, -1, -1, -1]]
    assert arrays.retrive_next_sibling.tolist() == [[-1, 4, 3, -1, -1, -1], [-1, -1, -1, -1, -1, -1]]


@pytest.mark.parametrize("impl", IMPLS)
def test_fan_with_grandchildren_retrive(impl):
    # root ─┬─ 1 ─── 4          node order need not be breadth-first: 4 hangs under 1, 5 under 3
    #       ├─ 2
    #       └─ 3 ─┬─ 5
    #             └─ 6
    tree = from_paths([[(), (0,), (1,), (2,), (0, 0), (2, 0), (2, 1)]])
    arrays = to_retrive(tree, impl=impl)
    assert arrays.retrive_next_token.tolist() == [[1, 4, -1, 5, -1, -1, -1]]
    assert arrays.retrive_next_sibling.tolist() == [[-1, 2, 3, -1, -1, 6, -1]]


def test_positions_root_plus_depth_padding_at_root():
    tree = from_paths(PADDED_PATHS, width=6)
    assert positions(tree, torch.tensor([7, 3])).tolist() == [[7, 8, 9, 9, 8, 7], [3, 4, 5, 3, 3, 3]]


@pytest.mark.parametrize("budget, depth", CASES)
def test_paths_round_trip(budget, depth):
    tree = random_tree(budget, depth)
    back = from_paths(to_paths(tree), width=tree.width)
    for name in ("parents", "depths", "ranks", "num_nodes"):
        assert torch.equal(getattr(back, name), getattr(tree, name)), name


@pytest.mark.parametrize("budget, depth", CASES)
def test_retrive_torch_matches_reference_and_round_trips(budget, depth):
    tree = random_tree(budget, depth, seed=1)
    reference = to_retrive(tree, impl="reference")
    fast = to_retrive(tree, impl="torch")
    for name in ("retrive_index", "retrive_next_token", "retrive_next_sibling"):
        assert torch.equal(getattr(fast, name), getattr(reference, name)), name
    back = from_retrive(fast)
    for name in ("parents", "depths", "ranks", "num_nodes"):
        assert torch.equal(getattr(back, name), getattr(tree, name)), name


def sglang_verify_tree_greedy(candidates, arrays, target_predict, num_speculative_tokens):
    """A line-by-line port of sgl_kernel's VerifyTreeGreedy (eagle_utils.cu), one request per loop."""
    batch, width = candidates.shape
    index = arrays.retrive_index.flatten().tolist()
    first = arrays.retrive_next_token.flatten().tolist()
    sibling = arrays.retrive_next_sibling.flatten().tolist()
    cand, target = candidates.flatten().tolist(), target_predict.flatten().tolist()
    accept_index = [[-1] * num_speculative_tokens for _ in range(batch)]
    accept_token_num, predicts = [0] * batch, [0] * (batch * width)
    for bx in range(batch):
        last = index[bx * width]
        accept_index[bx][0] = last
        cur = 0
        for _ in range(1, num_speculative_tokens):
            cur = first[bx * width + cur]
            while cur != -1:
                if cand[bx * width + cur] == target[last]:
                    predicts[last] = target[last]
                    accept_token_num[bx] += 1
                    accept_index[bx][accept_token_num[bx]] = index[bx * width + cur]
                    last = index[bx * width + cur]
                    break
                cur = sibling[bx * width + cur]
            if cur == -1:
                break
        predicts[last] = target[last]
    return accept_index, accept_token_num, predicts


@pytest.mark.parametrize("budget, depth", CASES)
def test_sglang_greedy_walk_over_our_arrays_equals_follow_tree(budget, depth):
    tree = random_tree(budget, depth, seed=2)
    generator = torch.Generator().manual_seed(3)
    target = guided_targets(tree, generator)
    walk = follow_tree(tree, target, impl="reference")
    node_tokens = torch.cat([torch.full_like(tree.token_ids[:, :1], -1), tree.token_ids], dim=1)
    candidates = torch.where(node_tokens >= 0, node_tokens, -2)
    accept_index, accept_num, predicts = sglang_verify_tree_greedy(
        candidates, to_retrive(tree, impl="torch"), target, tree.max_depth + 1
    )
    offsets = torch.arange(tree.batch_size).unsqueeze(1) * tree.width
    expected = torch.where(walk.accepted >= 0, walk.accepted + offsets, -1)
    assert accept_index == expected.tolist()
    assert accept_num == (walk.accept_lens - 1).tolist()
    last = expected.gather(1, (walk.accept_lens - 1).unsqueeze(1)).squeeze(1)
    assert [predicts[i] for i in last.tolist()] == walk.bonus.tolist()


@pytest.mark.parametrize(
    "paths",
    [
        pytest.param([[(0,)]], id="root-not-first"),
        pytest.param([[(), (0, 0), (0,)]], id="child-before-parent"),
        pytest.param([[(), (0,), (0,)]], id="duplicate"),
        pytest.param([[]], id="empty"),
    ],
)
def test_from_paths_rejects_malformed(paths):
    with pytest.raises(ValueError):
        from_paths(paths)


def test_from_retrive_rejects_shuffled_index():
    arrays = to_retrive(worked_example_tree(), impl="reference")
    bad = RetriveArrays(
        retrive_index=arrays.retrive_index.flip(1),
        retrive_next_token=arrays.retrive_next_token,
        retrive_next_sibling=arrays.retrive_next_sibling,
    )
    with pytest.raises(ValueError):
        from_retrive(bad)


def test_from_retrive_rejects_a_gap_in_node_order():
    # root -> 2 only: node 1 exists in no list, so the linked nodes are not 0..num_nodes.
    arrays = RetriveArrays(
        retrive_index=torch.arange(3)[None],
        retrive_next_token=torch.tensor([[2, -1, -1]]),
        retrive_next_sibling=torch.tensor([[-1, -1, -1]]),
    )
    with pytest.raises(ValueError):
        from_retrive(arrays)


def test_torch_path_needs_no_host_values():
    # Meta tensors have no data: any .item(), .tolist(), nonzero or data-dependent shape would raise.
    tree = from_paths(PADDED_PATHS, width=6, device="meta")
    arrays = to_retrive(tree, impl="torch")
    assert arrays.retrive_next_token.shape == arrays.retrive_next_sibling.shape == (2, 6)
    assert positions(tree, torch.empty(2, dtype=torch.int64, device="meta")).shape == (2, 6)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("budget, depth", CASES)
def test_torch_path_captures_in_cuda_graph(budget, depth):
    tree = random_tree(budget, depth, seed=4)
    on_gpu = dataclasses.replace(tree, **{name: getattr(tree, name).cuda() for name in TENSOR_FIELDS})
    roots = torch.arange(tree.batch_size, device="cuda") + 5
    arrays, where = replay_in_cuda_graph(lambda: (to_retrive(on_gpu, impl="torch"), positions(on_gpu, roots)))
    expected = to_retrive(tree, impl="reference")
    assert torch.equal(arrays.retrive_next_token.cpu(), expected.retrive_next_token)
    assert torch.equal(arrays.retrive_next_sibling.cpu(), expected.retrive_next_sibling)
    assert torch.equal(arrays.retrive_index.cpu(), expected.retrive_index)
    assert torch.equal(where.cpu(), positions(tree, roots.cpu()))

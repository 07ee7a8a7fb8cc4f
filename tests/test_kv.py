"""KV compaction plans: hand-drawn walks, torch == reference, and applying a plan == rebuilding by hand."""

import pytest
import torch
from trees import CASES, IMPLS, needs_cuda, random_tree, replay_in_cuda_graph

from ddtree_core.kv import KVCompactionPlan, apply_plan, compaction_plan


def random_walk(tree, generator):
    """A root-to-node path per request ending at a random node, as TreeWalk.accepted / accept_lens."""
    parents = tree.parents.tolist()
    accepted = torch.full((tree.batch_size, tree.max_depth + 1), -1, dtype=torch.int64)
    lens = []
    for b, count in enumerate(tree.num_nodes.tolist()):
        path = [int(torch.randint(0, count + 1, (), generator=generator))]
        while path[-1] != 0:
            path.append(parents[b][path[-1]])
        accepted[b, : len(path)] = torch.tensor(path[::-1])
        lens.append(len(path))
    return accepted, torch.tensor(lens)


def compacted_by_hand(cache, accepted, accept_lens, slots):
    """Request by request: verify position k's slot receives the KV of the k-th accepted node."""
    out = cache.clone()
    for b in range(accepted.shape[0]):
        for k in range(int(accept_lens[b])):
            out[slots[b, k]] = cache[slots[b, accepted[b, k]]]
    return out


@pytest.mark.parametrize("impl", IMPLS)
def test_worked_example(impl):
    # tree.py's tree, slots 40..44; the target accepts root, a, d (nodes 0, 1, 3).
    plan = compaction_plan(torch.tensor([[0, 1, 3]]), torch.tensor([3]), torch.arange(40, 45)[None], impl=impl)
    assert plan.src.tolist() == [[40, 41, 43]]
    assert plan.dst.tolist() == [[40, 41, 42]]
    assert plan.move.tolist() == [[False, False, True]]
    assert plan.free.tolist() == [[False, False, False, True, True]]


@pytest.mark.parametrize("impl", IMPLS)
def test_overlapping_moves_and_a_root_only_request(impl):
    # Request 0: root ─┬─ 1          accepted 0, 2, 3: slot 12 is read (-> 11) and written (<- 13).
    #                  └─ 2 ─ 3
    # Request 1: nothing accepted but the root; positions 2, 3 have no slot (-1), so nothing to free.
    accepted = torch.tensor([[0, 2, 3, -1], [0, -1, -1, -1]])
    slots = torch.tensor([[10, 11, 12, 13], [20, 21, -1, -1]])
    plan = compaction_plan(accepted, torch.tensor([3, 1]), slots, impl=impl)
    assert plan.src.tolist() == [[10, 12, 13, -1], [20, -1, -1, -1]]
    assert plan.dst.tolist() == [[10, 11, 12, -1], [20, -1, -1, -1]]
    assert plan.move.tolist() == [[False, True, True, False], [False, False, False, False]]
    assert plan.free.tolist() == [[False, False, False, True], [False, True, False, False]]
    cache = torch.arange(30) * 10
    out = apply_plan(cache.clone(), plan)
    expected = cache.clone()
    expected[11], expected[12] = 120, 130  # both read before either is written
    assert out.tolist() == expected.tolist()


def test_apply_plan_gathers_before_scattering():
    # Moves listed so that a one-by-one copy in list order would read slot 2 after overwriting it.
    plan = KVCompactionPlan(
        src=torch.tensor([[0, 3, 2]]),
        dst=torch.tensor([[0, 2, 1]]),
        move=torch.tensor([[False, True, True]]),
        free=torch.tensor([[False, False, False, True]]),
    )
    assert apply_plan(torch.tensor([0.0, 1.0, 2.0, 3.0]), plan).tolist() == [0.0, 2.0, 3.0, 3.0]


@pytest.mark.parametrize("budget, depth", CASES)
def test_torch_matches_reference_and_apply_matches_hand_rebuild(budget, depth):
    tree = random_tree(budget, depth)
    generator = torch.Generator().manual_seed(1)
    accepted, accept_lens = random_walk(tree, generator)
    num_slots = tree.batch_size * tree.width + 7
    slots = torch.randperm(num_slots, generator=generator)[: tree.batch_size * tree.width].view(tree.batch_size, -1)
    reference = compaction_plan(accepted, accept_lens, slots, impl="reference")
    fast = compaction_plan(accepted, accept_lens, slots, impl="torch")
    for name in ("src", "dst", "move", "free"):
        assert torch.equal(getattr(fast, name), getattr(reference, name)), name
    assert fast.free.sum(dim=1).tolist() == (tree.width - accept_lens).tolist()
    cache = torch.randn(num_slots, 2, 3, generator=generator)
    expected = compacted_by_hand(cache, accepted, accept_lens, slots)
    assert torch.equal(apply_plan(cache.clone(), fast), expected)


def test_checks_shapes():
    with pytest.raises(ValueError):
        compaction_plan(torch.zeros(2, 3, dtype=torch.int64), torch.ones(3, dtype=torch.int64), torch.zeros(2, 5))


def test_torch_path_needs_no_host_values():
    # Meta tensors have no data: any .item(), .tolist(), nonzero or data-dependent shape would raise.
    meta = lambda *shape: torch.empty(*shape, dtype=torch.int64, device="meta")
    plan = compaction_plan(meta(3, 5), meta(3), meta(3, 9), impl="torch")
    assert plan.src.shape == plan.dst.shape == plan.move.shape == (3, 5) and plan.free.shape == (3, 9)
    assert apply_plan(torch.empty(40, 8, device="meta"), plan).shape == (40, 8)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("budget, depth", CASES)
def test_torch_path_captures_in_cuda_graph(budget, depth):
    tree = random_tree(budget, depth, seed=2)
    generator = torch.Generator().manual_seed(3)
    accepted, accept_lens = random_walk(tree, generator)
    num_slots = tree.batch_size * tree.width
    slots = torch.randperm(num_slots, generator=generator).view(tree.batch_size, -1)
    cache = torch.randn(num_slots, 4, generator=generator)
    expected = compacted_by_hand(cache, accepted, accept_lens, slots)
    pristine, args = cache.cuda(), (accepted.cuda(), accept_lens.cuda(), slots.cuda())
    cache_gpu = torch.empty_like(pristine)

    def compact():
        cache_gpu.copy_(pristine)  # every run (warm-up, replay) starts from the same cache
        plan = compaction_plan(*args, impl="torch")
        apply_plan(cache_gpu, plan)
        return plan

    plan = replay_in_cuda_graph(compact)
    reference = compaction_plan(accepted, accept_lens, slots, impl="reference")
    for name in ("src", "dst", "move", "free"):
        assert torch.equal(getattr(plan, name).cpu(), getattr(reference, name)), name
    assert torch.equal(cache_gpu.cpu(), expected)

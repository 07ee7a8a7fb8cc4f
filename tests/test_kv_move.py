"""kernels/kv_move.py: the path's KV rows moved in place, per buffer, equal to the library's compaction plan."""

import pytest
import torch
from trees import guided_targets, random_tree

from ddtree_core.kv import apply_plan, compaction_plan
from ddtree_core.sglang.rounds import committed_path
from ddtree_core.verify import follow_tree

pytest.importorskip("triton")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_move_path_kv_equals_the_compaction_plan(seed):
    from ddtree_core.kernels.kv_move import move_path_kv

    generator = torch.Generator().manual_seed(seed)
    tree = random_tree([40, 1, 15, 90, 7], 8, seed=seed, vocab=20)
    walk = follow_tree(tree, guided_targets(tree, generator, stray=0.1), impl="reference")
    steps = torch.arange(walk.accepted.shape[1])  # some pair reads a slot a later pair writes
    assert bool(((walk.accepted > steps) & (walk.accepted < walk.accept_lens.unsqueeze(1))).any())
    slots = (torch.randperm(1000, generator=generator)[: tree.parents.numel()] + 1).view_as(tree.parents)
    path = committed_path(tree, walk, torch.zeros(tree.batch_size), cache_loc=slots)
    plan = compaction_plan(walk.accepted, walk.accept_lens, slots, impl="reference")
    # Two "layers" of K and V with different row sizes (bytes 12, 12, 40, 40), as SGLang's pool tables them.
    buffers = [torch.randn(1001, 3, generator=generator) for _ in range(2)]
    buffers += [torch.randint(0, 255, (1001, 40), generator=generator, dtype=torch.uint8) for _ in range(2)]
    expected = [apply_plan(b.clone(), plan) for b in buffers]
    table = torch.tensor([b.data_ptr() for b in buffers], dtype=torch.int64)
    row_bytes = torch.tensor([b[0].numel() * b.element_size() for b in buffers])
    move_path_kv(table, row_bytes, 40, path.kv_dst, path.kv_src, path.commit_lens)
    for got, want in zip(buffers, expected):
        assert torch.equal(got, want)


def test_move_path_kv_leaves_padding_and_identities():
    from ddtree_core.kernels.kv_move import move_path_kv

    pool = torch.arange(20, dtype=torch.float32).view(10, 2)
    dst = torch.tensor([[3, 4, 5], [7, 0, 0]])
    src = torch.tensor([[3, 6, 8], [7, 0, 0]])  # request 0: 3 -> 3 stays, 6 -> 4, 8 -> 5; request 1: identity
    lens = torch.tensor([3, 1], dtype=torch.int32)
    move_path_kv(torch.tensor([pool.data_ptr()]), torch.tensor([8]), 8, dst, src, lens)
    assert pool[:, 0].tolist() == [0, 2, 4, 6, 12, 16, 12, 14, 16, 18]


def test_self_check_passes_here():
    from ddtree_core.kernels.kv_move import self_check

    assert self_check("cpu") is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_move_path_kv_on_cuda_and_in_a_graph():
    from ddtree_core.kernels.kv_move import move_path_kv, self_check

    assert self_check("cuda") is None
    generator = torch.Generator().manual_seed(5)
    tree = random_tree([64, 15, 3, 128], 8, seed=5, vocab=30)
    walk = follow_tree(tree, guided_targets(tree, generator, stray=0.1), impl="reference")
    slots = (torch.randperm(4000, generator=generator)[: tree.parents.numel()] + 1).view_as(tree.parents)
    path = committed_path(tree, walk, torch.zeros(tree.batch_size), cache_loc=slots)
    plan = compaction_plan(walk.accepted, walk.accept_lens, slots, impl="reference")
    buffers = [torch.randn(4001, 8, 128, generator=generator).bfloat16() for _ in range(4)]
    expected = [apply_plan(b.clone(), plan) for b in buffers]
    on_gpu = [b.cuda() for b in buffers]
    table = torch.tensor([b.data_ptr() for b in on_gpu], dtype=torch.uint64, device="cuda")
    row_bytes = torch.tensor([8 * 128 * 2] * 4, device="cuda")
    dst, src, lens = path.kv_dst.cuda(), path.kv_src.cuda(), path.commit_lens.cuda()
    graph = torch.cuda.CUDAGraph()
    move_path_kv(table, row_bytes, 2048, dst, src, lens)  # compile outside the capture
    for b, original in zip(on_gpu, buffers):
        b.copy_(original)
    with torch.cuda.graph(graph):
        move_path_kv(table, row_bytes, 2048, dst, src, lens)
    for b, original in zip(on_gpu, buffers):
        b.copy_(original)
    graph.replay()
    torch.cuda.synchronize()
    for got, want in zip(on_gpu, expected):
        assert torch.equal(got.cpu(), want)

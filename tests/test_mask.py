"""Masks: hand-drawn trees, ancestor closure from path prefixes, bit packing, SGLang's FULL_MASK layout."""

import dataclasses

import numpy as np
import pytest
import torch
from trees import CASES, IMPLS, TENSOR_FIELDS, needs_cuda, random_tree, replay_in_cuda_graph

from ddtree_core.encoding import from_paths, to_paths
from ddtree_core.mask import ancestor_mask, flat_verify_mask, pack_bits, request_verify_mask, unpack_bits

# Two requests padded to W = 6: the tree.py worked example and a chain root ─ x ─ y.
#   root ─┬─ a ─┬─ c        root ─ x ─ y
#         │     └─ d
#         └─ b
PADDED_PATHS = [[(), (0,), (0, 0), (0, 1), (1,)], [(), (0,), (0, 0)]]
PADDED_MASK = [
    [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 0, 1, 0, 0],
        [1, 0, 0, 0, 1, 0],
        [0, 0, 0, 0, 0, 1],  # padding sees only itself
    ],
    [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [0, 0, 0, 1, 0, 0],
        [0, 0, 0, 0, 1, 0],
        [0, 0, 0, 0, 0, 1],
    ],
]


def closure_from_paths(tree):
    """j is i or an ancestor of i exactly when j's path is a prefix of i's; padding sees only itself."""
    width = tree.width
    rows = []
    for paths in to_paths(tree):
        block = [[i == j for j in range(width)] for i in range(width)]
        for i, path in enumerate(paths):
            block[i][: len(paths)] = [path[: len(other)] == other for other in paths]
        rows.append(block)
    return torch.tensor(rows, dtype=torch.bool)


@pytest.mark.parametrize("impl", IMPLS)
def test_padded_batch_ancestor_mask(impl):
    tree = from_paths(PADDED_PATHS, width=6)
    assert ancestor_mask(tree, impl=impl).int().tolist() == PADDED_MASK


@pytest.mark.parametrize("impl", IMPLS)
def test_pack_bits_little_order_along_last_dim(impl):
    packed = pack_bits(torch.tensor(PADDED_MASK, dtype=torch.bool), impl=impl)
    assert packed.dtype == torch.uint8
    assert packed.tolist() == [[[1], [3], [7], [11], [17], [32]], [[1], [3], [7], [8], [16], [32]]]
    row = torch.tensor([1, 1, 0, 1, 0, 0, 0, 0, 1, 0, 1], dtype=torch.bool)  # 11 bits -> 2 bytes
    assert pack_bits(row, impl=impl).tolist() == [0b00001011, 0b00000101]
    assert unpack_bits(torch.tensor([0b00001011, 0b00000101], dtype=torch.uint8), 11, impl=impl).tolist() == (
        row.tolist()
    )


@pytest.mark.parametrize("impl", IMPLS)
def test_flat_verify_mask_padded_batch(impl):
    tree = from_paths(PADDED_PATHS, width=6)
    first = [[1, 1] + row for row in PADDED_MASK[0]]  # prefix of 2, all visible
    second = [[1] + row for row in PADDED_MASK[1]]  # prefix of 1
    expected = [bit for row in first + second for bit in row]
    out = flat_verify_mask(tree, torch.tensor([2, 1]), 3, impl=impl)
    assert out.dtype == torch.bool and out.int().tolist() == expected


@pytest.mark.parametrize("budget, depth", CASES)
def test_ancestor_mask_is_the_path_prefix_closure(budget, depth):
    tree = random_tree(budget, depth)
    expected = closure_from_paths(tree)
    assert torch.equal(ancestor_mask(tree, impl="reference"), expected)
    assert torch.equal(ancestor_mask(tree, impl="torch"), expected)


@pytest.mark.parametrize("budget, depth", CASES)
def test_flat_verify_mask_torch_matches_reference(budget, depth):
    tree = random_tree(budget, depth, seed=6)
    generator = torch.Generator().manual_seed(7)
    prefix_lens = torch.randint(0, 6, (tree.batch_size,), generator=generator)
    total = int(prefix_lens.sum())
    reference = flat_verify_mask(tree, prefix_lens, total, impl="reference")
    assert reference.numel() == tree.width * total + tree.batch_size * tree.width**2
    assert torch.equal(flat_verify_mask(tree, prefix_lens, total, impl="torch"), reference)
    # Request b's block starts at W * sum(prefix_lens[:b]) + b * W * W and is its verify rows.
    masks = ancestor_mask(tree, impl="reference")
    start = 0
    for b, length in enumerate(prefix_lens.tolist()):
        rows = request_verify_mask(masks[b], length).flatten()
        assert start == tree.width * int(prefix_lens[:b].sum()) + b * tree.width**2
        assert torch.equal(reference[start : start + rows.numel()], rows)
        start += rows.numel()


def test_flat_verify_mask_reference_checks_the_total():
    with pytest.raises(ValueError):
        flat_verify_mask(from_paths(PADDED_PATHS), torch.tensor([2, 1]), 4, impl="reference")


@pytest.mark.parametrize("length", [1, 7, 8, 9, 16, 257])
def test_pack_unpack_round_trip_and_match_numpy(length):
    generator = torch.Generator().manual_seed(length)
    mask = torch.rand(3, 5, length, generator=generator) < 0.5
    expected = torch.from_numpy(np.packbits(mask.numpy(), axis=-1, bitorder="little"))
    for impl in IMPLS:
        packed = pack_bits(mask, impl=impl)
        assert packed.shape == (3, 5, -(-length // 8))
        assert torch.equal(packed, expected)
        assert torch.equal(unpack_bits(packed, length, impl=impl), mask)


def test_unpack_checks_width():
    with pytest.raises(ValueError):
        unpack_bits(torch.zeros(4, 2, dtype=torch.uint8), 17)


def test_torch_path_needs_no_host_values():
    # Meta tensors have no data: any .item(), .tolist(), nonzero or data-dependent shape would raise.
    tree = from_paths(PADDED_PATHS, width=6, device="meta")
    masks = ancestor_mask(tree, impl="torch")
    assert masks.shape == (2, 6, 6)
    assert flat_verify_mask(tree, torch.empty(2, dtype=torch.int64, device="meta"), 3, impl="torch").shape == (90,)
    assert unpack_bits(pack_bits(masks, impl="torch"), 6, impl="torch").shape == (2, 6, 6)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("budget, depth", CASES)
def test_torch_path_captures_in_cuda_graph(budget, depth):
    tree = random_tree(budget, depth, seed=8)
    on_gpu = dataclasses.replace(tree, **{name: getattr(tree, name).cuda() for name in TENSOR_FIELDS})
    prefix_lens = torch.arange(tree.batch_size) * 3 + 1
    total = int(prefix_lens.sum())
    lens_gpu = prefix_lens.cuda()

    def masks():
        dense = ancestor_mask(on_gpu, impl="torch")
        packed = pack_bits(dense, impl="torch")
        return (
            dense,
            packed,
            unpack_bits(packed, tree.width, impl="torch"),
            flat_verify_mask(on_gpu, lens_gpu, total, impl="torch"),
        )

    dense, packed, unpacked, flat = replay_in_cuda_graph(masks)
    expected = ancestor_mask(tree, impl="reference")
    assert torch.equal(dense.cpu(), expected)
    assert torch.equal(packed.cpu(), pack_bits(expected, impl="reference"))
    assert torch.equal(unpacked.cpu(), expected)
    assert torch.equal(flat.cpu(), flat_verify_mask(tree, prefix_lens, total, impl="reference"))

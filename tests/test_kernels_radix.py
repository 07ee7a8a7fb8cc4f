"""kernels/radix.pick_digit: one radix digit from a histogram, checked against the running counts."""

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from ddtree_core.kernels.radix import max_min_min, min_max, pick_digit  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def _pick_kernel(hist_ptr, left_ptr, out_ptr, BINS: tl.constexpr):
    hist = tl.load(hist_ptr + tl.arange(0, BINS))
    chosen, below, inside = pick_digit(hist, tl.load(left_ptr), BINS)
    tl.store(out_ptr, chosen)
    tl.store(out_ptr + 1, below)
    tl.store(out_ptr + 2, inside)


def expected(hist: np.ndarray, left: int) -> tuple[int, int, int]:
    cum = np.cumsum(hist)
    chosen = int((cum < left).sum())
    return chosen, int(hist[:chosen].sum()), int(hist[chosen]) if chosen < len(hist) else 0


@pytest.mark.parametrize("seed", range(6))
def test_pick_digit_matches_the_running_counts(seed):
    rng = np.random.default_rng(seed)
    hist = rng.integers(0, 4, 16) * (rng.random(16) < 0.6)  # empty digits too
    total = int(hist.sum()) or 1
    hist[0] += hist.sum() == 0
    for left in sorted({1, total, int(rng.integers(1, total + 1))}):
        out = torch.zeros(3, dtype=torch.int32, device=DEVICE)
        _pick_kernel[(1,)](torch.tensor(hist, dtype=torch.int32, device=DEVICE),
                           torch.tensor([left], dtype=torch.int32, device=DEVICE), out, BINS=16)  # fmt: skip
        assert tuple(out.tolist()) == expected(hist, left), (hist, left)


@triton.jit
def _bounds_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0)
    lo, hi = min_max(tl.where(m, x, 2147483647), tl.where(m, x, -2147483648))
    a, b, c = max_min_min(tl.where(m, x, -2147483648), tl.where(m, x, 2147483647), tl.where(m, x * 2, 2147483647))
    tl.store(out_ptr, lo)
    tl.store(out_ptr + 1, hi)
    tl.store(out_ptr + 2, a)
    tl.store(out_ptr + 3, b)
    tl.store(out_ptr + 4, c)


def test_bounds_in_one_reduction():
    x = torch.tensor([5, -3, 9, 0, 7], dtype=torch.int32, device=DEVICE)
    out = torch.zeros(5, dtype=torch.int32, device=DEVICE)
    _bounds_kernel[(1,)](x, 5, out, BLOCK=8)
    assert out.tolist() == [-3, 9, 9, -3, -6]

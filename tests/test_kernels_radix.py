"""kernels/radix.pick_digit: one radix digit from a histogram, checked against the running counts."""

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from ddtree_core.kernels.radix import pick_digit  # noqa: E402

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

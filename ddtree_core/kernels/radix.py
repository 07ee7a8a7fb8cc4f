"""Block reductions of the radix selections shared by the top-K and the tree build, each one pass where
separate tl.sum / tl.min / tl.max calls would take one barrier each: a digit from a pass's histogram (the
bucket that holds the `left`-th smallest key), and the bounds of a block of keys."""

from __future__ import annotations

import triton
import triton.language as tl

_I32_MAX = tl.constexpr(2147483647)


@triton.jit
def _count_max_min(c0, m0, n0, c1, m1, n1):
    return c0 + c1, tl.maximum(m0, m1), tl.minimum(n0, n1)


@triton.jit
def pick_digit(hist, left, BINS: tl.constexpr):
    """(chosen, below, inside) for a histogram [BINS] int32 of a bucket's keys by digit, and 1 <= left:
    chosen is the digit holding the left-th key (the number of digits whose running count stays below
    left), below the keys of the digits before it, inside the keys of digit `chosen` (0 if chosen = BINS).
    The running counts never decrease, so below is the largest running count under left and below +
    inside the smallest at or above it: one reduction gives all three."""
    cum = tl.cumsum(hist, 0)
    under = cum < left
    chosen, below, upto = tl.reduce(
        (under.to(tl.int32), tl.where(under, cum, 0), tl.where(under, _I32_MAX, cum)), 0, _count_max_min
    )
    return chosen, below, tl.where(chosen < BINS, upto - below, 0)


@triton.jit
def _min_max(a0, b0, a1, b1):
    return tl.minimum(a0, a1), tl.maximum(b0, b1)


@triton.jit
def _max_min_min(a0, b0, c0, a1, b1, c1):
    return tl.maximum(a0, a1), tl.minimum(b0, b1), tl.minimum(c0, c1)


@triton.jit
def min_max(a, b):
    """(min a, max b) of a block in one reduction."""
    return tl.reduce((a, b), 0, _min_max)


@triton.jit
def max_min_min(a, b, c):
    """(max a, min b, min c) of a block in one reduction."""
    return tl.reduce((a, b, c), 0, _max_min_min)

"""One dispatch point for the three implementations of every hot operation.

- "reference": plain host code (heapq, Python loops); the oracle, slow, exact.
- "torch": batched tensor code with static shapes and no host sync; runs anywhere torch runs and can
  be captured in a CUDA graph.
- "triton": fused kernels under ddtree_core/kernels; CUDA devices (or TRITON_INTERPRET=1 on the CPU).

`resolve(None, device)` picks the best available for the device: triton on CUDA when Triton imports,
torch otherwise. Tests pin an implementation with `force("reference")`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
from collections.abc import Iterator

import torch

IMPLS = ("reference", "torch", "triton")

_forced: contextvars.ContextVar[str | None] = contextvars.ContextVar("ddtree_impl", default=None)


@functools.cache
def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def resolve(impl: str | None, device: torch.device | str) -> str:
    """The implementation to run: `impl` if given, else the forced one, else the best available."""
    impl = impl or _forced.get()
    if impl is None:
        on_cuda = torch.device(device).type == "cuda"
        return "triton" if on_cuda and triton_available() else "torch"
    if impl not in IMPLS:
        raise ValueError(f"unknown implementation {impl!r}; expected one of {IMPLS}")
    if impl == "triton" and not triton_available():
        raise RuntimeError("impl='triton' needs the triton package (pip install 'ddtree[triton]')")
    return impl


@contextlib.contextmanager
def force(impl: str) -> Iterator[None]:
    """Run every dispatching call in this context with `impl` (tests, benchmarks)."""
    if impl not in IMPLS:
        raise ValueError(f"unknown implementation {impl!r}; expected one of {IMPLS}")
    token = _forced.set(impl)
    try:
        yield
    finally:
        _forced.reset(token)


def budgets_tensor(budget: int | torch.Tensor, batch: int, device: torch.device) -> torch.Tensor:
    """Per-request budgets as an int64 tensor [B] on `device`."""
    if isinstance(budget, torch.Tensor):
        return budget.to(device=device, dtype=torch.int64).reshape(batch)
    return torch.full((batch,), int(budget), dtype=torch.int64, device=device)

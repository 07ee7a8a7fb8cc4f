"""Phase stamps inside a Triton program (CUDA only): where a one-program-per-row kernel spends its time.

A profiled launch passes an int64 buffer [programs, slots]; each program writes, after a barrier, the SM's
cycle counter (%clock64) at the end of each phase, and the global nanosecond timer (%globaltimer) at its
first and last slot. `phase_times` turns the stamps into mean microseconds per program, converting cycles at
the rate the global timer measured across each program (so no clock rate is assumed). Without PROFILE,
`stamp` compiles to nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl


@triton.jit
def stamp(clock_ptr, slot, PROFILE: tl.constexpr, GLOBAL: tl.constexpr = False):
    """After a barrier, the SM's cycle counter (GLOBAL: the global nanosecond timer) to clock_ptr[slot]."""
    if PROFILE:
        tl.debug_barrier()
        if GLOBAL:
            asm: tl.constexpr = "mov.u64 $0, %globaltimer;"
        else:
            asm: tl.constexpr = "mov.u64 $0, %clock64;"
        now = tl.inline_asm_elementwise(asm, "=l", [], dtype=tl.int64, is_pure=False, pack=1)
        tl.store(clock_ptr + slot, now)


def check_clock(clock: torch.Tensor, programs: int, slots: int) -> None:
    """A profiled launch's buffer must be int64 [programs, slots] on a CUDA device."""
    if clock.device.type != "cuda" or clock.dtype != torch.int64 or clock.shape != (programs, slots):
        raise ValueError(f"clock must be an int64 CUDA tensor [{programs}, {slots}], got {clock.dtype} "
                         f"{tuple(clock.shape)} on {clock.device}")  # fmt: skip


def phase_times(clock: torch.Tensor, names: Sequence[str]) -> dict[str, float]:
    """Mean microseconds per program of each phase, and 'total' (the global timer).

    clock: [programs, len(names) + 3] int64: slot 0 the global timer at the start, 1 the cycle counter
    there, 2 + i the cycle counter after phase names[i], the last slot the global timer at the end.
    """
    stamps = clock.double().cpu()
    if stamps.shape[1] != len(names) + 3:
        raise ValueError(f"{len(names)} phases need {len(names) + 3} slots, got {stamps.shape[1]}")
    ns_per_cycle = (stamps[:, -1] - stamps[:, 0]) / (stamps[:, -2] - stamps[:, 1])
    cycles = stamps[:, 1:-1]
    times = {name: float(((cycles[:, i + 1] - cycles[:, i]) * ns_per_cycle).mean()) / 1e3
             for i, name in enumerate(names)}  # fmt: skip
    times["total"] = float((stamps[:, -1] - stamps[:, 0]).mean()) / 1e3
    return times

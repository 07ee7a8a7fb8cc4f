"""Programmatic dependent launch (PDL, Hopper and later) for the kernels of a round.

A kernel launched with PDL may be scheduled while the kernel before it in the stream is finishing: the launch's
setup and its programs' placement overlap that kernel's last steps instead of following them. Every program of
such a kernel first waits (griddepcontrol.wait) until the kernel before it has finished and its writes are
visible, before it reads anything: each read comes after the previous kernel, as in a plain launch, and since
each kernel finishes only after that wait returned, after every kernel before it. A program lets the next
kernel be scheduled (griddepcontrol.launch_dependents, which takes effect once every program of the kernel has
done so) only after its last store: letting it in at the start parks the next kernel's programs, waiting, on
SMs that the running kernel's later programs need.
A kernel before it that does not let dependents start (a torch kernel, or one launched without PDL) counts as
letting them start when it finishes: the launch is then a plain one. On a CUDA graph's capture the launches
become programmatic edges.

A kernel lets its dependents in at its end, not its start: let in early, the selection and build programs
would sit waiting on SMs that the many one-warp emit programs need.

`options(device)` gives the launch arguments: PDL on (the kernels' PDL flag and Triton's launch_pdl) on CUDA
devices of compute capability 9.0 and above, unless `configure(False)` turned it off for the process or the
Triton interpreter runs (which runs no PTX); else off, where `wait_for_inputs` and `let_next_start` compile to
nothing. The kernels read no environment: the entry points pass their configuration in (the SGLang plugin and
ddbench's kernel tools call `configure(from_environ(os.environ))`, so DDTREE_PDL=0 turns PDL off there).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


@triton.jit
def wait_for_inputs(PDL: tl.constexpr):
    """The first step of a kernel launched with PDL: wait until the kernel before it has finished."""
    if PDL:
        gdc_wait()


@triton.jit
def let_next_start(PDL: tl.constexpr):
    """The last step of a kernel launched with PDL: the next kernel may be scheduled once every program did this."""
    if PDL:
        gdc_launch_dependents()


ENV = "DDTREE_PDL"  # "0" turns PDL off where an entry point passes its environment to `from_environ`
_enabled = True


def configure(enabled: bool) -> None:
    """PDL on (the default) or off for every later launch in this process."""
    global _enabled
    _enabled = bool(enabled)


def from_environ(environ: Mapping[str, str]) -> bool:
    """Whether `environ` leaves PDL on: every value of DDTREE_PDL but "0" does, e.g. {"DDTREE_PDL": "0"} -> False."""
    return environ.get(ENV, "1").strip() != "0"


def options(device: torch.device) -> dict:
    """The PDL launch arguments of a kernel on `device` (its PDL constexpr, and Triton's launch_pdl when on)."""
    on = device.type == "cuda" and _enabled and not interpreted()
    on = on and _capability(device.index if device.index is not None else torch.cuda.current_device()) >= 9
    return {"PDL": True, "launch_pdl": True} if on else {"PDL": False}


@functools.cache
def _capability(index: int) -> int:
    return torch.cuda.get_device_capability(index)[0]


def interpreted() -> bool:
    """Whether Triton runs kernels under its interpreter."""
    knobs = getattr(triton, "knobs", None)  # Triton >= 3.4; before, Triton's own variable itself
    return knobs.runtime.interpret if knobs is not None else os.environ.get("TRITON_INTERPRET", "0") == "1"

"""Per-stage time of the DDTree decode round, for finding where a round's time goes on a live server.

    SGLANG_DDTREE_PROFILE_EVERY=200 python -m ddtree_core.sglang.launch_server ...

With the variable set to N > 0 the worker times each stage of every decode round (draft, tree, verify,
...): host time with perf_counter, and on CUDA the device time between CUDA events recorded at the stage
boundaries on the current stream. Every N rounds it synchronizes once, logs one line

    DDTREE profile (200 rounds, batch 1.0): draft host 0.41 gpu 0.38 | tree host 0.52 gpu 0.09 | ...

(milliseconds per round, means over the window) and starts a new window. Unset or 0: every call is a
no-op and nothing is recorded. The one synchronization per window makes this a diagnostic mode: it
perturbs overlap scheduling, so measure throughput without it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator

import torch

ENV_PROFILE_EVERY = "SGLANG_DDTREE_PROFILE_EVERY"

logger = logging.getLogger(__name__)
_OFF = contextlib.nullcontext()


class StageTimer:
    """Host and device time per named stage of a round (see the module docstring)."""

    def __init__(self, every: int, device: torch.device | str, log=logger.info):
        self.every = every
        self._cuda = torch.device(device).type == "cuda"
        self._log = log
        self._reset()

    @classmethod
    def from_env(cls, device: torch.device | str, environ=os.environ) -> StageTimer:
        raw = environ.get(ENV_PROFILE_EVERY, "").strip()
        try:
            every = int(raw) if raw else 0
        except ValueError:
            raise ValueError(f"{ENV_PROFILE_EVERY} must be an integer, got {raw!r}") from None
        return cls(max(every, 0), device)

    @property
    def enabled(self) -> bool:
        return self.every > 0

    def _reset(self) -> None:
        self._host: dict[str, float] = {}  # stage -> host seconds in this window
        self._events: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self._rounds = 0
        self._requests = 0

    def stage(self, name: str) -> contextlib.AbstractContextManager:
        """Time the `with` block as stage `name`; when off, a shared no-op context (nothing per round)."""
        return self._timed(name) if self.enabled else _OFF

    @contextlib.contextmanager
    def _timed(self, name: str) -> Iterator[None]:
        start_event = end_event = None
        if self._cuda:
            start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start_event.record()
        start = time.perf_counter()
        try:
            yield
        finally:
            self._host[name] = self._host.get(name, 0.0) + time.perf_counter() - start
            if self._cuda:
                end_event.record()
                self._events.append((name, start_event, end_event))

    def round_done(self, batch_size: int) -> dict[str, tuple[float, float | None]] | None:
        """Count a round; at the end of a window log and return {stage: (host ms, gpu ms or None)} per round."""
        if not self.enabled:
            return None
        self._rounds += 1
        self._requests += batch_size
        if self._rounds < self.every:
            return None
        device_ms: dict[str, float] = {}
        if self._cuda:
            torch.cuda.synchronize()
            for name, start_event, end_event in self._events:
                device_ms[name] = device_ms.get(name, 0.0) + start_event.elapsed_time(end_event)
        rounds = self._rounds
        means = {
            name: (1e3 * host / rounds, device_ms[name] / rounds if name in device_ms else None)
            for name, host in self._host.items()
        }
        parts = [
            f"{name} host {host:.3f}" + ("" if gpu is None else f" gpu {gpu:.3f}")
            for name, (host, gpu) in means.items()
        ]
        self._log(f"DDTREE profile ({rounds} rounds, batch {self._requests / rounds:.1f}): " + " | ".join(parts))
        self._reset()
        return means

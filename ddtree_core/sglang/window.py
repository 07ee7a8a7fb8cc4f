"""The SGLang releases the plugin supports: `register()` refuses any other in one line.

SUPPORTED lists releases by number (major.minor.patch); post releases and local builds count as their
release (0.5.15.post1 is 0.5.15). A release is added once `scripts/sglang_window.sh VERSION` passes on it
(the plugin's CPU checks against that SGLang). 0.5.15 is the release that runs on the GPU; 0.5.23 passes
the CPU checks through compat.py, which holds what differs between the two (DFlashWorkerV2's arguments,
the runners' widths, per-round KV id plans, ServerArgs resolved into declarations; README, "SGLang
support"). The releases between them are not checked.

Outside the window the plugin registers nothing: the server stays stock SGLang, where DDTREE is an
unknown algorithm. SGLANG_DDTREE_ALLOW_UNTESTED=1 registers it anyway, with a warning.

Example:
    check("0.5.15.post1", {})  -> (True, None)
    check("0.5.23", {})        -> (True, None)
    check("0.6.0", {})         -> (False, "DDTREE not registered: SGLang 0.6.0 is not a supported release
                                  (supported: 0.5.15, 0.5.23; SGLANG_DDTREE_ALLOW_UNTESTED=1 registers it anyway)")
    check("0.6.0", {"SGLANG_DDTREE_ALLOW_UNTESTED": "1"}) -> (True, "DDTREE on SGLang 0.6.0, ...")

Pure Python: the version comes in as an argument; `sglang_version()` reads the imported SGLang's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

SUPPORTED = ((0, 5, 15), (0, 5, 23))
ALLOW_UNTESTED = "SGLANG_DDTREE_ALLOW_UNTESTED"


def release(version: str) -> tuple[int, int, int] | None:
    """The (major, minor, patch) a version string starts with, else None: "0.5.15.post1" -> (0, 5, 15)."""
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return None if match is None else tuple(int(part) for part in match.groups())


def check(version: str, environ: Mapping[str, str]) -> tuple[bool, str | None]:
    """(whether DDTREE registers on SGLang `version`, the one line to log about it, or None).

    A supported release registers silently; any other is refused with an error line, or registers with a
    warning line when `environ` sets SGLANG_DDTREE_ALLOW_UNTESTED=1.
    """
    if release(version) in SUPPORTED:
        return True, None
    supported = ", ".join(".".join(map(str, number)) for number in SUPPORTED)
    if environ.get(ALLOW_UNTESTED) == "1":
        return True, f"DDTREE on SGLang {version}, not a supported release (supported: {supported}): {ALLOW_UNTESTED}=1"
    return False, (
        f"DDTREE not registered: SGLang {version} is not a supported release "
        f"(supported: {supported}; {ALLOW_UNTESTED}=1 registers it anyway)"
    )


def sglang_version() -> str:
    """The version of the SGLang this process imports."""
    from sglang.version import __version__

    return __version__

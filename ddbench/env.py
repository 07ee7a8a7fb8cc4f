"""The environment stamp every results folder carries, and the default engine for this machine.

A number means little without the machine and code behind it: the stamp records the git commit (and
whether the tree had local changes), GPUs and driver, the versions of torch, triton, transformers,
sglang and this package, and every SGLANG_DDTREE_* / DDTREE_* variable in effect. Nothing here imports
SGLang; its version comes from package metadata. A copy of the code outside git (a GPU machine's) names
its commit in DDBENCH_GIT_SHA and DDBENCH_GIT_DIRTY ("0" or "1").
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("torch", "triton", "transformers", "sglang", "flashinfer-python", "ddtree", "numpy")


def environment_stamp() -> dict[str, Any]:
    """Git sha, GPUs, driver, Python and package versions, host and time, as a JSON-ready dict."""
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": socket.gethostname(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "git": git_state(),
        "gpus": gpu_names(),
        "driver": nvidia_driver(),
        "cuda": _torch_cuda_version(),
        "packages": {name: package_version(name) for name in PACKAGES},
        "settings": ddtree_settings(),
    }


def ddtree_settings(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The SGLANG_DDTREE_* and DDTREE_* environment variables in effect, e.g. {"SGLANG_DDTREE_DRAFT_GRAPH": "1"}."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items()) if k.startswith(("SGLANG_DDTREE_", "DDTREE_"))}


def git_state() -> dict[str, Any]:
    """The checkout's commit and whether tracked files differ from it; outside git, what DDBENCH_GIT_SHA and
    DDBENCH_GIT_DIRTY say (empty values without them)."""
    sha = _run(["git", "-C", str(REPO), "rev-parse", "HEAD"])
    if not sha:
        sha = os.environ.get("DDBENCH_GIT_SHA", "")
        dirty = os.environ.get("DDBENCH_GIT_DIRTY")
        return {"sha": sha, "dirty": None if dirty is None else dirty == "1"}
    dirty = _run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])
    return {"sha": sha, "dirty": bool(dirty)}


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def gpu_names() -> list[str]:
    output = _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    return [line.strip() for line in output.splitlines() if line.strip()] if output else []


def nvidia_driver() -> str | None:
    output = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return output.splitlines()[0].strip() if output else None


def gpu_count() -> int:
    """Visible CUDA devices (0 without torch.cuda)."""
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def sglang_available() -> bool:
    return importlib.util.find_spec("sglang") is not None


def default_engine() -> str:
    """sglang where a GPU and SGLang are importable, else the reference engine (on CPU)."""
    return "sglang" if gpu_count() > 0 and sglang_available() else "reference"


def _torch_cuda_version() -> str | None:
    try:
        import torch

        return torch.version.cuda
    except ImportError:
        return None


def _run(command: list[str]) -> str:
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""

"""The environment stamp every results folder carries, and the default engine for this machine.

A number means little without the machine and code behind it: the stamp records the git commit (and
whether the tree had local changes), GPUs and driver, and the versions of torch, triton, transformers,
sglang and this package. Nothing here imports SGLang; its version comes from package metadata.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
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
    }


def git_state() -> dict[str, Any]:
    """The checkout's commit and whether tracked files differ from it; empty values outside git."""
    sha = _run(["git", "-C", str(REPO), "rev-parse", "HEAD"])
    dirty = _run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])
    return {"sha": sha, "dirty": bool(dirty) if sha else None}


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

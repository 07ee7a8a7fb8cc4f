import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():  # Triton kernels run under the interpreter on a CPU-only machine
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path | None:
    """The offline dataset mirror: $DDBENCH_DATA_DIR, else ../shared/data beside the checkout."""
    for candidate in (os.environ.get("DDBENCH_DATA_DIR"), REPO.parent / "shared" / "data"):
        if candidate and (Path(candidate) / "gsm8k_test.jsonl").exists():
            return Path(candidate)
    return None


@pytest.fixture
def data_dir() -> Path:
    path = shared_data_dir()
    if path is None:
        pytest.skip("no offline dataset mirror (set DDBENCH_DATA_DIR)")
    return path

"""The HF-transformers reference engine: the DFlash drafter, AR / DFlash / DDTree decoding loops at
batch 1, and an HTTP server with SGLang's /generate API.

It is the oracle the SGLang plugin is checked against, the producer of offline baselines, and the
CPU default of the benchmark CLI. It needs transformers (imported here, unlike ddtree_core itself).
"""

from ddtree_core.reference.decode import (
    Generation,
    SamplingConfig,
    SpecConfig,
    StageTimes,
    TreeTrace,
    generate,
)
from ddtree_core.reference.dflash import DFlashDraftModel, DFlashProposer

__all__ = [
    "DFlashDraftModel",
    "DFlashProposer",
    "Generation",
    "SamplingConfig",
    "SpecConfig",
    "StageTimes",
    "TreeTrace",
    "generate",
]

"""The reference engine's verify cost: target forward ms against tokens verified, measured where it runs.

`measure_verify_cost(target, widths)` fills a KV cache with `context` tokens, then times a forward of W new
tokens over it for every W (the verify of a W-token tree, with an additive mask as the tree's; W = 1 is an AR
step), the median of `repeats` after a warm-up pass, the widths interleaved, cutting the cache back after
each. The result prices `budget=auto` (`ddtree_core.policy.AutoBudget`): where the forward turns compute-bound
after a few tokens (a float32 target on a few CPU cores) small trees win; where it stays flat (a GPU) large ones.

Example: `measure_verify_cost(target, (1, 2, 5, 9))` -> CostTable(tokens=(1, 2, 5, 9), ms=(...)): one median
per width, in the order of `tokens`, ready for `AutoBudget(cost, budgets=(1, 4, 8))`.

A table measured once (`ddbench model calibrate`) is saved with `cost_identity(target)`, what the cost depends on:
the target's shape (not its weights), dtype, device and, on a CPU, torch's thread count. `load_cost_table(path,
target, widths)` gives it back only where that identity is the running target's and the table reaches the widest
verify; otherwise None and one line saying why, and the server measures its own (never a crash):

    >>> table, why = load_cost_table("cost.json", target, (1, 5, 9, 17))
    >>> why
    'cost.json was measured for threads 4, this process has 2'
"""

from __future__ import annotations

import inspect
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache

from ddtree_core.policy import CostTable, identity_mismatch, shape_identity


@torch.inference_mode()
def measure_verify_cost(
    target: torch.nn.Module, widths: Sequence[int], *, context: int = 128, repeats: int = 3
) -> CostTable:
    """Median ms of a forward of W tokens over a `context`-token cache, for each W of `widths`."""
    if not widths or min(widths) < 1 or context < 1 or repeats < 1:
        raise ValueError(f"need widths >= 1, context >= 1 and repeats >= 1, got {widths}, {context}, {repeats}")
    device = target.get_input_embeddings().weight.device
    vocab, dtype = target.get_input_embeddings().weight.shape[0], target.get_input_embeddings().weight.dtype
    generator = torch.Generator().manual_seed(0)
    cache_kwarg = "cache" if "cache" in inspect.signature(target.forward).parameters else "past_key_values"
    cache = DynamicCache()
    ids = torch.randint(vocab, (1, context), generator=generator).to(device)
    target(input_ids=ids, use_cache=True, **{cache_kwarg: cache})
    widths = sorted(set(int(w) for w in widths))

    def forward_ms(width: int) -> float:
        new = torch.randint(vocab, (1, width), generator=generator).to(device)
        positions = torch.arange(context, context + width, device=device)[None]
        mask = None
        if width > 1:  # a tree's verify passes an additive mask (decode._compile); a causal one costs the same
            visible = torch.ones(width, context + width, dtype=torch.bool, device=device).tril(context)
            mask = torch.zeros(1, 1, width, context + width, dtype=dtype, device=device)
            mask[0, 0].masked_fill_(~visible, torch.finfo(dtype).min)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        target(input_ids=new, position_ids=positions, attention_mask=mask, use_cache=True, **{cache_kwarg: cache})
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        for layer in cache.layers:  # back to the context (as decode's _keep_path trims)
            layer.keys, layer.values = layer.keys[:, :, :context], layer.values[:, :, :context]
        return 1000 * (time.perf_counter() - start)

    for width in widths:  # warm-up: the first call of a shape pays for its kernels' setup
        forward_ms(width)
    samples = {width: [] for width in widths}
    for _ in range(repeats):  # interleaved, so that a slow moment spreads over every width
        for width in widths:
            samples[width].append(forward_ms(width))
    return CostTable(tuple(widths), tuple(round(statistics.median(samples[w]), 3) for w in widths))


def cost_identity(target: torch.nn.Module) -> dict[str, Any]:
    """What `target`'s verify cost depends on: its config's shape, its dtype, the device (the GPU's name, or
    "cpu") and on a CPU torch's thread count (None on a GPU)."""
    config, weight = target.config, target.get_input_embeddings().weight
    on_gpu = weight.device.type == "cuda"
    return {
        **shape_identity(config),
        "vocab_size": int(weight.shape[0]),
        "dtype": str(weight.dtype).removeprefix("torch."),
        "device": torch.cuda.get_device_name(weight.device) if on_gpu else weight.device.type,
        "threads": None if on_gpu else torch.get_num_threads(),
    }


def load_cost_table(
    path: str | Path, target: torch.nn.Module, widths: Sequence[int]
) -> tuple[CostTable | None, str | None]:
    """(the table in `path`, None) where it was measured for this target (`cost_identity` equal in every field)
    and reaches max(widths); else (None, one line saying why: unreadable, another identity, too narrow)."""
    try:
        data = json.loads(Path(path).read_text())
        table = CostTable.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return None, f"{path} is not a cost table ({type(error).__name__}: {first})"
    mismatch = identity_mismatch(data, cost_identity(target))
    if mismatch is not None:
        return None, f"{path} {mismatch}"
    if table.tokens[-1] < max(widths):
        return None, f"{path} reaches {table.tokens[-1]} tokens, the widest verify here is {max(widths)}"
    return table, None

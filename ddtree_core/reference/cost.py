"""The reference engine's verify cost: target forward ms against tokens verified, measured where it runs.

`measure_verify_cost(target, widths)` fills a KV cache with `context` tokens, then times a forward of W new
tokens over it for every W (the verify of a W-token tree, with an additive mask as the tree's; W = 1 is an AR
step), the median of `repeats` after a warm-up pass, the widths interleaved, cutting the cache back after
each. The result prices `budget=auto` (`ddtree_core.policy.AutoBudget`): where the forward turns compute-bound
after a few tokens (a float32 target on a few CPU cores) small trees win; where it stays flat (a GPU) large ones.

Example: `measure_verify_cost(target, (1, 2, 5, 9))` -> CostTable(tokens=(1, 2, 5, 9), ms=(...)): one median
per width, in the order of `tokens`, ready for `AutoBudget(cost, budgets=(1, 4, 8))`.
"""

from __future__ import annotations

import inspect
import statistics
import time
from collections.abc import Sequence

import torch
from transformers import DynamicCache

from ddtree_core.policy import CostTable


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

"""`SGLANG_DDTREE_BUDGET=auto` on the SGLang plugin: each decode round's budget, chosen on the host before the round.

A round's budget fixes its verify width, max(b + 1, block), and so which verify CUDA graph replays; the host picks
it from what it knows without reading the device: the number of running requests, a verify cost table (ms
against tokens verified in the round, `SGLANG_DDTREE_COST_TABLE`, a `ddtree_core.policy.CostTable` JSON such as
`ddbench model calibrate` writes), and running means of what recent rounds' trees expected at every candidate
budget (`ddtree_core.policy.LaggedAuto`). The device computes those expectations every round (`expected_at`,
prefix sums of the tree's path probabilities at the candidate budgets) and they reach the host with the round's
results; the result processor's hook (plugin._collect_round) feeds them to the policy (`observe`), so the
policy lags one round behind, and every TP rank, fed the same rows, chooses the same budget.

A table names what it was measured for (`server_identity`: the target's shape, its dtype, the GPU and the TP size)
and a server takes it only where all of that is its own. Without SGLANG_DDTREE_COST_TABLE, or with one it cannot
read or that was measured for another model, GPU or TP size (a warning), the server measures one at startup
(`measure_cost`: each width's captured verify CUDA graphs replayed at batch sizes 1..64, the median of 5
replays, tokens = batch x width); where it cannot (no graphs, TP > 1, an SGLang that keeps them elsewhere) it
logs one warning and stays at its smallest budget, the chain-sized tree (verify width = the block, as
DFLASH's). A measured table is logged as a document that SGLANG_DDTREE_COST_TABLE takes, so a TP > 1 server of
the same model and GPU can be given one. At TP 1 the policy also learns each round's time outside the verify
(`LaggedAuto.observe_round`).

Example: budgets (15, 31, 63), a table whose 16-, 32- and 64-token verifies cost about the same and whose
1,024-token verify costs 4x: at one request the policy soon takes 63 (most expected tokens for the same time),
at sixteen 15.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

from ddtree_core.policy import CostTable, LaggedAuto, expected_accepts, identity_mismatch, shape_identity
from ddtree_core.types import DraftTree

logger = logging.getLogger(__name__)

ENV_COST_TABLE = "SGLANG_DDTREE_COST_TABLE"

_policy: LaggedAuto | None = None  # the process's policy (one DDTree worker per scheduler process)


def server_identity(config: object, dtype: object, device: str, tp_size: int) -> dict[str, object]:
    """What a server's verify cost depends on, as a cost table records it: the target's shape (its Hugging Face
    text config), its dtype, the GPU's name and the TP size.

    Example: the testbed target inflated to Llama-3.1-8B's shape in bfloat16 on one H200 ->
    {"model_type": "llama", "hidden_size": 4096, ..., "vocab_size": 49152, "dtype": "bfloat16",
    "device": "NVIDIA H200", "tp_size": 1}."""
    return {
        **shape_identity(config),
        "dtype": str(dtype).removeprefix("torch."),
        "device": device,
        "tp_size": tp_size,
    }


def load_cost(
    environ: Mapping[str, str], identity: Mapping[str, object] | None = None
) -> tuple[CostTable | None, str | None]:
    """The cost table SGLANG_DDTREE_COST_TABLE names, or (None, why not) when it is unset, unreadable, or records
    another `identity` (`server_identity`; a field the table lacks counts as another; None: not checked)."""
    path = environ.get(ENV_COST_TABLE, "").strip()
    if not path:
        return None, f"{ENV_COST_TABLE} is unset"
    try:
        data = json.loads(Path(path).read_text())
        table = CostTable.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError) as error:
        return None, f"{ENV_COST_TABLE}={path} cannot be read ({error})"
    mismatch = None if identity is None else identity_mismatch(data, identity)
    if mismatch is not None:
        return None, f"{ENV_COST_TABLE}={path} {mismatch}"
    return table, None


MEASURED_BATCHES = (1, 2, 4, 8, 16, 32, 64)  # the batch sizes measure_cost replays, where captured
MEASURED_TOKENS = 4096  # and not past this many tokens in one verify


def measure_cost(graphs: Mapping[int, Mapping[int, object]], repeats: int = 5) -> CostTable | None:
    """A cost table from verify CUDA graphs, {width: {batch size: graph}}: each graph of a MEASURED_BATCHES size
    and at most MEASURED_TOKENS tokens replayed once, then `repeats` times between CUDA events; tokens = batch x
    width -> the median ms (the least where two shapes verify as many tokens). None without such graphs.
    The graphs replay what their capture left in their buffers: dummy requests writing SGLang's padding slot."""
    times: dict[int, float] = {}
    for width, by_batch in graphs.items():
        for batch, graph in sorted(by_batch.items()):
            if batch not in MEASURED_BATCHES or batch * width > MEASURED_TOKENS:
                continue
            graph.replay()
            torch.cuda.synchronize()
            samples = []
            for _ in range(repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end))
            tokens, ms = batch * width, statistics.median(samples)
            times[tokens] = min(ms, times.get(tokens, ms))
    if not times:
        return None
    tokens = sorted(times)
    return CostTable(tuple(tokens), tuple(times[t] for t in tokens))


def make_policy(
    budgets: Sequence[int],
    block_size: int,
    environ: Mapping[str, str],
    measure: Callable[[], CostTable | None] | None = None,
    identity: Mapping[str, object] | None = None,
) -> LaggedAuto:
    """The policy of a server taking `budgets` (increasing), of `identity` (`server_identity`): priced by
    SGLANG_DDTREE_COST_TABLE, else by what `measure` returns (with a warning first where the table given cannot
    be read or records another identity); without either, one that stays at the smallest budget (one warning)."""
    cost, why = load_cost(environ, identity)
    if cost is None and measure is not None:
        if not why.endswith("is unset"):
            logger.warning("DDTREE auto: %s; measuring one instead.", why)
        try:
            cost = measure()
        except Exception as error:  # a measurement that fails must not stop the server: auto stays at the chain
            why = f"{why} and measuring one failed ({type(error).__name__}: {error})"
        else:
            if cost is None:
                why = f"{why} and no verify CUDA graphs to measure one with"
            else:
                ms = [round(ms, 3) for ms in cost.ms]
                document = json.dumps({**(identity or {}), "tokens": list(cost.tokens), "ms": ms})
                logger.info("DDTREE auto: verify ms by tokens, measured (as %s takes it): %s", ENV_COST_TABLE, document)
    if cost is None:
        logger.warning(
            "DDTREE auto: %s, so rounds stay at budget %d (verify width %d); `ddbench model calibrate` writes a table.",
            why,
            budgets[0],
            max(budgets[0] + 1, block_size),
        )
        budgets = budgets[:1]
        cost = CostTable((1,), (1.0,))
    return LaggedAuto(cost, tuple(budgets), block_size)


def install(policy: LaggedAuto | None) -> None:
    """Make `policy` the one the result hook feeds (None: none)."""
    global _policy
    _policy = policy


def expected_at(tree: DraftTree, budgets: Sequence[int]) -> torch.Tensor:
    """[B, len(budgets)] float32: each request's expected accepted nodes at each budget, from its tree built at the
    largest (columns past the tree's width read its last). Columns by plain indexing: an index tensor made from
    a host list would be a pageable host-to-device copy, which waits for the stream every round."""
    expected = expected_accepts(tree)
    last = expected.shape[1] - 1
    return torch.stack([expected[:, min(b, last)] for b in budgets], dim=1)


def observe(expected_row: Sequence[float] | None, used: int | None, accepted_nodes: int) -> None:
    """One request's round, as the result hook sees it; nothing without a policy or the round's expectations."""
    policy = _policy
    if policy is None or expected_row is None or used is None:
        return
    policy.observe(list(expected_row)[: len(policy.budgets)], used, accepted_nodes)

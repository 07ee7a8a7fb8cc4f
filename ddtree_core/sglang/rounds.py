"""One DDTree decode round's tensors, engine-free: everything the SGLang worker computes between the
drafter's logits and SGLang's KV helpers, in plain torch (no host reads, static shapes).

A round of a batch of B requests, widths fixed by ServerSettings (config.py):

    drafter logits [B, D, V] ──draft_tree──> DraftTopK [B, D, K], DraftTree (W = N + 1 columns)
    tree + bonus + prefix lens ──verify_batch──> tokens / positions [B, W], FULL_MASK custom mask
    target tokens [B, W] ──follow_tree──> TreeWalk (path [B, D + 1])
    tree + walk ──committed_path──> flat verify indices of the path, emitted tokens, commit lens
    tree + walk + top-K ──round_stats_rows──> [B, STATS_COLUMNS + D] int32 (host: summary_from_rows)

round_tail does the last three in one call (one Triton launch on CUDA).

Verify column i of request b is flat verify token b * W + i (SGLang lays verify tokens out request
by request), so a node's KV slot, logits row and hidden-state row are all found at that index.

Per-request settings (TreeSettings) never change a shape: a smaller budget leaves padding columns,
a smaller depth limit sets the drafter's log-probs of deeper positions to -inf, a temperature divides
that request's logits before the top-K.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ddtree_core import metrics, ops
from ddtree_core.encoding import positions as tree_positions
from ddtree_core.mask import ancestor_mask, scatter_verify_mask
from ddtree_core.settings import TreeSettings
from ddtree_core.sglang.config import ServerSettings
from ddtree_core.tree import DraftTopK, DraftTree, build_tree_from_topk, draft_topk
from ddtree_core.types import STATS_COLUMNS, CommittedPath
from ddtree_core.verify import TreeWalk, emitted_tokens, follow_tree


@dataclass(frozen=True)
class RequestLimits:
    """Per-request overrides as device tensors (only built when some request has one)."""

    budgets: torch.Tensor  # [B] int64, 0 .. server budget
    max_depths: torch.Tensor  # [B] int64, 1 .. server tree depth
    draft_temperatures: torch.Tensor  # [B] float32, > 0
    hold_chains: torch.Tensor  # [B] bool, trees that hold the drafter's chain


@dataclass(frozen=True)
class VerifyBatch:
    """The target verify forward's inputs. W = N + 1 columns per request, root first."""

    tokens: torch.Tensor  # [B, W] int64: bonus, then node tokens; padding columns repeat the bonus
    positions: torch.Tensor  # [B, W] int64: prefix_len + depth (padding: prefix_len)
    custom_mask: torch.Tensor  # [W * prefix_total + B * W * W] bool, SGLang's FULL_MASK layout


def request_limits(
    settings: Sequence[TreeSettings], server: ServerSettings, device: torch.device
) -> RequestLimits | None:
    """Device tensors of per-request settings, or None when every request runs the server defaults."""
    default = server.request_defaults()
    if all(s == default for s in settings):
        return None
    staged = staged_limits(settings, pin=torch.device(device).type == "cuda")
    fields = dataclasses.fields(RequestLimits)
    return RequestLimits(*(getattr(staged, f.name).to(device, non_blocking=True) for f in fields))


def staged_limits(settings: Sequence[TreeSettings], *, pin: bool) -> RequestLimits:
    """Per-request settings as host tensors (pinned for an asynchronous copy: the allocator keeps the
    staging memory alive until the copy completes)."""

    def column(values: list, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, pin_memory=pin)

    return RequestLimits(
        budgets=column([s.budget for s in settings], torch.int64),
        max_depths=column([s.max_depth for s in settings], torch.int64),
        draft_temperatures=column([s.draft_temperature for s in settings], torch.float32),
        hold_chains=column([s.hold_chain for s in settings], torch.bool),
    )


def draft_tree(
    draft_logits: torch.Tensor, server: ServerSettings, limits: RequestLimits | None, *, impl: str | None = None
) -> tuple[DraftTopK, DraftTree]:
    """Top-K lists and trees of a batch. draft_logits: [B, D, V] for block positions 1..D (D = tree_depth).

    The tree always has W - 1 = verify_width - 1 node columns; each request fills at most its budget.
    """
    k = max(1, min(server.top_k, draft_logits.shape[-1]))
    if limits is None:
        topk = draft_topk(draft_logits, k, draft_temperature=server.tree.draft_temperature, impl=impl)
        budget: int | torch.Tensor = server.tree.budget
        hold_chain: bool | torch.Tensor = server.tree.hold_chain
    else:
        scaled = draft_logits.float() / limits.draft_temperatures.view(-1, 1, 1)
        topk = _limit_depths(draft_topk(scaled, k, draft_temperature=1.0, impl=impl), limits.max_depths)
        budget, hold_chain = limits.budgets, limits.hold_chains
    tree = build_tree_from_topk(
        topk,
        budget,
        max_depth=server.tree_depth,
        max_budget=server.verify_width - 1,
        hold_chain=hold_chain,
        impl=impl,
    )
    return topk, tree


def draft_block_inputs(
    bonus: torch.Tensor,
    prefix_lens: torch.Tensor,
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    *,
    block: int,
    width: int,
    mask_token_id: int,
    impl: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The round's first inputs, int64: the drafter's block [bonus, MASK x (block - 1)] [B, block], its
    positions prefix + 0..block-1 [B, block], the KV slot of every verify column,
    req_to_token[req_pool_indices[b], prefix + 0..W-1] [B, W] (the reservation of prepare_for_decode
    covers W), and its first `block` columns as a contiguous [B, block] (where the drafter writes its
    block's KV). "triton": one launch."""
    if ops.resolve(impl, bonus.device) == "triton":
        from ddtree_core.kernels import round_inputs

        return round_inputs.draft_block_inputs(
            bonus, prefix_lens, req_pool_indices, req_to_token, block=block, width=width, mask_token_id=mask_token_id
        )
    batch = bonus.shape[0]
    prefix = prefix_lens.to(torch.int64).unsqueeze(1)
    ids = torch.full((batch, block), mask_token_id, dtype=torch.int64, device=bonus.device)
    ids[:, 0] = bonus
    columns = prefix + torch.arange(width, device=bonus.device)
    cache_loc = req_to_token[req_pool_indices.to(torch.int64).unsqueeze(1), columns].to(torch.int64)
    return ids, columns[:, :block].contiguous(), cache_loc, cache_loc[:, :block].contiguous()


def verify_batch(
    tree: DraftTree, bonus: torch.Tensor, prefix_lens: torch.Tensor, prefix_total: int, *, impl: str | None = None
) -> VerifyBatch:
    """Verify tokens, positions and mask. bonus: [B] the root tokens; prefix_lens: [B] committed lengths;
    prefix_total: their sum on the host (sizes the mask; a larger value leaves 1s past the last request).
    "triton" builds all three in one launch (kernels/round_inputs.py), equal to this composition."""
    if ops.resolve(impl, tree.parents.device) == "triton":
        from ddtree_core.kernels import round_inputs

        return VerifyBatch(*round_inputs.verify_batch(tree, bonus, prefix_lens, prefix_total))
    tokens, positions, masks = tree_verify_inputs(tree, bonus, prefix_lens, impl=impl)
    return VerifyBatch(tokens, positions, scatter_verify_mask(masks, prefix_lens, prefix_total))


def tree_verify_inputs(
    tree: DraftTree, bonus: torch.Tensor, prefix_lens: torch.Tensor, *, impl: str | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The shape-static part of verify_batch: tokens [B, W], positions [B, W], ancestor masks [B, W, W]."""
    tokens = tree.node_token_ids()
    # Root and padding columns carry -1; both get the bonus: the root is the bonus, and a padding
    # column needs some valid id (its mask row sees only the prefix and itself, no node sees it).
    tokens = torch.where(tokens < 0, bonus.to(tokens.dtype).unsqueeze(1), tokens)
    return tokens, tree_positions(tree, prefix_lens), ancestor_mask(tree, impl=impl)


def committed_path(
    tree: DraftTree, walk: TreeWalk, prefix_lens: torch.Tensor, *, cache_loc: torch.Tensor
) -> CommittedPath:
    """The accepted path laid out for SGLang's KV move and draft-KV write (see CommittedPath).

    cache_loc: [B, W] int64, the KV slot the verify forward writes for each column.
    """
    batch, length = walk.accepted.shape
    width = tree.width
    if cache_loc.shape != (batch, width):
        raise ValueError(f"cache_loc must be [B, N+1] = {(batch, width)}, got {tuple(cache_loc.shape)}")
    row_start = torch.arange(batch, device=walk.accepted.device).unsqueeze(1) * width
    on_path = walk.accepted >= 0
    steps = torch.arange(length, device=walk.accepted.device).unsqueeze(0)
    prefix = prefix_lens.to(torch.int64)
    slots = cache_loc.to(torch.int64)
    # A path holds at most W nodes, so slot k >= W is padding: clamped to stay inside the gather.
    verify_slots = slots.gather(1, steps.clamp(max=width - 1).expand(batch, -1))
    return CommittedPath(
        accept_index=torch.where(on_path, row_start + walk.accepted, -1),
        hidden_rows=row_start + walk.accepted.clamp(min=0),
        positions=prefix.unsqueeze(1) + steps,
        out_tokens=emitted_tokens(tree, walk).clamp(min=0),
        kv_dst=torch.where(on_path, verify_slots, 0),
        kv_src=torch.where(on_path, slots.gather(1, walk.accepted.clamp(min=0)), 0),
        commit_lens=walk.accept_lens.to(torch.int32),
        new_seq_lens=prefix + walk.accept_lens,
    )


def round_stats_rows(tree: DraftTree, walk: TreeWalk, topk: DraftTopK, *, impl: str | None = None) -> torch.Tensor:
    """Per-request round statistics, [B, len(STATS_COLUMNS) + D] int32 (D = topk positions).

    Columns: STATS_COLUMNS, then the target token's rank at depths 1..D (-1 past the walk; K = miss).
    The expected accept length (float32) travels as its bit pattern so the row stays one int tensor.
    """
    batch = tree.batch_size
    ranks = metrics.target_token_ranks(topk.token_ids, emitted_tokens(tree, walk), walk.accept_lens, impl=impl)
    expected = metrics.expected_acceptance_length(tree).float().contiguous().view(torch.int32)
    fixed = [
        walk.accept_lens,
        tree.num_nodes,
        tree.depths.max(dim=1).values,
        torch.full((batch,), topk.token_ids.shape[-1], device=ranks.device),
    ]
    columns = [c.to(torch.int32).unsqueeze(1) for c in fixed] + [expected.unsqueeze(1), ranks.to(torch.int32)]
    return torch.cat(columns, dim=1)


def round_tail(
    tree: DraftTree,
    target_tokens: torch.Tensor,
    topk: DraftTopK,
    prefix_lens: torch.Tensor,
    *,
    cache_loc: torch.Tensor,
    impl: str | None = None,
) -> tuple[TreeWalk, CommittedPath, torch.Tensor]:
    """Everything a round computes after the verify forward: the walk, the committed path and the stats rows.

    target_tokens: [B, W] the target's token at every node; topk: the round's DraftTopK; prefix_lens: [B];
    cache_loc: [B, W] int64, the verify KV slot of every column (CommittedPath.kv_dst / kv_src index it).
    The contract is the composition follow_tree -> committed_path -> round_stats_rows ("torch" and
    "reference" run it); "triton" computes all of it in one launch (kernels/round_tail.py), equal bit for
    bit except the expected accept length column, equal up to float32 rounding of its sum.
    """
    impl = ops.resolve(impl, tree.parents.device)
    if impl == "triton":
        from ddtree_core.kernels import round_tail as kernel

        return kernel.round_tail(tree, target_tokens, topk, prefix_lens, cache_loc=cache_loc)
    walk = follow_tree(tree, target_tokens, impl=impl)
    path = committed_path(tree, walk, prefix_lens, cache_loc=cache_loc)
    return walk, path, round_stats_rows(tree, walk, topk, impl=impl)


def checked_tail_impl(device: torch.device | str, *, impl: str | None = None) -> tuple[str, str | None]:
    """The round_tail implementation to serve with on `device`, and why it is not the preferred one.

    The preferred one (ops.resolve) is tried once on a random round against the torch composition; a
    compile error or any difference (the expected-length column up to float32 rounding) falls back to
    "torch", so a kernel that misbehaves on this device costs speed, never output.
    """
    preferred = ops.resolve(impl, device)
    if preferred != "triton":
        return preferred, None
    generator = torch.Generator().manual_seed(0)
    server = ServerSettings(block_size=16, tree=TreeSettings(budget=24, max_depth=15))
    logits = (torch.randn(3, server.tree_depth, 97, generator=generator) * 3).to(device)
    topk, tree = draft_tree(logits, server, None, impl="torch")
    target = torch.randint(0, 97, (3, tree.width), generator=generator).to(device)
    target[:, 0] = tree.token_ids[:, 0]  # every walk goes at least one deep
    prefix = torch.tensor([5, 0, 300], device=device)
    slots = (torch.randperm(1 << 16, generator=generator)[: 3 * tree.width] + 1).view(3, tree.width).to(device)
    try:
        fused = round_tail(tree, target, topk, prefix, cache_loc=slots, impl="triton")
    except Exception as error:  # a kernel that does not compile here
        return "torch", f"round_tail kernel failed: {type(error).__name__}: {error}"
    expected = round_tail(tree, target, topk, prefix, cache_loc=slots, impl="torch")
    same = all(torch.equal(a, b) for a, b in zip(_tail_tensors(fused), _tail_tensors(expected)))
    bits = len(STATS_COLUMNS) - 1
    close = torch.allclose(fused[2][:, bits].view(torch.float32), expected[2][:, bits].view(torch.float32))
    return ("triton", None) if same and close else ("torch", "round_tail kernel disagrees with the torch path")


def _tail_tensors(tail) -> list[torch.Tensor]:
    walk, path, stats = tail
    bits = len(STATS_COLUMNS) - 1
    rest = torch.cat([stats[:, :bits], stats[:, bits + 1 :]], dim=1)
    return [walk.accepted, walk.accept_lens, walk.bonus, *(getattr(path, f) for f in path.__dataclass_fields__), rest]


def round_stats_from_row(row: Sequence[int]) -> metrics.RoundStats:
    """The host-side RoundStats of one stats row (a list of ints)."""
    tau, nodes, depth, top_k, expected_bits = row[: len(STATS_COLUMNS)]
    ranks = row[len(STATS_COLUMNS) :][:tau]
    return metrics.RoundStats(
        accept_len=tau,
        num_nodes=nodes,
        depth_reached=depth,
        ranks=tuple(r for r in ranks if r >= 0),
        top_k=top_k,
        expected_accept_len=struct.unpack("<f", struct.pack("<i", expected_bits))[0],
    )


def summary_from_rows(rows: Sequence[Sequence[int]]) -> dict:
    """One response's DDTree summary under metrics.SUMMARY_KEYS, from its rounds' stats rows."""
    return metrics.summarize([[round_stats_from_row(row) for row in rows]]).to_dict()


def _limit_depths(topk: DraftTopK, max_depths: torch.Tensor) -> DraftTopK:
    """-inf log-probs at depths past each request's limit. Depth 1 alone offers K >= request budget finite
    candidates (K = the server budget, or SGLANG_DDTREE_TOP_K when a request lowers its depth: config.py
    refuses K below its budget then; the worker refuses a vocabulary smaller than the budget), so a
    request's best nodes never include a -inf one: its tree equals the depth-limited tree."""
    depth = torch.arange(1, topk.log_probs.shape[1] + 1, device=topk.log_probs.device).view(1, -1, 1)
    allowed = depth <= max_depths.view(-1, 1, 1)
    return DraftTopK(log_probs=topk.log_probs.masked_fill(~allowed, float("-inf")), token_ids=topk.token_ids)

"""The core's data types, apart from the code that makes them, so that every implementation (the host
reference, the batched torch path in batched.py, the Triton kernels) and every caller imports them from
here: tree.py and verify.py dispatch to the implementations, which import nothing from the dispatchers.

    DraftTopK      the drafter's top-K tokens per block position (tree.draft_topk)
    DraftTree      a batch of draft trees in the parents encoding (tree.build_tree_from_topk)
    TreeWalk       the accepted path and bonus token of each request (verify.follow_tree)
    CommittedPath  what a serving round commits: the KV move, output tokens, new lengths (sglang.rounds)
    STATS_COLUMNS  the leading columns of a round's per-request stats row (sglang.rounds.round_stats_rows)

Worked example: a budget-2 tree over the block [bonus, a, c] whose drafter put a then c first is
DraftTree(token_ids=[[a, c]], parents=[[-1, 0, 1]], depths=[[0, 1, 2]], num_nodes=[2], ...); if the
target's tokens agree with a but not c, TreeWalk(accepted=[[0, 1, -1]], accept_lens=[2], bonus=[the
target's token after a]).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

TRITON_NODE_LIMIT = 1 << 15  # the Triton build packs node indices in 15 bits: 1 + depth * budget < this


@dataclass(frozen=True)
class DraftTopK:
    """The drafter's top-K tokens per block position, sorted best first (ties: smaller id first)."""

    log_probs: torch.Tensor  # [B, L, K] float32, logits / draft_temperature minus their logsumexp
    token_ids: torch.Tensor  # [B, L, K] int64


@dataclass(frozen=True)
class DraftTree:
    """A batch of draft trees in the canonical parents encoding (node 0 = root, nodes in pop order)."""

    token_ids: torch.Tensor  # [B, N] int64, node i's token at column i-1; -1 padding
    parents: torch.Tensor  # [B, N+1] int64, parent node index; root and padding -1
    depths: torch.Tensor  # [B, N+1] int64, root 0; padding -1
    num_nodes: torch.Tensor  # [B] int64, non-root nodes of each tree (<= its budget)
    scores: torch.Tensor  # [B, N+1] float32, path log-prob; root 0.0; padding -inf
    ranks: torch.Tensor  # [B, N+1] int64, rank of the node's token in its depth's top-K; root/padding -1
    max_depth: int  # the depth limit the trees were built with (static; sizes walk outputs)

    @property
    def batch_size(self) -> int:
        return self.parents.shape[0]

    @classmethod
    def root_only(cls, batch: int, max_depth: int, device: torch.device | str) -> DraftTree:
        """Trees of width N = 0 (every budget 0): the root column alone."""

        def full(width: int, fill: float, dtype: torch.dtype = torch.int64) -> torch.Tensor:
            return torch.full((batch, width), fill, dtype=dtype, device=device)

        return cls(
            token_ids=full(0, -1),
            parents=full(1, -1),
            depths=full(1, 0),
            num_nodes=torch.zeros(batch, dtype=torch.int64, device=device),
            scores=full(1, 0.0, torch.float32),
            ranks=full(1, -1),
            max_depth=max_depth,
        )

    def node_token_ids(self) -> torch.Tensor:
        """[B, N+1] int64: every node's token with the root as -1 (its token is the caller's bonus)."""
        root = self.token_ids.new_full((self.batch_size, 1), -1)
        return torch.cat([root, self.token_ids], dim=1)

    @property
    def width(self) -> int:
        """N + 1: the number of verify positions per request, root included."""
        return self.parents.shape[1]

    def prefix(self, budget: int) -> DraftTree:
        """The trees cut to their first `budget` nodes, i.e. width budget + 1; self where it is not wider.

        A best-first tree's first b pops do not depend on what it pops later (a node enters the heap only when
        its parent or its next-higher-ranked sibling pops), so the cut is the tree `build_tree` builds at budget
        b from the same top-K lists: one tree built at the largest budget serves every smaller one.
        Example: a tree of nodes [root, a, b, a1] (parents [-1, 0, 0, 1]) cut to 2 is [root, a, b], num_nodes 2.
        """
        if budget < 0:
            raise ValueError(f"a tree prefix needs budget >= 0, got {budget}")
        if budget + 1 >= self.width:
            return self
        width = budget + 1
        return DraftTree(
            token_ids=self.token_ids[:, :budget].contiguous(),
            parents=self.parents[:, :width].contiguous(),
            depths=self.depths[:, :width].contiguous(),
            num_nodes=self.num_nodes.clamp(max=budget),
            scores=self.scores[:, :width].contiguous(),
            ranks=self.ranks[:, :width].contiguous(),
            max_depth=self.max_depth,
        )


@dataclass(frozen=True)
class TreeWalk:
    """The accepted root-to-node path of each request and the bonus token that follows it."""

    accepted: torch.Tensor  # [B, D+1] int64, accepted node indices root first; -1 padding
    accept_lens: torch.Tensor  # [B] int64, accepted nodes including the root (>= 1)
    bonus: torch.Tensor  # [B] int64, the target's token at the last accepted node


# Columns of a stats row before the per-depth ranks.
STATS_COLUMNS = ("accept_len", "num_nodes", "depth_reached", "top_k", "expected_accept_len_bits")


@dataclass(frozen=True)
class CommittedPath:
    """What a round commits. P = D + 1 = the walk's width; entries past accept_len are padding.

    kv_dst / kv_src are the target KV move, `move_kv_cache(kv_dst.reshape(-1), kv_src.reshape(-1))`: path
    slot k < accept_len copies the slot the verify forward wrote for the k-th path node to the k-th verify
    slot (sequence position prefix_len + k). Every slot k < accept_len is a pair, the identity pairs too (the
    root's always is); padding pairs are 0 -> 0, SGLang's dummy slot, which no request owns (its own helper
    pads so too). A slot is read only by pairs at or before the pair that writes it in this flat order
    (path nodes have increasing indices, so node index >= k), so a move that copies in order, or gathers
    all sources before scattering, leaves every destination with the verify forward's KV.
    """

    accept_index: torch.Tensor  # [B, P] int64, flat verify index b * W + node of the k-th path node; -1 padding
    hidden_rows: torch.Tensor  # [B, P] int64, the same index clamped to the root for padding
    positions: torch.Tensor  # [B, P] int64, prefix_len + k: the path's sequence positions
    out_tokens: torch.Tensor  # [B, P] int64, accepted drafts then the bonus; 0 padding
    kv_dst: torch.Tensor  # [B, P] int64, KV slot cache_loc[b, k] (the k-th verify slot); 0 padding
    kv_src: torch.Tensor  # [B, P] int64, KV slot cache_loc[b, node] of the k-th path node; 0 padding
    commit_lens: torch.Tensor  # [B] int32, tokens committed = accept_len (>= 1)
    new_seq_lens: torch.Tensor  # [B] int64, prefix_len + commit_len

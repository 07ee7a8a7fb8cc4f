"""What the DDTree worker hands to SGLang: the target verify input, the dummy verify input of CUDA-graph
warmups, and the batch result that carries a round's statistics to the host.

The verify input is SGLang's own DFlashVerifyInput (spec_input_type DFLASH_VERIFY): FlashInfer then
builds its attention arguments through `generate_attn_arg_prefill`, and Triton copies `custom_mask`
into its CUDA-graph mask buffer, both with mask rows laid out as ddtree_core.mask.flat_verify_mask
writes them. Nothing about a DDTree verify needs more fields than that.
"""

from __future__ import annotations

import dataclasses

import torch
from sglang.srt.managers.utils import GenerationBatchResult, _async_d2h
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.speculative.dflash_info import DFlashVerifyInput

from ddtree_core.sglang.rounds import VerifyBatch


def verify_input(batch: VerifyBatch, **fields) -> DFlashVerifyInput:
    """The TARGET_VERIFY input of a round: W tokens per request under the tree mask, hidden states
    captured (the accepted path's target features feed the drafter's KV). `fields`: further
    DFlashVerifyInput fields of this SGLang (compat.verify_kwargs: the round's KV plan on 0.5.23)."""
    return DFlashVerifyInput(
        draft_token=batch.tokens.reshape(-1),
        positions=batch.positions.reshape(-1),
        draft_token_num=batch.tokens.shape[1],
        custom_mask=batch.custom_mask,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        **fields,
    )


def dummy_verify_input(width: int, custom_mask: torch.Tensor, is_draft_worker: bool) -> DFlashVerifyInput:
    """The warmup input of a runner `width` tokens per request wide (the target's W, the drafter's block):
    the target's carries the runner's mask buffer, as its captured graph does; the drafter's block
    attention stays mask-free."""
    return DFlashVerifyInput(
        draft_token=None,
        positions=None,
        draft_token_num=width,
        custom_mask=None if is_draft_worker else custom_mask,
        capture_hidden_mode=CaptureHiddenMode.NULL if is_draft_worker else CaptureHiddenMode.FULL,
    )


@dataclasses.dataclass
class DDTreeBatchResult(GenerationBatchResult):
    """A decode round's result plus its per-request statistics (rounds.round_stats_rows)."""

    ddtree_stats: torch.Tensor | None = None  # [B, STATS + D] int32; on the host after copy_to_cpu
    ddtree_budget: int | None = None  # the round's budget (with auto, the one chosen for it)
    ddtree_expected: torch.Tensor | None = None  # auto: [B, candidate budgets] float32 (sglang.auto.expected_at)

    def copy_to_cpu(self, return_logprob: bool, return_hidden_states: bool = True):
        # Queued on the same (copy) stream before the parent records copy_done, so the scheduler's
        # wait on copy_done also covers the statistics: no extra synchronization.
        if self.ddtree_stats is not None and self.ddtree_stats.device.type != "cpu":
            self.ddtree_stats = _async_d2h(self.ddtree_stats)
        if self.ddtree_expected is not None and self.ddtree_expected.device.type != "cpu":
            self.ddtree_expected = _async_d2h(self.ddtree_expected)
        super().copy_to_cpu(return_logprob, return_hidden_states)

"""The DDTREE algorithm object SGLang dispatches on, and its server-argument rules.

DDTREE looks like DFLASH to every SGLang call site that asks `is_dflash()` (target-layer capture,
draft KV-pool scaling, draft CUDA graphs in TARGET_VERIFY mode, the overlap relay, the KV
reservation in DFlashDraftInputV2.prepare_for_decode); only the worker, the verify mask and the
widths differ. SGLang 0.5.15's CustomSpecAlgo lacks `need_topk`, `carries_draft_hidden_states` and
`create_future_map`, which the scheduler calls on every algorithm, so they are defined here.

Widths after `resolve_server_args` (config.py explains them):
- `server_args.speculative_num_draft_tokens` = W, the verify width: the target runner sizes its
  TARGET_VERIFY graphs, attention metadata and KV reservation with it;
- `server_args.speculative_dflash_block_size` = the drafter's block; the draft runner gets a shallow
  copy of the server args whose speculative_num_draft_tokens is the block (`compat.draft_server_args`).
Each runner thus reads its own width, so get_num_tokens_per_bs_for_target_verify keeps the default
(it returns the width it is given). On SGLang 0.5.23 the runners read the published spec bag instead,
which the worker scopes to the block around the draft runner's lifecycle (compat.draft_width).

Resolution (compat.declared_resolution): SGLang 0.5.15 writes the args in place and DDTREE marks them
resolved with a plain attribute; 0.5.23 declares every write (handle_server_args gets a recorder that keeps
ServerArgs fields only), so there the mark is DDTREE's declaration of speculative_dflash_block_size.
"""

from __future__ import annotations

import logging
import os

from sglang.srt.speculative.spec_registry import CustomSpecAlgo

from ddtree_core.sglang import compat
from ddtree_core.sglang.config import ServerSettings

logger = logging.getLogger(__name__)

NAME = "DDTREE"
SUPPORTED_ATTENTION_BACKENDS = ("triton", "flashinfer")
_RESOLVED_MARK = "_ddtree_resolved"
_BLOCK_FIELD = "speculative_dflash_block_size"


class DDTreeSpecAlgo(CustomSpecAlgo):
    """DFLASH's integration points with DDTree's worker (see the module docstring)."""

    def is_dflash(self) -> bool:
        return True

    def supports_target_verify_for_draft(self) -> bool:
        return True  # the DFlash drafter runs a TARGET_VERIFY-mode forward over its block

    def need_topk(self) -> bool:
        return False  # no EAGLE top-k relay between rounds; DFLASH relays only bonus tokens

    def carries_draft_hidden_states(self) -> bool:
        return False

    def create_future_map(self, device, req_to_token_pool, needs_cpu_seq_lens: bool = True):
        from sglang.srt.managers.overlap_utils import FutureMap

        return FutureMap(device, self, req_to_token_pool, needs_cpu_seq_lens)

    def handle_server_args(self, server_args) -> None:
        resolve_server_args(server_args)


def validate_server_args(server_args) -> None:
    """Refuse configurations the DDTree worker does not handle (called before handle_server_args)."""
    from sglang.srt.arg_groups.overrides import attention_backends_of, resolved_view

    view = resolved_view(server_args)
    problems = []
    if view.enable_dp_attention:
        problems.append("--enable-dp-attention")
    if view.pp_size != 1:
        problems.append(f"--pp-size {view.pp_size} (only 1)")
    if view.speculative_use_rejection_sampling:
        problems.append("--speculative-use-rejection-sampling (the tree walk samples the target directly)")
    if view.speculative_draft_window_size is not None:
        problems.append("--speculative-draft-window-size (compact draft KV)")
    if view.speculative_adaptive:
        problems.append("--speculative-adaptive")
    if view.disaggregation_mode != "null":
        problems.append(f"--disaggregation-mode {view.disaggregation_mode}")
    for kind, backend in zip(("prefill", "decode"), attention_backends_of(view)):
        if backend not in SUPPORTED_ATTENTION_BACKENDS:
            problems.append(f"{kind} attention backend {backend!r} (use --attention-backend triton or flashinfer)")
    if problems:
        raise ValueError("--speculative-algorithm DDTREE does not support: " + "; ".join(problems))


def resolve_server_args(server_args) -> None:
    """Apply DFLASH's server-argument rules, then turn speculative_num_draft_tokens into the verify width.

    --speculative-num-draft-tokens / --speculative-dflash-block-size name the drafter's block, as for
    DFLASH (default: the draft model's config). Idempotent: a second call leaves resolved args alone.
    """
    from sglang.srt.arg_groups.speculative_hook import _handle_dflash

    if _is_resolved(server_args):
        return
    # block size, num_steps/topk = 1, draft backend, max_running_requests (on 0.5.23 declared on the record
    # the recorder reads through; the recorder then reads them back)
    _handle_dflash(server_args)
    block_size = int(server_args.speculative_num_draft_tokens)
    settings = ServerSettings.from_env(os.environ, block_size)
    server_args.speculative_dflash_block_size = block_size
    server_args.speculative_num_draft_tokens = settings.verify_width
    setattr(server_args, _RESOLVED_MARK, True)
    logger.info("DDTREE settings: %s", settings.info())


def settings_of(server_args) -> ServerSettings:
    """The settings of a resolved server (the environment is the one the server started with)."""
    if not _is_resolved(server_args):
        raise RuntimeError("DDTREE server args are not resolved (handle_server_args did not run)")
    view = compat.resolved(server_args)
    settings = ServerSettings.from_env(os.environ, int(view.speculative_dflash_block_size))
    if settings.verify_width != view.speculative_num_draft_tokens:
        raise RuntimeError(
            f"DDTREE verify width {settings.verify_width} from SGLANG_DDTREE_* differs from the resolved "
            f"speculative_num_draft_tokens {view.speculative_num_draft_tokens}: the environment changed"
        )
    return settings


def is_ddtree(server_args) -> bool:
    return compat.resolved_field(server_args, "speculative_algorithm") == NAME


def _is_resolved(server_args) -> bool:
    if not compat.declared_resolution():
        # A plain instance attribute: pickled into the spawned schedulers with the args, and ignored by
        # dataclasses.asdict (server_info) because it is not a field.
        return getattr(server_args, _RESOLVED_MARK, False)
    # Declarations travel with the record; only DDTREE's resolution declares the drafter's block (DFLASH's
    # declares speculative_num_draft_tokens alone; a command-line value is raw input, not a declaration).
    return any(_BLOCK_FIELD in declared for _, declared in getattr(server_args, "_resolved_overrides", None) or ())

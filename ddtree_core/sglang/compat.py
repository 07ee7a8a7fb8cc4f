"""What differs between the SGLang releases the plugin supports (window.SUPPORTED), in one place.

Two API generations, told apart by what SGLang itself exposes (not by its version string):

- LEGACY (0.5.15): ServerArgs is a dataclass that resolution writes in place; DFlashWorkerV2 takes
  `(server_args, gpu_id, tp_rank, dp_rank, moe_ep_rank, attn_cp_rank, moe_dp_rank, nccl_port,
  target_worker)` and reads its widths from the server args it is given, so the draft runner gets a
  copy whose speculative_num_draft_tokens is the drafter's block; `forward_batch_generation(batch,
  on_publish)`; KV slot ids are what req_to_token stores.
- CURRENT (0.5.23): ServerArgs is a msgspec record whose resolution is a list of declarations
  (`_resolved_overrides`; a plugin's handle_server_args writes through a recorder that keeps only
  ServerArgs fields), read back through `resolved_view` / `resolution_result`; runners read their widths
  from the published `get_spec()` bag, so the draft runner's lifecycle calls run with that bag's
  speculative_num_draft_tokens scoped to the block (`draft_width`); DFlashWorkerV2 takes `(server_args,
  gpu_id, nccl_port, target_worker)` and `forward_batch_generation(batch, on_publish, grammar_barrier,
  pp_proxy_tensors)`; every forward of a round shares one KVLocPlan (the round's write window,
  translated once per sub-pool) and the target verify may defer its vocab gather (TP > 1).

Example (CURRENT): `draft_width(16)` around the draft runner's construction makes its TARGET_VERIFY
graphs 16 tokens per request while the target's, built outside, stay the verify width W = budget + 1.

Only the functions here branch on the generation; the worker and spec_algo call them.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect


@functools.cache
def declared_resolution() -> bool:
    """Whether ServerArgs resolves into declarations (CURRENT) rather than in place (LEGACY)."""
    from sglang.srt.arg_groups import overrides

    return hasattr(overrides, "declare_resolution") and hasattr(overrides, "resolution_result")


@functools.cache
def worker_api() -> str:
    """The worker API: "legacy" where DFlashWorkerV2 takes per-rank constructor arguments (0.5.15), else "current"."""
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    return "legacy" if "tp_rank" in inspect.signature(DFlashWorkerV2.__init__).parameters else "current"


# ---- server arguments ------------------------------------------------------------------------------


def resolved(server_args):
    """A read view of what resolution decided: the args themselves (LEGACY), else SGLang's resolved view."""
    if not declared_resolution():
        return server_args
    from sglang.srt.arg_groups.overrides import resolved_view

    return resolved_view(server_args)


def resolved_field(server_args, name: str, default=None):
    """One resolved field, without building a whole view (called per request)."""
    if not declared_resolution():
        return getattr(server_args, name, default)
    from sglang.srt.arg_groups.overrides import resolution_result

    return resolution_result(server_args, name, default)


# ---- worker construction and lifecycle -------------------------------------------------------------


def draft_server_args(server_args):
    """LEGACY: a shallow copy for the draft runner whose speculative_num_draft_tokens is the drafter's block.

    copy.copy, not dataclasses.replace (which would re-run ServerArgs.__post_init__). The cached
    `max_speculative_num_draft_tokens` (a cached_property in __dict__) is dropped so it follows.
    """
    draft_args = copy.copy(server_args)
    draft_args.speculative_num_draft_tokens = int(server_args.speculative_dflash_block_size)
    draft_args.__dict__.pop("max_speculative_num_draft_tokens", None)
    return draft_args


def draft_width(block: int):
    """Scope in which SGLang's runners read `block` as their speculative width (CURRENT; LEGACY: none)."""
    if worker_api() == "legacy":
        return contextlib.nullcontext()
    from sglang.srt.runtime_context import get_spec

    return get_spec().override(speculative_num_draft_tokens=int(block))


@contextlib.contextmanager
def target_width(model_runner, width: int):
    """Scope in which the target's runners read `width` as their verify width, while `auto` builds the attention
    backend and verify CUDA graphs of a width below the server's W: the server args' speculative_num_draft_tokens
    (LEGACY; the cached max_speculative_num_draft_tokens keeps W) or the spec bag's (CURRENT)."""
    if worker_api() != "legacy":
        with draft_width(width):
            yield
        return
    args = model_runner.server_args
    saved, cached = args.speculative_num_draft_tokens, "max_speculative_num_draft_tokens" in args.__dict__
    args.speculative_num_draft_tokens = int(width)
    try:
        yield
    finally:
        args.speculative_num_draft_tokens = saved
        if not cached:
            args.__dict__.pop("max_speculative_num_draft_tokens", None)


def build_verify_state(model_runner, width: int):
    """(attention backend, verify CUDA graph runner or None) of the target at verify width `width`, built as
    SGLang builds its adaptive speculation states (a backend with its own workspace, a DecodeCudaGraphRunner
    given that backend and width), graphs only where the target captured its own."""
    with target_width(model_runner, width):
        saved = getattr(model_runner, "init_new_workspace", False)
        try:
            backend = model_runner._get_attention_backend(init_new_workspace=True)
        finally:
            model_runner.init_new_workspace = saved
        runner = None
        if model_runner.decode_cuda_graph_runner is not None:
            from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

            runner = DecodeCudaGraphRunner(model_runner, attn_backend=backend, speculative_num_draft_tokens=int(width))
    return backend, runner


@contextlib.contextmanager
def verify_state(model_runner, state):
    """The target's attention backend and verify graph runner swapped for `state`'s (None: unchanged) during one
    verify (SGLang's prepare_for_verify and forward read both from the model runner)."""
    if state is None:
        yield
        return
    saved = model_runner.attn_backend, model_runner.decode_cuda_graph_runner
    model_runner.attn_backend, model_runner.decode_cuda_graph_runner = state
    try:
        yield
    finally:
        model_runner.attn_backend, model_runner.decode_cuda_graph_runner = saved


def verify_graphs(runner) -> dict:
    """A DecodeCudaGraphRunner's captured graphs by batch size (objects with `.replay()`), one per size; {} where
    this SGLang keeps them otherwise (0.5.15: runner.backend._graphs, keyed by ShapeKey(size=bs))."""
    graphs = getattr(getattr(runner, "backend", None), "_graphs", None)
    if not isinstance(graphs, dict):
        return {}
    found = {}
    for key, graph in graphs.items():
        size = getattr(key, "size", None)
        if isinstance(size, int) and getattr(key, "stream_idx", None) is None and hasattr(graph, "replay"):
            found.setdefault(size, graph)
    return found


def tp_rank(worker) -> int:
    """The worker's (target) tensor-parallel rank."""
    return worker.tp_rank if worker_api() == "legacy" else worker._target_tp_rank


def max_draft_graph_bs(server_args) -> int:
    """The largest batch the draft CUDA graphs serve: max_running_requests, else the largest captured size."""
    if worker_api() == "legacy":
        return int(server_args.max_running_requests or max(server_args.cuda_graph_config.decode.bs))
    from sglang.srt.runtime_context import get_exec

    running = resolved_field(server_args, "max_running_requests")
    return int(running or max(get_exec().graph.cuda_graph_config.decode.bs))


def reserved_seq_lens(draft_input):
    """(host lengths, their sum) of the KV that prepare_for_decode reserved, or (None, None)."""
    if worker_api() == "legacy":
        return draft_input.reserved_seq_lens_cpu, draft_input.reserved_seq_lens_sum
    return draft_input.nxt_kv_lens_cpu, draft_input.nxt_kv_lens_sum


# ---- one decode round ------------------------------------------------------------------------------


def round_plan(worker, batch, draft_input, cache_loc):
    """The round's KV id plan over its write window cache_loc [B, W] (CURRENT), shared by the draft block
    (its first `block` columns), the verify and the draft-KV commit; LEGACY: None."""
    if worker_api() == "legacy":
        return None
    host_lens = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else reserved_seq_lens(draft_input)[0]
    return worker.target_worker.model_runner.kv_index_translator.plan(
        req_pool_indices=batch.req_pool_indices,
        seq_lens=batch.seq_lens,
        seq_lens_cpu=host_lens,
        write_virtual=cache_loc.reshape(-1),
        read_extent=int(cache_loc.shape[1]),
    )


def draft_embeddings(worker, block_ids):
    """The drafter's input embeddings of block_ids [B, block]: the target's embedding (LEGACY); DFLASH's
    embedding module, full-vocabulary copy and noise scale where SGLang has them (CURRENT)."""
    target_model = worker.target_worker.model_runner.model
    if worker_api() == "legacy":
        return target_model.get_input_embeddings()(block_ids)
    import torch
    from sglang.srt.speculative.dflash_worker_v2 import _resolve_dflash_embedding_module, unwrap_lora_layer

    if worker._full_embed_gpu is not None:
        embeds = torch.nn.functional.embedding(block_ids, worker._full_embed_gpu)
    else:
        embeds = unwrap_lora_layer(_resolve_dflash_embedding_module(worker.draft_model, target_model))(block_ids)
    return embeds * worker._noise_embed_scale if worker._noise_embed_scale != 1.0 else embeds


def draft_forward(worker, batch, forward_batch, plan, block: int):
    """Run the drafter's forward over forward_batch; CURRENT: bound to the plan's first `block` columns,
    with DFLASH's padding and graph-eligibility fields (from the scheduler's batch) and inside the draft's
    parallel scope."""
    import torch

    if worker_api() == "legacy":
        with torch.inference_mode():
            return worker.draft_model_runner.forward(forward_batch)
    from sglang.srt.speculative.dflash_worker_v2 import draft_tp_context, enable_num_token_non_padded

    tokens = int(forward_batch.input_ids.numel())
    forward_batch.global_num_token_non_padded_cpu = tokens
    forward_batch.can_run_decode_cuda_graph = batch.can_run_decode_cuda_graph
    if enable_num_token_non_padded():
        forward_batch.num_token_non_padded = torch.full((), tokens, dtype=torch.int32, device=worker.device)
    plan.bind(forward_batch, worker.draft_model_runner.kv_index_translator, cols=slice(0, block))
    with torch.inference_mode(), draft_tp_context(worker.draft_parallel_layout):
        return worker.draft_model_runner.forward(forward_batch)


def verify_kwargs(plan) -> dict:
    """Extra DFlashVerifyInput fields: the round's plan (CURRENT); none (LEGACY)."""
    return {} if plan is None else {"kv_loc_plan": plan}


def full_verify_logits(worker, logits):
    """The verify logits over the whole vocabulary: CURRENT's target may hand back its vocab shard (the
    gather deferred at TP > 1), gathered here; LEGACY's are gathered already."""
    processor = getattr(worker, "_target_logits_processor", None)
    if processor is not None and processor.is_deferred_shard(logits):
        return processor.finish_deferred_gather(logits)
    return logits


def draft_write_ids(worker, plan, cache_loc_2d):
    """cache_loc_2d [B, L] (the round's first L verify slots) as the draft KV pool indexes them."""
    if plan is None:
        return cache_loc_2d
    length = int(cache_loc_2d.shape[1])
    ids = plan.write_ids(worker.draft_model_runner.kv_index_translator, cols=slice(0, length))
    return ids.view(cache_loc_2d.shape)


def translated_kv(model_runner) -> bool:
    """Whether the runner's KV ids differ from what req_to_token stores (CURRENT's unified pools)."""
    translator = getattr(model_runner, "kv_index_translator", None)
    return bool(getattr(translator, "is_translating", False))


# ---- plugin hooks ----------------------------------------------------------------------------------


def published_server_args():
    """The process's published server args; ValueError before they are published. 0.5.15 reads them with
    get_global_server_args, which 0.5.23 retired (it raises) for the runtime context's slot."""
    if not declared_resolution():
        from sglang.srt.server_args import get_global_server_args

        return get_global_server_args()
    from sglang.srt.runtime_context import get_context

    return get_context().server_args


def scheduler_server_args(processor):
    """The server args of the scheduler that owns `processor` (a SchedulerBatchResultProcessor): its field
    on 0.5.15; the process's published args on 0.5.23, whose processor has no such field."""
    server_args = getattr(processor, "server_args", None)
    return published_server_args() if server_args is None else server_args


def dummy_verify_call(original, args, kwargs):
    """create_dummy_verify_input's arguments as (spec_algorithm, custom_mask, width, is_draft_worker).

    LEGACY passes (spec_algorithm, server_args, custom_mask, num_tokens_per_bs, is_draft_worker) and the
    width is that runner's server_args.speculative_num_draft_tokens; CURRENT passes (spec_algorithm,
    custom_mask, num_tokens_per_req, is_draft_worker) and the width is the get_spec() bag's, as SGLang's.
    """
    bound = inspect.signature(original).bind(*args, **kwargs).arguments
    if "server_args" in bound:
        width = bound["server_args"].speculative_num_draft_tokens
    else:
        from sglang.srt.runtime_context import get_spec

        width = get_spec().speculative_num_draft_tokens
    return bound["spec_algorithm"], bound["custom_mask"], int(width), bound["is_draft_worker"]


def worker_entry_points():
    """(__init__, forward_batch_generation) with DFlashWorkerV2's own parameters, which SGLang passes by
    keyword: each hands the worker's `_ddtree_init(server_args, target_worker, *parent_args)` or
    `_ddtree_forward(batch, on_publish, **parent_kwargs)` what it needs."""
    if worker_api() == "legacy":

        def __init__(
            self, server_args, gpu_id, tp_rank, dp_rank, moe_ep_rank, attn_cp_rank, moe_dp_rank, nccl_port,
            target_worker,
        ):  # fmt: skip
            # The parent builds the draft runner from these args: its width is the block, the target keeps W.
            self._ddtree_init(
                server_args, target_worker, draft_server_args(server_args), gpu_id, tp_rank, dp_rank, moe_ep_rank,
                attn_cp_rank, moe_dp_rank, nccl_port, target_worker,
            )  # fmt: skip

        def forward_batch_generation(self, batch, on_publish=None):
            return self._ddtree_forward(batch, on_publish)

    else:

        def __init__(self, server_args, gpu_id, nccl_port, target_worker):
            self._ddtree_init(server_args, target_worker, server_args, gpu_id, nccl_port, target_worker)

        def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None):
            return self._ddtree_forward(
                batch, on_publish, grammar_barrier=grammar_barrier, pp_proxy_tensors=pp_proxy_tensors
            )

    return __init__, forward_batch_generation

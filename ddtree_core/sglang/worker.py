"""The DDTree worker: SGLang's DFlashWorkerV2 with a tree-building, tree-verifying decode round.

Prefill and idle batches run DFLASH's code unchanged (target prefill with hidden-state capture, prompt
features into the draft KV, bonus token). One decode round, all on the device without host reads:

  1. draft:  DFLASH's block [bonus, MASK x (block-1)] through the drafter; its hidden states at block
             positions 1..D through the target's logits processor (lm_head, TP gather, softcap)
  2. tree:   draft_topk + build_tree_from_topk (rounds.draft_tree), per-request limits as padding
  3. verify: W = N + 1 tokens per request [bonus, node tokens], positions prefix + depth, the
             FULL_MASK tree mask; KV slots req_to_token[prefix : prefix + W]
  4. accept: argmax per node (greedy) or a sample of the request's distribution per node, then
             rounds.round_tail (one Triton launch): follow_tree's accepted path and bonus token, the
             path's KV indices and emitted tokens, the round's stats rows
  5. commit: the path's target KV moves to the first accept_len verify slots (round_tail's slot
             pairs: kernels/kv_move.py on slot-row MHA pools, else the pool's move_kv_cache; any page
             size); the path's target hidden states, in path order, become draft KV exactly as DFLASH
             commits its block
  6. result: tokens [B * (D + 1)] (path + bonus, padded), accept_lens = commit lengths, per-round
             statistics for the host (info.DDTreeBatchResult)

With SGLANG_DDTREE_BUDGET=auto (config.py) the host first takes the round's budget b from the policy
(auto.py: running requests, cost table, what recent trees expected), so W = max(b + 1, block) for this round:
the trees are built at the largest budget, each candidate's expected accepted nodes go to the host with the
result, the trees are cut to b (DraftTree.prefix), and the verify runs on the target's attention backend and
CUDA graphs of width W (built at startup beside the server's own, compat.build_verify_state).

At TP = 1 steps 1-2 run inside the drafter's CUDA graph (draft_head.py) unless SGLANG_DDTREE_DRAFT_GRAPH=0;
at TP > 1 only with SGLANG_DDTREE_DRAFT_GRAPH=1.
On CUDA the round's inputs take one launch each (rounds.draft_block_inputs: the block, its positions and
every verify KV slot; rounds.verify_batch: tokens, positions and the mask, whose size depends on the
host's length sum).

The drafter's block KV slots req_to_token[prefix : prefix + block] are the first block verify slots:
both start at the committed prefix, and W >= block (config.py), so DFLASH's reservation of 2 * W
slots covers both.
"""

from __future__ import annotations

import logging
import os
import time

import torch
from sglang.srt.distributed import get_tp_group
from sglang.srt.layers.logits_processor import LogitsMetadata
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2
from sglang.srt.speculative.dflash_utils import apply_dflash_verify_logits_adjustments
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from ddtree_core.kernels import kv_move, pdl
from ddtree_core.settings import ENV_BUDGET, TreeSettings
from ddtree_core.sglang import auto, compat, draft_head, info, rounds
from ddtree_core.sglang.config import SETTINGS_ATTR, DDTreeConfigError
from ddtree_core.sglang.profile import StageTimer
from ddtree_core.sglang.spec_algo import settings_of
from ddtree_core.verify import sample_target_tokens

logger = logging.getLogger(__name__)

SUPPORTED_BACKEND_CLASSES = ("TritonAttnBackend", "FlashInferAttnBackend")


class DDTreeWorker(DFlashWorkerV2):
    """DFLASH's worker whose decode round drafts, verifies and commits a DDTree tree."""

    # DFlashWorkerV2's own parameters on this SGLang (compat.py); they call _ddtree_init / _ddtree_forward.
    __init__, forward_batch_generation = compat.worker_entry_points()

    def _ddtree_init(self, server_args, target_worker, *parent_args):
        self.settings = settings_of(server_args)
        pdl.configure(pdl.from_environ(os.environ))  # DDTREE_PDL=0: plain launches (the kernels read no environment)
        # The draft runner is built at the drafter's block width, the target keeps W (compat: a server-args
        # copy of that width on 0.5.15, which becomes self.server_args; the spec bag scoped to it on 0.5.23).
        with compat.draft_width(self.settings.block_size):
            super().__init__(*parent_args)
        check_target(target_worker.model_runner, self.settings.tree.budget)
        self._logits_processor = target_worker.model_runner.model.logits_processor
        self._kv_mover = None  # (pool, kv_move rows or None), at the first round: the pool comes later
        self._logits_metadata = LogitsMetadata(forward_mode=ForwardMode.DECODE)
        self._warned_request_settings = False
        self._timer = StageTimer.from_env(self.device)
        self._draft_head: draft_head.DraftHead | None = None  # built with the draft CUDA graphs
        self._auto = None  # budget=auto's policy (SGLANG_DDTREE_BUDGET=auto), set with the verify graphs
        self._verify_states = {}  # verify width below W -> (attention backend, graph runner) of the target
        self._last_round = None  # auto at TP 1: (host time, requests, budget) of the last decode round
        self._tail_impl, why = rounds.checked_tail_impl(self.device)
        if why is not None:
            logger.warning("DDTREE: %s; the round tail runs the torch path.", why)
        if compat.tp_rank(self) == 0:
            logger.info("DDTREE worker ready: %s", self.settings.info())

    def _maybe_build_draft_sampler(self):
        # DFLASH folds a greedy argmax into the draft graph. DDTree folds its whole draft side there
        # (draft_head.py) unless SGLANG_DDTREE_DRAFT_GRAPH=0 (or TP > 1 without =1): then after the graph.
        fold = draft_head.enabled()
        if fold is False:
            return None
        if get_tp_group().world_size != 1 and fold is None:
            if compat.tp_rank(self) == 0:
                logger.info("DDTREE draft head kept eager (tp > 1; SGLANG_DDTREE_DRAFT_GRAPH=1 folds it).")
            return None
        runner = self.draft_model_runner
        max_bs = compat.max_draft_graph_bs(self.server_args)
        self._draft_head = draft_head.DraftHead(
            self.settings,
            self._head_logits,
            hidden_size=int(runner.model_config.hidden_size),
            max_bs=max_bs,
            device=self.device,
            dtype=runner.model_config.dtype,
        )
        if compat.tp_rank(self) == 0:
            logger.info("DDTREE draft head folded into the draft cuda graph (max batch %d).", max_bs)
        return self._draft_head

    def alloc_memory_pool(self, memory_pool_config=None, req_to_token_pool=None, token_to_kv_pool_allocator=None):
        with compat.draft_width(self.block_size):  # the draft worker's pool only
            return super().alloc_memory_pool(memory_pool_config, req_to_token_pool, token_to_kv_pool_allocator)

    def init_attention_backends(self):
        with compat.draft_width(self.block_size):  # the draft worker's backends only
            return super().init_attention_backends()

    def init_cuda_graphs(self):
        # The target's graphs are captured before the draft worker's (Scheduler.init_model_worker).
        assert_verify_graph_masked(self.target_worker.model_runner)
        with compat.draft_width(self.block_size):
            super().init_cuda_graphs()
        self._init_auto()

    def _init_auto(self):
        """budget=auto: the policy, and the target's attention backend and verify graphs at each width it may
        take below W (the server's own serve W)."""
        if not self.settings.auto:
            return
        runner = self.target_worker.model_runner
        for width in self.settings.verify_widths[:-1]:  # the last is the server's own W
            self._verify_states[width] = compat.build_verify_state(runner, width)
            assert_verify_graph_masked(runner, self._verify_states[width])

        def measure():  # every width's verify graphs, the server's own included (measured once, at startup)
            if get_tp_group().world_size != 1:
                raise RuntimeError("at TP > 1 each rank would measure its own table and choose its own widths")
            runners = {w: state[1] for w, state in self._verify_states.items()}
            runners[self.settings.verify_width] = runner.decode_cuda_graph_runner
            graphs = {w: compat.verify_graphs(r) for w, r in runners.items() if r is not None}
            return auto.measure_cost(graphs) if any(graphs.values()) else None

        device = torch.device(self.device)
        gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
        config = runner.model_config
        identity = auto.server_identity(config.hf_text_config, config.dtype, gpu, get_tp_group().world_size)
        policy = auto.make_policy(self.settings.auto_budgets, self.block_size, os.environ, measure, identity)
        self._auto, self._auto_timed = policy, get_tp_group().world_size == 1
        auto.install(policy)
        if compat.tp_rank(self) == 0:
            logger.info("DDTREE auto over budgets %s (verify widths %s).", policy.budgets, self.settings.verify_widths)

    def _ddtree_forward(self, batch, on_publish, **parent_kwargs):
        if batch.forward_mode.is_extend() or batch.is_extend_in_batch or batch.forward_mode.is_idle():
            self._last_round = None  # the next decode round's interval would include this batch
            return super().forward_batch_generation(batch, on_publish, **parent_kwargs)
        if getattr(batch, "return_logprob", False):
            raise ValueError("DDTREE speculative decoding does not support return_logprob.")
        if not isinstance(batch.spec_info, DFlashDraftInputV2):
            raise RuntimeError("DDTREE expected DFlashDraftInputV2 state on the running batch.")
        return self._decode_round(batch, on_publish)

    def _decode_round(self, batch, on_publish):
        draft_input, timer = batch.spec_info, self._timer
        if batch.seq_lens.is_cuda:  # it may come from the previous overlap iteration's stream
            batch.seq_lens.record_stream(torch.get_device_module(self.device).current_stream())
        prefix_lens, bs = batch.seq_lens, len(batch.seq_lens)
        request_settings = self._request_settings(batch.reqs)
        budget = self._auto_budget(bs) if self._auto is not None else self.settings.tree.budget
        width = max(budget + 1, self.block_size)  # this round's verify width (the server's W but with auto)
        head = self._draft_head if self._draft_head is not None and bs <= self._draft_head.max_bs else None
        with timer.stage("draft"):
            block_ids, block_positions, cache_loc, block_loc = rounds.draft_block_inputs(  # one launch on CUDA
                draft_input.bonus_tokens,
                prefix_lens,
                batch.req_pool_indices,
                self.model_runner.req_to_token_pool.req_to_token,
                block=self.block_size,
                width=width,
                mask_token_id=int(self._mask_token_id),
            )
            plan = self._round_plan(batch, draft_input, cache_loc)
            if head is not None:
                head.load(request_settings)
            draft_hidden, in_graph = self._draft_block(batch, draft_input, block_ids, block_positions, block_loc, plan)
            if head is None:
                draft_logits = self._draft_logits(draft_hidden[:, 1 : 1 + self.settings.tree_depth])
            elif not in_graph:  # no draft graph for this batch: the head runs eagerly, same buffers
                head(draft_hidden.reshape(bs * self.block_size, -1))
        with timer.stage("tree"):
            if head is None:
                limits = rounds.request_limits(request_settings, self.settings, self.device)
                topk, tree = rounds.draft_tree(draft_logits, self.settings, limits)
        with timer.stage("verify_inputs"):  # one launch on CUDA
            if head is not None:
                topk, tree = head.outputs(bs)
            expected = None
            if self._auto is not None:  # built at the largest budget; what each candidate expects, then the cut
                expected = auto.expected_at(tree, self._auto.budgets)
                tree = tree.prefix(budget)
            prefix_total = _prefix_total(batch, draft_input)
            verify = rounds.verify_batch(tree, draft_input.bonus_tokens, prefix_lens, prefix_total)
        # The verify forward writes its KV there, and the KV move below reads the path's slots from it.
        batch.out_cache_loc = cache_loc.reshape(-1)
        with timer.stage("verify"):
            logits_output, can_run_cuda_graph = self._verify(batch, draft_input, verify, plan, width)
        with timer.stage("walk"):  # the walk, the committed path and the stats rows: one launch on CUDA
            target_tokens = self._target_tokens(batch, logits_output, width)
            walk, path, stats = rounds.round_tail(
                tree, target_tokens, topk, prefix_lens, cache_loc=cache_loc, impl=self._tail_impl
            )
        with timer.stage("commit"):  # the path's KV slot pairs come from round_tail (no index launches)
            self._move_path_kv(path)
            if on_publish is not None:
                on_publish(path.new_seq_lens)
            self._commit_draft_kv(logits_output.hidden_states, cache_loc, block_loc, path, plan)
        logits_output.hidden_states = None  # no D2H of the verify hidden states
        timer.round_done(len(batch.reqs))
        return info.DDTreeBatchResult(
            logits_output=logits_output,
            next_token_ids=path.out_tokens.reshape(-1),
            accept_lens=path.commit_lens,
            can_run_cuda_graph=can_run_cuda_graph,
            next_draft_input=self._make_next_draft_input_decode(
                bonus_tokens=walk.bonus, new_seq_lens=path.new_seq_lens
            ),
            speculative_num_draft_tokens=path.out_tokens.shape[1],  # the stride of next_token_ids
            new_seq_lens=path.new_seq_lens,
            ddtree_stats=stats,
            ddtree_budget=budget,
            ddtree_expected=expected,
        )

    def _auto_budget(self, bs: int) -> int:
        """auto: this round's budget. At TP 1 the host's interval since the previous decode round of as many
        requests first joins the policy's time outside the verify (in steady state the host waits for the device
        each round, so the interval is a round; at TP > 1 ranks would learn different times, so they do not)."""
        now = time.perf_counter()
        if self._last_round is not None and self._auto_timed:
            then, running, budget = self._last_round
            if running == bs:
                self._auto.observe_round(running, budget, 1000 * (now - then))
        budget = self._auto.choose(bs)
        self._last_round = (now, bs, budget)
        return budget

    def _round_plan(self, batch, draft_input, cache_loc: torch.Tensor):
        """The round's KV id plan over its verify slots cache_loc [B, W] (compat.round_plan; None on 0.5.15)."""
        return compat.round_plan(self, batch, draft_input, cache_loc)

    def _draft_block(
        self, batch, draft_input, block_ids: torch.Tensor, positions: torch.Tensor, block_loc: torch.Tensor, plan
    ) -> tuple[torch.Tensor, bool]:
        """DFLASH's draft forward over block_ids [B, block] = [bonus, MASK ...] at positions [B, block], its
        KV into the slots block_loc [B, block] (the plan's first block columns): the drafter's hidden states
        [B, block, H], and whether its CUDA graph ran (then a folded draft head ran with it)."""
        bs, block = len(batch.seq_lens), self.block_size
        embeds = compat.draft_embeddings(self, block_ids)
        seq_lens_cpu, seq_lens_sum = _host_seq_lens(batch, draft_input, extra=block)
        forward_batch = ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY,
            batch_size=bs,
            input_ids=block_ids.reshape(-1),
            req_pool_indices=batch.req_pool_indices,
            seq_lens=batch.seq_lens,
            out_cache_loc=block_loc.reshape(-1),
            seq_lens_sum=seq_lens_sum,
            seq_lens_cpu=seq_lens_cpu,
            positions=positions.reshape(-1),
            input_embeds=embeds.reshape(bs * block, -1),
            spec_algorithm=SpeculativeAlgorithm.DFLASH,
            spec_info=self._draft_block_spec_info,
            capture_hidden_mode=CaptureHiddenMode.NULL,
        )
        out = compat.draft_forward(self, batch, forward_batch, plan, block)
        hidden = out.logits_output.hidden_states
        if hidden is None:
            raise RuntimeError("DDTREE: the DFlash drafter returned no hidden states.")
        return hidden[: bs * block].view(bs, block, -1), bool(out.can_run_graph)

    def _draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target head's logits of the drafter's hidden states [B, D, H] -> [B, D, V]."""
        bs, depth, width = hidden.shape
        return self._head_logits(hidden.reshape(-1, width)).view(bs, depth, -1)

    def _head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[n, H] -> [n, V] float32: the target's lm_head through its logits processor (TP gather, scale,
        softcap; it cuts a padded head to the vocabulary, so padding columns never enter a top-K list)."""
        lm_head = self.target_worker.model_runner.model.lm_head
        return self._logits_processor._get_logits(hidden, lm_head, self._logits_metadata)

    def _request_settings(self, reqs) -> list[TreeSettings]:
        """Each request's settings, parsed once per request and kept on it (custom_params do not change
        while it runs): at admission (config.admit, the plugin hook on validate_dflash_request, which also
        refuses invalid ones), else here at its first decode round; should an invalid one get here anyway it
        runs with the server defaults."""
        out = []
        for req in reqs:
            settings = getattr(req, SETTINGS_ATTR, None)
            if settings is None:
                try:
                    settings = self.settings.request_settings(req.sampling_params.custom_params)
                except DDTreeConfigError as error:
                    if not self._warned_request_settings:
                        logger.warning("DDTREE: running a request with the server defaults: %s", error)
                        self._warned_request_settings = True
                    settings = self.settings.request_defaults()
                setattr(req, SETTINGS_ATTR, settings)
            out.append(settings)
        return out

    def _verify(self, batch, draft_input, verify: rounds.VerifyBatch, plan, width: int):
        """The target's TARGET_VERIFY forward at `width` tokens per request (CUDA graph when one fits; with auto,
        that width's backend and graphs) into the KV slots of batch.out_cache_loc (the round's plan's window).
        Returns (logits_output, used_graph)."""
        verify_input = info.verify_input(verify, **compat.verify_kwargs(plan))
        saved = batch.seq_lens_cpu, batch.seq_lens_sum
        # Host-side upper bound of the attended lengths (the prefix plus the verify tokens), as DFLASH.
        batch.seq_lens_cpu, batch.seq_lens_sum = _host_seq_lens(batch, draft_input, extra=width)
        with compat.verify_state(self.target_worker.model_runner, self._verify_states.get(width)):
            try:
                forward_batch, _ = verify_input.prepare_for_verify(batch, self.target_worker)
            finally:
                batch.seq_lens_cpu, batch.seq_lens_sum = saved
            out = self.target_worker.forward_batch_generation(
                batch=None, forward_batch=forward_batch, is_verify=True, skip_attn_backend_init=True
            )
        return out.logits_output, out.can_run_cuda_graph

    def _target_tokens(self, batch, logits_output, width: int) -> torch.Tensor:
        """The target's token at every verify position, [B, width]: argmax, or a sample of each request's
        temperature / top-p / top-k distribution (identical on every TP rank)."""
        sampling_info = batch.sampling_info
        logits = compat.full_verify_logits(self, logits_output.next_token_logits)
        if sampling_info is not None:
            apply_dflash_verify_logits_adjustments(
                next_token_logits=logits, sampling_info=sampling_info, draft_token_num=width
            )
        logits = logits.view(len(batch.seq_lens), width, -1)
        if sampling_info is None or sampling_info.is_all_greedy:
            return logits.argmax(dim=-1)
        tokens = sample_target_tokens(  # host flags: no sort over the vocabulary when nobody truncates
            logits,
            temperature=sampling_info.temperatures.view(-1),
            top_p=sampling_info.top_ps if sampling_info.need_top_p_sampling else 1.0,
            top_k=sampling_info.top_ks if sampling_info.need_top_k_sampling else -1,
        )
        tp_group = get_tp_group()
        if tp_group.world_size > 1:
            tp_group.broadcast(tokens, src=0)
        return tokens

    def _move_path_kv(self, path: rounds.CommittedPath) -> None:
        """The path's target KV into its committed slots: kernels/kv_move.py (one program per request,
        buffer and tile; padding and identities skipped) on slot-row MHA pools, else the pool's own copy."""
        if self._kv_mover is None:  # the scheduler sets the allocator after the workers are built
            if compat.translated_kv(self.model_runner):
                raise RuntimeError("DDTREE moves KV by the slot ids req_to_token stores; this pool translates them.")
            pool = self.model_runner.token_to_kv_pool_allocator.get_kvcache()
            rows, why_not = path_kv_rows(pool, self.device)
            if why_not is not None and compat.tp_rank(self) == 0:
                logger.info("DDTREE: the path's KV moves with the pool's move_kv_cache (%s).", why_not)
            self._kv_mover = (pool, rows)
        pool, rows = self._kv_mover
        if rows is not None:
            kv_move.move_path_kv(*rows, path.kv_dst, path.kv_src, path.commit_lens)
        else:
            pool.move_kv_cache(path.kv_dst.reshape(-1), path.kv_src.reshape(-1))

    def _commit_draft_kv(
        self,
        hidden_states: torch.Tensor,
        cache_loc: torch.Tensor,
        block_loc: torch.Tensor,
        path: rounds.CommittedPath,
        plan,
    ):
        """The accepted path's target features, in path order, into the draft KV at the path's slots
        (rows past commit_len are skipped by the prefix-valid writer), named as the draft pool names them."""
        if hidden_states is None:
            raise RuntimeError("DDTREE: the target verify returned no hidden states.")
        length = path.hidden_rows.shape[1]
        cache_loc_2d = block_loc if length == block_loc.shape[1] else cache_loc[:, :length].contiguous()
        cache_loc_2d = compat.draft_write_ids(self, plan, cache_loc_2d)
        self._append_target_hidden_to_draft_kv_by_loc(
            target_hidden=hidden_states.index_select(0, path.hidden_rows.reshape(-1)),
            cache_loc=cache_loc_2d.reshape(-1),
            positions=path.positions.reshape(-1),
            cache_loc_2d=cache_loc_2d,
            commit_lens=path.commit_lens,
        )


def path_kv_rows(pool, device) -> tuple[tuple[torch.Tensor, torch.Tensor, int] | None, str | None]:
    """(data_ptrs, data_strides, largest row in bytes) of a slot-row MHA pool for kernels/kv_move.py, or
    None and why not: other pool layouts, no CUDA, or a kernel that fails its startup check here."""
    if type(pool).__name__ != "MHATokenToKVPool" or getattr(pool, "use_hnd", False):
        return None, f"{type(pool).__name__} is not a slot-row MHA pool"
    if torch.device(device).type != "cuda":
        return None, "not on CUDA"
    why = kv_move.self_check(device)
    if why is not None:
        return None, why
    return (pool.data_ptrs, pool.data_strides, int(pool.data_strides.max())), None


def check_target(model_runner, budget: int) -> None:
    """Refuse targets this version cannot verify as a tree (at worker construction)."""
    if model_runner.mambaish_config is not None:
        raise ValueError("DDTREE does not support hybrid/Mamba targets (their state commit is chain-only).")
    if model_runner.is_hybrid_swa:
        raise ValueError("DDTREE does not support hybrid sliding-window targets.")
    vocab = int(model_runner.model_config.vocab_size)
    if vocab < budget:
        raise ValueError(f"{ENV_BUDGET} {budget} exceeds the vocabulary ({vocab}).")
    if getattr(model_runner.model, "logits_processor", None) is None or not hasattr(model_runner.model, "lm_head"):
        raise ValueError("DDTREE needs a target model with `lm_head` and `logits_processor`.")


def assert_verify_graph_masked(model_runner, state=None) -> None:
    """Fail at startup unless the target's TARGET_VERIFY path carries the tree mask (that of `state`, an auto
    width's (backend, runner), where given).

    Without the plugin's mask-policy hook SGLang captures the target verify graph with
    custom_mask=None: FlashInfer then fails at replay, Triton silently attends causally.
    """
    from sglang.srt.speculative.dflash_utils import resolve_dflash_verify_mask_policy

    backend, runner = state if state is not None else (model_runner.attn_backend, model_runner.decode_cuda_graph_runner)
    name, build_mask = resolve_dflash_verify_mask_policy(backend)
    if name not in SUPPORTED_BACKEND_CLASSES:
        raise ValueError(f"DDTREE verifies with {SUPPORTED_BACKEND_CLASSES}; the target uses {name}.")
    if not build_mask:
        raise RuntimeError("DDTREE: the verify mask policy hook is not applied (plugin not registered?).")
    if runner is None:
        return  # eager verify: every round passes its mask
    spec_info = runner.get_spec_info(runner.max_num_token)
    if spec_info is None or spec_info.custom_mask is None:
        raise RuntimeError("DDTREE: the target verify CUDA graph was captured without a custom mask.")
    for wrappers in getattr(backend, "prefill_cuda_graph_metadata", {}).values():
        if any(getattr(wrapper, "_custom_mask_buf", True) is None for wrapper in wrappers):
            raise RuntimeError("DDTREE: a FlashInfer verify graph has no custom mask buffer.")


def _host_seq_lens(batch, draft_input, extra: int) -> tuple[torch.Tensor, int]:
    """Host-side upper bounds of the attended lengths: committed + extra when the batch carries host
    lengths, else the reservation (always larger); never a device read."""
    if batch.seq_lens_cpu is not None:
        lens = batch.seq_lens_cpu + extra
        return lens, int(lens.sum())
    reserved, reserved_sum = compat.reserved_seq_lens(draft_input)
    if reserved is None:
        raise RuntimeError("DDTREE: no host sequence lengths (prepare_for_decode did not run).")
    return reserved, int(reserved_sum)


def _prefix_total(batch, draft_input) -> int:
    """The host sum of the committed prefix lengths, which sizes the tree mask. It must not be below the
    device sum: overlap scheduling resolves batch.seq_lens_cpu to the published lengths before the
    forward; without host lengths the reservation (>= every committed length) bounds it."""
    if batch.seq_lens_cpu is not None:
        return int(batch.seq_lens_sum)
    return int(compat.reserved_seq_lens(draft_input)[1])

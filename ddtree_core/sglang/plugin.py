"""Registration of DDTREE with SGLang: the algorithm and the hooks that adapt SGLang's DFLASH paths.

`register()` is the entry point of group `sglang.srt.plugins` (SGLang's `load_plugins()` calls it in
the main process and first thing in every scheduler process) and is also called by our launcher. It is
idempotent: a second call in the same process does nothing. On an SGLang release outside the supported
window (window.py) it logs one error line and registers nothing, unless SGLANG_DDTREE_ALLOW_UNTESTED=1.

Hooks (HookRegistry; each acts only when the server runs DDTREE):
- dflash_utils.resolve_dflash_verify_mask_policy (AROUND): the target's TARGET_VERIFY CUDA graph is
  captured with the runner's custom-mask buffer. Without it Triton replays a mask-free graph, i.e.
  causal attention over the tree, silently; FlashInfer refuses at replay.
- spec_info.create_dummy_verify_input (AROUND): warmup runs pass the same mask buffer.
- dflash_utils.validate_dflash_request (AROUND): admission also checks the ddtree_* custom_params (parsed
  here, once, and kept on the request for the worker: config.admit) and refuses min_p (the tree walk samples
  temperature / top-p / top-k only), return_logprob and grammars (which SGLang 0.5.23's DFLASH admits).
- SchedulerBatchResultProcessor._handle_finish_state_updated_req (AFTER): keeps each request's
  per-round stats rows and budgets; when it finishes, puts them into customized_info at its last token. With
  --enable-metrics it also records each row in the DDTree Prometheus metrics (prometheus.py). On an auto
  server it feeds each row to the budget policy (auto.observe).
- TokenizerManager._calculate_spec_decoding_metrics (AFTER): turns those rows into the
  metrics.SUMMARY_KEYS entries of the finished request's meta_info, and its budgets into
  `ddtree_budget_histogram` ({budget: rounds}).
- Scheduler.get_init_info (AFTER): the DDTree settings appear in /server_info.
- Req.update_finish_state (AROUND), only where SGLang's method lets the max_new_tokens cap beat the
  stop checks (0.5.15; finish.length_first probes the method's behaviour at registration): a stop token
  or stop string accepted within the budget ends the request there, not at the cap (finish.py). A
  DFLASH or AR server stays stock SGLang, as for every hook here, even where the plugin is loaded.
"""

from __future__ import annotations

import logging
import os
from collections import Counter

from ddtree_core.sglang import window

logger = logging.getLogger(__name__)

MASK_POLICY = "sglang.srt.speculative.dflash_utils.resolve_dflash_verify_mask_policy"
DUMMY_VERIFY_INPUT = "sglang.srt.speculative.spec_info.create_dummy_verify_input"
VALIDATE_REQUEST = "sglang.srt.speculative.dflash_utils.validate_dflash_request"
ROUND_PROCESSED = (
    "sglang.srt.managers.scheduler_components.batch_result_processor."
    "SchedulerBatchResultProcessor._handle_finish_state_updated_req"
)
SPEC_METRICS = "sglang.srt.managers.tokenizer_manager.TokenizerManager._calculate_spec_decoding_metrics"
INIT_INFO = "sglang.srt.managers.scheduler.Scheduler.get_init_info"
FINISH_STATE = "sglang.srt.managers.schedule_batch.Req.update_finish_state"

ROUNDS_KEY = "ddtree_round_stats"  # customized_info key of a finished request's stats rows
BUDGETS_KEY = "ddtree_round_budgets"  # customized_info key of its rounds' budgets
BUDGET_HISTOGRAM = "ddtree_budget_histogram"  # meta_info key: {budget: rounds} of a finished request
_ROUNDS_ATTR = "_ddtree_round_rows"  # per-request list of stats rows on the scheduler's Req
_BUDGETS_ATTR = "_ddtree_round_budgets"  # per-request list of its rounds' budgets

_registered = False


def register() -> bool:
    """Register the DDTREE algorithm and its hooks, and apply the hooks in this process.

    Returns whether DDTREE is registered: False, after one error line in the log, on an SGLang release
    outside the supported window (window.check), which then stays untouched. On SGLang 0.6.0:
    `register()` -> False, logging "DDTREE not registered: SGLang 0.6.0 is not a supported release (...)".
    """
    global _registered
    if _registered:
        return True
    registers, line = window.check(window.sglang_version(), os.environ)
    if line is not None:
        (logger.warning if registers else logger.error)(line)
    if not registers:
        return False
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from ddtree_core.sglang.finish import length_first
    from ddtree_core.sglang.spec_algo import NAME, DDTreeSpecAlgo, validate_server_args

    hooks = [
        (MASK_POLICY, _mask_policy, HookType.AROUND),
        (DUMMY_VERIFY_INPUT, _dummy_verify_input, HookType.AROUND),
        (VALIDATE_REQUEST, _validate_request, HookType.AROUND),
        (ROUND_PROCESSED, _collect_round, HookType.AFTER),
        (SPEC_METRICS, _add_summary, HookType.AFTER),
        (INIT_INFO, _add_init_info, HookType.AFTER),
    ]
    if length_first(Req):
        hooks.append((FINISH_STATE, _update_finish_state, HookType.AROUND))
    # apply_hooks skips targets it has patched before, so a hook on an already patched target would
    # silently never run.
    taken = [target for target, _, _ in hooks if target in HookRegistry._patched]
    if taken:
        raise RuntimeError(f"DDTREE cannot hook {taken}: already patched by another plugin")
    if not _is_registered(SpeculativeAlgorithm, NAME):
        SpeculativeAlgorithm.register(
            NAME, supports_overlap=True, validate_server_args=validate_server_args, spec_class=DDTreeSpecAlgo
        )(_worker_class)
    elif not isinstance(SpeculativeAlgorithm.from_string(NAME), DDTreeSpecAlgo):
        raise RuntimeError(f"{NAME} is already registered by another plugin")
    for target, hook, kind in hooks:
        HookRegistry.register(target, hook, kind)
    HookRegistry.apply_hooks()
    unapplied = [target for target, _, _ in hooks if target not in HookRegistry._patched]
    if unapplied:
        raise RuntimeError(f"DDTREE hooks failed to apply (see the log above): {unapplied}")
    _registered = True
    logger.info("DDTREE speculative algorithm registered")
    return True


def _worker_class(server_args):
    from ddtree_core.sglang.worker import DDTreeWorker

    return DDTreeWorker


def _is_registered(algorithm_enum, name: str) -> bool:
    try:
        algorithm_enum.from_string(name)
    except ValueError:
        return False
    return True


def _ddtree_server():
    """The process's server args when it runs DDTREE, else None (also before they are published)."""
    from ddtree_core.sglang.compat import published_server_args
    from ddtree_core.sglang.spec_algo import is_ddtree

    try:
        server_args = published_server_args()
    except ValueError:
        return None
    return server_args if is_ddtree(server_args) else None


def _mask_policy(original, attn_backend):
    name, build_custom_mask = original(attn_backend)
    return (name, True) if _ddtree_server() is not None else (name, build_custom_mask)


def _dummy_verify_input(original, *args, **kwargs):
    from ddtree_core.sglang.compat import dummy_verify_call
    from ddtree_core.sglang.spec_algo import DDTreeSpecAlgo

    spec_algorithm, custom_mask, width, is_draft_worker = dummy_verify_call(original, args, kwargs)
    if not isinstance(spec_algorithm, DDTreeSpecAlgo):
        return original(*args, **kwargs)
    from ddtree_core.sglang.info import dummy_verify_input

    return dummy_verify_input(width, custom_mask, is_draft_worker)


def _validate_request(original, req, enable_overlap):
    error = original(req, enable_overlap)
    server_args = _ddtree_server()
    if error is not None or server_args is None:
        return error
    from ddtree_core.sglang.config import admit
    from ddtree_core.sglang.spec_algo import settings_of

    # SGLang 0.5.15's DFLASH refuses these two itself; 0.5.23's admits them, the tree walk serves neither.
    if req.return_logprob:
        return "DDTREE speculative decoding does not support return_logprob."
    params = req.sampling_params
    if any(getattr(params, name, None) is not None for name in ("json_schema", "regex", "ebnf", "structural_tag")):
        return "DDTREE speculative decoding does not support grammar-constrained decoding."
    if params.min_p > 0:
        return "DDTREE speculative decoding does not support min_p yet."
    return admit(req, settings_of(server_args))


def _collect_round(ret, processor, req, batch, result, i, logits_output):
    """Keep request i's stats row of this round (and record it on /metrics when SGLang records scheduler
    metrics); at its finish publish all rows at its last token.

    customized_info values are per output token (the output streamer slices them by token offsets),
    so the rows go at index len(output_ids_through_stop) - 1 behind None padding.
    """
    stats = getattr(result, "ddtree_stats", None)
    if stats is None:
        return None
    rows, budgets = getattr(req, _ROUNDS_ATTR, None), getattr(req, _BUDGETS_ATTR, None)
    if rows is None:
        rows, budgets = [], []
        setattr(req, _ROUNDS_ATTR, rows)
        setattr(req, _BUDGETS_ATTR, budgets)
    row = stats[i].tolist()
    rows.append(row)
    budget = getattr(result, "ddtree_budget", None)
    budgets.append(budget)
    from ddtree_core.sglang import auto
    from ddtree_core.sglang.prometheus import observe_round

    expected = getattr(result, "ddtree_expected", None)
    auto.observe(None if expected is None else expected[i].tolist(), budget, row[0] - 1)
    observe_round(processor, row, budget)
    num_tokens = len(req.output_ids_through_stop)
    if req.finished() and num_tokens > 0:
        if req.customized_info is None:
            req.customized_info = {}
        req.customized_info[ROUNDS_KEY] = [None] * (num_tokens - 1) + [rows]
        req.customized_info[BUDGETS_KEY] = [None] * (num_tokens - 1) + [budgets]
    return None


def _add_summary(ret, manager, meta_info, recv_obj, i):
    """Replace the finished request's stats rows by its DDTree summary (metrics.SUMMARY_KEYS)."""
    values = meta_info.pop(ROUNDS_KEY, None)
    rows = next((value for value in reversed(values or []) if value is not None), None)
    if rows:
        from ddtree_core.sglang.rounds import summary_from_rows

        meta_info.update(summary_from_rows(rows))
    values = meta_info.pop(BUDGETS_KEY, None)
    budgets = next((value for value in reversed(values or []) if value is not None), None)
    histogram = Counter(str(budget) for budget in budgets or () if budget is not None)
    if histogram:
        meta_info[BUDGET_HISTOGRAM] = dict(histogram)
    return None


def _add_init_info(ret, scheduler):
    from ddtree_core.sglang.spec_algo import is_ddtree, settings_of

    if isinstance(ret, dict) and is_ddtree(scheduler.server_args):
        ret.update(settings_of(scheduler.server_args).info())
    return None


def _update_finish_state(original, req, new_accepted_len=1):
    """SGLang's method, after finish.stop_within_budget when a DDTREE request's run reaches the cap."""
    # Called for every request after every round: the cheap test first.
    if len(req.output_ids) >= req.sampling_params.max_new_tokens and _ddtree_server() is not None:
        from ddtree_core.sglang.finish import stop_within_budget

        stop_within_budget(req, new_accepted_len)
    return original(req, new_accepted_len)

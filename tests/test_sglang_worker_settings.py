"""The worker parses a request's custom_params once and keeps the result on the request (needs SGLang)."""

from types import SimpleNamespace

import pytest

pytest.importorskip("sglang.srt.speculative.dflash_worker_v2")

from ddtree_core.sglang.config import RequestSettings, ServerSettings  # noqa: E402
from ddtree_core.sglang.worker import DDTreeWorker  # noqa: E402


def test_request_settings_are_parsed_once_per_request(monkeypatch):
    server = ServerSettings(block_size=16, budget=64, max_depth=15, draft_temperature=1.0)
    worker = SimpleNamespace(settings=server, _warned_request_settings=False)
    reqs = [SimpleNamespace(sampling_params=SimpleNamespace(custom_params=params))
            for params in ({"ddtree_budget": 8}, None, {"ddtree_budget": 1000})]  # fmt: skip
    first = DDTreeWorker._request_settings(worker, reqs)
    assert first == [RequestSettings(8, 15, 1.0), RequestSettings.defaults(server), RequestSettings.defaults(server)]
    assert worker._warned_request_settings  # the out-of-range budget ran with the defaults, with a warning
    calls = []
    monkeypatch.setattr(RequestSettings, "from_custom_params", classmethod(lambda cls, *a: calls.append(a)))
    assert DDTreeWorker._request_settings(worker, reqs) == first and calls == []


def test_worker_builds_before_the_kv_pool_exists(monkeypatch):
    """SGLang builds the draft worker while the target's token_to_kv_pool_allocator is still None: the
    worker must not touch the pool before its first round (an H200 run died at startup on exactly that)."""
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    from ddtree_core.sglang import worker as worker_module

    server = ServerSettings(block_size=16, budget=15, max_depth=15, draft_temperature=1.0)
    model = SimpleNamespace(logits_processor=object(), lm_head=object())
    runner = SimpleNamespace(
        model=model, token_to_kv_pool_allocator=None, mambaish_config=None, is_hybrid_swa=False,
        model_config=SimpleNamespace(vocab_size=1000),
    )  # fmt: skip
    target = SimpleNamespace(model_runner=runner)

    def parent_init(self, server_args, gpu_id, tp_rank, dp_rank, moe_ep_rank, attn_cp_rank, moe_dp_rank, nccl_port,
                    target_worker):  # fmt: skip
        self.device, self.tp_rank, self._target_worker, self.model_runner = "cpu", tp_rank, target_worker, runner

    monkeypatch.setattr(DFlashWorkerV2, "__init__", parent_init)
    monkeypatch.setattr(worker_module, "settings_of", lambda args: server)
    monkeypatch.setattr(worker_module, "draft_server_args", lambda args: args)
    built = DDTreeWorker(SimpleNamespace(), 0, 0, 0, 0, 0, 0, 0, target)
    assert built.settings == server and built._kv_mover is None

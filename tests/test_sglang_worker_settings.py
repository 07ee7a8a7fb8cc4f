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

"""scripts/kv_leak.py: parsing SGLang's /v1/loads, the request plan, and the whole check against a
stand-in server (stdlib HTTP) that answers the four endpoints and keeps or leaks KV tokens on request."""

import importlib.util
import json
import random
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "kv_leak.py"
spec = importlib.util.spec_from_file_location("kv_leak", SCRIPT)
kv_leak = sys.modules.setdefault("kv_leak", importlib.util.module_from_spec(spec))  # dataclasses look it up
spec.loader.exec_module(kv_leak)

# A /v1/loads answer of SGLang 0.5.15 (LoadSnapshot.to_dict, include=core) with two DP ranks.
LOADS = {
    "timestamp": "2026-01-01T00:00:00+00:00",
    "version": "0.5.15",
    "loads": [
        {
            "dp_rank": rank,
            "num_running_reqs": running,
            "num_waiting_reqs": 0,
            "num_waiting_uncached_tokens": 0,
            "num_used_tokens": used,
            "num_total_tokens": used,
            "max_total_num_tokens": 1000,
            "max_running_requests": 48,
            "token_usage": used / 1000,
            "gen_throughput": 0.0,
            "cache_hit_rate": 0.0,
            "utilization": 0.0,
        }
        for rank, running, used in [(0, 2, 300), (1, 0, 12)]
    ],
}


def test_parse_loads_sums_the_dp_ranks():
    usage = kv_leak.parse_loads(LOADS)
    assert usage == kv_leak.KVUsage(used_tokens=312, max_total_tokens=2000, running_reqs=2, waiting_reqs=0)
    assert not usage.idle


@pytest.mark.parametrize("body", [{}, {"loads": []}, {"loads": [{"num_used_tokens": 3}]}, []], ids=str)
def test_parse_loads_refuses_other_bodies(body):
    with pytest.raises(ValueError):
        kv_leak.parse_loads(body)


def test_usable_budgets():
    assert kv_leak.usable_budgets([8, 16, 32, 64], {"speculative_algorithm": "DDTREE", "ddtree_budget": 32}) == [
        8,
        16,
        32,
    ]
    assert kv_leak.usable_budgets([8, 16], {"speculative_algorithm": "DFLASH"}) == [None]
    with pytest.raises(ValueError):
        kv_leak.usable_budgets([32, 64], {"speculative_algorithm": "DDTREE", "ddtree_budget": 15})


def test_plan_crosses_budgets_and_temperatures():
    specs = kv_leak.plan(["a", "b", "c"], 8, [8, 16], [0.0, 0.7], 0.0, random.Random(0))
    assert [(s.prompt, s.budget, s.temperature) for s in specs[:4]] == [
        ("a", 8, 0.0),
        ("b", 16, 0.0),
        ("c", 8, 0.7),
        ("a", 16, 0.7),
    ]
    assert not any(s.abort for s in specs)
    body = kv_leak.payload(specs[2], 64)
    assert body == {
        "text": "c",
        "sampling_params": {"max_new_tokens": 64, "temperature": 0.7, "custom_params": {"ddtree_budget": 8}},
        "stream": False,
    }
    ids = kv_leak.RequestSpec(prompt=[1, 2], budget=None, temperature=0.0, abort=True)
    assert kv_leak.payload(ids, 4) == {
        "input_ids": [1, 2],
        "sampling_params": {"max_new_tokens": 4, "temperature": 0.0},
        "stream": True,
    }


class StandIn(BaseHTTPRequestHandler):
    """SGLang's four endpoints over a token count: /generate holds its prompt's tokens while it runs and
    frees all but `leak` of them; /flush_cache empties the pool, as Scheduler.flush_cache does."""

    state = {"used": 0, "running": 0, "leak": 0, "budgets": []}
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def reply(self, code: int, body) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        state = self.state
        if self.path == "/server_info":
            return self.reply(200, {"speculative_algorithm": "DDTREE", "ddtree_budget": 16})
        running = {"num_running_reqs": state["running"], "num_waiting_reqs": 0, "max_total_num_tokens": 1000}
        return self.reply(200, {"loads": [{**running, "num_used_tokens": state["used"]}]})

    def do_POST(self):
        state = self.state
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if self.path == "/flush_cache":
            with self.lock:
                state["used"] = 0
            return self.reply(200, "Cache flushed.\n")
        with self.lock:
            state["used"] += 10
            state["running"] += 1
            state["budgets"].append(body["sampling_params"]["custom_params"]["ddtree_budget"])
        with self.lock:
            state["used"] -= 10 - state["leak"]
            state["running"] -= 1
        answer = {"text": "x", "meta_info": {"completion_tokens": 4}}
        return self.reply(200, f"data: {json.dumps(answer)}\n\ndata: [DONE]\n\n" if body["stream"] else answer)


class StandInServer(ThreadingHTTPServer):
    request_queue_size = 64  # a listen backlog for all 16 concurrent clients of the check (the default is 5)


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setattr(kv_leak, "POLL_S", 0.01)
    StandIn.state = {"used": 7, "running": 0, "leak": 0, "budgets": []}  # 7: left over before the check
    httpd = StandInServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.mark.parametrize("leak, code", [(0, 0), (1, 1)], ids=["clean", "leaks"])
def test_check_against_a_stand_in_server(server, capsys, leak, code):
    StandIn.state["leak"] = leak
    assert kv_leak.main(["--url", server, "--requests", "20", "--concurrency", "4"]) == code
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["used_tokens_start"] == 0  # the opening flush
    assert record["used_tokens_idle"] == record["leaked_tokens"] == 20 * leak
    assert record["used_tokens_after_flush"] == 0 and record["ok"] == (leak == 0)
    assert record["budgets"] == [8, 16] and sorted(set(StandIn.state["budgets"])) == [8, 16]
    assert record["requests"] == 20 and record["failed"] == 0 and record["completion_tokens"] == 80


def test_unreachable_server_cannot_start(capsys):
    assert kv_leak.main(["--url", "http://127.0.0.1:9", "--idle-timeout", "1"]) == 2
    assert "cannot start" in capsys.readouterr().err


def test_aborted_requests_are_counted_apart(server, capsys):
    assert kv_leak.main(["--url", server, "--requests", "20", "--abort-fraction", "0.5"]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0 < record["aborted"] < 20 and record["failed"] == 0
    assert record["completion_tokens"] == 4 * (20 - record["aborted"])

"""ddbench check load: SGLang's /v1/loads and /metrics read, the load's plan, and the whole check against a stand-in
server that can leak KV slots, accept bad input, change its outputs or miscount its metrics."""

import json
import math
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from ddbench.check import load
from ddbench.cli import app

LOADS = {
    "version": "0.5.15",
    "loads": [
        {"dp_rank": rank, "num_running_reqs": running, "num_waiting_reqs": 0, "num_used_tokens": used,
         "max_total_num_tokens": 1000, "token_usage": used / 1000}
        for rank, running, used in [(0, 2, 300), (1, 0, 12)]
    ],
}  # fmt: skip


def test_parse_loads_sums_the_dp_ranks():
    usage = load.parse_loads(LOADS)
    assert usage == load.KVUsage(used_tokens=312, max_total_tokens=2000, running_reqs=2, waiting_reqs=0)
    assert not usage.idle


@pytest.mark.parametrize("body", [{}, {"loads": []}, {"loads": [{"num_used_tokens": 3}]}, []], ids=str)
def test_parse_loads_refuses_other_bodies(body):
    with pytest.raises(ValueError):
        load.parse_loads(body)


def test_parse_metrics_sums_a_counter_over_its_labels():
    text = (
        "# HELP sglang:num_requests_total Number of requests processed.\n"
        "# TYPE sglang:num_requests_total counter\n"
        'sglang:num_requests_total{model_name="m",priority="0"} 12.0\n'
        'sglang:num_requests_total{model_name="m",priority="1"} 3.0\n'
        "sglang:generation_tokens_total 40.0\n"
        'sglang:num_requests_created{model_name="m"} 1.7e9\n'
    )
    assert load.parse_metrics(text) == {
        "sglang:num_requests_total": 15.0,
        "sglang:generation_tokens_total": 40.0,
        "sglang:num_aborted_requests_total": 0.0,
    }


def test_served_budgets():
    ddtree = {"speculative_algorithm": "DDTREE", "ddtree_budget": 32}
    assert load.served_budgets([8, 16, 32, 64], ddtree) == [8, 16, 32]
    assert load.served_budgets([8, 64], {**ddtree, "ddtree_auto_budgets": [15, 31]}) == [8, "auto"]
    assert load.served_budgets([8, 16], {"speculative_algorithm": "DFLASH"}) == [None]
    with pytest.raises(ValueError, match="fits the server's ddtree_budget 15"):
        load.served_budgets([32, 64], {"speculative_algorithm": "DDTREE", "ddtree_budget": 15})


def test_invalid_params_refuse_auto_only_on_a_fixed_server():
    fixed = {"speculative_algorithm": "DDTREE", "ddtree_budget": 63, "ddtree_block_size": 16}
    bad = load.invalid_params(fixed)
    assert ("ddtree_budget", {"custom_params": {"ddtree_budget": 64}}) in bad
    assert ("ddtree_max_depth", {"custom_params": {"ddtree_max_depth": 17}}) in bad
    assert ("ddtree_budget", {"custom_params": {"ddtree_budget": "auto"}}) in bad
    assert ("ddtree_budget", {"custom_params": {"ddtree_budget": "auto"}}) not in load.invalid_params(
        {**fixed, "ddtree_auto_budgets": [15, 31, 63]}
    )
    assert [field for field, _ in load.invalid_params({"speculative_algorithm": None})] == [
        "max_new_tokens", "context length"
    ]  # fmt: skip
    temperatures = [b["custom_params"][f] for f, b in bad if f == "ddtree_draft_temperature"]
    assert math.isnan(temperatures[2]) and temperatures[3] == math.inf
    body = load._body(load.Request("r", "invalid", "p", 4, 0.0, {"ddtree_draft_temperature": math.nan}, False))
    assert b'"ddtree_draft_temperature": NaN' in body["content"]


def test_plan_draws_the_kinds_and_cycles_the_rest():
    invalid = [("ddtree_budget", {"custom_params": {"ddtree_budget": -1}})]
    fractions = {"abort": 0.2, "disconnect": 0.2, "invalid": 0.1}
    requests = load.plan(["a", "b", "c"], 400, [8, 16], [0.0, 0.7], [1, 64], fractions, invalid, random.Random(0))
    kinds = {kind: sum(r.kind == kind for r in requests) for kind in load.KINDS}
    assert 50 < kinds["abort"] < 110 and 50 < kinds["disconnect"] < 110 and 20 < kinds["invalid"] < 65
    first = requests[0]
    assert (first.prompt, first.max_new_tokens, first.temperature) == ("a", 1, 0.0)
    assert [r.temperature for r in requests[:4]] == [0.0, 0.0, 0.7, 0.7]
    assert all(r.stream for r in requests if r.kind in ("abort", "disconnect"))
    assert all(not r.stream and r.invalid_field == "ddtree_budget" for r in requests if r.kind == "invalid")
    assert {r.custom_params["ddtree_budget"] for r in requests if r.kind == "complete"} == {8, 16}
    assert len({r.rid for r in requests}) == 400
    body = load.payload(requests[0])
    assert body["rid"] == "load-0" and body["sampling_params"]["custom_params"] == {"ddtree_budget": 8}
    assert load.payload(load.Request("r", "complete", [1, 2], 4, 0.0, None, False))["input_ids"] == [1, 2]


class StandIn(BaseHTTPRequestHandler):
    """SGLang's endpoints over a token count: a request holds 10 KV tokens while it runs and frees all but `leak`
    of them at its end (finished, aborted or disconnected); custom_params are checked as the plugin checks them
    (one line naming the field) unless `lax` (accepted) or `vague` (refused in two lines naming nothing); `drift`
    changes the greedy outputs once the load began; `miscount` counts each finished request twice in /metrics."""

    state: dict = {}
    lock = threading.Lock()
    protocol_version = "HTTP/1.0"  # a streamed answer ends when the connection closes

    def log_message(self, *args):
        pass

    def reply(self, code: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        state = self.state
        if self.path == "/server_info":
            info = {"speculative_algorithm": "DDTREE", "ddtree_budget": 16, "ddtree_block_size": 16}
            return self.reply(200, {**info, "ddtree_auto_budgets": state["auto"]})
        if self.path == "/metrics":
            data = f"# TYPE x counter\nsglang:num_requests_total{{a=\"1\"}} {state['requests']}\n"
            data += f"sglang:generation_tokens_total {state['tokens']}\n"
            self.send_response(200)
            self.end_headers()
            return self.wfile.write(data.encode())
        loads = {"num_running_reqs": state["running"], "num_waiting_reqs": 0, "max_total_num_tokens": 1000}
        return self.reply(200, {"loads": [{**loads, "num_used_tokens": state["used"]}]})

    def refusal(self, body: dict) -> str | None:
        params = body["sampling_params"]
        if len(body.get("input_ids") or ()) >= 8192:
            tokens = len(body["input_ids"])
            return f"The input ({tokens} tokens) is longer than the model's context length (8192 tokens)."
        if params["max_new_tokens"] < 0:
            return f"max_new_tokens must be at least 0, got {params['max_new_tokens']}."
        for key, value in (params.get("custom_params") or {}).items():
            if key == "ddtree_budget":
                if value == "auto" and self.state["auto"]:
                    continue
                if not isinstance(value, int) or not 0 <= value <= 16:
                    return f"custom_params.ddtree_budget must be an int in [0, 16], got {value!r}"
            elif key == "ddtree_draft_temperature" and not 0 < value < math.inf:
                return f"custom_params.ddtree_draft_temperature must be > 0, got {value!r}"
            elif key == "ddtree_max_depth" and not 1 <= value <= 15:
                return f"custom_params.ddtree_max_depth must be in [1, 15], got {value!r}"
            elif key not in ("ddtree_budget", "ddtree_draft_temperature", "ddtree_max_depth"):
                return f"custom_params.{key} is not a DDTREE setting"
        return None

    def ended(self, tokens: int) -> None:
        state = self.state
        with self.lock:
            state["used"] -= 10 - state["leak"]
            state["running"] -= 1
            state["requests"] += 2 if state["miscount"] else 1
            state["tokens"] += tokens

    def do_POST(self):
        state = self.state
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if self.path == "/flush_cache":
            with self.lock:
                state["used"] = 0
            return self.reply(200, "Cache flushed.")
        if self.path == "/abort_request":
            with self.lock:
                state["aborted"].add(body["rid"])
            return self.reply(200, {})
        if state["broken"]:
            return self.reply(500, {"error": {"message": "Internal Server Error"}})
        params = body["sampling_params"]
        why = None if state["lax"] else self.refusal(body)
        if why is not None:
            return self.reply(400, {"error": {"message": "Bad request.\nSee the log." if state["vague"] else why}})
        with self.lock:
            state["used"] += 10
            state["running"] += 1
            if "rid" in body:
                state["load_began"] = True
        prompt = body.get("text") or str(body.get("input_ids"))
        shift = 1 if state["drift"] and state["load_began"] else 0
        ids = [(len(prompt) + i + shift) % 97 for i in range(max(params["max_new_tokens"], 0))]
        if state["lax"] and len(body.get("input_ids") or ()) >= 8192:
            ids = []  # a lax server truncates
        if not body.get("stream"):
            self.ended(len(ids))
            return self.reply(200, {"text": "x", "output_ids": ids, "meta_info": self.meta(len(ids), "length")})
        self.send_response(200)
        self.end_headers()
        sent = 0
        try:
            if not ids:  # max_new_tokens 0: one chunk, finished
                self.wfile.write(f"data: {json.dumps({'text': '', 'meta_info': self.meta(0, 'length')})}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                return
            for sent in range(1, len(ids) + 1):
                if body["rid"] in state["aborted"]:
                    sent -= 1
                    break
                last = sent == len(ids)
                chunk = {"text": "x", "meta_info": self.meta(sent, "length" if last else None)}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.002)
            else:
                self.wfile.write(b"data: [DONE]\n\n")
                return
            chunk = {"text": "", "meta_info": self.meta(sent, "abort")}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())
        except OSError:  # the client went away: SGLang aborts the request
            pass
        finally:
            self.ended(sent)

    @staticmethod
    def meta(tokens: int, finish: str | None) -> dict:
        return {"completion_tokens": tokens, "finish_reason": None if finish is None else {"type": finish}}


class StandInServer(ThreadingHTTPServer):
    request_queue_size = 64
    daemon_threads = True


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setattr(load, "POLL_S", 0.01)
    StandIn.state = {
        "used": 7, "running": 0, "leak": 0, "lax": False, "vague": False, "broken": False, "drift": False,
        "miscount": False, "auto": [], "aborted": set(), "requests": 0, "tokens": 0, "load_began": False,
    }  # fmt: skip  (used 7: left over before the check, which flushes first)
    httpd = StandInServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


FAULTS = {"abort": 0.15, "disconnect": 0.15, "invalid": 0.15}


def check(url: str, **kwargs) -> dict:
    settings = dict(requests=120, concurrency=8, lengths=(0, 1, 8, 40), fractions=FAULTS, fixed=4, fixed_tokens=8)
    return load.run_check(url, **{**settings, **kwargs})


def test_a_server_that_holds_everything_passes(server):
    record = check(server)
    assert record["ok"], record
    assert record["failed"] == 0 and record["leaked_tokens"] == 0 and record["used_tokens_start"] == 0
    assert set(record["kinds"]) == set(load.KINDS) and sum(record["kinds"].values()) == 120
    assert record["finishes"].get("abort", 0) > 0  # aborts that arrived before the request's end
    assert record["fixed_set_same"] == record["fixed_set"] == 4
    assert record["budgets"] == [8, 16] and record["metrics"]["ok"]


def test_an_auto_server_is_sent_auto_too(server):
    StandIn.state["auto"] = [15, 31]
    record = check(server)
    assert record["ok"] and record["budgets"] == [8, 16, "auto"]


@pytest.mark.parametrize(
    "fault, judged",
    [
        ("leak", lambda r: r["leaked_tokens"] > 0),
        ("lax", lambda r: r["failed_by_kind"] == {"invalid": r["kinds"]["invalid"]}),
        ("vague", lambda r: "is not one line naming" in r["first_failures"][0]["error"]),
        ("drift", lambda r: r["fixed_set_same"] == 0),
        ("miscount", lambda r: not r["metrics"]["ok"] and "num_requests_total" in r["metrics"]["why"][0]),
    ],
)
def test_each_fault_fails_the_check(server, fault, judged):
    StandIn.state[fault] = 1 if fault == "leak" else True
    record = check(server)
    assert not record["ok"] and judged(record), record


def test_the_command_prints_the_record_and_exits_1_on_a_fault(server, tmp_path):
    StandIn.state["leak"] = 1
    out = tmp_path / "load.json"
    result = CliRunner().invoke(
        app, ["check", "load", "--url", server, "--requests", "40", "--concurrency", "4", "--fixed", "2",
              "--max-new-tokens", "4,8", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    record = json.loads(out.read_text())
    admitted = 40 - record["kinds"].get("invalid", 0) + 2  # each leaks a token; the fixed set's 2 before the load
    assert record["leaked_tokens"] == admitted and json.loads(result.stdout.strip().splitlines()[-1]) == record


def test_a_server_that_cannot_answer_the_fixed_set_cannot_be_checked(server):
    StandIn.state["broken"] = True
    with pytest.raises(load.CannotStart, match="500"):
        check(server)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--url", "http://127.0.0.1:9", "--idle-timeout", "1", "--fixed", "0"], "cannot check http://127.0.0.1:9"),
        (["--abort-fraction", "0.6", "--disconnect-fraction", "0.5"], "must be <= 1, got 1.15"),
        (["--max-new-tokens", "8,x"], "comma-separated integers"),
        (["--temperatures", "0,-1"], "must be finite and >= 0"),
    ],
)
def test_bad_input_exits_2_in_one_line(args, message):
    result = CliRunner().invoke(app, ["check", "load", *args])
    assert result.exit_code == 2 and message in result.output, result.output

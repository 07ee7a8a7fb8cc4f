"""testbed.distill: answers from a /generate server, batched or one by one, resumable, held-out prompts refused."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from ddbench import heldout
from ddbench.cli import app
from ddbench.datasets import load_all_prompts
from ddbench.testbed import distill
from tests.cli.conftest import byte_tokenizer


class Echo(BaseHTTPRequestHandler):
    """/generate answering each prompt with its last 3 ids reversed plus its temperature x 10; lists for lists
    (a list of prompts comes with a list of sampling params, one each, as SGLang takes them)."""

    requests: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Echo.requests.append(body)

        def answer(ids, params):
            t = int(params["temperature"] * 10)
            return {"output_ids": ids[-3:][::-1] + [t], "meta_info": {"completion_tokens": 4}}

        ids, params = body["input_ids"], body["sampling_params"]
        if ids and isinstance(ids[0], list):
            params = params if isinstance(params, list) else [params] * len(ids)
            payload = [answer(x, p) for x, p in zip(ids, params, strict=True)]
        else:
            payload = answer(ids, params)
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    Echo.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()


@pytest.fixture
def model(tmp_path):
    folder = tmp_path / "model"
    byte_tokenizer().save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize("batch", [1, 3])
def test_answers_every_prompt_at_every_temperature_and_resumes(server, model, tmp_path, batch):
    rows = [{"dataset": "d", "prompt": f"question {i}"} for i in range(5)]
    out = tmp_path / "answers.jsonl"
    settings = dict(url=server, model=model, temperatures=[0.0, 0.7], max_new_tokens=4, concurrency=2, batch=batch)
    assert distill.answer_all(rows[:3], out, **settings, log=lambda _: None) == 6
    assert distill.answer_all(rows, out, **settings, log=lambda _: None) == 4  # only the new prompts' answers
    answers = {a["key"]: a for a in distill.read_rows(out)}
    assert sorted(answers) == sorted(f"{i}:{t}" for i in range(5) for t in ("0", "0.7"))
    one = answers["4:0.7"]
    prompt = one["ids"][: one["prompt_len"]]
    assert one["ids"][one["prompt_len"] :] == prompt[-3:][::-1] + [7] and one["prompt"] == "question 4"
    sent = [len(r["input_ids"]) if isinstance(r["input_ids"][0], list) else 1 for r in Echo.requests]
    assert max(sent) <= batch and sum(sent) == 10
    # one request per group of `batch` prompts, whatever their temperatures: 6 answers in 2, then 4 in 2
    assert len(Echo.requests) == (10 if batch == 1 else 4)


def test_the_command_sends_batch_prompts_per_request(server, model, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(5)))
    out = tmp_path / "a.jsonl"
    args = ["testbed", "distill", "train", str(prompts), str(out), "--url", server, "--model", model, "--batch", "2"]
    assert CliRunner().invoke(app, args).exit_code == 0
    sent = sorted(len(r["input_ids"]) if isinstance(r["input_ids"][0], list) else 1 for r in Echo.requests)
    assert sent == [1, 2, 2] and len(distill.read_rows(out)) == 5


def test_the_seed_orders_the_requests(server, model, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(12)))
    orders = []
    for seed in ("0", "1", "0"):
        Echo.requests = []
        out = tmp_path / f"a{seed}-{len(orders)}.jsonl"
        argv = ["testbed", "distill", "train", str(prompts), str(out), "--url", server, "--model", model]
        assert CliRunner().invoke(app, [*argv, "--batch", "1", "--concurrency", "1", "--seed", seed]).exit_code == 0
        orders.append([tuple(r["input_ids"]) for r in Echo.requests])
    assert orders[0] == orders[2] and orders[0] != orders[1] and sorted(orders[0]) == sorted(orders[1])


def test_train_refuses_held_out_prompts_and_eval_answers_them(server, model, tmp_path, data_dir):
    held = heldout.eval_prompts("gsm8k", data_dir=data_dir)[0].turns[0]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "new"}) + "\n" + json.dumps({"prompt": held}) + "\n")
    out = tmp_path / "a.jsonl"
    args = ["testbed", "distill", "train", str(prompts), str(out), "--url", server, "--model", model]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and not out.exists() and not Echo.requests
    assert result.stderr.startswith("error: refusing to train on held-out evaluation prompts: 1 of gsm8k")
    rows = distill.eval_rows(data_dir)
    assert len(rows) == 128 + 64 + 40 + len(load_all_prompts(str(heldout.OOD_FILE)))
    assert all(heldout.held_out_dataset(row["prompt"]) for row in rows)

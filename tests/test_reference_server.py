"""The reference HTTP server: SGLang-shaped /generate responses equal to the library's output,
queued concurrent requests, 400 for malformed requests while it keeps serving."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
import torch

from ddtree_core import metrics
from ddtree_core.reference.decode import SamplingConfig, SpecConfig, generate
from ddtree_core.reference.dflash import DFlashDraftModel
from ddtree_core.reference.loading import random_target
from ddtree_core.reference.server import ENGINE_KEYS, ReferenceEngine, serving
from ddtree_core.settings import TreeSettings

VOCAB = 8
PROMPT = [1, 2, 3, 4, 5]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def word_tokenizer():
    """Word-level tokenizer: token i is the word "w{i}"; text is space separated."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer)


@pytest.fixture(scope="module")
def parts():
    target = random_target("qwen3", vocab_size=VOCAB)
    drafter = DFlashDraftModel.random(
        seed=0,
        init_std=0.3,
        hidden_size=32,
        num_target_layers=4,
        num_hidden_layers=2,
        block_size=6,
        mask_token_id=VOCAB - 1,
        vocab_size=VOCAB,
    )
    return target, drafter, word_tokenizer()


def engine_for(parts, method="ddtree", **kwargs):
    target, drafter, tokenizer = parts
    spec = SpecConfig(method=method, tree=TreeSettings(16, None, 3.0))
    return ReferenceEngine(target, drafter=drafter, tokenizer=tokenizer, spec=spec, model_path="tiny", **kwargs)


@pytest.fixture(scope="module")
def url(parts):
    with serving(engine_for(parts)) as base:
        yield base


def call(url, path, body=None, raw=None):
    """(status, parsed JSON or None) of a GET (no body) or POST."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, payload = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, payload = error.code, error.read()
    return status, json.loads(payload) if payload else None


def greedy(parts, max_new_tokens, prompt=PROMPT):
    sampling = SamplingConfig(max_new_tokens=max_new_tokens)
    return list(generate(parts[0], prompt, sampling, SpecConfig(method="ar")).tokens)


def test_health_and_info(url):
    assert call(url, "/health") == (200, None)
    status, info = call(url, "/get_model_info")
    assert status == 200 and info["model_path"] == "tiny" and info["speculative_algorithm"] == "DDTREE"
    status, info = call(url, "/get_server_info")
    assert status == 200 and (info["ddtree_budget"], info["speculative_num_draft_tokens"]) == (16, 6)
    assert info["ddtree_hold_chain"] is False
    assert (info["dtype"], info["draft_dtype"]) == ("float32", "float32")
    assert call(url, "/nowhere")[0] == 404


def test_sglang_0_5_routes_and_an_api_key(parts):
    """/model_info and /server_info as SGLang 0.5.15 names them; with an API key every route but /health wants
    `Authorization: Bearer KEY`, as SGLang's --api-key."""
    with serving(engine_for(parts), api_key="k") as base:
        assert call(base, "/health") == (200, None)
        assert call(base, "/server_info") == (401, {"error": {"message": "Unauthorized"}})
        body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 1}}
        assert call(base, "/generate", body)[0] == 401
        keyed = urllib.request.Request(base + "/model_info", headers={"Authorization": "Bearer k"})
        with urllib.request.urlopen(keyed, timeout=60) as response:
            assert json.loads(response.read())["speculative_algorithm"] == "DDTREE"
        keyed = urllib.request.Request(base + "/server_info", headers={"Authorization": "Bearer k"})
        with urllib.request.urlopen(keyed, timeout=60) as response:
            info = json.loads(response.read())
        assert info["engine"] == "ddtree_core.reference" and "version" in info


def test_generate_matches_the_library(url, parts):
    body = {"input_ids": PROMPT, "sampling_params": {"temperature": 0, "max_new_tokens": 20}, "rid": "r1"}
    status, out = call(url, "/generate", body)
    assert status == 200
    assert out["output_ids"] == greedy(parts, 20)
    assert out["text"] == " ".join(f"w{t}" for t in out["output_ids"])
    meta = out["meta_info"]
    assert meta["id"] == "r1" and meta["finish_reason"] == {"type": "length", "length": 20}
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (5, 20)
    rounds = meta["spec_verify_ct"]
    assert sum(meta["spec_accept_histogram"]) == rounds == meta["ddtree_num_rounds"]
    assert meta["spec_accept_length"] == pytest.approx(20 / rounds)
    assert meta["spec_num_correct_drafts"] == sum(i * n for i, n in enumerate(meta["spec_accept_histogram"]))
    assert set(metrics.SUMMARY_KEYS) | set(ENGINE_KEYS) <= set(meta)
    assert meta["ddtree_stage_times"]["verify"] > 0


def test_text_prompt_and_stop_string(url, parts):
    expected = greedy(parts, 20)
    stop = f"w{expected[6]}"
    cut = next(i for i, t in enumerate(expected) if f"w{t}" == stop)
    body = {
        "text": "w1 w2 w3 w4 w5",
        "sampling_params": {"temperature": 0, "max_new_tokens": 20, "stop": stop},
    }
    status, out = call(url, "/generate", body)
    assert status == 200
    assert out["output_ids"] == expected[: cut + 1]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert out["text"] == " ".join(f"w{t}" for t in expected[:cut]) + " "


def test_stop_token_ids_and_ignore_eos(parts):
    expected = greedy(parts, 20)
    eos = expected[4]
    engine = engine_for(parts, eos_token_ids=(eos,))
    params = {"temperature": 0, "max_new_tokens": 20}
    out = engine.generate({"input_ids": PROMPT, "sampling_params": params})
    assert out["output_ids"] == expected[: expected.index(eos) + 1]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": eos}
    out = engine.generate({"input_ids": PROMPT, "sampling_params": {**params, "ignore_eos": True}})
    assert out["output_ids"] == expected
    stop = expected[9]
    out = engine.generate({"input_ids": PROMPT, "sampling_params": {**params, "stop_token_ids": [stop]}})
    assert out["output_ids"] == expected[: min(expected.index(stop), expected.index(eos)) + 1]


def test_concurrent_requests_are_all_served(url, parts):
    prompts = [[1, 2, 3], [4, 5, 6, 1], [2, 2, 2], [6, 5, 4, 3, 2], [1, 2, 3], [3, 1]]
    results = [None] * len(prompts)

    def client(i):
        body = {"input_ids": prompts[i], "sampling_params": {"temperature": 0, "max_new_tokens": 12}}
        results[i] = call(url, "/generate", body)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for prompt, (status, out) in zip(prompts, results):
        assert status == 200 and out["output_ids"] == greedy(parts, 12, prompt)


def test_every_decode_runs_on_the_engine_thread(parts):
    """With a worker, concurrent requests decode on its one thread (one OpenMP team on a CPU), same outputs."""
    from concurrent.futures import ThreadPoolExecutor

    seen = set()
    worker = ThreadPoolExecutor(1, thread_name_prefix="engine")
    engine = engine_for(parts, worker=worker)
    decode = engine._decode
    engine._decode = lambda request: (seen.add(threading.current_thread().name), decode(request))[1]
    prompts = [[1, 2, 3], [4, 5, 6, 1], [2, 2, 2]]
    with serving(engine) as base:
        bodies = [{"input_ids": p, "sampling_params": {"temperature": 0, "max_new_tokens": 8}} for p in prompts]
        with ThreadPoolExecutor(3) as clients:
            results = list(clients.map(lambda body: call(base, "/generate", body), bodies))
    worker.shutdown()
    assert len(seen) == 1 and next(iter(seen)).startswith("engine")
    for prompt, (status, out) in zip(prompts, results):
        assert status == 200 and out["output_ids"] == greedy(parts, 8, prompt)


BAD_BODIES = {
    "not_json": b"{not json",
    "not_object": b"[1, 2]",
    "no_prompt": {},
    "both_prompts": {"text": "w1", "input_ids": [1]},
    "empty_ids": {"input_ids": []},
    "batched_ids": {"input_ids": [[1, 2], [3]]},
    "batched_text": {"text": ["w1", "w2"]},
    "id_out_of_vocab": {"input_ids": [VOCAB]},
    "bool_id": {"input_ids": [True]},
    "stream": {"input_ids": [1], "stream": True},
    "params_not_object": {"input_ids": [1], "sampling_params": [1]},
    "string_temperature": {"input_ids": [1], "sampling_params": {"temperature": "hot"}},
    "negative_temperature": {"input_ids": [1], "sampling_params": {"temperature": -1}},
    "zero_top_p": {"input_ids": [1], "sampling_params": {"top_p": 0}},
    "negative_max_tokens": {"input_ids": [1], "sampling_params": {"max_new_tokens": -1}},
    "float_max_tokens": {"input_ids": [1], "sampling_params": {"max_new_tokens": 2.5}},
    "string_max_tokens": {"input_ids": [1], "sampling_params": {"max_new_tokens": "8"}},
    "max_tokens_over_context": {"input_ids": [1], "sampling_params": {"max_new_tokens": 10**9}},
    "unknown_param": {"input_ids": [1], "sampling_params": {"bogus": 1}},
    "penalty": {"input_ids": [1], "sampling_params": {"frequency_penalty": 0.5}},
    "bad_stop": {"input_ids": [1], "sampling_params": {"stop": [""]}},
    "number_stop": {"input_ids": [1], "sampling_params": {"stop": 5}},
    "bad_stop_ids": {"input_ids": [1], "sampling_params": {"stop_token_ids": "w1"}},
    "negative_budget": {"input_ids": [1], "sampling_params": {"custom_params": {"ddtree_budget": -1}}},
    "huge_budget": {"input_ids": [1], "sampling_params": {"custom_params": {"ddtree_budget": 1_000_000_000}}},
    "string_budget": {"input_ids": [1], "sampling_params": {"custom_params": {"ddtree_budget": "64"}}},
    "float_budget": {"input_ids": [1], "sampling_params": {"custom_params": {"ddtree_budget": 8.5}}},
    "auto_budget_unserved": {"input_ids": [1], "sampling_params": {"custom_params": {"ddtree_budget": "auto"}}},
    "zero_depth": {"input_ids": [1], "sampling_params": {"custom_params": {"ddtree_max_depth": 0}}},
    "zero_draft_temperature": {"input_ids": [1], "sampling_params": {"custom_params": {"ddtree_draft_temperature": 0}}},
    "nan_draft_temperature": b'{"input_ids": [1], "sampling_params": {"custom_params": '
    b'{"ddtree_draft_temperature": NaN}}}',
    "inf_draft_temperature": b'{"input_ids": [1], "sampling_params": {"custom_params": '
    b'{"ddtree_draft_temperature": Infinity}}}',
    "unknown_ddtree_key": {"input_ids": [1], "sampling_params": {"custom_params": {"ddtree_budgte": 8}}},
    "prompt_over_context": {"input_ids": [1] * 32768},
    "deep_tree": {"input_ids": [1], "sampling_params": {"custom_params": {"ddtree_max_depth": 99}}},
    "bad_custom": {"input_ids": [1], "sampling_params": {"custom_params": [1]}},
    "int_hold_chain": {"input_ids": [1], "sampling_params": {"custom_params": {"ddtree_hold_chain": 1}}},
    "string_hold_chain": {"input_ids": [1], "sampling_params": {"custom_params": {"ddtree_hold_chain": "true"}}},
}


@pytest.mark.parametrize("body", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_bad_requests_get_400_and_the_server_keeps_serving(url, body):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, out = call(url, "/generate", raw=raw)
    assert status == 400 and out["error"]["message"] and "\n" not in out["error"]["message"]
    status, out = call(url, "/generate", {"input_ids": [1], "sampling_params": {"max_new_tokens": 2}})
    assert status == 200 and len(out["output_ids"]) == 2


def test_custom_params_set_the_tree(url):
    def mean_nodes(budget):
        params = {"temperature": 0, "max_new_tokens": 12, "custom_params": {"ddtree_budget": budget}}
        status, out = call(url, "/generate", {"input_ids": PROMPT, "sampling_params": params})
        assert status == 200
        return out["meta_info"]["ddtree_mean_tree_nodes"]

    assert mean_nodes(0) == 0 and mean_nodes(1) == 1 and mean_nodes(2) == 2 and mean_nodes(16) > 2


BUDGET = "custom_params.ddtree_budget must be an int in [0, 16] (the server's budget), got "
DEPTH = "custom_params.ddtree_max_depth must be an int in [1, 5] (the server's depth limit), got "
DRAFT_TEMPERATURE = "custom_params.ddtree_draft_temperature must be a finite number > 0, got "


@pytest.mark.parametrize(
    "params, message",
    [
        ({"custom_params": {"ddtree_budget": 1_000_000_000}}, BUDGET + "1000000000"),
        ({"custom_params": {"ddtree_budget": -1}}, BUDGET + "-1"),
        ({"custom_params": {"ddtree_budget": "64"}}, BUDGET + "'64'"),
        ({"custom_params": {"ddtree_budget": "auto"}}, BUDGET + "'auto'"),  # this server prices no budgets
        ({"custom_params": {"ddtree_budget": 8.0}}, BUDGET + "8.0"),
        ({"custom_params": {"ddtree_max_depth": 0}}, DEPTH + "0"),
        ({"custom_params": {"ddtree_max_depth": 6}}, DEPTH + "6"),  # the block is 6: 5 drafted positions
        ({"custom_params": {"ddtree_draft_temperature": 0}}, DRAFT_TEMPERATURE + "0"),
        ({"custom_params": {"ddtree_draft_temperature": -2}}, DRAFT_TEMPERATURE + "-2"),
        ({"custom_params": {"ddtree_draft_temperature": float("nan")}}, DRAFT_TEMPERATURE + "nan"),
        ({"custom_params": {"ddtree_draft_temperature": float("inf")}}, DRAFT_TEMPERATURE + "inf"),
        ({"custom_params": {"ddtree_budgte": 8}}, "custom_params.ddtree_budgte is unknown; known: ddtree_budget, "),
        ({"max_new_tokens": -1}, "max_new_tokens must be an int in [0, 32767] (the context 32768 less the prompt's 1"),
        ({"max_new_tokens": 2.5}, "max_new_tokens must be an int in [0, 32767] (the context 32768 less the prompt's 1"),
        ({"max_new_tokens": 32768}, "max_new_tokens must be an int in [0, 32767] (the context 32768 less the prompt"),
    ],
)
def test_bad_requests_name_the_field_and_range(url, parts, params, message):
    """Each refusal is one line that names the field, the range it allows and the value sent (JSON's NaN and
    Infinity included, which Python's json writes and reads)."""
    assert parts[0].config.max_position_embeddings == 32768
    status, out = call(url, "/generate", {"input_ids": [1], "sampling_params": params})
    assert status == 400 and out["error"]["message"].startswith(message), out


def test_a_prompt_over_the_context_names_its_length_and_the_context(url):
    status, out = call(url, "/generate", {"input_ids": [1] * 32768})
    assert (status, out) == (400, {"error": {"message": "the prompt has 32768 tokens; it must be shorter than the "
                                                        "context (32768)"}})  # fmt: skip


def test_a_huge_budget_is_refused_before_any_allocation(parts, monkeypatch):
    """ddtree_budget 10**9 is refused by the range check, before the engine builds a proposer or sizes a
    buffer by it."""
    from ddtree_core.reference import server

    for name in ("generate", "DFlashProposer"):
        monkeypatch.setattr(server, name, lambda *a, **k: pytest.fail("reached the engine"))
    body = {"input_ids": [1], "sampling_params": {"custom_params": {"ddtree_budget": 10**9}}}
    with pytest.raises(server.RequestError, match=r"ddtree_budget must be an int in \[0, 16\]"):
        engine_for(parts).generate(body)


@pytest.mark.parametrize("method", ["ddtree", "ar"])
def test_zero_max_new_tokens_is_an_empty_completion_as_sglang(url, parts, method):
    """max_new_tokens 0 (SGLang: valid, prefill only) answers no tokens, finished by length; a budget of 0
    (the bonus token only) is valid too."""
    params = {"max_new_tokens": 0, "custom_params": {"ddtree_budget": 0}}
    if method == "ddtree":
        status, out = call(url, "/generate", {"input_ids": PROMPT, "sampling_params": params})
        assert status == 200
    else:
        out = engine_for(parts, method="ar").generate({"input_ids": PROMPT, "sampling_params": params})
    assert (out["text"], out["output_ids"]) == ("", [])
    meta = out["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 0}
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (5, 0)
    assert meta.get("spec_verify_ct", 0) == 0


def test_hold_chain_custom_param_at_budget_depth_accepts_as_dflash(url, parts):
    """Held at budget = depth (block 6: 5), the tree is DFlash's block: the same rounds and histogram."""
    params = {"temperature": 0, "max_new_tokens": 20}
    held = {**params, "custom_params": {"ddtree_budget": 5, "ddtree_hold_chain": True}}
    status, out = call(url, "/generate", {"input_ids": PROMPT, "sampling_params": held})
    assert status == 200 and out["output_ids"] == greedy(parts, 20)
    chain = engine_for(parts, method="dflash").generate({"input_ids": PROMPT, "sampling_params": params})
    keys = ("spec_verify_ct", "spec_accept_histogram")
    assert [out["meta_info"][key] for key in keys] == [chain["meta_info"][key] for key in keys]
    plain = {**params, "custom_params": {"ddtree_budget": 5, "ddtree_hold_chain": False}}
    status, unheld = call(url, "/generate", {"input_ids": PROMPT, "sampling_params": plain})
    assert status == 200 and unheld["meta_info"]["spec_accept_histogram"] != out["meta_info"]["spec_accept_histogram"]


def test_hold_chain_flag_sets_the_server_default():
    from ddtree_core.reference.server import _parser

    required = ["--model", "m", "--draft", "d"]
    assert _parser().parse_args([*required, "--hold-chain"]).hold_chain is True
    assert _parser().parse_args(required).hold_chain is False


@pytest.mark.parametrize("method", ["ar", "dflash"])
def test_other_methods(parts, method):
    out = engine_for(parts, method=method).generate({"input_ids": PROMPT, "sampling_params": {"temperature": 0}})
    assert out["output_ids"] == greedy(parts, 128)
    meta = out["meta_info"]
    if method == "ar":
        assert "spec_verify_ct" not in meta and meta["ddtree_method"] == "ar"
    else:
        assert meta["spec_num_proposed_drafts"] == 5 * meta["spec_verify_ct"]


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_command_line_server(parts, tmp_path):
    target, drafter, tokenizer = parts
    target.save_pretrained(tmp_path / "target")
    tokenizer.save_pretrained(tmp_path / "target")
    drafter.save_pretrained(tmp_path / "draft")
    port = free_port()
    command = [sys.executable, "-m", "ddtree_core.reference.server", "--model", str(tmp_path / "target")]
    command += ["--draft", str(tmp_path / "draft"), "--method", "ddtree", "--budget", "8", "--hold-chain"]
    command += ["--port", str(port), "--device", "cpu", "--dtype", "float32"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, process.stderr.read().decode()
            try:
                if call(url, "/health")[0] == 200:
                    break
            except urllib.error.URLError:
                pass
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.5)
        body = {"text": "w1 w2 w3 w4 w5", "sampling_params": {"temperature": 0, "max_new_tokens": 10}}
        status, out = call(url, "/generate", body)
        assert status == 200 and out["output_ids"] == greedy(parts, 10)
        info = call(url, "/get_server_info")[1]
        assert (info["ddtree_budget"], info["ddtree_hold_chain"]) == (8, True)
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_draft_vocabulary_serves_the_same_output_and_says_its_size(parts):
    engine = engine_for(parts, draft_vocab=VOCAB // 2, eos_token_ids=(VOCAB - 2,))
    assert engine.server_info()["draft_vocab"] == VOCAB // 2 + 1
    assert engine_for(parts).server_info()["draft_vocab"] is None
    params = {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True}  # 6, its end-of-sequence id, is drafted too
    out = engine.generate({"input_ids": PROMPT, "sampling_params": params})
    assert out["output_ids"] == greedy(parts, 24)


def test_the_draft_vocab_flag():
    from ddtree_core.reference.server import DRAFT_VOCAB_CPU, _parser, draft_vocab_size

    required = ["--model", "m", "--draft", "d"]
    assert _parser().parse_args(required).draft_vocab == "auto"
    assert _parser().parse_args([*required, "--draft-vocab", "4096"]).draft_vocab == "4096"
    for bad in ("0", "-3", "many"):
        with pytest.raises(SystemExit):
            _parser().parse_args([*required, "--draft-vocab", bad])
    cpu = random_target("qwen3", vocab_size=VOCAB)
    assert draft_vocab_size("auto", cpu) == DRAFT_VOCAB_CPU and draft_vocab_size("all", cpu) is None
    assert draft_vocab_size("4096", cpu) == 4096

"""ddbench sweep --url: sweeps against reference servers that run in this process, started outside ddbench, and
the detection of what a server is (ddbench.harness.remote) on recorded server answers (tests/data/server_info.json)."""

import contextlib
import json
import shutil
import socket
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ddbench.cli import app
from ddbench.config import Cell, DDBenchError, ServerURL, build_config, parse_urls, read_config_file
from ddbench.harness import client, remote
from ddbench.harness.fleet import Fleet
from ddtree_core.reference.decode import SpecConfig
from ddtree_core.reference.server import load_engine, make_server
from ddtree_core.settings import TreeSettings

runner = CliRunner()
KEY = "test-key-0123"
ANSWERS = json.loads((Path(__file__).resolve().parents[1] / "data" / "server_info.json").read_text())


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The in-process servers share the test's cores; one thread each, as ddbench gives its two workers."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Running:
    """A reference server in this process, in a thread (as ddtree_core.reference.server.serving), counting the
    /generate requests it served; `stop` ends it as a crash would (connections refused from then on)."""

    def __init__(self, pair, method: str, *, budget: int = 8, api_key: str | None = KEY):
        target, draft = pair
        spec = SpecConfig(method=method, tree=TreeSettings(budget, None))
        engine = load_engine(str(target), str(draft), spec, device="cpu")
        self.generated = 0
        generate = engine.generate

        def counting(body):
            self.generated += 1
            return generate(body)

        engine.generate = counting
        self.server = make_server(engine, port=0, api_key=api_key)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture(scope="module")
def servers(tiny_pair):
    """AR, DFLASH and two DDTREE (budget 8) servers over the tiny pair, all wanting the API key."""
    running = {name: Running(tiny_pair, name.rstrip("12")) for name in ("ar", "dflash", "ddtree1", "ddtree2")}
    yield running
    for server in running.values():
        server.stop()


def url_args(servers, prompts, out, *extra, urls=None) -> list[str]:
    """A sweep of the `swept` fixture's grid on the running servers: AR and DFLASH labelled, the DDTREE two not."""
    if urls is None:
        urls = (
            f"ar={servers['ar'].url},{servers['ddtree1'].url},dflash={servers['dflash'].url},{servers['ddtree2'].url}"
        )
    return ["sweep", "--url", urls, "--api-key", KEY, "--datasets", str(prompts), "--budgets", "2,8",
            "--max-new-tokens", "8", "--out", str(out), *extra]  # fmt: skip


@pytest.fixture(scope="module")
def url_swept(servers, prompt_file, tmp_path_factory) -> Path:
    """The `swept` grid run against the running servers (no --model: the servers say which); copy to change it."""
    out = tmp_path_factory.mktemp("url") / "run"
    result = runner.invoke(app, url_args(servers, prompt_file, out))
    assert result.exit_code == 0, result.output
    return out


def records(folder: Path) -> dict[tuple, dict]:
    rows = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    return {(row["cell_id"], row["prompt_index"], row["turn"]): row for row in rows}


# --- sweeps against running servers ------------------------------------------------------------------------


def test_url_sweep_gives_the_outputs_of_a_sweep_that_started_its_servers(url_swept, swept):
    ours, theirs = records(url_swept), records(swept)
    assert sorted(ours) == sorted(theirs) and len(ours) == 16
    assert all(ours[key]["output_ids"] == theirs[key]["output_ids"] for key in ours)
    summary = runner.invoke(app, ["report", str(url_swept)])
    assert summary.exit_code == 0 and "DDTree b8" in summary.output
    with open(url_swept / "summary.csv") as stream:
        rows = stream.read().splitlines()
    assert len(rows) == 5 and all(",done," in row for row in rows[1:])


def test_two_ddtree_servers_share_each_ddtree_cell_round_robin(url_swept, servers):
    urls = {name: server.url for name, server in servers.items()}
    by_cell: dict[str, list[str]] = {}
    for (cell_id, _, _), row in sorted(records(url_swept).items()):
        by_cell.setdefault(cell_id.split("__")[1], []).append(row["server_url"])
    assert by_cell["ar"] == [urls["ar"]] * 4 and by_cell["dflash"] == [urls["dflash"]] * 4
    for setting in ("ddtree-b2-dauto-dt1", "ddtree-b8-dauto-dt1"):
        assert sorted(by_cell[setting]) == sorted([urls["ddtree1"], urls["ddtree2"]] * 2)
    assert servers["ddtree1"].generated >= 7 and servers["ddtree2"].generated >= 7  # probe; per cell 1 warm-up, 2
    done = json.loads((url_swept / "cells" / "tiny__ddtree-b8-dauto-dt1__t0__c1.json").read_text())["server"]
    assert done["urls"] == [urls["ddtree1"], urls["ddtree2"]] and done["block_size"] == 4


def test_manifest_names_the_servers_and_the_model_and_keeps_no_key(url_swept, servers, tiny_pair):
    manifest = json.loads((url_swept / "manifest.json").read_text())
    config = manifest["config"]
    assert (config["engine"], config["model"], config["draft"]) == ("reference", str(tiny_pair[0]), str(tiny_pair[1]))
    assert config["url"][0] == f"ar={servers['ar'].url}" and "api_key" not in config
    reported = {server["url"]: server for server in manifest["servers"]}
    assert reported[servers["ddtree2"].url]["method"] == "ddtree"
    assert reported[servers["ddtree2"].url]["settings"]["ddtree_budget"] == 8
    assert reported[servers["dflash"].url]["block_size"] == 4 and "version" in reported[servers["ar"].url]
    assert manifest["runs"][-1]["servers"] == manifest["servers"]
    assert not [path for path in url_swept.rglob("*") if path.is_file() and KEY in path.read_text()]


def test_report_plot_compare_and_diverge_read_a_url_run(url_swept, swept, tmp_path):
    plots = runner.invoke(app, ["plot", str(url_swept), "--out", str(tmp_path / "plots")])
    assert plots.exit_code == 0 and len(list((tmp_path / "plots").glob("*.png"))) == 6
    compared = runner.invoke(app, ["compare", "--baseline", str(swept), str(url_swept), "--no-speed"])
    assert compared.exit_code == 0 and "4 of 4 matched cells within tolerance" in compared.output
    # the model: the manifest's
    diverged = runner.invoke(app, ["check", "diverge", str(url_swept), "--out", str(tmp_path)])
    assert diverged.exit_code == 0, diverged.output
    assert "0 divergences" in diverged.output


def test_rerun_resumes_and_dry_run_lists_what_each_url_serves(url_swept, servers, prompt_file, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(url_swept, out)
    (out / "cells" / "tiny__ddtree-b2-dauto-dt1__t0__c1.json").unlink()  # as if stopped before it finished
    plan = runner.invoke(app, url_args(servers, prompt_file, out, "--budgets", "2,4", "--dry-run"))
    assert plan.exit_code == 0, plan.output
    urls = {name: server.url for name, server in servers.items()}
    listed = {line.split(": ")[0].strip(): line for line in plan.output.splitlines() if line.startswith("  http")}
    assert {url: line.split("; ")[-1] for url, line in listed.items()} == {
        urls["ar"]: "0 cell(s)", urls["dflash"]: "0 cell(s)", urls["ddtree1"]: "2 cell(s)", urls["ddtree2"]: "2 cell(s)"
    }  # fmt: skip
    assert listed[urls["ddtree2"]].startswith(f"  {urls['ddtree2']}: ddtree on reference")
    assert listed[urls["ddtree2"]].endswith(", block 4, budgets <= 8, depths <= 3; 2 cell(s)")
    assert f"  1. ddtree at {urls['ddtree1']}, {urls['ddtree2']}: 2 cell(s)" in plan.output
    assert "2 cells to run on 1 pool(s) of running servers, one at a time; 2 already done" in plan.output
    assert not (out / "cells" / "tiny__ddtree-b4-dauto-dt1__t0__c1.json").exists()
    keyed = [arg for arg in url_args(servers, prompt_file, out, "--budgets", "2,4") if arg not in ("--api-key", KEY)]
    rerun = runner.invoke(app, keyed, env={"DDBENCH_API_KEY": KEY})  # the key from the environment
    assert rerun.exit_code == 0, rerun.output
    assert "2 cells run, 2 already done" in rerun.output


# --- bad input: one line naming the URL, exit 2, nothing written --------------------------------------------


class NotSGLang(BaseHTTPRequestHandler):
    """An HTTP server that is no SGLang server: 404 everywhere."""

    def do_GET(self):
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


class InfoOnly(NotSGLang):
    """Answers /model_info and /server_info as the reference DFLASH server does, /generate with something else."""

    def do_GET(self):
        answer = ANSWERS["reference-dflash"]
        self._send(answer["model_info"] if self.path == "/model_info" else answer["server_info"])

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self._send({"choices": []})

    def _send(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def not_sglang(handler=NotSGLang):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_budget_auto_runs_on_running_reference_servers(url_swept, servers, prompt_file, tmp_path):
    """An auto cell added to a finished url sweep asks both budget-8 DDTREE servers for "ddtree_budget": "auto"
    and gives AR's greedy outputs."""
    out = tmp_path / "run"
    shutil.copytree(url_swept, out)
    result = runner.invoke(app, url_args(servers, prompt_file, out, "--budgets", "auto,2,8"))
    assert result.exit_code == 0, result.output
    assert "1 cells run, 4 already done" in result.output
    auto = {key: row for key, row in records(out).items() if key[0] == "tiny__ddtree-bauto-dauto-dt1__t0__c1"}
    assert len(auto) == 4 and {row["server_url"] for row in auto.values()} == {
        servers["ddtree1"].url, servers["ddtree2"].url
    }  # fmt: skip
    ar = records(out)
    assert all(row["output_ids"] == ar[("tiny__ar__t0__c1", *key[1:])]["output_ids"] for key, row in auto.items())
    assert all(0 < row["meta_info"]["ddtree_mean_tree_nodes"] <= 8 for row in auto.values())


def test_budget_auto_on_running_sglang_servers_needs_an_auto_server(monkeypatch, prompt_file, tmp_path):
    """An SGLang DDTREE server serves budget auto only when started with SGLANG_DDTREE_BUDGET=auto (its
    server_info lists ddtree_auto_budgets), and then no fixed budget: exit 2 with one line before any cell."""
    names = ("sglang-ar", "sglang-dflash", "sglang-ddtree")
    described = [
        remote.describe(f"http://n{i}:1", ANSWERS[n]["model_info"], ANSWERS[n]["server_info"])
        for i, n in enumerate(names)
    ]
    auto_info = {**ANSWERS["sglang-ddtree"]["server_info"], "ddtree_auto_budgets": [15, 31, 63]}
    described.append(remote.describe("http://n3:1", ANSWERS["sglang-ddtree"]["model_info"], auto_info))
    monkeypatch.setattr("ddbench.harness.fleet.probe", lambda url, key: described[int(url.url[8])])
    out = tmp_path / "run"
    args = ["--datasets", str(prompt_file), "--out", str(out)]
    result = runner.invoke(
        app, ["sweep", "--url", "http://n0:1,http://n1:1,http://n2:1", *args, "--budgets", "auto,16"]
    )
    assert result.exit_code == 2 and not out.exists()
    assert result.stderr == (
        "error: no URL serves tiny__ddtree-bauto-dauto-dt1__t0__c1 (http://n2:1: budget auto needs a server started "
        "with SGLANG_DDTREE_BUDGET=auto)\n"
    )
    fixed_on_auto = runner.invoke(
        app, ["sweep", "--url", "http://n0:1,http://n1:1,http://n3:1", *args, "--budgets", "16"]
    )
    assert fixed_on_auto.exit_code == 2 and "(http://n3:1: serves budget auto only" in fixed_on_auto.stderr
    all_four = ["sweep", "--url", "http://n0:1,http://n1:1,http://n2:1,http://n3:1", *args, "--budgets", "auto,16"]
    assert runner.invoke(app, [*all_four, "--dry-run"]).exit_code == 0


def test_bad_urls_exit_2_before_any_cell_with_one_line(servers, prompt_file, tmp_path):
    ar, dflash, tree1, tree2 = (servers[name].url for name in ("ar", "dflash", "ddtree1", "ddtree2"))
    silent = closed_port_url()
    out = tmp_path / "run"
    with not_sglang() as other:
        cases = {
            f"ar={ar},dflash={dflash},{silent}": f"error: {silent} does not answer (ConnectError",
            f"ar={ar},ddtree={dflash},{tree1}": f"error: {dflash} is labelled ddtree but serves dflash",
            f"{ar},{tree1}": "error: no URL serves dflash, which tiny__dflash__t0__c1 needs",
            f"{ar},{dflash},{other}": f"error: {other} is no SGLang-compatible server: GET /model_info and "
            "/get_model_info answer HTTP 404",
            f"{ar},{dflash},ftp://x": "error: url takes [METHOD=]http(s)://HOST:PORT",
        }
        for urls, message in cases.items():
            result = runner.invoke(app, url_args(servers, prompt_file, out, urls=urls))
            assert result.exit_code == 2 and result.stderr.startswith(message), (urls, result.stderr)
            assert result.stderr.count("\n") == 1
    wide = runner.invoke(app, url_args(servers, prompt_file, out, "--budgets", "2,16"))
    assert wide.exit_code == 2
    assert wide.stderr == (f"error: no URL serves tiny__ddtree-b16-dauto-dt1__t0__c1 ({tree1}: budget 16 > 8; "
                           f"{tree2}: budget 16 > 8)\n")  # fmt: skip
    no_key = [arg for arg in url_args(servers, prompt_file, out) if arg not in ("--api-key", KEY)]
    keyless = runner.invoke(app, no_key, env={"DDBENCH_API_KEY": None})
    assert keyless.exit_code == 2
    assert keyless.stderr.startswith(
        f"error: {ar} refuses GET /model_info with HTTP 401 (a missing or wrong --api-key?)"
    )
    started = runner.invoke(app, url_args(servers, prompt_file, out, "--workers", "2"))
    assert started.exit_code == 2 and "workers only apply to servers ddbench starts" in started.stderr
    engine = runner.invoke(app, url_args(servers, prompt_file, out, "--engine", "sglang"))
    assert engine.exit_code == 2 and engine.stderr == f"error: engine is sglang, but {ar} runs reference\n"
    assert not out.exists()


def test_a_server_without_an_sglang_generate_is_refused():
    with not_sglang(InfoOnly) as url:
        with pytest.raises(DDBenchError, match=f"^{url} is no SGLang-compatible server: POST /generate answers no "):
            remote.probe(ServerURL(url), None)
        assert remote.down(url, None) is None  # it is up, just not SGLang
    assert remote.down(url, None).startswith(f"{url} does not answer (ConnectError")


def test_a_server_dying_mid_sweep_costs_its_cells_and_a_rerun_resumes(tiny_pair, prompt_file, tmp_path):
    """The DDTREE server stops as its first cell starts: both DDTree cells fail, AR and DFLASH finish; a rerun
    against a new DDTREE server at another URL runs the two that failed."""
    from ddbench.harness.runner import run_sweep

    ar, dflash, tree = (Running(tiny_pair, method, api_key=None) for method in ("ar", "dflash", "ddtree"))
    out = tmp_path / "run"
    values = dict(model=str(tiny_pair[0]), draft=str(tiny_pair[1]), datasets=str(prompt_file), budgets="2,8")
    config = build_config({**values, "url": f"{ar.url},{dflash.url},{tree.url}", "max_new_tokens": 8,
                           "out": str(out)}, {})  # fmt: skip

    class StopTreeServer:
        stopped: list[str] = []

        def cells_planned(self, num_cells):
            pass

        def cell_started(self, cell, num_requests):
            if cell.method == "ddtree" and not self.stopped:
                tree.stop()
                self.stopped.append(cell.cell_id)

        def request_done(self, cell):
            pass

        def cell_finished(self, cell, error):
            pass

    try:
        outcome = run_sweep(config, StopTreeServer())
        assert outcome.done == 2 and len(outcome.failed) == 2
        assert all(f"server died: {tree.url} does not answer" in failure for failure in outcome.failed)
        assert len(list((out / "cells").glob("*.failure.json"))) == 2
        again = Running(tiny_pair, "ddtree", api_key=None)
        try:
            rerun = run_sweep(build_config({**config.to_dict(), "url": f"{ar.url},{dflash.url},{again.url}"}, {}))
        finally:
            again.stop()
        assert (rerun.done, rerun.skipped, rerun.failed) == (2, 2, ())
        assert not list((out / "cells").glob("*.failure.json")) and again.generated > 0
    finally:
        ar.stop()
        dflash.stop()


# --- detection on recorded answers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, expected",
    [
        ("reference-ar", ("ar", "reference", None, None, None)),
        ("reference-dflash", ("dflash", "reference", 4, None, None)),
        ("reference-ddtree", ("ddtree", "reference", 4, 8, 3)),
        ("sglang-ar", ("ar", "sglang", None, None, None)),
        ("sglang-dflash", ("dflash", "sglang", 16, None, None)),
        ("sglang-ddtree", ("ddtree", "sglang", 16, 63, 15)),
        ("sglang-live-ar", ("ar", "sglang", None, None, None)),
        ("sglang-live-dflash", ("dflash", "sglang", 16, None, None)),
        ("sglang-live-ddtree", ("ddtree", "sglang", 16, 63, 15)),
    ],
)
def test_describe_recorded_answers(name, expected):
    answer = ANSWERS[name]
    server = remote.describe("http://x:1", answer["model_info"], answer["server_info"])
    assert (server.method, server.engine, server.block_size, server.max_budget, server.max_depth) == expected
    assert server.model == answer["model_info"]["model_path"]
    assert server.draft == answer["server_info"]["speculative_draft_model_path"]
    assert server.version == answer["server_info"]["version"]
    assert "api_key" not in server.settings and "ssl_keyfile_password" not in server.settings
    assert "internal_states" not in server.settings


def test_what_a_ddtree_server_serves():
    sglang = ANSWERS["sglang-ddtree"]
    server = remote.describe("http://c:1", sglang["model_info"], sglang["server_info"])
    assert server.label == "ddtree on sglang 0.5.15, block 16, budgets <= 63, depths <= 15"
    assert server.settings["tp_size"] == 2 and server.settings["ddtree_verify_width"] == 64

    def cell(method="ddtree", budget=32, depth=None, held=False):
        tree = method == "ddtree"
        return Cell(
            "gsm8k", method, budget if tree else None, depth, 1.0 if tree else None, 0.0, 1, held if tree else None
        )

    assert [server.refusal(c) for c in (cell(), cell(depth=7), cell(held=True), cell(budget=63))] == [None] * 4
    assert (
        server.refusal(cell(budget=64)) == "budget 64 > 63" and server.refusal(cell(method="dflash")) == "serves ddtree"
    )
    top_k = remote.describe("http://c:1", sglang["model_info"], {**sglang["server_info"], "ddtree_top_k": 8})
    assert top_k.max_budget == 8 and top_k.refusal(cell(budget=16)) == "budget 16 > 8"
    shallow = remote.describe("http://c:1", sglang["model_info"], {**sglang["server_info"], "ddtree_max_depth": 7})
    assert shallow.refusal(cell()) == "depth 15 > 7" and shallow.refusal(cell(depth=7)) is None


def test_describe_refuses_what_it_cannot_sweep():
    sglang = ANSWERS["sglang-ddtree"]
    with pytest.raises(ValueError, match="serves EAGLE3, which ddbench does not sweep"):
        remote.describe("http://x:1", {}, {**sglang["server_info"], "speculative_algorithm": "EAGLE3"})
    older = {key: value for key, value in sglang["server_info"].items() if key != "ddtree_hold_chain"}
    with pytest.raises(ValueError, match="no ddtree_budget or ddtree_hold_chain"):
        remote.describe("http://x:1", sglang["model_info"], older)
    with pytest.raises(ValueError, match="reports no model_path"):
        remote.describe("http://x:1", {}, {"speculative_algorithm": None})


def test_fleet_refuses_servers_of_different_models(monkeypatch):
    answers = [ANSWERS["sglang-ar"], ANSWERS["sglang-dflash"]]
    described = [remote.describe(f"http://n{i}:1", a["model_info"], a["server_info"]) for i, a in enumerate(answers)]
    monkeypatch.setattr("ddbench.harness.fleet.probe", lambda url, key: described[int(url.url[8])])
    urls = parse_urls("http://n0:1,http://n1:1")
    assert Fleet.connect(urls, None).model == "Qwen/Qwen3-8B"
    described[1] = remote.describe("http://n1:1", {"model_path": "Qwen/Qwen3-4B"}, answers[1]["server_info"])
    with pytest.raises(DDBenchError, match="different targets: http://n0:1 Qwen/Qwen3-8B, http://n1:1 Qwen/Qwen3-4B"):
        Fleet.connect(urls, None)


# --- config and client ----------------------------------------------------------------------------------------


def test_urls_parse_and_the_key_is_never_stored(tmp_path):
    assert parse_urls("ar=http://a:30000, https://b:1/") == (
        ServerURL("http://a:30000", "ar"),
        ServerURL("https://b:1"),
    )
    assert parse_urls(["ddtree=http://c:3"]) == (ServerURL("http://c:3", "ddtree"),)
    with pytest.raises(ValueError, match="lists a server twice"):
        parse_urls("http://a:1,ar=http://a:1")
    with pytest.raises(ValueError, match=r"url takes \[METHOD=\]"):
        parse_urls("eagle=http://a:1")
    config = build_config({"model": "m", "draft": "d", "url": "ar=http://a:1", "api_key": "secret"}, {})
    assert config.to_dict()["url"] == ["ar=http://a:1"] and "api_key" not in config.to_dict()
    assert "secret" not in repr(config)
    assert build_config(config.to_dict(), {}).url == config.url
    path = tmp_path / "keyed.toml"
    path.write_text('[sweep]\nurl = ["http://a:1"]\napi_key = "secret"\n')
    with pytest.raises(DDBenchError, match="api_key does not belong in a config file"):
        read_config_file(str(path))


def test_running_servers_are_sent_every_ddtree_knob():
    config = build_config({"model": "m", "draft": "d"}, {})
    tree = Cell("gsm8k", "ddtree", 8, None, 1.0, 0.0, 1)
    assert client.sampling_params(tree, config, explicit_block=16)["custom_params"] == {
        "ddtree_budget": 8, "ddtree_draft_temperature": 1.0, "ddtree_max_depth": 15, "ddtree_hold_chain": False
    }  # fmt: skip
    assert client.sampling_params(tree, config)["custom_params"] == {
        "ddtree_budget": 8,
        "ddtree_draft_temperature": 1.0,
    }
    next_url = client.RoundRobin(["a", "b"])
    assert [next_url() for _ in range(5)] == ["a", "b", "a", "b", "a"]
    assert client.auth_headers("k") == {"Authorization": "Bearer k"} and client.auth_headers(None) == {}


def test_warm_up_reaches_every_url(monkeypatch):
    sent = []
    monkeypatch.setattr(client, "generate", lambda http, url, ids, params, stream: sent.append((url, params)))
    inputs = types.SimpleNamespace(prompts={"gsm8k": [types.SimpleNamespace(turns=("hi",))]}, encode=lambda m: [7])
    config = build_config({"model": "m", "draft": "d"}, {})
    client.warm_up_cell(config, Cell("gsm8k", "ar", None, None, None, 0.0, 1), ["http://a:1", "http://b:1"], inputs)
    assert sorted((url, params["max_new_tokens"]) for url, params in sent) == [("http://a:1", 4), ("http://b:1", 8)]


def test_a_ddtree_cell_goes_to_the_narrowest_servers_that_serve_it():
    answer = ANSWERS["sglang-ddtree"]

    def ddtree(host, budget):
        info = {**answer["server_info"], "ddtree_budget": budget, "ddtree_top_k": budget}
        return remote.describe(f"http://{host}:1", answer["model_info"], info)

    fleet = Fleet((ddtree("c", 32), ddtree("d", 64), ddtree("e", 32)))
    cells = [Cell("gsm8k", "ddtree", budget, None, 1.0, 0.0, 1, False) for budget in (16, 32, 33, 64)]
    pools = fleet.pools(cells)
    assert [pools[cell].urls for cell in cells] == [
        ("http://c:1", "http://e:1"), ("http://c:1", "http://e:1"), ("http://d:1",), ("http://d:1",)
    ]  # fmt: skip


def test_an_auto_cell_goes_to_the_widest_servers_that_serve_auto():
    reference, sglang = ANSWERS["reference-ddtree"], ANSWERS["sglang-ddtree"]

    def ddtree(host, budget, answer=reference):
        info = {**answer["server_info"], "ddtree_budget": budget, "ddtree_top_k": budget}
        return remote.describe(f"http://{host}:1", answer["model_info"], info)

    auto, fixed = (Cell("gsm8k", "ddtree", budget, None, 1.0, 0.0, 1, False) for budget in ("auto", 8))
    pools = Fleet((ddtree("c", 8), ddtree("d", 16), ddtree("e", 16))).pools([auto, fixed])
    assert pools[auto].urls == ("http://d:1", "http://e:1") and pools[fixed].urls == ("http://c:1",)
    assert ddtree("z", 0).refusal(auto) == "budget auto needs a server budget >= 1, not 0"
    assert ddtree("s", 63, sglang).refusal(auto) == "budget auto needs a server started with SGLANG_DDTREE_BUDGET=auto"


def test_the_reconstructed_sglang_answer_reports_what_a_live_server_did():
    def ddtree_keys(name):
        return {k: v for k, v in ANSWERS[name]["server_info"].items() if k.startswith("ddtree_") or k == "version"}

    assert ddtree_keys("sglang-ddtree") == ddtree_keys("sglang-live-ddtree")
    assert ANSWERS["sglang-live-ddtree"]["server_info"]["speculative_num_draft_tokens"] == 64

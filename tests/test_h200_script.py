"""scripts/h200.sh job dispatch, with a stand-in python3 that logs its arguments: every job that only
waits and sweeps must finish, and run the sweeps it names (a job that hangs spends GPU time on nothing)."""

import os
import stat
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "h200.sh"


def tools_env(tmp_path, tools: dict[str, str], **extra) -> dict:
    """The environment of a job run whose PATH starts with these stand-in tools (name -> shell body)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in tools.items():
        tool = bin_dir / name
        tool.write_text(f"#!/bin/sh\n{body}")
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "DD_WORK": str(tmp_path / "w"), "GPU": "0"} | extra


@pytest.fixture
def stand_in(tmp_path):
    # python3 logs its arguments; the job's waits (a server's stop, health polls) pass at once
    return tmp_path, tools_env(tmp_path, {"python3": f'echo "$*" >> {tmp_path}/calls.log\n', "sleep": "exit 0\n"})


def run_jobs(tmp_path, env, *jobs, queues="1", timeout=30):
    work = tmp_path / "w"
    work.mkdir(exist_ok=True)
    (work / "queues").write_text(queues)
    done = subprocess.run(["bash", str(SCRIPT), "sweeps", *jobs], env=env, cwd=SCRIPT.parents[1],
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip
    calls = (tmp_path / "calls.log").read_text().splitlines() if (tmp_path / "calls.log").exists() else []
    return done, calls, (work / "done").read_text().splitlines()


def test_tp2_alone_runs_at_once_and_sweeps_at_tp2(stand_in):
    tmp_path, env = stand_in
    done, calls, finished = run_jobs(tmp_path, env, "tp2")  # no other queue: no `done` file to wait on
    assert done.returncode == 0, done.stderr
    assert "integer expression expected" not in done.stderr
    sweeps = [c for c in calls if c.startswith("-m ddbench sweep")]
    outs = [c.split(" --out ")[1].split()[0] for c in sweeps]
    assert outs == [str(tmp_path / "w" / "runs" / name) for name in ("tp2", "tp2-fold")]
    assert all("--tp 2" in c and "--gpus 0,1" in c for c in sweeps)
    assert finished[-1] == "all-0"


def test_tp2_fold_can_be_left_out(stand_in):
    tmp_path, env = stand_in
    done, calls, _ = run_jobs(tmp_path, {**env, "TP2_FOLD": "0"}, "tp2")
    assert done.returncode == 0, done.stderr
    assert [c for c in calls if c.startswith("-m ddbench sweep")] and not any("tp2-fold" in c for c in calls)


def test_unknown_job_is_reported_not_fatal(stand_in):
    tmp_path, env = stand_in
    done, _, finished = run_jobs(tmp_path, env, "nosuch gputests")
    assert "unknown job nosuch" in done.stdout
    assert "gputests rc=0" in finished and finished[-1] == "all-0"


def test_ab_sweeps_with_and_without_prefill_graphs_and_kernels_take_the_impls(stand_in):
    tmp_path, env = stand_in
    done, calls, finished = run_jobs(tmp_path, {**env, "KERNEL_IMPLS": "triton"}, "ab kernels")
    assert done.returncode == 0, done.stderr
    sweeps = {c.split(" --out ")[1].split()[0].rsplit("/", 1)[1]: c for c in calls if c.startswith("-m ddbench sweep")}
    assert set(sweeps) == {"ab-prefill-graph", "ab-no-prefill-graph"}
    assert "--disable-prefill-cuda-graph" in sweeps["ab-no-prefill-graph"]
    assert "--disable-prefill-cuda-graph" not in sweeps["ab-prefill-graph"]
    assert any(c.startswith("scripts/log_rounds.py --summary 1,16") for c in calls)
    assert "ab rc=0" in finished
    assert any(c.startswith("-m ddbench kernels bench") and "--impls triton" in c for c in calls)
    assert finished[-1] == "all-0"


def test_peers_runs_the_dflash_control_then_ddtree_and_compares(stand_in):
    tmp_path, env = stand_in
    (tmp_path / "w" / "payload" / "peers").mkdir(parents=True)
    done, calls, finished = run_jobs(tmp_path, {**env, "PEER_SELECT": "test_dflash.py:TestDFlashServerBase"}, "peers")
    assert done.returncode == 0, done.stderr
    runs = [c for c in calls if "scripts/peer_tests.py run" in c]
    assert [c.split("--algorithm ")[1].split()[0] for c in runs] == ["DFLASH", "DDTREE"]
    assert all("--select test_dflash.py:TestDFlashServerBase" in c and "--gsm8k" in c for c in runs)
    assert any("scripts/peer_tests.py compare" in c for c in calls)
    assert "peers DFLASH rc=0" in finished and "peers DDTREE rc=0" in finished and finished[-1] == "all-0"


def test_peers_without_the_gathered_tests_says_so_and_goes_on(stand_in):
    tmp_path, env = stand_in
    done, calls, finished = run_jobs(tmp_path, env, "peers gputests")
    assert done.returncode == 0, done.stderr
    assert not any("peer_tests.py" in c for c in calls)
    assert any("no payload/peers" in line for line in finished) and "gputests rc=0" in finished


def test_load_checks_b63_at_two_page_sizes_and_an_auto_server(stand_in):
    tmp_path, env = stand_in
    done, calls, finished = run_jobs(tmp_path, env, "load")
    assert done.returncode == 0, done.stderr
    servers = [c for c in calls if "launch_server" in c]
    assert len(servers) == 3 and all("--enable-metrics" in c for c in servers)
    assert [c.split("--page-size ")[1].split()[0] for c in servers] == ["1", "16", "1"]
    checks = [c for c in calls if c.startswith("-m ddbench check load")]
    outs = [c.split(" --out ")[1].split()[0].rsplit("/", 1)[1] for c in checks]
    assert outs == ["b63-p1.json", "b63-p16.json", "auto-p1.json"]
    assert [line for line in finished if line.startswith("load ")] == [
        "load b63-p1 rc=0", "load b63-p16 rc=0", "load auto-p1 rc=0"
    ]  # fmt: skip


def test_gputests_runs_a_pytest_per_gpu_test_file(stand_in):
    tmp_path, env = stand_in
    done, calls, finished = run_jobs(tmp_path, env, "gputests")
    assert done.returncode == 0 and "gputests rc=0" in finished
    files = sorted(call.split()[5] for call in calls if call.startswith("-m pytest -v -m gpu"))
    gpu_files = sorted(
        f"tests/{path.name}"
        for path in (SCRIPT.parents[1] / "tests").glob("test_*.py")
        if "pytest.mark.gpu" in path.read_text() and path.name != "test_datasets.py"
    )
    assert files == gpu_files and len(files) > 5
    assert all("faulthandler_timeout=240" in call for call in calls)


def test_drafter_trains_one_drafter_per_depth_and_soft_label_weight(stand_in):
    tmp_path, env = stand_in
    env = {**env, "LAYERS": "2 4", "SOFT": "0 1", "DRAFTER_MEM": "0.25"}
    done, calls, finished = run_jobs(tmp_path, env, "drafter")
    prompts = [c for c in calls if c.startswith("-m ddbench testbed train-prompts")]
    assert len(prompts) == 1 and "--gsm8k-train" not in prompts[0]  # no train split carried
    (tmp_path / "w" / "data").mkdir()
    (tmp_path / "w" / "data" / "gsm8k_train.jsonl.gz").write_bytes(b"")
    (tmp_path / "calls.log").unlink()
    done, calls, finished = run_jobs(tmp_path, env, "drafter")
    prompts = [c for c in calls if c.startswith("-m ddbench testbed train-prompts")]
    assert f"--gsm8k-train {tmp_path}/w/data/gsm8k_train.jsonl.gz" in prompts[0]
    assert done.returncode == 0, done.stderr
    trains = [c for c in calls if c.startswith("-m ddbench testbed train ")]
    outs = [(c.split(" --out ")[1].split()[0].rsplit("/", 1)[1], c.split("--soft-labels ")[1].split()[0])
            for c in trains]  # fmt: skip
    assert outs == [("l2", "0"), ("l2-s1", "1"), ("l4", "0"), ("l4-s1", "1")]
    servers = [c for c in calls if "launch_server" in c]
    assert len(servers) == 1 and "--disable-radix-cache" in servers[0]  # its evictions slowed the answers 2.3x
    assert servers[0].split("--mem-fraction-static ")[-1].split()[0] == "0.25"
    assert "drafter rc=0" in finished


def test_resident8b_starts_each_named_server_once_and_sweeps_the_plan_against_them(tmp_path):
    """RESIDENT with an auto server and RESIDENT_PLAN=mt-t1: five servers (the stand-in python3 prints SGLang's
    "Capture cuda graph end", a server stays up, every health check passes), then the plan's four sweeps,
    each against all five servers with budgets 15, 63 and auto, the auto server given the committed table."""
    python = (  # a server stays up until the job stops it
        f'echo "$*" >> {tmp_path}/calls.log\necho "Capture cuda graph end"\n'
        f'case "$*" in *launch_server*) echo "$SGLANG_DDTREE_BUDGET $SGLANG_DDTREE_COST_TABLE" >> {tmp_path}/env.log\n'
        "  exec sleep 60 ;; esac\n"
    )
    env = tools_env(tmp_path, {"python3": python, "nvidia-smi": "echo 80000\n"}, RESIDENT="b63 b15 dflash ar auto",
                    RESIDENT_PLAN="mt-t1", AUTO_COST_TABLE="configs/cost/testbed8b-h200.json")  # fmt: skip
    (tmp_path / "w" / "big" / "target").mkdir(parents=True)
    (tmp_path / "w" / "big" / "target" / "config.json").write_text("{}")  # inflated before: no inflation
    done, calls, finished = run_jobs(tmp_path, env, "resident8b")
    assert done.returncode == 0, done.stderr
    servers = [c for c in calls if "launch_server" in c]
    assert [c.split("--port ")[1].split()[0] for c in servers] == ["12100", "12200", "12300", "12400", "12500"]
    assert sum("ddtree_core.sglang.launch_server" in c for c in servers) == 3
    budgets = (tmp_path / "env.log").read_text().splitlines()
    assert [line.split()[0] for line in budgets] == ["63", "15", "0", "0", "auto:15,31,63"]
    assert budgets[-1].split()[1] == f"{tmp_path}/w/repo/configs/cost/testbed8b-h200.json"
    sweeps = [c for c in calls if c.startswith("-m ddbench sweep")]
    outs = [c.split(" --out ")[1].split()[0].rsplit("/", 1)[1] for c in sweeps]
    assert outs == ["mt-c1", "t1-c1", "mt-load", "t1-load"]
    for sweep in sweeps:
        assert "--budgets 15,63,auto" in sweep and sweep.split("--url ")[1].split()[0].count("http://") == 5
    assert [line for line in finished if line.startswith("8b-resident")] == [
        "8b-resident mt-c1 rc=0", "8b-resident t1-c1 rc=0", "8b-resident mt-load rc=0", "8b-resident t1-load rc=0"
    ]  # fmt: skip


def test_chisq_checks_b15_and_b63_against_one_ar_server_and_a_planted_failure(stand_in):
    tmp_path, env = stand_in
    done, calls, finished = run_jobs(tmp_path, env, "chisq")
    assert done.returncode == 0, done.stderr
    # the servers start in the background, so their lines may reach the log in either order: tell them by port
    servers = sorted((c.split("--port ")[1].split()[0], c) for c in calls if "launch_server" in c)
    assert [port for port, _ in servers] == ["31000", "31000", "31050"]
    assert "--speculative-algorithm" not in servers[2][1]  # one AR server, beside the port the checks' DDTree use
    assert all("--speculative-algorithm DDTREE" in c for _, c in servers[:2])
    checks = [c for c in calls if c.startswith("-m ddbench check sampled")]
    outs = [c.split(" --out ")[1].split()[0].rsplit("/", 1)[1] for c in checks]
    assert outs == [f"b{b}-{case}.json" for b in (15, 63) for case in ("t1.0-p1.0", "t0.7-p0.9", "planted")]
    assert all("--samples 2000" in c for c in checks) and all("--spec-temperature 0.8" in c for c in checks[2::3])
    assert "chisq rc=0" in finished


@pytest.mark.parametrize("big", [False, True])
def test_trace_traces_the_testbed_or_the_inflated_pair_and_gives_the_testbed_back(stand_in, big):
    tmp_path, env = stand_in
    env = {**env, "TRACE_8B": "1"} if big else env
    done, calls, finished = run_jobs(tmp_path, env, "trace", "chisq", timeout=90)  # each server stops in 5 s
    assert done.returncode == 0, done.stderr
    inflations = [c for c in calls if c.startswith("-m ddbench testbed inflate")]
    assert len(inflations) == int(big)
    runs = [c for c in calls if c.startswith("scripts/trace_rounds.py")]
    traces = [c for c in runs if "--steps 0" not in c]
    names = ["dflash", "ddtree-b15"] if big else ["dflash", "ddtree-b15", "ddtree-b128", "ar"]
    assert [c.split("--prefix ")[1].split()[0] for c in traces] == names
    # each server also takes untraced bursts, whose prefill-free rounds log_rounds --pure summarises
    assert [c.split("--prefix ")[1].split()[0] for c in runs] == [p for n in names for p in (n, f"{n}-bursts")]
    assert all(f"/runs/trace{'-8b' if big else ''} " in c for c in runs)
    out = tmp_path / "w" / "runs" / f"trace{'-8b' if big else ''}"
    assert sorted(p.name for p in out.glob("server-*.log")) == sorted(f"server-{n}.log" for n in names)
    summaries = [c for c in calls if c.startswith("scripts/log_rounds.py --pure")]
    assert len(summaries) == 1 and f"--max-ms {60 if big else 20} --summary 1,16 {out}/server-" in summaries[0]
    servers = [c.split("--model-path ")[1].split()[0] for c in calls if "launch_server" in c]
    testbed = f"{tmp_path}/w/cache/SmolLM2-135M-Instruct"
    assert servers[: len(traces)] == [f"{tmp_path}/w/big/target" if big else testbed] * len(traces)
    assert set(servers[len(traces) :]) == {testbed}  # chisq after it: the testbed again
    assert "trace rc=0" in finished and "chisq rc=0" in finished


@pytest.mark.parametrize("share", ["0", "1"])
def test_queues_go_one_per_gpu_or_all_on_gpu_0_with_their_own_ports(tmp_path, share):
    # `queues` alone, its setsid a stand-in that logs each queue's GPU, QUEUE and jobs
    env = tools_env(tmp_path, {"setsid": f'echo "$GPU $QUEUE $*" >> {tmp_path}/queues.log\n'}, SHARE_GPU=share)
    (tmp_path / "w").mkdir()
    body = f"""W={tmp_path}/w; eval "$(sed -n '/^queues() {{/,/^}}/p' {SCRIPT})"; queues gputests / chisq load; wait"""
    assert subprocess.run(["bash", "-c", body], env=env, cwd=SCRIPT.parents[1], timeout=30).returncode == 0
    lines = sorted((tmp_path / "queues.log").read_text().splitlines())
    assert [line.split(" nohup ")[0] for line in lines] == (["0 0", "0 1"] if share == "1" else ["0 0", "1 1"])
    assert lines[0].endswith("sweeps gputests") and lines[1].endswith("sweeps chisq load")
    assert (tmp_path / "w" / "queues").read_text().strip() == "2"
    # the second queue's servers take the ports above the first's
    (tmp_path / "q").mkdir()
    env = tools_env(tmp_path / "q", {"python3": f'echo "$*" >> {tmp_path}/calls.log\n', "sleep": "exit 0\n"},
                    QUEUE="1", DD_WORK=str(tmp_path / "w"))  # fmt: skip
    done, calls, _ = run_jobs(tmp_path, env, "chisq")
    assert done.returncode == 0, done.stderr
    assert {c.split("--port ")[1].split()[0] for c in calls if "launch_server" in c} == {"31100", "31150"}


def test_resident8b_takes_any_budget_and_sweeps_each(tmp_path):
    python = (
        f'echo "$*" >> {tmp_path}/calls.log\necho "Capture cuda graph end"\n'
        'case "$*" in *launch_server*) exec sleep 60 ;; esac\n'
    )
    env = tools_env(tmp_path, {"python3": python, "nvidia-smi": "echo 80000\n"}, RESIDENT="b127 b31 b15 dflash b0x",
                    RESIDENT_PLAN="c1")  # fmt: skip
    (tmp_path / "w" / "big" / "target").mkdir(parents=True)
    (tmp_path / "w" / "big" / "target" / "config.json").write_text("{}")
    done, calls, _ = run_jobs(tmp_path, env, "resident8b")
    assert done.returncode == 0, done.stderr
    assert "resident: unknown server b0x" in done.stdout
    servers = [c for c in calls if "launch_server" in c]
    assert [c.split("--port ")[1].split()[0] for c in servers] == ["13127", "13031", "12200", "12300"]
    sweeps = [c for c in calls if c.startswith("-m ddbench sweep")]
    assert sweeps and all("--budgets 15,31,127" in c and c.split("--url ")[1].split()[0].count("http://") == 4
                          for c in sweeps)  # fmt: skip

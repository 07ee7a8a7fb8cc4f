"""The environment stamp: the commit outside git, the DDTree settings in effect, the GPU record of a server."""

from ddbench import env
from ddbench.harness.server import gpu_snapshot


def test_commit_outside_git_comes_from_the_environment(monkeypatch):
    monkeypatch.setattr(env, "_run", lambda command: "")  # as in a copy of the code without .git
    monkeypatch.setenv("DDBENCH_GIT_SHA", "145a455")
    monkeypatch.setenv("DDBENCH_GIT_DIRTY", "1")
    assert env.git_state() == {"sha": "145a455", "dirty": True}
    monkeypatch.delenv("DDBENCH_GIT_SHA")
    monkeypatch.delenv("DDBENCH_GIT_DIRTY")
    assert env.git_state() == {"sha": "", "dirty": None}


def test_ddtree_settings_are_recorded(monkeypatch):
    environ = {"SGLANG_DDTREE_DRAFT_GRAPH": "1", "DDTREE_PDL": "0", "SGLANG_OTHER": "x", "PATH": "/bin"}
    assert env.ddtree_settings(environ) == {"DDTREE_PDL": "0", "SGLANG_DDTREE_DRAFT_GRAPH": "1"}
    monkeypatch.setenv("SGLANG_DDTREE_BUDGET", "63")
    assert env.environment_stamp()["settings"]["SGLANG_DDTREE_BUDGET"] == "63"


def test_gpu_snapshot_without_gpus_is_empty():
    assert gpu_snapshot(()) == ""

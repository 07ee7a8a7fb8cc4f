"""SGLang plugin settings: environment knobs, widths, per-request overrides and their validation."""

import math
from types import SimpleNamespace

import pytest

from ddtree_core.settings import TreeSettings
from ddtree_core.sglang.config import SETTINGS_ATTR, DDTreeConfigError, ServerSettings, admit


def server(block=16, budget=15, max_depth=15, draft_temperature=1.0, hold_chain=False, **knobs):
    return ServerSettings(block, TreeSettings(budget, max_depth, draft_temperature, hold_chain), **knobs)


def admitted(params, settings):
    """What SGLang's admission hook answers for a request of these custom_params, and the request."""
    req = SimpleNamespace(sampling_params=SimpleNamespace(custom_params=params))
    return admit(req, settings), req


def test_defaults_follow_the_block():
    settings = ServerSettings.from_env({}, 16)
    assert settings == server()
    assert (settings.tree_depth, settings.verify_width, settings.top_k) == (15, 16, 15)


def test_environment_values():
    env = {"SGLANG_DDTREE_BUDGET": "63", "SGLANG_DDTREE_MAX_DEPTH": " 8 ", "SGLANG_DDTREE_DRAFT_TEMPERATURE": "0.5"}
    settings = ServerSettings.from_env(env, 16)
    assert settings == server(budget=63, max_depth=8, draft_temperature=0.5)
    assert (settings.tree_depth, settings.verify_width) == (8, 64)


def test_empty_variables_mean_defaults():
    env = {"SGLANG_DDTREE_BUDGET": "", "SGLANG_DDTREE_MAX_DEPTH": "  ", "SGLANG_DDTREE_DRAFT_TEMPERATURE": ""}
    assert ServerSettings.from_env(env, 8) == server(block=8, budget=7, max_depth=7)


@pytest.mark.parametrize(
    "budget, max_depth, block, depth, width",
    [
        (15, 15, 16, 15, 16),  # the reference default: W == block
        (4, 15, 16, 4, 16),  # a small budget: W stays the block (padding columns), D <= N
        (16, 15, 16, 15, 17),
        (255, 3, 16, 3, 256),
        (1, 1, 2, 1, 2),
    ],
)
def test_widths(budget, max_depth, block, depth, width):
    settings = server(block=block, budget=budget, max_depth=max_depth)
    assert (settings.tree_depth, settings.verify_width) == (depth, width)
    # The reservation of 2 * W slots covers the previous round's <= D + 1 commits plus this round's writes.
    assert 2 * settings.verify_width >= settings.tree_depth + 1 + max(settings.verify_width, block)


@pytest.mark.parametrize(
    "env, match",
    [
        ({"SGLANG_DDTREE_BUDGET": "lots"}, "SGLANG_DDTREE_BUDGET must be an integer"),
        ({"SGLANG_DDTREE_BUDGET": "0"}, "SGLANG_DDTREE_BUDGET must be >= 1"),
        ({"SGLANG_DDTREE_BUDGET": "7.5"}, "SGLANG_DDTREE_BUDGET must be an integer"),
        ({"SGLANG_DDTREE_MAX_DEPTH": "0"}, r"SGLANG_DDTREE_MAX_DEPTH must be in 1\.\.15"),
        ({"SGLANG_DDTREE_MAX_DEPTH": "16"}, r"SGLANG_DDTREE_MAX_DEPTH must be in 1\.\.15"),
        ({"SGLANG_DDTREE_DRAFT_TEMPERATURE": "0"}, "SGLANG_DDTREE_DRAFT_TEMPERATURE must be a finite number > 0"),
        ({"SGLANG_DDTREE_DRAFT_TEMPERATURE": "-1"}, "must be a finite number > 0"),
        ({"SGLANG_DDTREE_DRAFT_TEMPERATURE": "nan"}, "must be a finite number > 0"),
        ({"SGLANG_DDTREE_DRAFT_TEMPERATURE": "inf"}, "must be a finite number > 0"),
        ({"SGLANG_DDTREE_DRAFT_TEMPERATURE": "hot"}, "SGLANG_DDTREE_DRAFT_TEMPERATURE must be a number"),
        ({"SGLANG_DDTREE_TOP_K": "16"}, r"SGLANG_DDTREE_TOP_K must be in 1\.\.15 \(the budget\)"),
        ({"SGLANG_DDTREE_TOP_K": "-1"}, r"SGLANG_DDTREE_TOP_K must be in 1\.\.15"),
        ({"SGLANG_DDTREE_TOP_K": "four"}, "SGLANG_DDTREE_TOP_K must be an integer"),
        ({"SGLANG_DDTREE_HOLD_CHAIN": "2"}, "SGLANG_DDTREE_HOLD_CHAIN must be 0 or 1"),
    ],
)
def test_bad_environment(env, match):
    with pytest.raises(DDTreeConfigError, match=match):
        ServerSettings.from_env(env, 16)


def test_block_needs_a_drafted_position():
    with pytest.raises(DDTreeConfigError, match="block size must be >= 2"):
        ServerSettings.from_env({}, 1)


@pytest.mark.parametrize(
    "tree, message",
    [
        (TreeSettings(0, 15), "SGLANG_DDTREE_BUDGET must be >= 1, got 0"),
        (TreeSettings(15, 16), "SGLANG_DDTREE_MAX_DEPTH must be in 1..15, got 16"),
        (TreeSettings(15, None), "SGLANG_DDTREE_MAX_DEPTH must be in 1..15, got None"),
        (TreeSettings(15, 15, auto=True), 'SGLANG_DDTREE_BUDGET takes no "auto"'),
    ],
)
def test_server_trees_are_checked_as_the_environment_is(tree, message):
    """Settings built in code meet the checks (and the one-line errors) of settings from the environment."""
    with pytest.raises(DDTreeConfigError) as raised:
        ServerSettings(16, tree)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


def test_environment_round_trip():
    settings = server(budget=63, max_depth=8, draft_temperature=0.5, hold_chain=True)
    assert ServerSettings.from_env(settings.tree.to_environment(), 16) == settings


def test_info_keys():
    assert server(budget=63, max_depth=8).info() == {
        "ddtree_block_size": 16,
        "ddtree_budget": 63,
        "ddtree_max_depth": 8,
        "ddtree_draft_temperature": 1.0,
        "ddtree_top_k": 63,
        "ddtree_hold_chain": False,
        "ddtree_tree_depth": 8,
        "ddtree_verify_width": 64,
        "ddtree_auto_budgets": [],
    }


@pytest.mark.parametrize("params", [None, {}, {"__req__": object(), "temperature_bias": 3}])
def test_requests_without_ddtree_params_run_the_defaults(params):
    settings = server(budget=31, max_depth=8, draft_temperature=0.7)
    assert settings.request_settings(params) == TreeSettings(31, 8, 0.7)
    error, req = admitted(params, settings)
    assert error is None and getattr(req, SETTINGS_ATTR) == TreeSettings(31, 8, 0.7)


@pytest.mark.parametrize(
    "params, expected",
    [
        ({"ddtree_budget": 0}, TreeSettings(0, 8, 1.0)),
        ({"ddtree_budget": 31}, TreeSettings(31, 8, 1.0)),
        ({"ddtree_max_depth": 1, "ddtree_budget": 5}, TreeSettings(5, 1, 1.0)),
        ({"ddtree_draft_temperature": 2}, TreeSettings(31, 8, 2.0)),
        ({"ddtree_draft_temperature": 0.25, "__req__": None}, TreeSettings(31, 8, 0.25)),
    ],
)
def test_request_overrides(params, expected):
    settings = server(budget=31, max_depth=8)
    out = settings.request_settings(params)
    assert out == expected
    assert isinstance(out.draft_temperature, float)
    assert getattr(admitted(params, settings)[1], SETTINGS_ATTR) == expected  # kept for the worker


def test_request_depth_between_tree_depth_and_max_depth_means_tree_depth():
    settings = server(budget=4, max_depth=15)  # tree_depth 4: a 4-node tree is at most 4 deep
    assert settings.request_settings({"ddtree_max_depth": 10}).max_depth == 4
    assert settings.request_defaults().max_depth == 4


@pytest.mark.parametrize(
    "params, match",
    [
        ({"ddtree_budget": 32}, r"custom_params\.ddtree_budget must be an int in \[0, 31\] \(the server's budget\)"),
        ({"ddtree_budget": -1}, r"ddtree_budget must be an int in \[0, 31\]"),
        ({"ddtree_budget": True}, r"ddtree_budget must be an int in \[0, 31\].*got True"),
        ({"ddtree_budget": "8"}, r"ddtree_budget must be an int in \[0, 31\].*got '8'"),
        ({"ddtree_budget": 8.0}, r"ddtree_budget must be an int in \[0, 31\].*got 8\.0"),
        ({"ddtree_max_depth": 9}, r"ddtree_max_depth must be an int in \[1, 8\]"),
        ({"ddtree_max_depth": 0}, r"ddtree_max_depth must be an int in \[1, 8\]"),
        ({"ddtree_draft_temperature": 0}, "ddtree_draft_temperature must be a finite number > 0"),
        ({"ddtree_draft_temperature": math.inf}, "must be a finite number > 0"),
        ({"ddtree_draft_temperature": "1"}, "ddtree_draft_temperature must be a finite number > 0, got '1'"),
        ({"ddtree_draft_temperature": False}, "ddtree_draft_temperature must be a finite number > 0, got False"),
        ({"ddtree_budjet": 3}, r"custom_params\.ddtree_budjet is unknown; known: ddtree_budget"),
        ({"ddtree_hold_chain": 1}, "ddtree_hold_chain must be true or false"),
        ({"ddtree_hold_chain": "yes"}, "ddtree_hold_chain must be true or false"),
    ],
)
def test_bad_request_params(params, match):
    settings = server(budget=31, max_depth=8)
    with pytest.raises(DDTreeConfigError, match=match):
        settings.request_settings(params)
    error, req = admitted(params, settings)
    assert error.startswith("DDTREE: ") and "\n" not in error and not hasattr(req, SETTINGS_ATTR)


def test_top_k_knob():
    settings = ServerSettings.from_env({"SGLANG_DDTREE_BUDGET": "63", "SGLANG_DDTREE_TOP_K": "8"}, 16)
    assert (settings.top_k, settings.verify_width, settings.info()["ddtree_top_k"]) == (8, 64, 8)
    assert ServerSettings.from_env({"SGLANG_DDTREE_BUDGET": "63"}, 16).top_k == 63  # the exact DDTree tree
    # A request may lower its depth only while K covers its budget (rounds._limit_depths needs K >= budget).
    assert settings.request_settings({"ddtree_budget": 8, "ddtree_max_depth": 3}).max_depth == 3
    with pytest.raises(DDTreeConfigError, match="ddtree_max_depth below the server's 15 needs SGLANG_DDTREE_TOP_K"):
        settings.request_settings({"ddtree_max_depth": 3})


def test_top_k_knob_limits_children_per_node():
    import torch

    from ddtree_core.sglang.rounds import draft_tree

    settings = ServerSettings(block_size=8, tree=TreeSettings(20, 7, 1.0), draft_top_k=2)
    logits = torch.randn(3, settings.tree_depth, 50, generator=torch.Generator().manual_seed(0))
    topk, tree = draft_tree(logits, settings, None, impl="reference")
    assert topk.token_ids.shape == (3, 7, 2) and tree.num_nodes.tolist() == [20, 20, 20]
    for parents in tree.parents.tolist():
        counts = [parents.count(node) for node in range(len(parents))]
        assert max(counts) == 2  # at most K children, and some node has K


def test_hold_chain_knob():
    assert ServerSettings.from_env({"SGLANG_DDTREE_HOLD_CHAIN": "1"}, 16).tree.hold_chain
    assert not ServerSettings.from_env({"SGLANG_DDTREE_HOLD_CHAIN": " 0 "}, 16).tree.hold_chain
    held = server(budget=31, max_depth=8, hold_chain=True)
    assert held.request_defaults().hold_chain and held.info()["ddtree_hold_chain"]
    assert not held.request_settings({"ddtree_hold_chain": False}).hold_chain
    assert server(budget=31).request_settings({"ddtree_hold_chain": True}).hold_chain


def test_held_trees_through_request_limits():
    """Per-request hold and depth limits together: a held request's chain stops at its depth limit, and
    its tree is the reference held tree of its own depth; the other request's tree is unchanged."""
    import torch

    from ddtree_core import build_tree_from_topk
    from ddtree_core.sglang.rounds import draft_tree, staged_limits

    settings = server(block=8, budget=12, max_depth=7)
    logits = torch.randn(2, settings.tree_depth, 40, generator=torch.Generator().manual_seed(2)) * 3
    requests = [TreeSettings(12, 3, 1.0, hold_chain=True), TreeSettings(12, 7, 1.0)]
    topk, tree = draft_tree(logits, settings, staged_limits(requests, pin=False), impl="torch")
    _, plain = draft_tree(logits, settings, None, impl="torch")
    held = build_tree_from_topk(topk, 12, max_depth=3, hold_chain=True, impl="reference")
    assert tree.parents[0].tolist() == held.parents[0].tolist()
    assert tree.token_ids[0].tolist() == held.token_ids[0].tolist()
    chain = logits[0, :3].argmax(-1).tolist()
    assert tree.token_ids[0, :3].tolist() == chain and tree.depths[0, :4].tolist() == [0, 1, 2, 3]
    assert int(tree.depths[0].max()) == 3
    assert tree.parents[1].tolist() == plain.parents[1].tolist()


@pytest.mark.parametrize(
    "value, budgets, widths",
    [("auto", (15, 31, 63), (16, 32, 64)), (" AUTO:63,15 ", (15, 63), (16, 64)), ("auto:15", (15,), (16,))],
)
def test_auto_budgets_from_the_environment(value, budgets, widths):
    settings = ServerSettings.from_env({"SGLANG_DDTREE_BUDGET": value}, 16)
    assert settings.auto and settings.auto_budgets == budgets and settings.verify_widths == widths
    assert settings.tree.budget == budgets[-1] and settings.verify_width == widths[-1] and not settings.tree.auto
    assert settings.info()["ddtree_auto_budgets"] == list(budgets)
    assert server(budget=63).verify_widths == (64,) and not server(budget=63).auto


@pytest.mark.parametrize(
    "value, match",
    [
        ("auto:7,63", r"SGLANG_DDTREE_BUDGET=auto needs increasing budgets >= 15 \(the block's\), got 7,63"),
        ("auto:x", r"SGLANG_DDTREE_BUDGET must be an integer, auto or auto:B1,B2,\.\., got 'auto:x'"),
        ("auto:", "SGLANG_DDTREE_BUDGET must be an integer, auto or"),
        ("autox", "SGLANG_DDTREE_BUDGET must be an integer, got 'autox'"),
    ],
)
def test_bad_auto_budgets(value, match):
    with pytest.raises(DDTreeConfigError, match=match):
        ServerSettings.from_env({"SGLANG_DDTREE_BUDGET": value}, 16)


def test_requests_on_an_auto_server():
    """A budget of "auto" is taken on an auto server (its default trees) and refused elsewhere; an int caps a
    request's tree whatever the round's budget."""
    auto = ServerSettings.from_env({"SGLANG_DDTREE_BUDGET": "auto"}, 16)
    assert auto.request_settings({"ddtree_budget": "auto"}) == auto.request_defaults()
    assert auto.request_settings({"ddtree_budget": 20}).budget == 20
    with pytest.raises(DDTreeConfigError, match=r"ddtree_budget must be an int in \[0, 63\].*or \"auto\""):
        auto.request_settings({"ddtree_budget": "Auto"})
    with pytest.raises(DDTreeConfigError, match=r"ddtree_budget must be an int in \[0, 63\] \(the server's budget\)"):
        server(budget=63).request_settings({"ddtree_budget": "auto"})

"""ddtree_core.settings: TreeSettings, its rules, its ways in (custom_params, the environment) and out, round trips."""

import math

import pytest

from ddtree_core.settings import (
    ENVIRONMENT,
    REQUEST_PARAMS,
    TreeSettings,
    TreeSettingsError,
)

SERVER = TreeSettings(budget=64, max_depth=15, draft_temperature=1.0, hold_chain=False)


def one_line_error(call) -> str:
    with pytest.raises(TreeSettingsError) as raised:
        call()
    assert "\n" not in str(raised.value)
    return str(raised.value)


# --- the settings themselves ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(budget=-1, max_depth=None), "budget must be an int >= 0, got -1"),
        (dict(budget=True, max_depth=None), "budget must be an int >= 0, got True"),
        (dict(budget=8.0, max_depth=None), "budget must be an int >= 0, got 8.0"),
        (dict(budget=8, max_depth=0), "max_depth must be None or an int >= 1, got 0"),
        (dict(budget=8, max_depth=None, draft_temperature=0), "draft_temperature must be a finite number > 0, got 0"),
        (dict(budget=8, max_depth=None, draft_temperature=math.inf), "draft_temperature must be a finite number > 0"),
        (dict(budget=8, max_depth=None, draft_temperature="1"), "draft_temperature must be a finite number > 0"),
        (dict(budget=8, max_depth=None, hold_chain=1), "hold_chain must be a bool, got 1"),
        (dict(budget=8, max_depth=None, auto="yes"), "auto must be a bool, got 'yes'"),
    ],
)
def test_bad_fields_name_the_field_and_value(fields, message):
    assert one_line_error(lambda: TreeSettings(**fields)).startswith(message)


def test_settings_are_frozen_and_hashable():
    settings = TreeSettings(16, None, 0.5)
    with pytest.raises(AttributeError):
        settings.budget = 8
    assert len({settings, TreeSettings(16, None, 0.5), TreeSettings(16, 3, 0.5)}) == 2


# --- custom_params -------------------------------------------------------------------------------------


def test_overrides_apply_and_lower_only():
    chosen = TreeSettings.from_custom_params(
        {"ddtree_budget": 0, "ddtree_max_depth": 3, "ddtree_draft_temperature": 2, "ddtree_hold_chain": True,
         "other_plugin_key": [1]},
        server=SERVER, max_depth=15,
    )  # fmt: skip
    assert chosen == TreeSettings(0, 3, 2.0, True)
    assert TreeSettings.from_custom_params(None, server=SERVER, max_depth=15) is SERVER
    assert TreeSettings.from_custom_params({}, server=SERVER, max_depth=15) is SERVER


def test_auto_budget_only_where_served():
    auto = TreeSettings.from_custom_params({"ddtree_budget": "auto"}, server=SERVER, max_depth=15, auto_served=True)
    assert auto == TreeSettings(64, 15, auto=True)
    fixed = TreeSettings.from_custom_params({"ddtree_budget": 8}, server=auto, max_depth=15, auto_served=True)
    assert fixed == TreeSettings(8, 15)  # a fixed budget turns auto off
    message = one_line_error(
        lambda: TreeSettings.from_custom_params({"ddtree_budget": "auto"}, server=SERVER, max_depth=15)
    )
    assert message == "custom_params.ddtree_budget must be an int in [0, 64] (the server's budget), got 'auto'"


@pytest.mark.parametrize(
    "params, message",
    [
        ({"ddtree_budget": 65}, "custom_params.ddtree_budget must be an int in [0, 64] (the server's budget), got 65"),
        ({"ddtree_budget": None}, "custom_params.ddtree_budget must be an int in [0, 64] (the server's budget), got N"),
        ({"ddtree_max_depth": 16}, "custom_params.ddtree_max_depth must be an int in [1, 15]"),
        ({"ddtree_draft_temperature": float("nan")}, "custom_params.ddtree_draft_temperature must be a finite number"),
        ({"ddtree_hold_chain": 0}, "custom_params.ddtree_hold_chain must be true or false, got 0"),
        ({"ddtree_top_k": 4}, "custom_params.ddtree_top_k is unknown; known: " + ", ".join(REQUEST_PARAMS)),
        ([("ddtree_budget", 1)], "custom_params must be an object"),
    ],
)
def test_bad_overrides_name_the_field_range_and_value(params, message):
    error = one_line_error(lambda: TreeSettings.from_custom_params(params, server=SERVER, max_depth=15))
    assert error.startswith(message)


@pytest.mark.parametrize(
    "settings",
    [TreeSettings(16, None, 0.5), TreeSettings(8, 3, 1.0, True), TreeSettings(0, 15), TreeSettings(0, None, auto=True)],
)
def test_custom_params_round_trip(settings):
    """What to_custom_params asks for is what from_custom_params gives, the server's depth for an unsaid one
    (and, for auto, the server's budget to choose under)."""
    back = TreeSettings.from_custom_params(settings.to_custom_params(), server=SERVER, max_depth=15, auto_served=True)
    budget = SERVER.budget if settings.auto else settings.budget
    depth = settings.max_depth or SERVER.max_depth
    assert back == TreeSettings(budget, depth, settings.draft_temperature, settings.hold_chain, settings.auto)


def test_custom_params_form():
    assert TreeSettings(16, None, 0.5).to_custom_params() == {
        "ddtree_budget": 16, "ddtree_draft_temperature": 0.5, "ddtree_hold_chain": False,
    }  # fmt: skip
    assert TreeSettings(0, 7, auto=True).to_custom_params() == {
        "ddtree_budget": "auto", "ddtree_draft_temperature": 1.0, "ddtree_max_depth": 7, "ddtree_hold_chain": False,
    }  # fmt: skip


# --- the environment -----------------------------------------------------------------------------------


def test_environment_defaults_and_values():
    assert TreeSettings.from_environment({}, budget=15, max_depth=15) == TreeSettings(15, 15)
    env = {"SGLANG_DDTREE_BUDGET": " 63 ", "SGLANG_DDTREE_MAX_DEPTH": "8", "SGLANG_DDTREE_DRAFT_TEMPERATURE": "0.5",
           "SGLANG_DDTREE_HOLD_CHAIN": "on", "SGLANG_DDTREE_TOP_K": "4"}  # fmt: skip
    assert TreeSettings.from_environment(env, budget=15, max_depth=15) == TreeSettings(63, 8, 0.5, True)
    empty = dict.fromkeys(ENVIRONMENT, "")
    assert TreeSettings.from_environment(empty, budget=7, max_depth=7) == TreeSettings(7, 7)


@pytest.mark.parametrize(
    "env, message",
    [
        ({"SGLANG_DDTREE_BUDGET": "lots"}, "SGLANG_DDTREE_BUDGET must be an integer, got 'lots'"),
        ({"SGLANG_DDTREE_BUDGET": "0"}, "SGLANG_DDTREE_BUDGET must be >= 1, got 0"),
        ({"SGLANG_DDTREE_MAX_DEPTH": "16"}, "SGLANG_DDTREE_MAX_DEPTH must be in 1..15, got 16"),
        ({"SGLANG_DDTREE_MAX_DEPTH": "0"}, "SGLANG_DDTREE_MAX_DEPTH must be in 1..15, got 0"),
        ({"SGLANG_DDTREE_DRAFT_TEMPERATURE": "hot"}, "SGLANG_DDTREE_DRAFT_TEMPERATURE must be a number, got 'hot'"),
        ({"SGLANG_DDTREE_DRAFT_TEMPERATURE": "nan"}, "SGLANG_DDTREE_DRAFT_TEMPERATURE must be a finite number > 0"),
        ({"SGLANG_DDTREE_HOLD_CHAIN": "2"}, "SGLANG_DDTREE_HOLD_CHAIN must be 0 or 1, got '2'"),
    ],
)
def test_bad_environment_names_the_variable(env, message):
    error = one_line_error(lambda: TreeSettings.from_environment(env, budget=15, max_depth=15))
    assert error.startswith(message)


@pytest.mark.parametrize("settings", [TreeSettings(63, 8, 0.5, True), TreeSettings(1, 15, 3.0), TreeSettings(31, None)])
def test_environment_round_trip(settings):
    """What to_environment sets is what from_environment reads (an unsaid depth: the server's default)."""
    back = TreeSettings.from_environment(settings.to_environment(), budget=15, max_depth=15)
    depth = settings.max_depth or 15
    assert back == TreeSettings(settings.budget, depth, settings.draft_temperature, settings.hold_chain)


def test_environment_form():
    assert TreeSettings(31, None, 1.0, True).to_environment() == {
        "SGLANG_DDTREE_BUDGET": "31", "SGLANG_DDTREE_DRAFT_TEMPERATURE": "1.0", "SGLANG_DDTREE_HOLD_CHAIN": "1",
    }  # fmt: skip
    assert set(TreeSettings(8, 3, 0.5, True).to_environment()) == set(ENVIRONMENT)
    message = one_line_error(lambda: TreeSettings(64, None, auto=True).to_environment())
    assert message.startswith('SGLANG_DDTREE_BUDGET takes no "auto"')

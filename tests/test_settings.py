"""ddtree_core.settings: the one validation of a request's DDTree overrides, and its round trip."""

import pytest

from ddtree_core.settings import REQUEST_PARAMS, TreeSettings, TreeSettingsError

SERVER = TreeSettings(budget=64, max_depth=15, draft_temperature=1.0, hold_chain=False)


def test_overrides_apply_and_lower_only():
    chosen = SERVER.with_custom_params(
        {"ddtree_budget": 0, "ddtree_max_depth": 3, "ddtree_draft_temperature": 2, "ddtree_hold_chain": True,
         "other_plugin_key": [1]},
        max_depth=15,
    )  # fmt: skip
    assert chosen == TreeSettings(0, 3, 2.0, True)
    assert SERVER.with_custom_params(None, max_depth=15) is SERVER
    assert SERVER.with_custom_params({}, max_depth=15) is SERVER


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
    with pytest.raises(TreeSettingsError) as raised:
        SERVER.with_custom_params(params, max_depth=15)
    assert str(raised.value) == message or str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


def test_custom_params_round_trip():
    for settings in (TreeSettings(16, None, 0.5), TreeSettings(8, 3, 1.0, True)):
        assert SERVER.with_custom_params(settings.to_custom_params(), max_depth=15) == TreeSettings(
            settings.budget, settings.max_depth or SERVER.max_depth, settings.draft_temperature, settings.hold_chain
        )

"""The supported SGLang releases (window.py) and register()'s one-line refusal of others; no SGLang needed."""

import logging
import sys
import types

import pytest

from ddtree_core.sglang import plugin, window

REFUSED_0_6_0 = (
    "DDTREE not registered: SGLang 0.6.0 is not a supported release "
    "(supported: 0.5.15, 0.5.23; SGLANG_DDTREE_ALLOW_UNTESTED=1 registers it anyway)"
)


@pytest.mark.parametrize(
    "version, number",
    [
        ("0.5.15", (0, 5, 15)),
        ("0.5.15.post1", (0, 5, 15)),
        ("0.5.24rc1", (0, 5, 24)),
        ("1.2.3+cu130", (1, 2, 3)),
        ("0.0.0.dev0", (0, 0, 0)),  # SGLang's version in a source checkout without a build
        ("0.5", None),
        ("unknown", None),
    ],
)
def test_release(version, number):
    assert window.release(version) == number


@pytest.mark.parametrize("version", ["0.5.15", "0.5.15.post1", "0.5.23", "0.5.23.post2"])
def test_supported_releases_register_silently(version):
    assert window.check(version, {}) == (True, None)


@pytest.mark.parametrize("version", ["0.5.14", "0.5.16", "0.5.22", "0.5.24", "0.6.0", "0.0.0.dev0", "unknown"])
def test_other_releases_are_refused_in_one_line(version):
    assert window.check(version, {}) == (False, REFUSED_0_6_0.replace("0.6.0", version))


def test_the_override_registers_with_a_warning():
    registers, line = window.check("0.6.0", {"SGLANG_DDTREE_ALLOW_UNTESTED": "1"})
    assert registers
    assert line == (
        "DDTREE on SGLang 0.6.0, not a supported release (supported: 0.5.15, 0.5.23): SGLANG_DDTREE_ALLOW_UNTESTED=1"
    )
    for value in ("0", "", "yes"):
        assert window.check("0.6.0", {"SGLANG_DDTREE_ALLOW_UNTESTED": value}) == (False, REFUSED_0_6_0)


@pytest.fixture
def sglang_0_6_0(monkeypatch):
    """register() on a stubbed SGLang 0.6.0 whose modules cannot be imported: an import is a step past the check."""
    monkeypatch.setattr(window, "sglang_version", lambda: "0.6.0")
    monkeypatch.setattr(plugin, "_registered", False)
    for name in ("sglang.srt.managers.schedule_batch", "sglang.srt.plugins.hook_registry"):
        monkeypatch.setitem(sys.modules, name, None)


def test_register_refuses_in_one_error_line(sglang_0_6_0, monkeypatch, caplog):
    monkeypatch.delenv("SGLANG_DDTREE_ALLOW_UNTESTED", raising=False)
    with caplog.at_level(logging.DEBUG):
        assert plugin.register() is False
    assert [(record.levelname, record.getMessage()) for record in caplog.records] == [("ERROR", REFUSED_0_6_0)]
    assert not plugin._registered


def test_register_goes_on_with_the_override(sglang_0_6_0, monkeypatch, caplog):
    monkeypatch.setenv("SGLANG_DDTREE_ALLOW_UNTESTED", "1")
    with caplog.at_level(logging.DEBUG), pytest.raises(ImportError):
        plugin.register()  # past the check, into SGLang's modules
    assert [record.levelname for record in caplog.records] == ["WARNING"]


@pytest.fixture
def fake_sglang(monkeypatch):
    """A stand-in SGLang package of a chosen version (sglang.__version__, from sglang.version as SGLang's
    own __init__ takes it) whose other modules cannot be imported; the real one, if any, comes back after."""

    def install(version: str) -> None:
        package = types.ModuleType("sglang")
        package.__path__ = []
        package.__version__ = version
        version_module = types.ModuleType("sglang.version")
        version_module.__version__ = version
        monkeypatch.setitem(sys.modules, "sglang", package)
        monkeypatch.setitem(sys.modules, "sglang.version", version_module)
        for name in ("sglang.srt.managers.schedule_batch", "sglang.srt.plugins.hook_registry"):
            monkeypatch.setitem(sys.modules, name, None)

    monkeypatch.setattr(plugin, "_registered", False)
    monkeypatch.delenv("SGLANG_DDTREE_ALLOW_UNTESTED", raising=False)
    return install


@pytest.mark.parametrize("version", ["0.5.14", "0.5.16", "0.5.22", "0.5.24", "0.6.0"])
def test_register_on_an_sglang_outside_the_window_refuses_in_one_line(fake_sglang, caplog, version):
    fake_sglang(version)
    with caplog.at_level(logging.DEBUG):
        assert plugin.register() is False
    line = REFUSED_0_6_0.replace("0.6.0", version)
    assert [(record.levelname, record.getMessage()) for record in caplog.records] == [("ERROR", line)]


@pytest.mark.parametrize("version", ["0.5.15", "0.5.15.post1", "0.5.23"])
def test_register_on_a_supported_sglang_goes_past_the_check(fake_sglang, caplog, version):
    fake_sglang(version)
    with caplog.at_level(logging.DEBUG), pytest.raises(ImportError):
        plugin.register()  # past the check, into SGLang's modules
    assert caplog.records == []

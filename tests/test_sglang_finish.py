"""A stop within max_new_tokens beats the cap (finish.py and its plugin hook on Req.update_finish_state).

Every case runs on FakeReq, SGLang 0.5.15's finishing fields, helpers and length-first method written
out (no SGLang needed), and on SGLang's own Req where SGLang imports. Tokens are characters: token id =
code point, so the request's output so far, [97, 98, 99], reads "abc"; EOS is 2; the budget is 6 tokens.
"""

import os
import pkgutil
import subprocess
import sys
import textwrap
import types
from array import array
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

import ddtree_core.sglang
from ddtree_core.sglang import plugin
from ddtree_core.sglang.finish import length_first, stop_within_budget
from ddtree_core.sglang.window import release, sglang_version

EOS, NEWLINE, VOCAB = 2, 10, 1000
BEFORE = [97, 98, 99]  # "abc": the output before the round


class CharTokenizer:
    eos_token_id = EOS
    additional_stop_token_ids = None

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(map(chr, ids))


class Reason(dict):
    """A finish reason, as SGLang's to_json() reports it."""

    def to_json(self):
        return dict(self)


class FakeReq:
    """SGLang 0.5.15's Req as finishing sees it: fields, helper checks and the length-first method."""

    def __init__(self, max_new_tokens=6, stop=(), stop_token_ids=None, ignore_eos=False):
        self.output_ids = array("q", BEFORE)
        self.sampling_params = SimpleNamespace(
            max_new_tokens=max_new_tokens, stop_strs=list(stop), stop_str_max_len=max(map(len, stop), default=0),
            stop_regex_strs=[], stop_regex_max_len=0, stop_token_ids=stop_token_ids, ignore_eos=ignore_eos,
        )  # fmt: skip
        self.eos_token_ids, self.tokenizer, self.vocab_size = {EOS}, CharTokenizer(), VOCAB
        self.grammar, self.decoded_text = None, ""
        self.finished_reason = self.finished_len = self.to_finish = None

    @property
    def output_ids_through_stop(self):
        return self.output_ids if self.finished_len is None else self.output_ids[: self.finished_len]

    def finished(self):
        return self.finished_reason is not None

    def update_finish_state(self, new_accepted_len=1):
        if self.finished():
            return
        if self.to_finish:
            self.finished_reason, self.to_finish = self.to_finish, None
            return
        cap = self.sampling_params.max_new_tokens
        if len(self.output_ids) >= cap:
            self.finished_reason, self.finished_len = Reason(type="length", length=cap), cap
            return
        tokens = self.output_ids[-new_accepted_len:]
        if not self._check_vocab_boundary_finish(tokens) and not self._check_str_based_finish(new_accepted_len):
            self._check_token_based_finish(tokens)

    def _check_vocab_boundary_finish(self, tokens):
        for i, token in enumerate(tokens):
            if not 0 <= token < self.vocab_size:
                offset = len(self.output_ids) - len(tokens) + i
                self.output_ids[offset] = EOS
                self.finished_reason, self.finished_len = Reason(type="stop", matched="NaN happened"), offset + 1
                return True
        return False

    def _check_str_based_finish(self, new_accepted_len):
        params = self.sampling_params
        if not params.stop_strs:
            return False
        start = max(len(self.output_ids) - params.stop_str_max_len - new_accepted_len, 0)
        text = self.tokenizer.decode(self.output_ids[start:])
        for stop in params.stop_strs:
            if stop in text:
                self.finished_reason = Reason(type="stop", matched=stop)
                self.finished_len = start + text.index(stop) + len(stop)
                return True
        return False

    def _check_token_based_finish(self, tokens):
        if self.sampling_params.ignore_eos:
            return False
        stops = self.eos_token_ids | (self.sampling_params.stop_token_ids or set())
        for i, token in enumerate(tokens):
            if token in stops:
                self.finished_reason = Reason(type="stop", matched=token)
                self.finished_len = len(self.output_ids) - len(tokens) + i + 1
                return True
        return False


class StopFirstReq(FakeReq):
    """A Req whose own method already lets a stop within the budget win."""

    def update_finish_state(self, new_accepted_len=1):
        stop_within_budget(self, new_accepted_len)
        super().update_finish_state(new_accepted_len)


@dataclass
class Case:
    run: list  # the round's accepted tokens
    reason: dict | None  # finished_reason.to_json(), None while unfinished
    sent: list  # output_ids_through_stop: what the client gets
    options: dict | None = None  # FakeReq's keywords beside the budget


CASES = {
    "eos-inside-a-run-that-crosses-the-cap": Case(
        [100, EOS, NEWLINE, 101], {"type": "stop", "matched": EOS}, BEFORE + [100, EOS]
    ),
    "eos-as-the-last-token-of-the-budget": Case(
        [100, 101, EOS, NEWLINE], {"type": "stop", "matched": EOS}, BEFORE + [100, 101, EOS]
    ),
    "eos-beyond-the-cap": Case([100, 101, 102, EOS], {"type": "length", "length": 6}, BEFORE + [100, 101, 102]),
    "no-stop": Case([100, 101, 102, 103], {"type": "length", "length": 6}, BEFORE + [100, 101, 102]),
    "ignore-eos": Case(
        [100, EOS, NEWLINE, 101], {"type": "length", "length": 6}, BEFORE + [100, EOS, NEWLINE], {"ignore_eos": True}
    ),
    "stop-token-id": Case(
        [100, 5, EOS, 101], {"type": "stop", "matched": 5}, BEFORE + [100, 5], {"stop_token_ids": {5}}
    ),
    "stop-string-within-the-budget": Case(
        [100, 101, 102, 103], {"type": "stop", "matched": "de"}, BEFORE + [100, 101], {"stop": ("de",)}
    ),
    "stop-string-across-the-cap": Case(
        [100, 101, 102, 103], {"type": "length", "length": 6}, BEFORE + [100, 101, 102], {"stop": ("fg",)}
    ),
    # SGLang's order within a run: a stop string beats a stop token, even one before it.
    "stop-string-before-a-stop-token": Case(
        [EOS, 100, NEWLINE, 101], {"type": "stop", "matched": "d"}, BEFORE + [EOS, 100], {"stop": ("d",)}
    ),
    "out-of-vocabulary-token": Case(
        [100, -1, 101, 102], {"type": "stop", "matched": "NaN happened"}, BEFORE + [100, EOS]
    ),
    "below-the-cap-stop": Case([100, EOS], {"type": "stop", "matched": EOS}, BEFORE + [100, EOS]),
    "below-the-cap-no-stop": Case([100], None, BEFORE + [100]),
}


def finish_round(req, run: list) -> None:
    """What SGLang's result processor does with a round's run, with the plugin's hook on a DDTREE server."""
    req.output_ids.extend(run)
    stop_within_budget(req, len(run))
    req.update_finish_state(len(run))


def outcome(req):
    reason = None if req.finished_reason is None else req.finished_reason.to_json()
    return reason, list(req.output_ids_through_stop)


@pytest.mark.parametrize("name", CASES)
def test_a_stop_within_the_budget_beats_the_cap(name):
    case = CASES[name]
    req = FakeReq(**(case.options or {}))
    finish_round(req, case.run)
    assert outcome(req) == (case.reason, case.sent)
    assert len(req.output_ids) == len(BEFORE) + len(case.run)  # the tokens past the cap are back


def test_sglang_alone_ends_at_the_cap_and_sends_the_tokens_after_the_eos():
    req = FakeReq()
    req.output_ids.extend([100, EOS, NEWLINE, 101])
    req.update_finish_state(4)
    assert outcome(req) == ({"type": "length", "length": 6}, BEFORE + [100, EOS, NEWLINE])


def test_finished_requests_and_pending_finishes_stay_sglangs():
    done = FakeReq()
    done.output_ids.extend([100, EOS, NEWLINE, 101])
    done.finished_reason = Reason(type="abort")
    stop_within_budget(done, 4)
    assert done.finished_len is None and done.finished_reason == {"type": "abort"}
    pending = FakeReq()
    pending.to_finish = Reason(type="abort")
    finish_round(pending, [100, EOS, NEWLINE, 101])
    assert outcome(pending) == ({"type": "abort"}, BEFORE + [100, EOS, NEWLINE, 101])


def test_length_first_detects_the_order():
    assert length_first(FakeReq)
    assert not length_first(StopFirstReq)


@pytest.mark.parametrize("server", [None, SimpleNamespace(speculative_algorithm="DDTREE")], ids=["other", "ddtree"])
def test_hook_acts_on_ddtree_servers_only(monkeypatch, server):
    monkeypatch.setattr(plugin, "_ddtree_server", lambda: server)
    req = FakeReq()
    req.output_ids.extend([100, EOS, NEWLINE, 101])
    plugin._update_finish_state(FakeReq.update_finish_state, req, 4)
    reason, sent = outcome(req)
    assert reason["type"] == ("length" if server is None else "stop")
    assert sent == BEFORE + ([100, EOS, NEWLINE] if server is None else [100, EOS])


class StubRegistry:
    """SGLang's HookRegistry as far as register() uses it: AROUND and AFTER hooks, patched in place."""

    def __init__(self):
        self.hooks, self._patched = [], set()

    def register(self, target, hook, kind):
        self.hooks.append((target, hook, kind))

    def apply_hooks(self):
        for target, hook, kind in self.hooks:
            owner_path, name = target.rsplit(".", 1)
            owner = pkgutil.resolve_name(owner_path)
            original = getattr(owner, name)

            def wrapper(*args, _original=original, _hook=hook, _kind=kind):
                return _hook(_original, *args) if _kind == "around" else _hook(_original(*args), *args)

            setattr(owner, name, wrapper)
            self._patched.add(target)


class StubAlgorithm:
    registered = {}

    @classmethod
    def register(cls, name, **kwargs):
        return lambda worker_class: cls.registered.setdefault(name, kwargs["spec_class"]())

    @classmethod
    def from_string(cls, name):
        if name not in cls.registered:
            raise ValueError(name)
        return cls.registered[name]


def stub_sglang(monkeypatch, req_class) -> StubRegistry:
    """Stand-in SGLang modules for register(): every hook target exists, Req is `req_class`."""
    registry = StubRegistry()
    monkeypatch.setattr(StubAlgorithm, "registered", {})
    modules = {
        "sglang.version": {"__version__": "0.5.15"},
        "sglang.srt.plugins.hook_registry": {
            "HookRegistry": registry, "HookType": SimpleNamespace(AROUND="around", AFTER="after")
        },
        "sglang.srt.speculative.spec_info": {
            "SpeculativeAlgorithm": StubAlgorithm, "create_dummy_verify_input": lambda *a: None
        },
        "sglang.srt.speculative.spec_registry": {"CustomSpecAlgo": type("CustomSpecAlgo", (), {})},
        "sglang.srt.speculative.dflash_utils": {
            "resolve_dflash_verify_mask_policy": lambda *a: None, "validate_dflash_request": lambda *a: None
        },
        "sglang.srt.managers.scheduler_components.batch_result_processor": {
            "SchedulerBatchResultProcessor": type("SchedulerBatchResultProcessor", (), {
                "_handle_finish_state_updated_req": lambda *a: None
            })
        },
        "sglang.srt.managers.tokenizer_manager": {
            "TokenizerManager": type("TokenizerManager", (), {"_calculate_spec_decoding_metrics": lambda *a: None})
        },
        "sglang.srt.managers.scheduler": {"Scheduler": type("Scheduler", (), {"get_init_info": lambda *a: {}})},
        "sglang.srt.managers.schedule_batch": {"Req": req_class},
    }  # fmt: skip
    for name, attributes in modules.items():
        module = types.ModuleType(name)
        vars(module).update(attributes)
        monkeypatch.setitem(sys.modules, name, module)
    for name in ("sglang", "sglang.srt", "sglang.srt.plugins", "sglang.srt.speculative", "sglang.srt.managers",
                 "sglang.srt.managers.scheduler_components"):  # fmt: skip
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    # spec_algo imports SGLang: imported anew against the stubs, the real one back afterwards
    monkeypatch.delitem(sys.modules, "ddtree_core.sglang.spec_algo", raising=False)
    monkeypatch.delattr(ddtree_core.sglang, "spec_algo", raising=False)
    monkeypatch.setattr(plugin, "_registered", False)
    return registry


def test_register_hooks_req_where_sglang_is_length_first(monkeypatch):
    req_class = type("Req", (FakeReq,), {})  # patched in place: a class of this test's own
    registry = stub_sglang(monkeypatch, req_class)
    plugin.register()
    assert (plugin.FINISH_STATE, plugin._update_finish_state, "around") in registry.hooks
    assert plugin.FINISH_STATE in registry._patched
    monkeypatch.setattr(plugin, "_ddtree_server", lambda: SimpleNamespace(speculative_algorithm="DDTREE"))
    req = req_class()
    req.output_ids.extend([100, EOS, NEWLINE, 101])
    req.update_finish_state(4)  # through the installed hook
    assert outcome(req) == ({"type": "stop", "matched": EOS}, BEFORE + [100, EOS])


def test_register_leaves_a_stop_first_req_alone(monkeypatch):
    req_class = type("Req", (StopFirstReq,), {})
    registry = stub_sglang(monkeypatch, req_class)
    plugin.register()
    assert plugin.FINISH_STATE not in {target for target, _, _ in registry.hooks}
    assert req_class.update_finish_state is StopFirstReq.update_finish_state
    assert len(registry.hooks) == 6  # the other hooks


def sglang_req(case_options: dict | None = None):
    """SGLang's own Req in FakeReq's starting state."""
    schedule_batch = pytest.importorskip("sglang.srt.managers.schedule_batch")
    from sglang.srt.sampling.sampling_params import SamplingParams

    options = {"stop": (), **(case_options or {})}
    params = SamplingParams(
        max_new_tokens=6, stop=list(options["stop"]), stop_token_ids=options.get("stop_token_ids"),
        ignore_eos=options.get("ignore_eos", False),
    )  # fmt: skip
    params.normalize(CharTokenizer())
    req = schedule_batch.Req("r", "", array("q", [1]), params, eos_token_ids={EOS}, vocab_size=VOCAB)
    req.tokenizer = CharTokenizer()
    req.output_ids.extend(BEFORE)
    return req


@pytest.mark.slow  # imports SGLang
@pytest.mark.parametrize("name", CASES)
def test_sglang_req_gives_the_same_outcomes(name):
    case = CASES[name]
    req = sglang_req(case.options)
    finish_round(req, case.run)
    assert outcome(req) == (case.reason, case.sent)


@pytest.mark.slow
def test_length_first_reads_sglangs_order():
    """SGLang 0.5.15 alone: the cap beats the EOS before it, the tokens after the EOS go out. Later releases
    (0.5.23) end at the EOS; length_first tells which order SGLang's Req has."""
    req = sglang_req()
    req.output_ids.extend([100, EOS, NEWLINE, 101])
    req.update_finish_state(4)
    if length_first(type(req)):
        assert outcome(req) == ({"type": "length", "length": 6}, BEFORE + [100, EOS, NEWLINE])
    else:
        assert outcome(req) == ({"type": "stop", "matched": EOS}, BEFORE + [100, EOS])
    if release(sglang_version()) == (0, 5, 15):
        assert length_first(type(req))


@pytest.mark.slow
def test_register_hooks_sglangs_req():
    """register() in a process of its own puts the hook on SGLang's Req, through SGLang's HookRegistry."""
    pytest.importorskip("sglang.srt.managers.schedule_batch")
    code = f"""
        from array import array
        from types import SimpleNamespace
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.plugins.hook_registry import HookRegistry
        from sglang.srt.sampling.sampling_params import SamplingParams
        from ddtree_core.sglang import plugin
        from ddtree_core.sglang.finish import length_first

        stock = [Req.update_finish_state]  # in a list: HookRegistry rebinds module attributes that hold it
        sglang_ends_at_the_cap = length_first(Req)  # 0.5.15; later releases (0.5.23) end at the EOS, unhooked
        plugin.register()
        hooked = plugin.FINISH_STATE in HookRegistry._patched
        assert hooked == sglang_ends_at_the_cap
        assert (Req.update_finish_state.__wrapped__ if hooked else Req.update_finish_state) is stock[0]
        for server, expected in ((None, 6 if hooked else 5), (SimpleNamespace(speculative_algorithm="DDTREE"), 5)):
            plugin._ddtree_server = lambda: server
            params = SamplingParams(max_new_tokens=6)
            params.normalize(None)
            req = Req("r", "", array("q", [1]), params, eos_token_ids={{{EOS}}}, vocab_size={VOCAB})
            req.output_ids.extend({BEFORE + [100, EOS, NEWLINE, 101]})
            req.update_finish_state(4)
            assert req.finished_len == expected, (server, req.finished_len)
        """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]

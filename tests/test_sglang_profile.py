"""The DDTree round's stage timer: off by default, one log line per window of rounds when on."""

import time

import pytest

from ddtree_core.sglang.profile import ENV_PROFILE_EVERY, StageTimer


def test_off_by_default_records_nothing():
    timer = StageTimer.from_env("cpu", environ={})
    assert not timer.enabled
    with timer.stage("draft"):
        pass
    assert timer.round_done(4) is None


def test_logs_mean_host_time_per_round_every_window():
    lines = []
    timer = StageTimer(2, "cpu", log=lines.append)
    for _ in range(2):
        with timer.stage("draft"):
            time.sleep(0.01)
        with timer.stage("tree"):
            pass
        result = timer.round_done(3)
    assert set(result) == {"draft", "tree"}
    draft_host, draft_gpu = result["draft"]
    assert draft_host >= 10.0 and draft_gpu is None  # ms per round; no device time on a CPU
    assert result["tree"][0] < draft_host
    assert len(lines) == 1 and lines[0].startswith("DDTREE profile (2 rounds, batch 3.0): draft host ")
    with timer.stage("draft"):
        pass
    assert timer.round_done(1) is None  # a new window started


def test_bad_setting_is_refused():
    with pytest.raises(ValueError, match=ENV_PROFILE_EVERY):
        StageTimer.from_env("cpu", environ={ENV_PROFILE_EVERY: "often"})
    assert StageTimer.from_env("cpu", environ={ENV_PROFILE_EVERY: "50"}).every == 50

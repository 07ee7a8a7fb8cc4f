"""ddtree_core.sglang.auto: the cost table a server loads or measures, the policy it makes, the per-round
expectations and the result hook's feed (no SGLang needed)."""

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ddtree_core.policy import CostTable
from ddtree_core.sglang import auto
from ddtree_core.tree import build_tree


class FakeEvent:
    """torch.cuda.Event on a CPU: elapsed_time is the replays between the two records times the graph's ms."""

    clock = [0.0]

    def __init__(self, enable_timing=True):
        self.at = None

    def record(self):
        self.at = FakeEvent.clock[0]

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return end.at - self.at


class FakeGraph:
    def __init__(self, ms):
        self.ms, self.replays = ms, 0

    def replay(self):
        self.replays += 1
        FakeEvent.clock[0] += self.ms


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)


def test_measure_cost_times_each_width_and_batch(fake_cuda):
    graphs = {
        16: {1: FakeGraph(6.0), 4: FakeGraph(6.5), 128: FakeGraph(50.0), 3: FakeGraph(9.0)},
        64: {1: FakeGraph(6.4), 16: FakeGraph(30.0), 64: FakeGraph(99.0)},
    }
    cost = auto.measure_cost(graphs, repeats=3)
    # batch 128 and 3 are not measured sizes, 64 x 64 = 4096 tokens is the last allowed; 64 tokens twice: the least
    assert cost.tokens == (16, 64, 1024, 4096) and cost.ms == pytest.approx((6.0, 6.4, 30.0, 99.0))
    assert graphs[16][1].replays == 4 and graphs[16][128].replays == 0 and graphs[16][3].replays == 0
    assert auto.measure_cost({16: {}}) is None


def test_make_policy_loads_measures_or_stays_at_the_chain(tmp_path, caplog):
    table = tmp_path / "cost.json"
    CostTable((16, 64), (6.0, 6.5)).to_json(table)
    loaded = auto.make_policy((15, 31, 63), 16, {auto.ENV_COST_TABLE: str(table)}, measure=lambda: 1 / 0)
    assert loaded.budgets == (15, 31, 63) and loaded.cost == CostTable((16, 64), (6.0, 6.5))
    measured = auto.make_policy((15, 63), 16, {}, measure=lambda: CostTable((16,), (5.0,)))
    assert measured.budgets == (15, 63) and measured.cost == CostTable((16,), (5.0,))
    with caplog.at_level(logging.WARNING, logger="ddtree_core.sglang.auto"):
        failed = auto.make_policy((15, 63), 16, {}, measure=lambda: 1 / 0)
        nothing = auto.make_policy((15, 63), 16, {}, measure=lambda: None)
        unreadable = auto.make_policy((15, 63), 16, {auto.ENV_COST_TABLE: str(tmp_path / "no.json")}, measure=None)
        remeasured = auto.make_policy(
            (15, 63), 16, {auto.ENV_COST_TABLE: str(tmp_path / "no.json")}, measure=lambda: CostTable((16,), (5.0,))
        )
    assert failed.budgets == nothing.budgets == unreadable.budgets == (15,) and remeasured.budgets == (15, 63)
    assert failed.choose(1) == 15 and unreadable.choose(64) == 15 and remeasured.cost == CostTable((16,), (5.0,))
    lines = [record.getMessage() for record in caplog.records]
    assert "measuring one failed (ZeroDivisionError: division by zero)" in lines[0]
    assert "no verify CUDA graphs to measure one with" in lines[1] and "stay at budget 15 (verify width 16)" in lines[1]
    assert f"{tmp_path / 'no.json'} cannot be read" in lines[2] and "rounds stay at budget 15" in lines[2]
    assert f"{tmp_path / 'no.json'} cannot be read" in lines[3] and lines[3].endswith("measuring one instead.")


H200_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 49152,
    "dtype": "bfloat16",
    "device": "NVIDIA H200",
    "tp_size": 1,
}


def test_server_identity_names_the_shape_dtype_gpu_and_tp():
    config = SimpleNamespace(**{k: v for k, v in H200_8B.items() if k not in ("dtype", "device", "tp_size")})
    assert auto.server_identity(config, torch.bfloat16, "NVIDIA H200", 1) == H200_8B


@pytest.mark.parametrize(
    "field, value",
    [("device", "NVIDIA H100"), ("hidden_size", 576), ("tp_size", 2), ("dtype", "float16"), ("model_type", None)],
)
def test_a_table_of_another_model_gpu_or_tp_is_measured_again(tmp_path, caplog, field, value):
    table = tmp_path / "cost.json"
    CostTable((16, 64), (6.0, 6.5)).to_json(table, **H200_8B)
    environ = {auto.ENV_COST_TABLE: str(table)}
    assert auto.make_policy((15, 63), 16, environ, identity=H200_8B).cost == CostTable((16, 64), (6.0, 6.5))
    ours = {**H200_8B, field: value}
    with caplog.at_level(logging.WARNING, logger="ddtree_core.sglang.auto"):
        policy = auto.make_policy((15, 63), 16, environ, measure=lambda: CostTable((16,), (9.0,)), identity=ours)
    assert policy.cost == CostTable((16,), (9.0,)) and policy.budgets == (15, 63)
    said = f"{table} was measured for {field} {H200_8B[field]}, this process has {value}; measuring one instead."
    assert said in caplog.text


def test_a_table_that_does_not_say_what_it_was_measured_for_is_measured_again(tmp_path, caplog):
    table = tmp_path / "cost.json"
    CostTable((16, 64), (6.0, 6.5)).to_json(table, device="NVIDIA H200")  # the GPU, but not the model
    environ = {auto.ENV_COST_TABLE: str(table)}
    with caplog.at_level(logging.WARNING, logger="ddtree_core.sglang.auto"):
        policy = auto.make_policy((15, 63), 16, environ, measure=lambda: CostTable((16,), (9.0,)), identity=H200_8B)
    assert policy.cost == CostTable((16,), (9.0,))
    assert "was measured for model_type None, this process has llama" in caplog.text


def test_a_measured_table_is_logged_as_a_table_the_same_server_takes(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="ddtree_core.sglang.auto"):
        auto.make_policy((15, 63), 16, {}, measure=lambda: CostTable((16, 64), (6.01234, 6.5)), identity=H200_8B)
    said = "measured (as SGLANG_DDTREE_COST_TABLE takes it)"
    (line,) = [record.getMessage() for record in caplog.records if said in record.getMessage()]
    table = tmp_path / "logged.json"
    table.write_text(line.split("takes it): ", 1)[1])
    cost, why = auto.load_cost({auto.ENV_COST_TABLE: str(table)}, H200_8B)
    assert why is None and cost == CostTable((16, 64), (6.012, 6.5))


def test_the_committed_8b_table_is_the_inflated_testbed_s_on_an_h200():
    path = Path(__file__).resolve().parents[1] / "configs" / "cost" / "testbed8b-h200.json"
    cost, why = auto.load_cost({auto.ENV_COST_TABLE: str(path)}, H200_8B)
    assert why is None and cost.tokens[0] == 16


def test_expected_at_and_observe_feed_the_installed_policy():
    tree = build_tree(torch.randn(2, 5, 30, generator=torch.Generator().manual_seed(3)) * 2, 40, impl="torch")
    expected = auto.expected_at(tree, (15, 31, 63))  # 63 is past the tree's 40 nodes: its last column
    probs = torch.where(torch.isfinite(tree.scores[:, 1:]), tree.scores[:, 1:].exp(), 0.0)
    assert torch.allclose(expected[:, 0], probs[:, :15].sum(1)) and torch.allclose(expected[:, 2], probs.sum(1))
    policy = auto.make_policy((15, 31, 63), 16, {}, measure=lambda: CostTable((16, 64, 1024), (6.0, 6.2, 20.0)))
    auto.observe(expected[0].tolist(), 15, 1)  # no policy installed: nothing
    assert policy.weight == 0
    auto.install(policy)
    try:
        auto.observe(expected[0].tolist(), 15, 1)
        auto.observe(None, 15, 1)  # a round without expectations (a fixed server's)
    finally:
        auto.install(None)
    assert policy.weight > 0 and policy.means[63] / policy.weight == pytest.approx(float(expected[0, 2]))

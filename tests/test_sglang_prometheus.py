"""The plugin's Prometheus metrics: buckets, row -> observations, recording, SGLang's multiprocess mode.

The bucket and observation tests need neither SGLang nor prometheus_client; the recording tests need
prometheus_client, and the last one real SGLang (a stored ServerArgs-like object, SGLang's own
SchedulerMetricsCollector.init_new and the hooked SchedulerBatchResultProcessor method).
Oracles: the worked-example tree (trees.py) walked by hand.
"""

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from trees import worked_example_topk

from ddtree_core import build_tree_from_topk
from ddtree_core.settings import TreeSettings
from ddtree_core.sglang import prometheus
from ddtree_core.sglang.config import ServerSettings
from ddtree_core.sglang.prometheus import histogram_specs, integer_buckets, node_buckets, observations
from ddtree_core.sglang.rounds import round_stats_rows
from ddtree_core.verify import follow_tree

SERVER = ServerSettings(block_size=16, tree=TreeSettings(64, 15, 1.0))
LABELS = {"model_name": "smol", "tp_rank": "0"}
# The worked example's scores, nodes 10, 12, 13, 11 (trees.py): the drafter's forecast of tau.
EXPECTED_TAU = 1 + sum(math.exp(s) for s in (-0.1, -0.3, -2.0, -2.5))


def worked_rows() -> list[list[int]]:
    """Two rounds of the worked example (4 nodes, depth 2): the target follows 10 -> 12 (tau 3), then
    takes a token no node carries (tau 1).
    root ─┬─ 10 ─┬─ 12
          │      └─ 13
          └─ 11
    """
    topk = worked_example_topk()
    topk = type(topk)(log_probs=topk.log_probs.expand(2, -1, -1), token_ids=topk.token_ids.expand(2, -1, -1))
    tree = build_tree_from_topk(topk, 4, impl="reference")
    # Columns: root, 10, 12, 13, 11; the target's token after each.
    targets = torch.tensor([[10, 12, 99, 99, 99], [99, 99, 99, 99, 99]])
    walk = follow_tree(tree, targets, impl="reference")
    return round_stats_rows(tree, walk, topk, impl="reference").tolist()


@pytest.mark.parametrize(
    "budget, buckets",
    [(1, (0, 1)), (2, (0, 1, 2)), (8, (0, 1, 2, 4, 8)), (15, (0, 1, 2, 4, 8, 15)), (64, (0, 1, 2, 4, 8, 16, 32, 64))],
    ids=["n1", "n2", "n8", "n15", "n64"],
)
def test_node_buckets(budget, buckets):
    assert node_buckets(budget) == tuple(map(float, buckets))


def test_histogram_specs_follow_the_server_widths():
    specs = {spec.name: spec for spec in histogram_specs(SERVER)}
    assert list(specs) == [
        "sglang:ddtree_accept_length",
        "sglang:ddtree_expected_accept_length",
        "sglang:ddtree_tree_nodes",
        "sglang:ddtree_depth_reached",
    ]
    assert integer_buckets(1, 16) == tuple(float(v) for v in range(1, 17))
    assert specs["sglang:ddtree_accept_length"].buckets == specs["sglang:ddtree_expected_accept_length"].buckets
    assert specs["sglang:ddtree_accept_length"].buckets == integer_buckets(1, 16)
    assert specs["sglang:ddtree_tree_nodes"].buckets == node_buckets(64)
    assert specs["sglang:ddtree_depth_reached"].buckets == tuple(float(v) for v in range(16))
    shallow = ServerSettings(block_size=16, tree=TreeSettings(4, 15, 1.0))  # tree depth 4
    assert {s.name: s.buckets[-1] for s in histogram_specs(shallow)}["sglang:ddtree_accept_length"] == 5.0


def test_observations_of_worked_rounds():
    specs = histogram_specs(SERVER)
    first, second = (observations(row, specs) for row in worked_rows())
    assert first[0] == 3.0 and first[2:] == (4.0, 2.0)  # tau, nodes, depth
    assert second[0] == 1.0 and second[2:] == (4.0, 2.0)
    assert first[1] == second[1] == pytest.approx(EXPECTED_TAU, rel=1e-6)


def test_nothing_recorded_without_scheduler_metrics(monkeypatch):
    monkeypatch.setattr(prometheus, "_process_metrics", None)
    row = worked_rows()[0]
    prometheus.observe_round(None, row)  # the existing hook tests pass no processor
    off = SimpleNamespace(metrics_reporter=SimpleNamespace(current_scheduler_metrics_enabled=False))
    prometheus.observe_round(off, row)
    assert prometheus._process_metrics is None


def test_metrics_record_rows():
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    metrics = prometheus.DDTreeMetrics(
        LABELS,
        histogram_specs(SERVER),
        histogram_cls=prometheus_client.Histogram,
        counter_cls=prometheus_client.Counter,
        registry=registry,
    )
    for row in worked_rows():
        metrics.observe(row)
    value = lambda name, **extra: registry.get_sample_value(name, {**LABELS, **extra})
    assert value("sglang:ddtree_rounds_total") == 2
    assert value("sglang:ddtree_accept_length_count") == 2 and value("sglang:ddtree_accept_length_sum") == 4
    assert [value("sglang:ddtree_accept_length_bucket", le=le) for le in ("1.0", "2.0", "3.0", "+Inf")] == [1, 1, 2, 2]
    assert [value("sglang:ddtree_tree_nodes_bucket", le=le) for le in ("2.0", "4.0", "64.0")] == [0, 2, 2]
    assert value("sglang:ddtree_depth_reached_bucket", le="1.0") == 0 and value("sglang:ddtree_depth_reached_sum") == 4
    assert value("sglang:ddtree_expected_accept_length_sum") == pytest.approx(2 * EXPECTED_TAU, rel=1e-6)


def read_multiproc_dir(path: Path, name: str, labels: dict) -> float | None:
    """A sample as SGLang's /metrics serves it: a MultiProcessCollector over the directory."""
    from prometheus_client import CollectorRegistry, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(path))
    return registry.get_sample_value(name, labels)


def run_python(code: str, multiproc_dir: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(multiproc_dir), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def test_multiprocess_mode_reaches_the_metrics_directory(tmp_path):
    pytest.importorskip("prometheus_client")
    # A separate process, as a scheduler: prometheus_client is imported only when the metrics are made,
    # after PROMETHEUS_MULTIPROC_DIR is set, so its values go to files there.
    run_python(
        f"""
        import sys
        from ddtree_core.sglang import prometheus
        assert "prometheus_client" not in sys.modules
        from prometheus_client import Counter, Histogram
        from ddtree_core.settings import TreeSettings
        from ddtree_core.sglang.config import ServerSettings
        settings = ServerSettings(block_size=16, tree=TreeSettings(64, 15, 1.0))
        metrics = prometheus.DDTreeMetrics(
            {LABELS!r}, prometheus.histogram_specs(settings), histogram_cls=Histogram, counter_cls=Counter
        )
        for row in {json.dumps(worked_rows())}:
            metrics.observe(row)
        """,
        tmp_path,
    )
    assert any(path.name.startswith("histogram_") for path in tmp_path.iterdir())
    assert read_multiproc_dir(tmp_path, "sglang:ddtree_rounds_total", LABELS) == 2
    assert read_multiproc_dir(tmp_path, "sglang:ddtree_accept_length_bucket", {**LABELS, "le": "3.0"}) == 2


@pytest.mark.slow  # importing SGLang takes tens of seconds
def test_sglang_hook_records_in_multiprocess_mode(tmp_path):
    """The registered hook on SGLang's own method, SGLang's collector labels and ranks rule, one scheduler
    process writing the multiprocess directory that /metrics reads."""
    pytest.importorskip("sglang")
    pytest.importorskip("prometheus_client")
    run_python(
        f"""
        import contextlib
        import dataclasses
        from types import SimpleNamespace

        import torch
        from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor
        from sglang.srt.observability.metrics_collector import SchedulerMetricsCollector
        from sglang.srt.server_args import ServerArgs

        from ddtree_core.sglang import plugin

        plugin.register()
        # Server args as spec_algo.resolve_server_args leaves them for block 16, budget 15, with metrics on.
        if dataclasses.is_dataclass(ServerArgs):  # 0.5.15: resolution writes the fields and a mark
            # SGLang's defaults without ServerArgs.__post_init__ (which would load a model config).
            args = object.__new__(ServerArgs)
            for field in dataclasses.fields(ServerArgs):
                if field.default is not dataclasses.MISSING:
                    setattr(args, field.name, field.default)
                elif field.default_factory is not dataclasses.MISSING:
                    setattr(args, field.name, field.default_factory())
            args.enable_metrics, args.served_model_name, args.speculative_algorithm = True, "smol", "DDTREE"
            args.speculative_dflash_block_size = args.speculative_num_draft_tokens = 16
            args._ddtree_resolved = True
            ranks = contextlib.nullcontext()
            placement = dict(ps=SimpleNamespace(attn_tp_rank=0, pp_rank=0, attn_cp_rank=0, moe_ep_rank=0),
                             tp_rank=0, pp_rank=0, dp_rank=None)  # fmt: skip
        else:  # 0.5.23: resolution declares the fields, SGLang publishes them; the ranks live in its context
            from sglang.srt.runtime_context import get_context, get_parallel

            args = get_context().override_server_args(
                enable_metrics=True, served_model_name="smol", speculative_algorithm="DDTREE",
                speculative_dflash_block_size=16, speculative_num_draft_tokens=16,
            ).install()  # fmt: skip
            ranks = get_parallel().override(
                attn_tp_rank=0, attn_cp_rank=0, tp_rank=0, pp_rank=0, moe_ep_rank=0, dp_rank=None
            )
            placement = dict()
        with ranks:
            context = SchedulerMetricsCollector.init_new(
                server_args=args,
                **placement,
                enable_priority_scheduling=False,
                enable_lora=False,
                enable_hierarchical_cache=False,
            )
        fields = {{f.name: None for f in dataclasses.fields(SchedulerBatchResultProcessor)}}
        if "server_args" in fields:  # 0.5.15; 0.5.23's processor reads the published args
            fields["server_args"] = args
        processor = SchedulerBatchResultProcessor(
            **{{
                **fields,
                "metrics_collector": context.collector,
                "metrics_reporter": SimpleNamespace(
                    current_scheduler_metrics_enabled=context.current_scheduler_metrics_enabled
                ),
            }}
        )
        req = SimpleNamespace(
            mamba_ping_pong_track_buffer=None,  # 0.5.15; 0.5.23 keeps it in req.kv
            kv=SimpleNamespace(mamba_ping_pong_track_buffer=None),
            customized_info=None,
            output_ids_through_stop=[1, 2, 3],
            finished=lambda: False,
        )
        result = SimpleNamespace(ddtree_stats=torch.tensor({worked_rows()!r}, dtype=torch.int32))
        for i in range(2):
            processor._handle_finish_state_updated_req(req, SimpleNamespace(mamba_track_mask_cpu=None), result, i, None)
        assert req._ddtree_round_rows == result.ddtree_stats.tolist()
        """,
        tmp_path,
    )
    labels = {"model_name": "smol", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
    assert read_multiproc_dir(tmp_path, "sglang:ddtree_rounds_total", labels) == 2
    assert read_multiproc_dir(tmp_path, "sglang:ddtree_accept_length_sum", labels) == 4
    assert read_multiproc_dir(tmp_path, "sglang:ddtree_tree_nodes_bucket", {**labels, "le": "4.0"}) == 2  # budget 15
    assert read_multiproc_dir(tmp_path, "sglang:ddtree_depth_reached_bucket", {**labels, "le": "2.0"}) == 2

"""The profiler-trace summary (ddbench/kernels/trace_summary.py): rounds, host functions, launches, host syncs and
their callers, GPU busy time on hand-built event lists with known answers, and a real CPU profiler trace."""

import gzip
import json

import pytest
import torch
import typer
from typer.testing import CliRunner

from ddbench.kernels import trace_summary

HOST, GPU = (7, 7), (0, 3)  # (pid, tid) of the scheduler thread and of a CUDA stream


def event(cat, name, ts, dur, thread=HOST):
    return {"ph": "X", "cat": cat, "name": name, "pid": thread[0], "tid": thread[1], "ts": ts, "dur": dur}


def decode_trace(rounds=3, period=2000.0):
    """`rounds` scheduler iterations `period` us apart. Each: run_batch (1500 us) > forward_batch_generation
    (1200) > _decode_round (1000) > walk (300) > Tensor.item (120) > aten::item (110) > cudaStreamSynchronize
    (100); two kernel launches; kernels [200, 700) and [600, 900) overlap, a 10 us DtoH copy at 1000; then
    process_batch_result outside run_batch. Plus events the summary must ignore."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 7, "args": {"name": "scheduler"}},
        event("python_function", "threading.py(1012): run", -500.0, rounds * period + 500),  # wraps everything
        event("python_function", "sglang/srt/managers/scheduler.py(1540): recv_requests", -400.0, 100),
    ]
    for i in range(rounds):
        t = i * period
        events += [
            event("python_function", "sglang/srt/managers/scheduler.py(3191): run_batch", t, 1500),
            event("python_function", "ddtree_core/sglang/worker.py(123): forward_batch_generation", t + 100, 1200),
            event("python_function", "ddtree_core/sglang/worker.py(132): _decode_round", t + 150, 1000),
            event("python_function", "ddtree_core/verify.py(50): walk", t + 400, 300),
            event("python_function", f"<built-in method item of Tensor object at 0x7f{i:04x}>", t + 450, 120),
            event("cpu_op", "aten::item", t + 455, 110),
            event("cuda_runtime", "cudaStreamSynchronize", t + 460, 100),
            event("cuda_runtime", "cudaLaunchKernel", t + 180, 5),
            event("cuda_driver", "cuLaunchKernel", t + 300, 5),
            event("cuda_runtime", "cudaEventRecord", t + 310, 1),
            event("kernel", "gemm", t + 200, 500, GPU),
            event("kernel", "triton_walk", t + 600, 300, GPU),
            event("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", t + 1000, 10, GPU),
            event("python_function", "sglang/srt/managers/scheduler.py(3449): process_batch_result", t + 1600, 200),
            event("gpu_user_annotation", "verify", t + 200, 700, GPU),
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": i, "pid": 7, "tid": 7, "ts": t + 180},
        ]
    return events


def test_rounds_syncs_launches_and_gpu_of_a_known_trace():
    s = trace_summary.summarize(decode_trace())
    # 3 rounds; the window [0, 4000) holds 2 whole iterations, and per-round numbers are over those 2.
    assert (s["rounds"], s["partial_dropped"], s["iterations"], s["window_ms"]) == (3, 0, 2, 4.0)
    assert s["wall_ms"] == {"median": 2.0, "mean": 2.0}
    assert s["host_ms"] == {"median": 1.5, "mean": 1.5}
    assert s["syncs"]["calls"] == 1.0 and s["syncs"]["ms"] == pytest.approx(0.1)
    [site] = s["syncs"]["sites"]
    assert site["name"] == "cudaStreamSynchronize" and site["op"] == "aten::item"
    assert site["caller"] == "ddtree_core/sglang/worker.py(132): _decode_round > ddtree_core/verify.py(50): walk"
    assert s["launches"]["calls"] == 2.0 and s["launches"]["ms"] == pytest.approx(0.01)
    assert {r["name"]: r["calls"] for r in s["launches"]["runtime"]} == {
        "cudaLaunchKernel": 1.0, "cuLaunchKernel": 1.0, "cudaEventRecord": 1.0, "cudaStreamSynchronize": 1.0,
    }  # fmt: skip
    gpu = s["gpu"]
    assert (gpu["kernels"], gpu["memcpys"], gpu["memsets"]) == (2.0, 1.0, 0.0)
    assert gpu["busy_ms"] == pytest.approx(0.71)  # union [200, 900) + 10 us copy, not 500 + 300 + 10
    assert gpu["busy_fraction"] == pytest.approx(0.355)
    assert [r["name"] for r in gpu["top"]] == ["gemm", "triton_walk", "Memcpy DtoH (Device -> Pinned)"]
    assert s["aten"] == [{"name": "aten::item", "calls": 1.0, "ms": pytest.approx(0.11)}]


def test_host_functions_have_inclusive_and_self_time_and_skip_wrappers():
    host = {r["name"]: r for r in trace_summary.summarize(decode_trace())["host"]}
    assert "threading.py(1012): run" not in host  # starts before the window: wraps everything
    run_batch = host["sglang/srt/managers/scheduler.py(3191): run_batch"]
    assert (run_batch["calls"], run_batch["ms"], run_batch["self_ms"]) == (1.0, 1.5, pytest.approx(0.3))
    assert host["ddtree_core/sglang/worker.py(132): _decode_round"]["self_ms"] == pytest.approx(0.7)
    assert host["<built-in method item of Tensor object>"]["calls"] == 1.0  # addresses stripped, calls merged
    assert list(host)[:3] == [
        "sglang/srt/managers/scheduler.py(3191): run_batch",
        "ddtree_core/sglang/worker.py(123): forward_batch_generation",
        "ddtree_core/sglang/worker.py(132): _decode_round",
    ]


def test_recursion_counts_inclusive_time_once_and_nested_round_matches_once():
    events = [event("python_function", "b.py(2): g", -100.0, 50)]
    for t in (0.0, 1000.0):
        events += [
            event("python_function", "spec/worker.py(10): forward_batch_generation", t, 800),
            event("python_function", "managers/tp_worker.py(20): forward_batch_generation", t + 100, 400),
            event("python_function", "a.py(1): f", t + 100, 300),
            event("python_function", "a.py(1): f", t + 150, 100),
        ]
    s = trace_summary.summarize(events, round_fn=r"forward_batch_generation$")
    assert (s["rounds"], s["wall_ms"]["median"], s["host_ms"]["median"]) == (2, 1.0, 0.8)
    f = next(r for r in s["host"] if r["name"] == "a.py(1): f")
    assert (f["calls"], f["ms"], f["self_ms"]) == (2.0, pytest.approx(0.3), pytest.approx(0.3))


def test_a_round_running_when_tracing_began_is_left_out():
    # Drop the event that ended before the first round: now only its ancestor precedes it, as when SGLang starts
    # the profiler inside run_batch and the tracer opens the frames already on the stack at the trace start.
    events = [e for e in decode_trace(rounds=4) if "recv_requests" not in e.get("name", "")]
    s = trace_summary.summarize(events)
    assert (s["rounds"], s["partial_dropped"], s["iterations"], s["window_ms"]) == (3, 1, 2, 4.0)
    assert trace_summary.summarize(decode_trace(rounds=4))["partial_dropped"] == 0


def test_no_matching_round_is_an_error():
    with pytest.raises(ValueError, match="no python_function event matches"):
        trace_summary.summarize(decode_trace(), round_fn="nothing_like_this")


def test_markdown_and_comparison_show_the_numbers():
    s = trace_summary.summarize(decode_trace())
    text = trace_summary.render_markdown(s, "ddtree")
    assert text.startswith("## ddtree\n\n3 rounds") and "**1.00 host syncs (0.100 ms)**" in text
    assert "| cudaStreamSynchronize | ddtree_core/sglang/worker.py(132): _decode_round > " in text
    slower = trace_summary.summarize(decode_trace(period=3000.0))
    table = trace_summary.render_comparison({"ddtree": slower, "dflash": s})
    assert "| per round | ddtree | dflash |" in table and "| wall ms/round (median) | 3.000 | 2.000 |" in table


def test_cli_reads_gzipped_traces_and_writes_json(tmp_path):
    paths = []
    for name, period in (("ddtree", 3000.0), ("dflash", 2000.0)):
        paths.append(tmp_path / f"{name}.trace.json.gz")
        with gzip.open(paths[-1], "wt") as f:
            json.dump({"traceEvents": decode_trace(period=period)}, f)
    out = tmp_path / "summary.json"
    app = typer.Typer()
    app.command()(trace_summary.main)
    result = CliRunner().invoke(app, [*map(str, paths), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "## Side by side" in result.output and "| host syncs/round | 1.000 | 1.000 |" in result.output
    numbers = json.loads(out.read_text())
    assert [numbers[str(p)]["wall_ms"]["median"] for p in paths] == [3.0, 2.0]
    result = CliRunner().invoke(app, [str(paths[0]), "--round-fn", "no_such_function"])
    assert result.exit_code == 2 and "no python_function event matches" in result.output
    (tmp_path / "other.json").write_text('{"cells": []}')
    for bad, why in (("missing.json.gz", "cannot read a Chrome trace"), ("other.json", "not a Chrome trace")):
        result = CliRunner().invoke(app, [str(tmp_path / bad)])
        assert result.exit_code == 2 and why in result.output, result.output


def one_round(x):
    return inner_step(x).sum().item()


def inner_step(x):
    return (x @ x).relu()


def test_real_cpu_profiler_trace(tmp_path):
    x = torch.randn(8, 8)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True) as prof:
        for _ in range(3):
            one_round(x)
    path = tmp_path / "cpu.trace.json.gz"
    prof.export_chrome_trace(str(path))
    s = trace_summary.summarize(trace_summary.load_events(path), round_fn=r"test_trace_summary\.py\(\d+\): one_round$")
    assert (s["rounds"], s["iterations"]) == (3, 2)
    names = [r["name"] for r in s["host"]]
    assert any(n.endswith(f"test_trace_summary.py({inner_step.__code__.co_firstlineno}): inner_step") for n in names)
    assert {"aten::matmul", "aten::relu", "aten::item"} <= {r["name"] for r in s["aten"]}
    assert s["syncs"]["calls"] == 0 and s["gpu"]["kernels"] == 0  # a CPU-only trace has no CUDA events

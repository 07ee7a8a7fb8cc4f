r"""Where a decode round's time goes, from a torch-profiler Chrome trace of a serving SGLang scheduler.

    ddbench kernels trace ddtree.trace.json.gz dflash.trace.json.gz [--round-fn REGEX] [--json OUT]

Reads traces written by torch.profiler's export_chrome_trace (SGLang's /start_profile with activities
CPU and GPU and with_stack) and prints one markdown section per trace, then, for two or more, a
side-by-side table; --json writes the same numbers.

Rounds are the outermost python_function events whose name matches --round-fn on their thread. The
default, the scheduler's `run_batch`, runs once per scheduler iteration for AR, DFLASH and DDTREE alike
(it calls the worker's forward_batch_generation once); `worker\.py\(\d+\): forward_batch_generation` would
pick the DDTree worker's call alone. SGLang starts the profiler inside run_batch, so a first round that was
already running when tracing began (no Python call on its thread ended before it) is left out.

Wall per round is the gap between consecutive round starts. Every other number is counted over the window
[first round start, last round start), which holds whole scheduler iterations (with overlap scheduling,
that includes the previous batch's result processing), and divided by the number of iterations in it,
rounds - 1 (with one round, the window is that round); host time inside the round function is taken over
the rounds that start those iterations. Python functions (less those as long as the window: event loops)
and aten ops come from the rounds' threads, CUDA runtime/driver calls from any host thread, GPU time from
all streams. A host sync's caller is the innermost two Python frames around it on its thread. Times are
ms per round unless named otherwise; `ts`/`dur` in the trace are microseconds. Events of other categories
and phases (flows, metadata, annotations) are ignored.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

ROUND_FN = r"scheduler\.py\(\d+\): run_batch$"
HOST_CATS = ("cuda_runtime", "cuda_driver")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCHES = frozenset(
    {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch",
     "cudaMemcpyAsync", "cudaMemsetAsync"}
)  # fmt: skip
SYNCS = frozenset(
    {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cuStreamSynchronize",
     "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpyDtoH", "cuMemcpyDtoH_v2"}
)  # fmt: skip
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


@dataclass(frozen=True, slots=True)
class Span:
    """One complete ("ph": "X") event; ts and end in microseconds."""

    ts: float
    end: float
    name: str
    thread: tuple  # (pid, tid)


def load_events(path: Path) -> list[dict]:
    """The traceEvents of a Chrome trace file (.json or .json.gz); ValueError for anything else."""
    try:
        with (gzip.open if str(path).endswith(".gz") else open)(path, "rt") as f:
            data = json.load(f)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"cannot read a Chrome trace ({type(error).__name__}: {error})") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ValueError("not a Chrome trace (no traceEvents list)")
    return events


def _spans(events: Iterable[dict]) -> dict[str, list[Span]]:
    """Complete events by category, each list sorted by (start, longest first) so parents precede children."""
    by_cat = defaultdict(list)
    wanted = {"python_function", "cpu_op", *HOST_CATS, *GPU_CATS}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in wanted:
            ts = float(e["ts"])
            name = _ADDRESS.sub("", e.get("name", ""))
            by_cat[e["cat"]].append(Span(ts, ts + float(e.get("dur", 0.0)), name, (e.get("pid"), e.get("tid"))))
    for spans in by_cat.values():
        spans.sort(key=lambda s: (s.ts, -s.end))
    return by_cat


def _by_thread(spans: Iterable[Span]) -> dict[tuple, list[Span]]:
    groups = defaultdict(list)
    for s in spans:
        groups[s.thread].append(s)
    return groups


def _outermost(spans: list[Span]) -> list[Span]:
    """The spans not inside another of `spans` on their thread (sorted input, sorted output)."""
    kept, open_until = [], {}
    for s in spans:
        if s.ts >= open_until.get(s.thread, float("-inf")):
            kept.append(s)
            open_until[s.thread] = s.end
    return kept


def _function_times(spans: list[Span]) -> dict[str, list[float]]:
    """name -> [calls, inclusive us, self us] of nested spans. Inclusive counts only the outermost call of a
    name on a stack (recursion is not double-counted); self is a span's time outside its direct children."""
    stats = defaultdict(lambda: [0, 0.0, 0.0])
    for thread_spans in _by_thread(spans).values():
        stack = []  # [span, us in direct children], outermost first
        for s in [*thread_spans, None]:  # None closes what is still open
            while stack and (s is None or stack[-1][0].end <= s.ts):
                span, children = stack.pop()
                stats[span.name][2] += span.end - span.ts - children
            if s is None:
                break
            if stack:
                stack[-1][1] += s.end - s.ts
            entry = stats[s.name]
            entry[0] += 1
            entry[1] += (s.end - s.ts) if all(open_span.name != s.name for open_span, _ in stack) else 0.0
            stack.append([s, 0.0])
    return stats


def _stacks_at(spans: list[Span], times: list[float]) -> list[list[str]]:
    """For each of the sorted `times`, the names of the nested `spans` (one thread, sorted) open at it,
    outermost first."""
    out, stack, i = [], [], 0
    for t in times:
        while i < len(spans) and spans[i].ts <= t:
            while stack and stack[-1].end < spans[i].ts:
                stack.pop()
            stack.append(spans[i])
            i += 1
        while stack and stack[-1].end < t:
            stack.pop()
        out.append([s.name for s in stack])
    return out


def _union_us(spans: Iterable[Span], lo: float, hi: float) -> float:
    """Length of the union of the spans' intervals clipped to [lo, hi)."""
    total, cur_lo, cur_hi = 0.0, None, None
    for a, b in sorted((max(s.ts, lo), min(s.end, hi)) for s in spans):
        if b <= a:
            continue
        if cur_hi is None or a > cur_hi:
            total += 0.0 if cur_hi is None else cur_hi - cur_lo
            cur_lo, cur_hi = a, b
        else:
            cur_hi = max(cur_hi, b)
    return total + (0.0 if cur_hi is None else cur_hi - cur_lo)


def _rows(spans: Iterable[Span], n: int, sort_by: str, top: int | None) -> list[dict]:
    """Calls and ms per round of each span name over `n` rounds, largest `sort_by` first."""
    groups = defaultdict(lambda: [0, 0.0])
    for s in spans:
        groups[s.name][0] += 1
        groups[s.name][1] += s.end - s.ts
    rows = [{"name": k, "calls": v[0] / n, "ms": v[1] / 1e3 / n} for k, v in groups.items()]
    return sorted(rows, key=lambda r: -r[sort_by])[:top]


def _syncs(spans: dict[str, list[Span]], host: list[Span], n: int) -> dict:
    """Host-blocking CUDA calls grouped by (call, innermost two Python frames, innermost op)."""
    syncs = [s for s in host if s.name in SYNCS]
    py, ops = _by_thread(spans["python_function"]), _by_thread(spans["cpu_op"])
    sites = defaultdict(lambda: [0, 0.0, 0.0])
    for thread, thread_syncs in _by_thread(syncs).items():
        times = [s.ts for s in thread_syncs]
        py_stacks = _stacks_at(py.get(thread, []), times)
        op_stacks = _stacks_at(ops.get(thread, []), times)
        for s, py_stack, op_stack in zip(thread_syncs, py_stacks, op_stacks):
            frames = [f for f in py_stack if ".py(" in f]
            builtin = py_stack[-1] if py_stack and ".py(" not in py_stack[-1] else ""
            caller = " > ".join(frames[-2:]) or "?"
            op = op_stack[-1] if op_stack else builtin
            site = sites[(s.name, caller, op)]
            site[0], site[1], site[2] = site[0] + 1, site[1] + s.end - s.ts, max(site[2], s.end - s.ts)
    rows = [
        {"name": k[0], "caller": k[1], "op": k[2], "calls": v[0] / n, "ms": v[1] / 1e3 / n, "max_ms": v[2] / 1e3}
        for k, v in sites.items()
    ]
    rows.sort(key=lambda r: -r["ms"])
    return {"calls": len(syncs) / n, "ms": sum(s.end - s.ts for s in syncs) / 1e3 / n, "sites": rows}


def summarize(events: Iterable[dict], round_fn: str = ROUND_FN, top: int = 25) -> dict:
    """Per-round numbers of one trace (see the module docstring); raises ValueError when no round is found."""
    spans = _spans(events)
    pattern = re.compile(round_fn)
    rounds = _outermost([s for s in spans["python_function"] if pattern.search(s.name)])
    if not rounds:
        raise ValueError(f"no python_function event matches --round-fn {round_fn!r}")
    first = rounds[0]
    ended_before = (s for s in spans["python_function"] if s.thread == first.thread and s.end <= first.ts)
    partial = len(rounds) > 1 and next(ended_before, None) is None
    rounds = rounds[partial:]
    starts = [r.ts for r in rounds]
    lo, hi = (starts[0], starts[-1]) if len(rounds) > 1 else (rounds[0].ts, rounds[0].end)
    n = max(len(rounds) - 1, 1)
    threads = {r.thread for r in rounds}
    within = lambda s: lo <= s.ts < hi
    on_round_threads = lambda cat: [s for s in spans[cat] if s.thread in threads and within(s)]
    gaps = [(b - a) / 1e3 for a, b in zip(starts, starts[1:])] or [(hi - lo) / 1e3]
    host_ms = [(r.end - r.ts) / 1e3 for r in rounds[:n]]  # the last round may be cut by the trace's end

    wrappers = lambda s: s.end - s.ts >= hi - lo  # as long as the whole window: event loops and the like
    functions = _function_times([s for s in on_round_threads("python_function") if not wrappers(s)])
    host_rows = [
        {"name": k, "calls": v[0] / n, "ms": v[1] / 1e3 / n, "self_ms": v[2] / 1e3 / n} for k, v in functions.items()
    ]
    host = [s for cat in HOST_CATS for s in spans[cat] if within(s)]
    gpu = [s for cat in GPU_CATS for s in spans[cat]]
    busy_ms = _union_us(gpu, lo, hi) / 1e3 / n
    launches = [s for s in host if s.name in LAUNCHES]
    return {
        "round_fn": round_fn,
        "rounds": len(rounds),
        "partial_dropped": int(partial),
        "iterations": n,
        "window_ms": (hi - lo) / 1e3,
        "wall_ms": {"median": statistics.median(gaps), "mean": statistics.fmean(gaps)},
        "host_ms": {"median": statistics.median(host_ms), "mean": statistics.fmean(host_ms)},
        "host": sorted(host_rows, key=lambda r: -r["ms"])[:top],
        "launches": {
            "calls": len(launches) / n,
            "ms": sum(s.end - s.ts for s in launches) / 1e3 / n,
            "runtime": _rows(host, n, "calls", None),
        },
        "syncs": _syncs(spans, host, n),
        "gpu": {
            "kernels": sum(within(s) for s in spans["kernel"]) / n,
            "memcpys": sum(within(s) for s in spans["gpu_memcpy"]) / n,
            "memsets": sum(within(s) for s in spans["gpu_memset"]) / n,
            "busy_ms": busy_ms,
            "busy_fraction": busy_ms * n / ((hi - lo) / 1e3) if hi > lo else 0.0,
            "top": _rows(filter(within, gpu), n, "ms", 15),
        },
        "aten": _rows(on_round_threads("cpu_op"), n, "calls", 20),
    }


def _table(headers: list[str], rows: list[list]) -> str:
    cell = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v).replace("|", "\\|")
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows])


def _short(name: str, width: int = 100) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def render_markdown(summary: dict, title: str = "trace") -> str:
    """One markdown section of `summarize`'s numbers."""
    s, g, sy, la = summary, summary["gpu"], summary["syncs"], summary["launches"]
    wall = s["wall_ms"]["median"]
    return "\n\n".join([
        f"## {title}",
        f"{s['rounds']} rounds (`{s['round_fn']}`; {s['partial_dropped']} open at trace start left out), "
        f"{s['iterations']} iterations in {s['window_ms']:.1f} ms. "
        f"Per round: wall {wall:.3f} ms median ({s['wall_ms']['mean']:.3f} mean), host inside the round function "
        f"{s['host_ms']['median']:.3f} ms median ({s['host_ms']['mean']:.3f} mean), GPU busy {g['busy_ms']:.3f} ms "
        f"({100 * g['busy_fraction']:.0f} % of the window), {la['calls']:.1f} launches ({la['ms']:.3f} ms host), "
        f"**{sy['calls']:.2f} host syncs ({sy['ms']:.3f} ms)**.",
        "### Host syncs per round",
        _table(["call", "caller (outer > inner)", "op", "calls", "ms", "max ms"],
               [[r["name"], r["caller"], r["op"], r["calls"], r["ms"], r["max_ms"]] for r in sy["sites"]]),
        "### Python functions per round (inclusive ms, self ms)",
        _table(["function", "calls", "ms", "self ms"],
               [[_short(r["name"]), r["calls"], r["ms"], r["self_ms"]] for r in s["host"]]),
        "### CUDA runtime/driver calls per round",
        _table(["call", "calls", "host ms"], [[r["name"], r["calls"], r["ms"]] for r in la["runtime"]]),
        f"### GPU per round: {g['kernels']:.1f} kernels, {g['memcpys']:.1f} memcpy, {g['memsets']:.1f} memset, "
        f"busy {g['busy_ms']:.3f} ms, idle {max(wall - g['busy_ms'], 0.0):.3f} ms of the median wall",
        _table(["kernel", "calls", "ms"], [[_short(r["name"]), r["calls"], r["ms"]] for r in g["top"]]),
        "### aten ops per round (ms includes nested ops)",
        _table(["op", "calls", "ms"], [[r["name"], r["calls"], r["ms"]] for r in s["aten"]]),
    ])  # fmt: skip


def render_comparison(summaries: dict[str, dict]) -> str:
    """The headline numbers of several traces side by side."""
    metrics = {
        "wall ms/round (median)": lambda s: s["wall_ms"]["median"],
        "host ms/round in round fn (median)": lambda s: s["host_ms"]["median"],
        "launches/round": lambda s: s["launches"]["calls"],
        "launch host ms/round": lambda s: s["launches"]["ms"],
        "host syncs/round": lambda s: s["syncs"]["calls"],
        "sync ms/round": lambda s: s["syncs"]["ms"],
        "kernels/round": lambda s: s["gpu"]["kernels"],
        "GPU busy ms/round": lambda s: s["gpu"]["busy_ms"],
    }
    rows = [[label] + [float(get(s)) for s in summaries.values()] for label, get in metrics.items()]
    return "## Side by side\n\n" + _table(["per round", *summaries], rows)


def main(
    traces: Annotated[list[Path], typer.Argument(help="Chrome traces (.json or .json.gz) from torch.profiler.")],
    round_fn: Annotated[str, typer.Option(help="Regex on python_function names; one match = one round.")] = ROUND_FN,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the numbers here.")] = None,
    top: Annotated[int, typer.Option(help="Python functions to list.")] = 25,
):
    """Per decode round: wall and host time, Python functions, launches, host syncs and their callers, GPU
    busy time and kernels, aten ops; with several traces, a side-by-side table."""
    summaries = {}
    for path in traces:
        try:
            summaries[str(path)] = summarize(load_events(path), round_fn, top)
        except ValueError as err:
            typer.echo(f"error: {path}: {err}", err=True)
            raise typer.Exit(code=2) from None
    sections = [render_markdown(s, p) for p, s in summaries.items()]
    if len(summaries) > 1:
        names = [Path(p).name for p in summaries]
        labels = names if len(set(names)) == len(names) else list(summaries)
        sections.append(render_comparison(dict(zip(labels, summaries.values()))))
    print("\n\n".join(sections))
    if json_out is not None:
        json_out.write_text(json.dumps(summaries, indent=1))


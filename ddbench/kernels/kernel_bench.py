"""Kernel benchmark: the draft-side DDTree round (top-K, tree build, mask + positions, walk) per impl.

    ddbench kernels bench --out results/kernels/h200
    ddbench kernels bench --out /tmp/kb --smoke        # tiny sizes, runs on a CPU

For every cell (batch x budget x vocab, L = 16 draft positions, bf16 draft logits on the device) and
impl it times each stage and the whole round:
- torch / triton: CUDA events around replays of a CUDA graph of the stage (the capture itself is the
  proof that the stage never syncs with the host), the round also eagerly (launch overhead
  included), and one eager round under torch.cuda.set_sync_debug_mode("error"); round_graph8 is one
  graph of 8 rounds back to back over 8: the GPU time of a round inside a larger graph (as in a server's
  draft graph), without the few microseconds each replay's launch costs;
- reference: host wall time of eager calls (device-to-host copies included); skipped where one call
  would take more than a few seconds, which the note column says.
The floor of a round is reading the draft logits once at the copy bandwidth measured at the start (a
device-to-device copy, bytes read + written over time). Writes cells.csv and run.json (environment
stamp, bandwidth, every cell) to --out and prints a table. A cell that fails records its error. With
--profile (CUDA) also kernels.csv: each kernel's launches and device time per eager round (torch.profiler),
the round's time less its launch gaps. For triton, settled is the share of the top-K's rows that its tiles'
candidates settled (empty where the default launch does not try them).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import torch
import typer

from ddbench import env

STAGES = ("topk", "build", "mask", "walk", "round")
REFERENCE_SECONDS_LIMIT = 3.0  # skip reference cells estimated slower than this per call


@dataclass(frozen=True)
class BenchConfig:
    batches: tuple[int, ...]
    budgets: tuple[int, ...]
    vocabs: tuple[int, ...]
    impls: tuple[str, ...]
    length: int  # draft positions (block size - 1)
    device: str
    min_seconds: float  # timed replays per stage run at least this long
    seed: int
    logit_scale: float = 4.0  # draft logits = randn x this: larger is a sharper drafter (deeper, narrower trees)
    profile: bool = False  # also each kernel's device time in an eager round (torch.profiler): kernels.csv


@dataclass(frozen=True)
class CellResult:
    batch: int
    budget: int
    vocab: int
    impl: str
    topk_us: float | None  # graph replay (torch/triton) or host wall time (reference)
    build_us: float | None
    mask_us: float | None
    walk_us: float | None
    round_us: float | None
    round_eager_us: float | None  # the round launched eagerly (torch/triton)
    round_graph8_us: float | None  # a graph of 8 rounds, per round (torch/triton): no per-replay launch cost
    logits_mb: float  # draft logits read by the round
    floor_us: float | None  # reading the draft logits once at the measured copy bandwidth
    over_floor: float | None  # round_us / floor_us
    graph_captured: bool | None  # every stage captured in a CUDA graph
    sync_free: bool | None  # an eager round passed set_sync_debug_mode("error")
    mean_nodes: float | None  # mean tree size (sanity: the same for every impl)
    mean_depth: float | None  # mean depth of the trees' deepest nodes (how chain-like the drafts are)
    settled: float | None  # triton: the share of the top-K's rows its tiles' candidates settled (None: not used)
    logit_scale: float  # the draft logits' scale (randn x scale)
    note: str  # skips and errors


def full_config(device: str, seed: int) -> BenchConfig:
    return BenchConfig(
        batches=(1, 8, 32, 64),
        budgets=(16, 64, 256, 1024),
        vocabs=(32000, 152064),
        impls=("reference", "torch", "triton"),
        length=16,
        device=device,
        min_seconds=0.1,
        seed=seed,
    )


def smoke_config(device: str, seed: int) -> BenchConfig:
    return BenchConfig(
        batches=(1, 2),
        budgets=(5,),
        vocabs=(64,),
        impls=("reference", "torch", "triton"),
        length=4,
        device=device,
        min_seconds=0.0,
        seed=seed,
    )


def copy_bandwidth(device: str) -> float | None:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    if not device.startswith("cuda"):
        return None
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = graph_seconds(lambda: dst.copy_(src), min_seconds=0.2)
    return 2 * src.numel() / seconds


def capture_graph(fn: Callable[[], object]) -> torch.cuda.CUDAGraph:
    """A CUDA graph of fn, captured after two eager warm-ups on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def graph_seconds(fn: Callable[[], object], min_seconds: float) -> float:
    """Mean seconds per replay of a CUDA graph of fn (capture_graph)."""
    graph = capture_graph(fn)
    try:
        return _timed_replays(graph.replay, min_seconds)
    finally:
        del graph


def parse_launches(text: str, keys: Sequence[str], flags: Sequence[str] = ()) -> list[dict]:
    """Launches from "key=value,key=value;...", one per ';' part: keys from `keys`, values ints (0 / 1 for the
    keys in `flags`, which become bools)."""
    found = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        launch = {}
        for item in part.split(","):
            key, _, value = (s.strip() for s in item.partition("="))
            if key not in keys or not value.isdigit() or (key in flags and value not in ("0", "1")):
                raise typer.BadParameter(f"a launch is key=value pairs with keys from {', '.join(keys)} and int "
                                         f"values (0 or 1 for {', '.join(flags) or 'none'}), got {item!r} in {part!r}")
            launch[key] = bool(int(value)) if key in flags else int(value)
        found.append(launch)
    return found


def launch_label(launch: dict) -> str:
    """A launch's overrides as "key=value,...", or "default" for none (the tuners' phases.csv)."""
    return ",".join(f"{key}={value}" for key, value in launch.items()) or "default"


def tune_row(row: dict, call: Callable[[], object], check: Callable[[object], dict], columns: Sequence[str]) -> dict:
    """One launch of a tuning sweep: row gets check(call())'s fields (e.g. equal), then us, the mean of
    CUDA-graph replays of call (host clock on a CPU), and note; a launch that fails costs its row only
    (us and equal empty, note the error). Prints the row's non-empty columns."""
    try:
        row.update(check(call()))
        cuda = torch.cuda.is_available()
        seconds = graph_seconds(call, 0.05) if cuda else eager_seconds(call, 0.0, False)
        row.update(us=round(seconds * 1e6, 1), note="")
    except Exception as error:  # noqa: BLE001 - a launch that fails costs its row only
        row.update(us="", equal="", note=f"{type(error).__name__}: {str(error)[:80]}")
    print(", ".join(f"{key}={row[key]}" for key in columns if row.get(key, "") != ""), flush=True)
    return row


def eager_seconds(fn: Callable[[], object], min_seconds: float, events: bool) -> float:
    """Mean seconds per eager call: CUDA events, or the host clock (fn must finish its own work)."""
    fn()
    if events:
        return _timed_replays(fn, min_seconds)
    start = time.perf_counter()
    calls = 0
    while calls < 1 or time.perf_counter() - start < min_seconds:
        fn()
        calls += 1
    return (time.perf_counter() - start) / calls


def _timed_replays(fn: Callable[[], object], min_seconds: float) -> float:
    """Event-timed mean over enough calls to last min_seconds (at least 3)."""
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    fn()
    end.record()
    end.synchronize()
    calls = max(3, min(1000, math.ceil(min_seconds / max(begin.elapsed_time(end) / 1e3, 1e-6))))
    begin.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1e3 / calls


def round_stages(
    logits: torch.Tensor, budget: int, impl: str, target_seed: int
) -> tuple[dict[str, Callable[[], object]], torch.Tensor]:
    """The stage closures of one impl on fixed inputs (the round runs all four in order), and the
    sizes [B] and node depths [B, N+1] of its trees."""
    from ddtree_core.tree import build_tree_from_topk, draft_topk
    from ddtree_core.verify import follow_tree

    k = max(1, min(budget, logits.shape[-1]))
    topk = draft_topk(logits, k, impl=impl)
    tree = build_tree_from_topk(topk, budget, max_budget=budget, impl=impl)
    target = deep_walk_target(tree, target_seed)
    roots = torch.arange(logits.shape[0], device=logits.device, dtype=torch.int64) * 7 + 100
    mask_fn = mask_stage(impl)

    def whole_round() -> object:
        new_tree = build_tree_from_topk(draft_topk(logits, k, impl=impl), budget, max_budget=budget, impl=impl)
        mask_fn(new_tree, roots)
        return follow_tree(new_tree, target, impl=impl)

    return (
        {
            "topk": lambda: draft_topk(logits, k, impl=impl),
            "build": lambda: build_tree_from_topk(topk, budget, max_budget=budget, impl=impl),
            "mask": lambda: mask_fn(tree, roots),
            "walk": lambda: follow_tree(tree, target, impl=impl),
            "round": whole_round,
        },
        tree.num_nodes,
        tree.depths,
    )


def mask_stage(impl: str) -> Callable[[object, torch.Tensor], object]:
    """Ancestor mask + positions: the fused kernel for triton, mask.py + encoding.py otherwise."""
    if impl == "triton":
        from ddtree_core.kernels import tree_mask

        return tree_mask.tree_mask
    from ddtree_core import encoding, mask

    return lambda tree, roots: (mask.ancestor_mask(tree, impl=impl), encoding.positions(tree, roots))


def deep_walk_target(tree, seed: int) -> torch.Tensor:
    """Target tokens that follow each node's first child, so the walk goes as deep as the tree."""
    generator = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 1 << 20, tree.parents.shape, generator=generator).to(tree.parents.device)
    parents, tokens = tree.parents, tree.node_token_ids()
    first_child = tree.ranks == 0
    rows = torch.arange(parents.shape[0], device=parents.device).unsqueeze(1).expand_as(parents)
    keep = first_child & (parents >= 0)
    target[rows[keep], parents[keep]] = tokens[keep]
    return target


def reference_estimate_seconds(batch: int, budget: int, vocab: int, length: int) -> float:
    """Rough host cost of one reference round: the top-K argsort, the heap and the host mask loops."""
    return batch * length * vocab * 8e-8 + batch * budget * 3e-5 + batch * (budget + 1) * 6 * 6e-6


def draft_logits(batch: int, length: int, vocab: int, scale: float, seed: int, device: str) -> torch.Tensor:
    """A cell's bf16 draft logits [batch, length, vocab]: randn x scale from a generator on `device` seeded by
    (seed, batch, vocab), so that every tool (build_tune too) times the same tensors."""
    generator = torch.Generator(device=device).manual_seed(seed + batch * 7919 + vocab)
    return (torch.randn((batch, length, vocab), generator=generator, device=device) * scale).bfloat16()


def run_cell(
    config: BenchConfig, batch: int, budget: int, vocab: int, impl: str, bandwidth: float | None
) -> CellResult:
    """Time one (batch, budget, vocab, impl); any failure becomes the cell's note."""
    logits_bytes = batch * config.length * vocab * 2
    floor = logits_bytes / bandwidth * 1e6 if bandwidth else None
    base = dict(batch=batch, budget=budget, vocab=vocab, impl=impl, logits_mb=logits_bytes / 1e6, floor_us=floor,
                logit_scale=config.logit_scale)  # fmt: skip
    if impl == "reference":
        estimate = reference_estimate_seconds(batch, budget, vocab, config.length)
        if estimate > REFERENCE_SECONDS_LIMIT:
            return _empty_result(base, f"skipped: reference estimated {estimate:.0f} s per round")
    try:
        return _measure(config, batch, budget, vocab, impl, base)
    except Exception as error:  # noqa: BLE001 - the benchmark records every failure and moves on
        if config.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        return _empty_result(base, f"error: {type(error).__name__}: {str(error).splitlines()[0][:200]}")


def _measure(config: BenchConfig, batch: int, budget: int, vocab: int, impl: str, base: dict) -> CellResult:
    logits = draft_logits(batch, config.length, vocab, config.logit_scale, config.seed, config.device)
    stages, num_nodes, depths = round_stages(logits, budget, impl, config.seed)
    mean_nodes = float(num_nodes.float().mean())
    use_graphs = config.device.startswith("cuda") and impl != "reference"
    timings: dict[str, float | None] = {}
    graph_ok = True if use_graphs else None
    notes = []
    for name in STAGES:
        try:
            seconds = graph_seconds(stages[name], config.min_seconds) if use_graphs else None
        except Exception as error:  # noqa: BLE001 - a capture failure is a finding, not a crash
            graph_ok, seconds = False, None
            notes.append(f"{name} graph: {type(error).__name__}: {str(error).splitlines()[0][:120]}")
            torch.cuda.synchronize()
        if seconds is None:
            seconds = eager_seconds(_finished(stages[name], config.device), config.min_seconds, events=False)
        timings[name] = seconds * 1e6
    eager = eager_seconds(stages["round"], config.min_seconds, events=True) * 1e6 if use_graphs else None
    graph8 = None
    if use_graphs and graph_ok:
        graph8 = graph_seconds(lambda: [stages["round"]() for _ in range(8)], config.min_seconds) / 8 * 1e6
    sync_free = _sync_free(stages["round"]) if use_graphs else None
    round_us = timings["round"]
    floor = base["floor_us"]
    return CellResult(
        **base,
        **{f"{name}_us": timings[name] for name in STAGES},
        round_eager_us=eager,
        round_graph8_us=graph8,
        over_floor=round_us / floor if floor else None,
        graph_captured=graph_ok,
        sync_free=sync_free,
        mean_nodes=mean_nodes,
        mean_depth=float(depths.max(dim=1).values.float().mean()),
        settled=settled_share(logits, max(1, min(budget, vocab))) if impl == "triton" else None,
        note="; ".join(notes),
    )


def settled_share(logits: torch.Tensor, k: int, **launch) -> float | None:
    """The share of rows whose top-K a Triton radix launch (the default without `launch`) took from its tiles'
    candidates; None where it does not try them (emit 0, or the default's `topk_radix.default_emit`)."""
    from ddtree_core.kernels import topk_radix

    emit = launch.pop("emit", None)
    if emit is None:
        emit = topk_radix.default_emit(logits, k)
    if not emit:
        return None
    settled = torch.zeros(logits.numel() // logits.shape[-1], dtype=torch.int32, device=logits.device)
    topk_radix.draft_topk(logits, k, 1.0, emit=emit, settled=settled, **launch)
    return round(settled.float().mean().item(), 4)


def kernel_times(fn: Callable[[], object], calls: int = 20) -> dict[str, tuple[float, float]]:
    """{kernel name: (launches per call, device microseconds per call)} of `calls` eager calls of fn on
    CUDA, as torch.profiler's CUDA activity records them: the kernels' own time, without launch gaps."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = {}
    for event in prof.key_averages():
        device_us = getattr(event, "self_device_time_total", 0) or 0
        if device_us > 0:
            times[event.key] = (event.count / calls, device_us / calls)
    return times


def profile_rows(config: BenchConfig, batch: int, budget: int, vocab: int, impl: str) -> list[dict]:
    """kernels.csv rows of one cell: every kernel of its eager round (kernel_times), on the cell's inputs."""
    logits = draft_logits(batch, config.length, vocab, config.logit_scale, config.seed, config.device)
    stages, _, _ = round_stages(logits, budget, impl, config.seed)
    cell = {"batch": batch, "budget": budget, "vocab": vocab, "impl": impl}
    times = kernel_times(stages["round"])
    rows = [cell | {"kernel": name, "launches": count, "us": round(us, 2)} for name, (count, us) in times.items()]
    return rows + [cell | {"kernel": "all", "launches": sum(c for c, _ in times.values()),
                           "us": round(sum(us for _, us in times.values()), 2)}]  # fmt: skip


def _finished(fn: Callable[[], object], device: str) -> Callable[[], object]:
    """fn followed by a device sync, for host-clock timing."""
    if not device.startswith("cuda"):
        return fn
    return lambda: (fn(), torch.cuda.synchronize())


def _sync_free(fn: Callable[[], object]) -> bool:
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
        return True
    except RuntimeError:
        return False
    finally:
        torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()


def _empty_result(base: dict, note: str) -> CellResult:
    empty = {f.name: None for f in dataclasses.fields(CellResult) if f.name not in base}
    return CellResult(**{**empty, **base, "note": note})


def run(config: BenchConfig, out: Path, echo: Callable[[str], None] = print) -> list[CellResult]:
    """Every cell of the config; writes cells.csv and run.json to out after each cell."""
    out.mkdir(parents=True, exist_ok=True)
    bandwidth = copy_bandwidth(config.device)
    stamp = env.environment_stamp()
    if bandwidth:
        echo(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s (read + write)")
    results: list[CellResult] = []
    kernels: list[dict] = []
    for vocab in config.vocabs:
        for batch in config.batches:
            for budget in config.budgets:
                for impl in config.impls:
                    result = run_cell(config, batch, budget, vocab, impl, bandwidth)
                    results.append(result)
                    echo(_one_line(result))
                    write_results(out, config, bandwidth, stamp, results)
                    if config.profile and config.device.startswith("cuda") and impl != "reference":
                        kernels += _profiled(config, batch, budget, vocab, impl, echo)
                        write_dict_csv(out / "kernels.csv", kernels, KERNEL_COLUMNS)
    return results


KERNEL_COLUMNS = ("batch", "budget", "vocab", "impl", "kernel", "launches", "us")


def _profiled(config: BenchConfig, batch: int, budget: int, vocab: int, impl: str, echo) -> list[dict]:
    try:
        rows = profile_rows(config, batch, budget, vocab, impl)
    except Exception as error:  # noqa: BLE001 - a profiler failure costs the cell's kernel rows only
        echo(f"  kernels: {type(error).__name__}: {str(error).splitlines()[0][:160]}")
        return []
    echo("  kernels: " + ", ".join(f"{r['kernel'][:40]} {r['us']:.1f} us x{r['launches']:g}" for r in rows))
    return rows


def write_dict_csv(path: Path, rows: list[dict], columns: Sequence[str]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)


def write_cells_csv(path: Path, results: list, cls: type) -> list[dict]:
    """cells.csv of dataclass results (columns: cls's fields); returns the rows as dicts."""
    rows = [dataclasses.asdict(r) for r in results]
    write_dict_csv(path, rows, [f.name for f in dataclasses.fields(cls)])
    return rows


def write_results(
    out: Path, config: BenchConfig, bandwidth: float | None, stamp: dict, results: list[CellResult]
) -> None:
    rows = write_cells_csv(out / "cells.csv", results, CellResult)
    record = {
        "config": dataclasses.asdict(config),
        "copy_bandwidth_bytes_per_s": bandwidth,
        "gpu": torch.cuda.get_device_name() if config.device.startswith("cuda") else None,
        "environment": stamp,
        "cells": rows,
    }
    (out / "run.json").write_text(json.dumps(record, indent=1))


def _one_line(r: CellResult) -> str:
    fmt = lambda v: "-" if v is None else f"{v:.1f}"
    return (
        f"B={r.batch} N={r.budget} V={r.vocab} {r.impl}: round {fmt(r.round_us)} us (in a graph of 8: "
        f"{fmt(r.round_graph8_us)}) (nodes {fmt(r.mean_nodes)}, depth {fmt(r.mean_depth)}) "
        f"(topk {fmt(r.topk_us)}, build {fmt(r.build_us)}, mask {fmt(r.mask_us)}, walk {fmt(r.walk_us)}) {r.note}"
    )


def print_table(results: list[CellResult]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="DDTree draft-side round (us per call)")
    for column in ("batch", "budget", "vocab", "impl", "topk", "build", "mask", "walk", "round", "eager", "in graph",
                   "floor", "x floor", "graph", "no sync", "note"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("impl", "note") else "right")
    fmt = lambda v, digits=1: "-" if v is None else (str(v) if isinstance(v, bool) else f"{v:.{digits}f}")
    for r in results:
        table.add_row(
            str(r.batch), str(r.budget), str(r.vocab), r.impl, fmt(r.topk_us), fmt(r.build_us), fmt(r.mask_us),
            fmt(r.walk_us), fmt(r.round_us), fmt(r.round_eager_us), fmt(r.round_graph8_us), fmt(r.floor_us),
            fmt(r.over_floor),
            fmt(r.graph_captured), fmt(r.sync_free), r.note[:60],
        )  # fmt: skip
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def parse_ints(text: str | None) -> tuple[int, ...] | None:
    """A comma list of ints, or None for an option left out."""
    return tuple(int(x) for x in text.split(",")) if text else None


def main(
    out: Annotated[Path, typer.Option(help="Folder for cells.csv and run.json.")],
    smoke: Annotated[bool, typer.Option(help="Tiny sizes (runs on a CPU under the Triton interpreter).")] = False,
    batches: Annotated[str | None, typer.Option(help="Comma list (default 1,8,32,64).")] = None,
    budgets: Annotated[str | None, typer.Option(help="Comma list (default 16,64,256,1024).")] = None,
    vocabs: Annotated[str | None, typer.Option(help="Comma list (default 32000,152064).")] = None,
    impls: Annotated[str | None, typer.Option(help="Comma list (default reference,torch,triton).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the draft logits.")] = 0,
    logit_scale: Annotated[
        float, typer.Option(help="Draft logits = randn x this (bf16): 4 gives bushy trees, 12 chain-like ones.")
    ] = 4.0,
    profile: Annotated[
        bool,
        typer.Option(help="Also each kernel's device time in an eager round (torch.profiler; CUDA): kernels.csv."),
    ] = False,
) -> None:
    """Time the draft-side DDTree round per impl and write the results to --out."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported
    _configure_pdl()
    config = smoke_config(device, seed) if smoke else full_config(device, seed)
    config = dataclasses.replace(
        config,
        batches=parse_ints(batches) or config.batches,
        budgets=parse_ints(budgets) or config.budgets,
        vocabs=parse_ints(vocabs) or config.vocabs,
        impls=tuple(impls.split(",")) if impls else config.impls,
        logit_scale=logit_scale,
        profile=profile,
    )
    if not logit_scale > 0:
        raise typer.BadParameter(f"--logit-scale must be > 0, got {logit_scale}")
    results = run(config, out)
    print_table(results)


def _configure_pdl() -> None:
    """DDTREE_PDL=0 turns programmatic dependent launch off (the kernels read no environment themselves)."""
    from ddtree_core.kernels import pdl  # after TRITON_INTERPRET is settled: importing Triton reads it

    pdl.configure(pdl.from_environ(os.environ))


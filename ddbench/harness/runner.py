"""Run a sweep: plan servers over GPUs or CPU workers, run every unfinished cell, write the results.

The grid runs pass by pass: pass r is every cell of repeat r (one pass unless --repeats). A pass's cells
are grouped by the server they need (engine method, plus the DDTree setting when the engine cannot take
it per request or --restart-per-budget asks for it); groups are split until every slot (a GPU group of
--tp GPUs, or a CPU worker) has work, and the slots run the jobs in parallel threads, each starting one
server at a time. Jobs are queued pass after pass and a free slot takes the next one in that order: no
job of pass r + 1 starts before every job of pass r has started, but a slot done early starts on pass
r + 1 while the others finish pass r (slots are separate GPUs or CPU shares; a barrier would only idle
them). Each pass starts its own servers, so the repeats of a method are spread over the sitting,
interleaved with the other methods, rather than measured back to back on one server. Example: on one
worker, --repeats 2 starts the AR, DFLASH and DDTree servers of pass 1, then those of pass 2.

A cell runs its prompts with `concurrency` requests in flight; multi-turn prompts send their turns one
after the other, each turn carrying the model's own earlier answers. A finished cell is stored at once;
a failed one leaves `<cell>.failure.json` and costs only itself (a server that died is restarted for the
job's next cell; one that would not start fails its job's remaining cells). A rerun skips finished cells
and retries the rest, repeats included.

With `url` (ddbench.harness.fleet) the cells run against servers that are already running: ddbench starts, stops
and restarts none. A pass's cells are grouped by their pool (the servers that can serve them) and run one
job after the other on one slot, each cell's requests shared round robin by its pool: servers ddbench did
not place may share hardware, so no two cells run at once. Before each cell every server of its pool must
answer GET /health; a server that stopped answering costs the cells it would serve (`server died: ...`),
and a rerun, against the same URLs or others, retries them. Ctrl-C lets the cell in flight finish, since
its requests are on servers ddbench cannot stop.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import httpx

from ddbench import env
from ddbench.config import AUTO_BUDGET, RUN_DEFINING, Cell, DDBenchError, SweepConfig, dataset_label, expand_cells
from ddbench.harness.client import Inputs, run_cell
from ddbench.harness.fleet import Fleet, Pool
from ddbench.harness.results import RunFolder, merge_requests, write_json
from ddbench.harness.server import Server, ServerError, ServerSpec, last_log_line
from ddtree_core.settings import TreeSettings


class SweepProgress(Protocol):
    """What the runner reports while it works (the CLI draws Rich progress bars from it)."""

    def cells_planned(self, num_cells: int) -> None: ...

    def cell_started(self, cell: Cell, num_requests: int) -> None: ...

    def request_done(self, cell: Cell) -> None: ...

    def cell_finished(self, cell: Cell, error: str | None) -> None: ...


class _Silent:
    def cells_planned(self, num_cells: int) -> None:
        pass

    def cell_started(self, cell: Cell, num_requests: int) -> None:
        pass

    def request_done(self, cell: Cell) -> None:
        pass

    def cell_finished(self, cell: Cell, error: str | None) -> None:
        pass


@dataclass(frozen=True)
class Slot:
    """Where one server runs at a time: a group of GPUs, or a share of the CPU."""

    index: int
    gpus: tuple[int, ...]
    cpu_threads: int | None


@dataclass(frozen=True)
class Job:
    """Cells that one server (started once, restarted only if it dies), or one pool of running servers,
    measures in order."""

    spec: ServerSpec | Pool  # a ServerSpec's gpus and threads are filled in by the slot that runs it
    cells: tuple[Cell, ...]  # of one repeat

    @property
    def repeat(self) -> int:
        """The pass the job belongs to: its cells' repeat."""
        return self.cells[0].repeat


@dataclass(frozen=True)
class SweepOutcome:
    done: int  # cells finished in this run
    skipped: int  # cells an earlier run had finished
    failed: tuple[str, ...]  # "cell_id: error" of the cells that failed in this run, in grid order


@dataclass(frozen=True)
class SweepPlan:
    jobs: tuple[Job, ...]  # the servers a run would start (or pools it would use) and the unfinished cells of each
    skipped: int  # cells an earlier run had finished
    slots: int  # servers that run side by side
    fleet: Fleet | None = None  # the running servers of a sweep with url


def plan_sweep(config: SweepConfig, fleet: Fleet | None = None) -> SweepPlan:
    """What `run_sweep` would start, writing nothing (a folder holding other settings is refused the same way,
    as are running servers that cannot serve the cells). `fleet`: config.url's servers, if probed already."""
    folder = RunFolder(Path(config.out).expanduser())
    previous_manifest(folder, config)
    cells = expand_cells(config)
    pending = [cell for cell in cells if not folder.is_done(cell)]
    fleet = running_fleet(config, fleet)
    slots = len(plan_slots(config))
    jobs = plan_jobs(config, pending, slots, fleet) if pending else []
    return SweepPlan(tuple(jobs), len(cells) - len(pending), slots, fleet)


def run_sweep(config: SweepConfig, progress: SweepProgress | None = None, fleet: Fleet | None = None) -> SweepOutcome:
    """Run every unfinished cell of `config`'s grid into `config.out`, then rewrite the merged files.

    Everything that can be checked (settings against the folder, running servers against the cells,
    datasets, tokenizer) is checked before anything is written. `fleet`: config.url's servers, if probed already.
    """
    progress = progress or _Silent()
    folder = RunFolder(Path(config.out).expanduser())
    previous = previous_manifest(folder, config)
    cells = expand_cells(config)
    pending = [cell for cell in cells if not folder.is_done(cell)]
    fleet = running_fleet(config, fleet)
    jobs = plan_jobs(config, pending, len(plan_slots(config)), fleet)
    inputs = Inputs(config) if pending else None
    servers = fleet.to_manifest() if fleet else None
    all_cells = write_manifest(folder, config, cells, previous, inputs.held_out if inputs else {}, servers)
    failures: list[str] = []
    try:
        if pending:
            progress.cells_planned(len(pending))
            failures = run_jobs(config, folder, jobs, inputs, progress)
    finally:  # an interrupted sweep still leaves merged files of the cells it finished
        from ddbench.harness.report import write_summary

        results = [folder.read_cell(cell) for cell in all_cells]
        merge_requests(folder, results)
        write_summary(folder, results)
    # Parallel slots fail in any order; report in grid order, so "the first failure" means the same every run.
    order = {cell.cell_id: position for position, cell in enumerate(cells)}
    failures.sort(key=lambda failure: order.get(failure.split(": ", 1)[0], len(order)))
    return SweepOutcome(done=len(pending) - len(failures), skipped=len(cells) - len(pending), failed=tuple(failures))


def running_fleet(config: SweepConfig, fleet: Fleet | None) -> Fleet | None:
    """config.url's servers (`fleet`, else probed now), checked against the config; None without url."""
    if not config.url:
        return None
    fleet = fleet or Fleet.connect(config.url, config.api_key)
    fleet.check(config)
    return fleet


def previous_manifest(folder: RunFolder, config: SweepConfig) -> dict[str, Any] | None:
    """The folder's manifest, if any; DDBenchError if it holds a sweep with other run-defining settings."""
    if not folder.manifest.exists():
        return None
    previous = folder.read_manifest()
    for name in RUN_DEFINING:
        old, new = previous["config"].get(name), config.to_dict()[name]
        if old != new:
            raise DDBenchError(f"{folder.root} holds a sweep with {name}={old!r}, not {new!r}; use another --out")
    return previous


def write_manifest(
    folder: RunFolder,
    config: SweepConfig,
    cells: Sequence[Cell],
    previous: dict[str, Any] | None,
    held_out: dict[str, bool],
    servers: list[dict[str, Any]] | None = None,
) -> list[Cell]:
    """Create or extend manifest.json; returns every cell the folder reports on (earlier runs' first).

    `held_out` (client.held_out_datasets of this run's prompts) updates the manifest's "held_out" map, dataset
    label -> whether all its prompts were held out from drafter training, e.g. {"gsm8k": true}. `servers`
    (Fleet.to_manifest: URL, method, engine, version, model, draft, widths and reported settings of each
    running server) is stored as this run's "servers", and the manifest's while it is the latest run.
    """
    stamp = env.environment_stamp()
    known = [Cell.from_dict(data) for data in previous["cells"]] if previous else []
    seen = set(known)
    all_cells = known + [cell for cell in cells if cell not in seen]
    run = {"environment": stamp, "config": config.to_dict()} | ({"servers": servers} if servers else {})
    manifest = {
        "name": config.name,
        "config": config.to_dict(),
        "datasets": {**(previous or {}).get("datasets", {}), **{dataset_label(s): s for s in config.datasets}},
        "held_out": {**(previous or {}).get("held_out", {}), **held_out},
        "environment": stamp,
        "cells": [cell.to_dict() for cell in all_cells],
        "runs": (previous or {}).get("runs", []) + [run],
    } | ({"servers": servers} if servers else {})
    write_json(folder.manifest, manifest)
    return all_cells


def plan_slots(config: SweepConfig) -> list[Slot]:
    """One slot per group of `tp` GPUs, or `workers` CPU slots sharing the cores; one slot for running servers."""
    if config.url:
        return [Slot(0, (), None)]
    if config.gpus:
        groups = [config.gpus[i : i + config.tp] for i in range(0, len(config.gpus), config.tp)]
        return [Slot(index, tuple(group), None) for index, group in enumerate(groups)]
    threads = max(1, (os.cpu_count() or 1) // config.workers)
    return [Slot(index, (), threads) for index in range(config.workers)]


def server_spec(config: SweepConfig, cell: Cell) -> ServerSpec:
    """The server a cell needs (without devices); cells with equal specs can share one server.

    A DDTree server is started with the cell's setting (--restart-per-budget), or shared by every DDTree cell
    at the sweep's largest budget where the engine needs one (SGLang) or an `auto` cell chooses under it
    (`SweepConfig.largest_budget`); else the engine's defaults (the reference server's --budget 64). On SGLang
    an `auto` cell has a server of its own (SGLANG_DDTREE_BUDGET=auto: the plugin's budgets, priced by
    SGLANG_DDTREE_COST_TABLE where the sweep's environment sets it, else by a table it measures at startup)."""
    launch = None
    if cell.method == "ddtree" and config.engine == "sglang" and cell.budget == AUTO_BUDGET:
        launch = TreeSettings(config.largest_budget, None, auto=True)
    elif cell.method == "ddtree" and config.restart_per_budget:
        tree = cell.tree_settings()  # held trees are asked for per request, as on a shared server
        budget = config.largest_budget if tree.auto else tree.budget
        launch = TreeSettings(budget, tree.max_depth, tree.draft_temperature)
    elif cell.method == "ddtree" and (config.engine == "sglang" or AUTO_BUDGET in config.budgets):
        launch = TreeSettings(config.largest_budget, None)  # widest tree; requests narrow it
    return ServerSpec(
        engine=config.engine,
        method=cell.method,
        model=config.model,
        draft=config.draft,
        tp=config.tp,
        launch=launch,
        extra_args=config.server_args,
    )


def plan_jobs(config: SweepConfig, cells: Sequence[Cell], num_slots: int, fleet: Fleet | None = None) -> list[Job]:
    """The jobs in start order, pass by pass: repeat 1's, then repeat 2's, ... (see `_plan_pass`); with a fleet
    of running servers, jobs of pools (Fleet.pools: DDBenchError if a cell has none)."""
    servers = fleet.pools(cells) if fleet else {cell: server_spec(config, cell) for cell in cells}
    jobs = []
    for repeat in sorted({cell.repeat for cell in cells}):
        jobs += _plan_pass([cell for cell in cells if cell.repeat == repeat], servers, num_slots)
    return jobs


def _plan_pass(cells: Sequence[Cell], servers: dict[Cell, ServerSpec | Pool], num_slots: int) -> list[Job]:
    """Group cells by server, then halve the largest job until every slot has one (or no job splits)."""
    groups: dict[ServerSpec | Pool, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(servers[cell], []).append(cell)
    jobs = [Job(spec, tuple(group)) for spec, group in groups.items()]
    while len(jobs) < num_slots:
        largest = max(jobs, key=lambda job: len(job.cells))
        if len(largest.cells) < 2:
            break
        jobs.remove(largest)
        half = len(largest.cells) // 2
        jobs += [Job(largest.spec, largest.cells[:half]), Job(largest.spec, largest.cells[half:])]
    return sorted(jobs, key=lambda job: -len(job.cells))


class _Running:
    """The servers alive now, so that an interrupt (Ctrl-C) can stop them all and the slots can quit."""

    def __init__(self):
        self.stopping = threading.Event()
        self._servers: set[Server] = set()
        self._lock = threading.Lock()

    def add(self, server: Server) -> None:
        with self._lock:
            self._servers.add(server)

    def remove(self, server: Server) -> None:
        with self._lock:
            self._servers.discard(server)

    def interrupt(self) -> None:
        self.stopping.set()
        with self._lock:
            servers = list(self._servers)
        for server in servers:
            server.stop()


def run_jobs(
    config: SweepConfig, folder: RunFolder, jobs: Sequence[Job], inputs: Inputs, progress: SweepProgress
) -> list[str]:
    """Run the jobs on every slot in parallel; returns 'cell_id: error' per failed cell.

    On Ctrl-C every server is stopped, cells in flight stay unfinished (a rerun runs them), and the
    KeyboardInterrupt propagates.
    """
    work: queue.Queue[Job] = queue.Queue()
    for job in jobs:
        work.put(job)
    failures: list[str] = []
    running = _Running()

    def drain(slot: Slot) -> None:
        while not running.stopping.is_set():
            try:
                job = work.get_nowait()
            except queue.Empty:
                return
            try:
                failures.extend(run_job(config, folder, job, slot, inputs, progress, running))
            except Exception as error:  # a bug must not leave the job's cells silently unaccounted for
                lost = [cell for cell in job.cells if not folder.is_done(cell)]
                failures.extend(_fail(folder, cell, f"internal error: {error!r}", None, progress) for cell in lost)

    threads = [threading.Thread(target=drain, args=(slot,), name=f"slot{slot.index}") for slot in plan_slots(config)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.5)
    except KeyboardInterrupt:
        running.interrupt()
        for thread in threads:
            thread.join()
        raise
    return failures


def run_job(
    config: SweepConfig,
    folder: RunFolder,
    job: Job,
    slot: Slot,
    inputs: Inputs,
    progress: SweepProgress,
    running: _Running,
) -> list[str]:
    """One job's cells on one slot's server, or on a pool of running servers; 'cell_id: error' per failed cell."""
    if isinstance(job.spec, Pool):
        return run_pool_job(config, folder, job.spec, job.cells, inputs, progress, running)
    spec = replace(job.spec, gpus=slot.gpus, cpu_threads=slot.cpu_threads)
    failures: list[str] = []
    server: Server | None = None
    try:
        for position, cell in enumerate(job.cells):
            if server is None or not server.alive():
                if server is not None:
                    server.stop()
                    running.remove(server)
                label = spec.label + (f"-r{job.repeat}" if job.repeat > 1 else "")
                log = folder.logs / f"slot{slot.index}-{label}-{time.strftime('%Y%m%d-%H%M%S')}-{position}.log"
                server = Server(spec, log, startup_timeout_s=config.startup_timeout_s)
                running.add(server)
                try:
                    server.start()
                    target = _started_target(server, server.block_size())
                except ServerError as error:
                    server.stop()
                    if running.stopping.is_set():
                        return failures
                    for lost in job.cells[position:]:
                        failures.append(_fail(folder, lost, f"server did not start: {error}", log, progress))
                    return failures
            error = _run_and_store(config, folder, cell, target, inputs, progress)
            if running.stopping.is_set():
                return failures
            if error is not None:
                failures.append(_fail(folder, cell, error, server.log_path, progress))
            else:
                progress.cell_finished(cell, None)
    finally:
        if server is not None:
            server.stop()
            running.remove(server)
    return failures


def run_pool_job(
    config: SweepConfig,
    folder: RunFolder,
    pool: Pool,
    cells: Sequence[Cell],
    inputs: Inputs,
    progress: SweepProgress,
    running: _Running,
) -> list[str]:
    """Cells on a pool of running servers, each after a health check of the pool; 'cell_id: error' per failed
    cell. A server that does not answer fails the cell without sending it."""
    target = _pool_target(pool, config.api_key)
    failures: list[str] = []
    for cell in cells:
        down = pool.down(config.api_key)
        error = f"server died: {down}" if down else _run_and_store(config, folder, cell, target, inputs, progress)
        if running.stopping.is_set():
            return failures
        if error is not None:
            failures.append(_fail(folder, cell, error, None, progress))
        else:
            progress.cell_finished(cell, None)
    return failures


def _fail(folder: RunFolder, cell: Cell, error: str, log, progress: SweepProgress) -> str:
    folder.write_failure(cell, error, None if log is None else str(log))
    progress.cell_finished(cell, error)
    return f"{cell.cell_id}: {error}"


@dataclass(frozen=True)
class Target:
    """Where a cell's requests go and what its done record says of the server(s)."""

    urls: tuple[str, ...]  # shared round robin
    record: dict[str, Any]  # cells/<id>.json "server" (CellResult.server), less the cell's start and end
    died: Callable[[Exception], str | None]  # "server died: ..." when a request failed because the server did
    explicit_block: int | None = None  # running servers: the drafter's block, every DDTree knob sent (client)


def _started_target(server: Server, block_size: int | None) -> Target:
    def died(error: Exception) -> str | None:
        if isinstance(error, httpx.TransportError) and server.exited(timeout_s=5.0) or not server.alive():
            return f"server died: {last_log_line(server.log_path)}"
        return None

    record = {"label": server.spec.label, "log": str(server.log_path), "block_size": block_size}
    if server.spec.engine == "reference":  # its few settings as it reports them (dtypes, draft vocabulary, tree)
        record["settings"] = server.info()
    return Target((server.url,), {**record, "server_started": server.started_at}, died)


def _pool_target(pool: Pool, api_key: str | None) -> Target:
    def died(error: Exception) -> str | None:
        down = pool.down(api_key) if isinstance(error, httpx.TransportError) else None
        return None if down is None else f"server died: {down}"

    record = {"label": pool.label, "urls": list(pool.urls), "block_size": pool.block_size}
    return Target(pool.urls, record, died, explicit_block=pool.block_size)


def _run_and_store(
    config: SweepConfig, folder: RunFolder, cell: Cell, target: Target, inputs: Inputs, progress: SweepProgress
) -> str | None:
    """Run one cell and store it; the error message if it failed."""
    progress.cell_started(cell, inputs.num_requests(cell.dataset))
    started = time.time()
    try:
        records, wall_s = run_cell(config, cell, target.urls, inputs, progress.request_done, target.explicit_block)
    except (httpx.HTTPError, OSError, ValueError, KeyError) as error:
        return target.died(error) or f"{type(error).__name__}: {error}"
    except Exception as error:  # a bug while measuring costs the cell, and its traceback is kept
        return f"{type(error).__name__}: {error} | {traceback.format_exc(limit=3)}"
    info = {**target.record, "started": started, "finished": time.time()}
    folder.write_cell(cell, records, wall_s, info, held_out=inputs.held_out[cell.dataset])
    return None

"""The harness's commands, at the top of `ddbench`: sweep, report, plot, compare, baseline, serve.

    ddbench sweep --budgets 16,32,64,128 --datasets gsm8k,mt-bench --gpus 0-7 --out results/qwen3-8b
    ddbench report results/qwen3-8b
    ddbench plot results/qwen3-8b
    ddbench compare --baseline zlab.json results/qwen3-8b

Errors (unknown dataset, budget 0, budget auto where the engine does not serve it, a malformed baseline,
a server that would not start) are one line on stderr and exit status 2; nothing already written is
overwritten.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ddbench import env
from ddbench.commands import console, fail, progress_display
from ddbench.config import BUILTIN_DATASETS, DDBenchError, SweepSettings, as_list, parse_urls

if TYPE_CHECKING:
    from ddbench.harness.fleet import Fleet

app = typer.Typer()  # its commands sit at the top of ddbench.cli.app

Csv = str | None


@app.command()
def sweep(
    config: Annotated[Csv, typer.Option(help="Named sweep in configs/ (or a .toml path); flags override it.")] = None,
    engine: Annotated[
        Csv, typer.Option(help="sglang | reference (default: sglang with a GPU and SGLang, else reference).")
    ] = None,
    model: Annotated[
        Csv, typer.Option(help="Target model folder or hub id (default: the testbed target; --url: the servers').")
    ] = None,
    draft: Annotated[
        Csv, typer.Option(help="DFlash drafter folder or hub id (default: the testbed drafter; --url: the servers').")
    ] = None,
    methods: Annotated[
        Csv, typer.Option(help="Methods, comma list of ar, dflash, ddtree; ar and dflash always run (default: all).")
    ] = None,
    budgets: Annotated[
        Csv,
        typer.Option(
            help="DDTree node budgets, comma list of integers >= 1 and 'auto' (default: 16,32,64,128; on a CPU "
            "4,8,16). 'auto': the server chooses each round's budget (the reference engine; SGLang not yet) under "
            "the largest integer of the list, which the DDTree server is started with (64 if auto is alone); with "
            "--url, under the budget of the widest DDTREE server."
        ),
    ] = None,
    depths: Annotated[
        Csv, typer.Option(help="DDTree depth limits, comma list; 'auto' = block size - 1 (default: auto).")
    ] = None,
    draft_temperatures: Annotated[Csv, typer.Option(help="DDTree draft temperatures, comma list (default: 1).")] = None,
    hold_chain: Annotated[
        Csv, typer.Option(help="DDTree trees holding the drafter's rank-0 chain first: 0, 1 or 0,1 (default: 0).")
    ] = None,
    temperatures: Annotated[
        Csv, typer.Option(help="Sampling temperatures, comma list; 0 = greedy (default: 0).")
    ] = None,
    concurrency: Annotated[Csv, typer.Option(help="Requests in flight per cell, comma list (default: 1).")] = None,
    datasets: Annotated[
        Csv, typer.Option(help="mt-bench, gsm8k, humaneval or .jsonl paths, comma list (default: gsm8k).")
    ] = None,
    data_dir: Annotated[
        Csv, typer.Option(help="Offline dataset mirror (default: $DDBENCH_DATA_DIR, else the hub).")
    ] = None,
    num_prompts: Annotated[
        int | None,
        typer.Option(
            help="Prompts per dataset (default: 128 gsm8k, 164 humaneval, 80 mt-bench; with the testbed drafter its "
            "held-out 128, 64, 40; reference engine 6). More than are held out warns with the testbed drafter."
        ),
    ] = None,
    max_new_tokens: Annotated[
        int | None, typer.Option(help="Generated tokens per request at most (default: 2048; reference engine 64).")
    ] = None,
    gpus: Annotated[
        Csv, typer.Option(help="GPU ids, e.g. 0-7 or 0,1 (default: all visible for sglang, none for reference).")
    ] = None,
    tp: Annotated[
        int | None, typer.Option(help="GPUs per server: 1 gives one server per GPU, 8 one 8-GPU server (default: 1).")
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(help="CPU reference-engine servers running cells in parallel, sharing the cores (default: 1)."),
    ] = None,
    out: Annotated[
        Csv, typer.Option(help="Results folder; rerunning into it resumes (default: results/<config name>).")
    ] = None,
    stream: Annotated[
        bool | None,
        typer.Option("--stream/--no-stream", help="Stream responses for TTFT and inter-token latency (SGLang)."),
    ] = None,
    restart_per_budget: Annotated[
        bool | None,
        typer.Option(
            "--restart-per-budget/--per-request-budget",
            help="One server per DDTree setting instead of per-request custom_params.",
        ),
    ] = None,
    server_arg: Annotated[
        list[str] | None,
        typer.Option(
            help="Extra server argument, repeatable (e.g. --server-arg=--attention-backend --server-arg=triton)."
        ),
    ] = None,
    top_p: Annotated[float | None, typer.Option(help="Nucleus sampling p (default: 1).")] = None,
    top_k: Annotated[int | None, typer.Option(help="Top-k sampling, -1 = off (default: -1).")] = None,
    startup_timeout: Annotated[
        float | None, typer.Option(help="Seconds a server may take to become healthy (default: 900).")
    ] = None,
    repeats: Annotated[
        int | None,
        typer.Option(
            help="Measure the whole grid N times, pass after pass, every pass on servers started anew, so each "
            "method's repeats are interleaved with the others' in one sitting; repeat r > 1 is stored as cells "
            "ending in -rR, and the report adds the median over repeats, its spread and the speedup of the "
            "medians (default: 1)."
        ),
    ] = None,
    url: Annotated[
        Csv,
        typer.Option(
            help="Measure servers that are already running instead of starting any: a comma list of SGLang-"
            "compatible base URLs, each optionally labelled with its method (ar=URL, dflash=URL, ddtree=URL; "
            "unlabelled: the method the server reports). ddbench asks each what it serves (/model_info, "
            "/server_info), sends every cell to the servers of its method (several share its requests round "
            "robin; a router is one URL; a DDTREE server serves budgets up to its own per request), and never "
            "starts, stops or reconfigures them. Engine, model and drafter default to what they report; a URL "
            "that does not answer, is mislabelled, or leaves a cell without a server exits 2 before any cell runs."
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="DDBENCH_API_KEY",
            help="Sent as Authorization: Bearer to every request (SGLang's --api-key); never written to disk.",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            help="List the servers and unfinished cells a run would start (pass by pass with --repeats), or with "
            "--url what each URL will serve, then exit; writes nothing."
        ),
    ] = False,
) -> None:
    """Measure AR, DFLASH and DDTree cells (budget x depth x draft temperature x held chain) per dataset,
    temperature, load; with --repeats, the whole grid several times, interleaved; with --url, on running servers."""
    from ddbench.harness.runner import plan_sweep, run_sweep

    flags = SweepSettings(
        engine=engine, model=model, draft=draft, methods=methods, budgets=budgets, depths=depths,
        draft_temperatures=draft_temperatures, hold_chain=hold_chain, temperatures=temperatures,
        concurrency=concurrency,
        datasets=datasets, data_dir=data_dir, num_prompts=num_prompts, max_new_tokens=max_new_tokens,
        gpus=gpus, tp=tp, workers=workers, out=out, stream=stream, restart_per_budget=restart_per_budget,
        server_args=server_arg or None, top_p=top_p, top_k=top_k, startup_timeout_s=startup_timeout,
        repeats=repeats, url=url, api_key=api_key,
    )  # fmt: skip
    try:
        settings = flags.over(SweepSettings.from_file(config)) if config else flags
        fleet = _running_servers(settings)
        if fleet is None:  # ddbench starts the servers
            _need_engine(settings.engine)
        sweep_config = _machine_defaults(settings, fleet).build()
        if dry_run:
            _print_plan(plan_sweep(sweep_config, fleet), sweep_config)
            return
        with progress_display() as progress:
            outcome = run_sweep(sweep_config, progress, fleet)
    except DDBenchError as error:
        raise fail(str(error)) from None
    except KeyboardInterrupt:
        console(stderr=True).print("interrupted: the servers ddbench started are stopped; rerun to resume")
        raise typer.Exit(code=130) from None
    _print_report(Path(sweep_config.out))
    console(stderr=True).print(
        f"{outcome.done} cells run, {outcome.skipped} already done; results in {sweep_config.out}"
    )
    if outcome.failed:
        raise fail(f"{len(outcome.failed)} cell(s) failed, rerun to retry; first: {outcome.failed[0]}")


def _running_servers(settings: SweepSettings) -> Fleet | None:
    """The running servers of `url`, probed now; None without url."""
    if not settings.url:
        return None
    from ddbench.harness.fleet import Fleet

    try:
        urls = parse_urls(settings.url)
    except ValueError as error:
        raise DDBenchError(str(error)) from None
    return Fleet.connect(urls, settings.api_key)


def _print_plan(plan, config) -> None:
    """With running servers, one line per URL: what it is and how many cells it will serve. Then one line per
    server to start or pool of running servers (in start order; with repeats under a heading per pass), then
    the totals."""
    say = console().print
    say(f"dry run: {config.out} (nothing written)", markup=False, highlight=False)
    if plan.fleet is not None:
        say(f"running servers (ddbench starts none), target {config.model}, drafter {config.draft}:", markup=False,
            highlight=False, soft_wrap=True)  # fmt: skip
        for server in plan.fleet.servers:
            count = sum(len(job.cells) for job in plan.jobs if server.url in job.spec.urls)
            say(f"  {server.url}: {server.label}; {count} cell(s)", markup=False, highlight=False, soft_wrap=True)
    heading = None
    for number, job in enumerate(plan.jobs, 1):
        if config.repeats > 1 and job.repeat != heading:
            heading = job.repeat
            say(f"pass {job.repeat} of {config.repeats}:", markup=False, highlight=False)
        cells = job.cells[0].cell_id + (f" .. {job.cells[-1].cell_id}" if len(job.cells) > 1 else "")
        say(f"{number:>3}. {job.spec.label}: {len(job.cells)} cell(s), {cells}", markup=False, highlight=False,
            soft_wrap=True)  # fmt: skip
    pending = sum(len(job.cells) for job in plan.jobs)
    where = "pool(s) of running servers, one at a time" if plan.fleet else f"server start(s), {plan.slots} side by side"
    say(f"{pending} cells to run on {len(plan.jobs)} {where}; {plan.skipped} already done", markup=False,
        highlight=False)  # fmt: skip


# What a sweep on the reference engine measures unless told otherwise (the SGLang defaults are the
# published harness's: 128 prompts, 2048 tokens).
CPU_DEFAULTS = {"datasets": "gsm8k", "num_prompts": 6, "max_new_tokens": 64, "budgets": "4,8,16", "workers": 1}


def _machine_defaults(settings: SweepSettings, fleet: Fleet | None = None) -> SweepSettings:
    """Fill what depends on the machine: the engine, its GPUs, the testbed target, the output folder; with running
    servers (`fleet`) the engine, target and drafter they report, unless given."""
    given = settings
    if fleet is not None:
        given = replace(given, engine=given.engine or fleet.engine, model=given.model or fleet.model,
                        draft=given.draft or fleet.draft)  # fmt: skip
    if given.engine is None:
        given = replace(given, engine=env.default_engine())
    if given.engine == "reference":  # sized for a CPU: a few minutes on the testbed pair
        cpu = {key: value for key, value in CPU_DEFAULTS.items() if getattr(given, key) is None}
        if fleet is not None:
            cpu.pop("workers", None)  # ddbench starts no workers for running servers
        given = replace(given, **cpu)
    if given.engine == "sglang" and not given.gpus and fleet is None:
        given = replace(given, gpus=",".join(str(gpu) for gpu in range(env.gpu_count())))
    if not given.model:  # the testbed pair
        from ddbench.testbed import target as testbed

        model = str(testbed.prepare_target(console=console(stderr=True)))
        given = replace(given, model=model, draft=given.draft or str(testbed.DRAFTER_DIR))
    elif not given.draft:
        raise DDBenchError(
            f"--model {given.model} needs --draft (its DFlash drafter): the bundled drafter serves only the "
            f"testbed target, which a sweep without --model uses"
        )
    for key in ("model", "draft"):  # a path (not a hub id like Qwen/Qwen3-8B) must name a folder
        value = getattr(given, key)
        if value.startswith(("/", ".", "~")) and not Path(value).expanduser().is_dir():
            raise DDBenchError(f"--{key} {value}: no such folder")
    if given.out is None:
        given = replace(given, out=f"results/{'sweep' if given.name is None else given.name}")
    if any(spec in BUILTIN_DATASETS for spec in as_list("gsm8k" if given.datasets is None else given.datasets)):
        from ddbench.datasets import default_data_dir

        data_dir = default_data_dir(given.data_dir)  # recorded in the manifest as resolved
        given = replace(given, data_dir=str(data_dir) if data_dir else None)
    return given

def _need_engine(engine: str | None) -> None:
    """DDBenchError, in one line naming the extra to install, when ddbench would start servers of `engine`
    and that engine's package is not importable here."""
    if engine == "sglang" and not env.sglang_available():
        raise DDBenchError("the sglang engine needs sglang: pip install 'ddtree[sglang]'")


def _print_report(folder: Path) -> None:
    from ddbench.harness.report import print_report, summarize
    from ddbench.harness.results import find_run_folder, load_cells

    print_report(summarize(load_cells(find_run_folder(folder))), console())


@app.command()
def report(
    results: Annotated[Path, typer.Argument(help="Results folder written by `ddbench sweep`.")],
    markdown: Annotated[Path | None, typer.Option(help="Also write the tables as markdown to this file.")] = None,
) -> None:
    """Print the per-dataset tables: tau, throughput, speedup vs AR, parity, latency; best budget starred."""
    from ddbench.harness.report import markdown as to_markdown
    from ddbench.harness.report import print_report, summarize
    from ddbench.harness.results import find_run_folder, load_cells, write_atomic

    try:
        rows = summarize(load_cells(find_run_folder(results)))
    except DDBenchError as error:
        raise fail(str(error)) from None
    print_report(rows, console())
    if markdown is not None:
        write_atomic(markdown, to_markdown(rows))


@app.command()
def plot(
    results: Annotated[Path, typer.Argument(help="Results folder of `ddbench sweep` (or of `ddbench model cost`).")],
    out: Annotated[Path | None, typer.Option(help="Folder for the PNG files (default: RESULTS/plots).")] = None,
) -> None:
    """Acceptance and speedup vs budget, throughput vs concurrency, latency CDFs, histograms, per-depth acceptance;
    for a `ddbench model cost` folder, verify time vs tree width per batch size."""
    from ddbench.harness.plots import plot_all, plot_cost
    from ddbench.harness.report import over_repeats, summarize
    from ddbench.harness.results import find_run_folder, load_cells

    if (results / "cells.csv").is_file() and (results / "run.json").is_file():  # a `ddbench model cost` folder
        try:
            console().print(str(plot_cost(results / "cells.csv", out or results / "plots")))
        except (ValueError, KeyError) as error:
            raise fail(f"{results}: not a readable `ddbench model cost` folder ({error})") from None
        return
    try:
        folder = find_run_folder(results)
        cells = load_cells(folder)
    except DDBenchError as error:
        raise fail(str(error)) from None
    for path in plot_all(over_repeats(summarize(cells)), cells, out or folder.root / "plots"):
        console().print(str(path))


@app.command()
def compare(
    results: Annotated[Path, typer.Argument(help="Results folder written by `ddbench sweep`.")],
    baseline: Annotated[
        Path, typer.Option(help="ddbench results, zlab.json, a liranringel/ddtree .pt, or z-lab printout.")
    ],
    accept_tol: Annotated[float, typer.Option(help="Allowed relative drop of the acceptance length.")] = 0.02,
    hist_tol: Annotated[float, typer.Option(help="Allowed total-variation distance of the tau histograms.")] = 0.05,
    depth_tol: Annotated[float, typer.Option(help="Allowed absolute per-depth acceptance difference.")] = 0.05,
    speedup_tol: Annotated[float, typer.Option(help="Allowed relative drop of the speedup vs AR.")] = 0.10,
    parity_tol: Annotated[float, typer.Option(help="Allowed absolute drop of parity with AR.")] = 0.05,
    min_match: Annotated[
        float | None, typer.Option(help="Least share of outputs equal to the baseline's (default: not checked).")
    ] = None,
    equal_accept_tol: Annotated[
        float | None,
        typer.Option(help="Allowed relative drop of tau over the identical outputs (default: not checked)."),
    ] = None,
    strict: Annotated[
        bool, typer.Option(help="Also fail when tau or speedup exceed the baseline by more than the tolerance.")
    ] = False,
    speed: Annotated[
        bool, typer.Option("--speed/--no-speed", help="Check speedups (off for runs on other machines).")
    ] = True,
    dataset: Annotated[str | None, typer.Option(help="Dataset of a z-lab printout that names none.")] = None,
    temperature: Annotated[float, typer.Option(help="Temperature of a z-lab printout.")] = 0.0,
    markdown: Annotated[Path | None, typer.Option(help="Also write the comparison as markdown to this file.")] = None,
) -> None:
    """Match cells with a baseline and show deltas; exit 0 within tolerance, 1 on a regression, 2 on bad input."""
    from ddbench.harness.compare import Tolerances, comparison_markdown, comparison_table, load_baseline
    from ddbench.harness.compare import compare as compare_runs
    from ddbench.harness.results import write_atomic

    tolerances = Tolerances(
        accept_tol, hist_tol, depth_tol, speedup_tol, parity_tol, min_match, equal_accept_tol, strict, speed
    )
    try:
        deltas = compare_runs(results, load_baseline(baseline, dataset=dataset, temperature=temperature), tolerances)
    except DDBenchError as error:
        raise fail(str(error)) from None
    console().print(comparison_table(deltas))
    if markdown is not None:
        write_atomic(markdown, comparison_markdown(deltas))
    regressions = [delta for delta in deltas if not delta.ok]
    console().print(f"{len(deltas) - len(regressions)} of {len(deltas)} matched cells within tolerance")
    if regressions:
        raise typer.Exit(code=1)


@app.command("baseline")
def baseline_command(
    model: Annotated[str, typer.Option(help="Target model folder.")],
    draft: Annotated[str, typer.Option(help="DFlash drafter folder.")],
    out: Annotated[Path, typer.Option(help="The zlab.json file to write.")] = Path("zlab.json"),
    datasets: Annotated[str, typer.Option(help="Comma list of mt-bench, gsm8k, humaneval or .jsonl paths.")] = "gsm8k",
    data_dir: Annotated[str | None, typer.Option(help="Offline dataset mirror.")] = None,
    num_prompts: Annotated[int | None, typer.Option(help="Prompts per dataset (default: the dataset's).")] = None,
    max_new_tokens: Annotated[int, typer.Option(help="Generated tokens per response at most.")] = 2048,
    budgets: Annotated[str, typer.Option(help="DDTree node budgets, comma list of integers >= 1.")] = "16,32,64,128",
    temperatures: Annotated[str, typer.Option(help="Temperatures, comma list.")] = "0",
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto (bf16 on CUDA, fp32 on CPU) | float32 | bfloat16")] = "auto",
    overwrite: Annotated[bool, typer.Option(help="Replace an existing --out file.")] = False,
) -> None:
    """Run the reference engine in-process with the offline harness's semantics and write zlab.json."""
    from ddbench.config import AUTO_BUDGET
    from ddbench.harness.baseline import run_baseline, write_baseline

    if out.exists() and not overwrite:  # checked first: the run below takes minutes
        raise fail(f"{out} exists; choose another --out or pass --overwrite")
    try:
        config = SweepSettings(
            model=model, draft=draft, datasets=datasets, budgets=budgets, temperatures=temperatures,
            num_prompts=num_prompts, max_new_tokens=max_new_tokens, data_dir=data_dir,
        ).build()  # fmt: skip
        if AUTO_BUDGET in config.budgets:
            raise DDBenchError(f"--budgets {AUTO_BUDGET}: a baseline runs fixed budgets only (ddbench sweep runs auto)")
        from ddbench.harness.client import load_prompts

        prompts = load_prompts(config)
        with progress_display() as progress:
            total = sum(len(p.turns) for items in prompts.values() for p in items)
            tick = progress.counter("baseline requests", total * (len(config.budgets) + 2) * len(config.temperatures))
            document = run_baseline(
                model=model, draft=draft, prompts=prompts, budgets=config.budgets, temperatures=config.temperatures,
                max_new_tokens=config.max_new_tokens, device=device, dtype=dtype, on_request=tick,
            )  # fmt: skip
    except (DDBenchError, ValueError, OSError) as error:
        raise fail(str(error)) from None
    write_baseline(out, document)
    console().print(f"wrote {out}")


@app.command()
def serve(
    engine: Annotated[str | None, typer.Option(help="sglang | reference (default: by machine).")] = None,
    method: Annotated[str, typer.Option(help="ar | dflash | ddtree")] = "ddtree",
    model: Annotated[str | None, typer.Option(help="Target model (default: the testbed target).")] = None,
    draft: Annotated[str, typer.Option(help="DFlash drafter (default with the testbed target: its drafter).")] = "",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 30000,
    gpus: Annotated[str, typer.Option(help="GPU ids for the server, e.g. 0-7.")] = "",
    tp: Annotated[int, typer.Option(help="Tensor-parallel GPUs (SGLang).")] = 1,
    budget: Annotated[int, typer.Option(help="DDTree node budget (per-request custom_params override it).")] = 64,
    max_depth: Annotated[int | None, typer.Option(help="DDTree depth limit (default: block size - 1).")] = None,
    draft_temperature: Annotated[float, typer.Option(help="DDTree draft temperature.")] = 1.0,
    hold_chain: Annotated[
        bool, typer.Option(help="DDTree trees hold the drafter's rank-0 chain first (requests may override).")
    ] = False,
    log: Annotated[Path, typer.Option(help="Server log file.")] = Path("results/serve/server.log"),
    server_arg: Annotated[list[str] | None, typer.Option(help="Extra server argument, repeatable.")] = None,
) -> None:
    """Start one server (SGLang with DDTree, or the reference engine) and keep it up until Ctrl-C."""
    from ddbench.config import parse_gpus
    from ddbench.harness.server import Server, ServerSpec
    from ddtree_core.settings import TreeSettings

    try:
        engine = engine or env.default_engine()
        _need_engine(engine)
        if model is None:  # the testbed pair
            from ddbench.testbed import target as testbed

            model = str(testbed.prepare_target(console=console(stderr=True)))
            draft = draft or str(testbed.DRAFTER_DIR)
        if method != "ar" and not draft:
            raise DDBenchError(f"method {method} needs a drafter (--draft)")
        launch = TreeSettings(budget, max_depth, draft_temperature, hold_chain) if method == "ddtree" else None
        extra = tuple(server_arg or ())
        spec = ServerSpec(engine, method, model, draft, parse_gpus(gpus), tp, launch, extra_args=extra)
        with Server(spec, log, port=port) as server:
            console().print(f"{spec.label} serving at {server.url} (log: {log}); Ctrl-C stops it")
            while server.alive():
                time.sleep(1.0)
            server.check_alive("while serving")
    except (DDBenchError, ValueError) as error:
        raise fail(str(error)) from None
    except KeyboardInterrupt:
        console(stderr=True).print("stopped")

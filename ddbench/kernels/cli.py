"""`ddbench kernels`: the draft side's GPU kernels. The round timed per implementation (`bench`), the launch
settings of the Triton top-K and tree build searched (`tune topk`, `tune build`), and where decode rounds
spend their time in SGLang profiler traces (`trace`)."""

import typer

from ddbench.commands import Tool, lazy_group

TOOLS = {
    "bench": Tool(
        "ddbench.kernels.kernel_bench:main",
        "Time the draft-side DDTree round per impl and write the results to --out.",
    ),
    "trace": Tool(
        "ddbench.kernels.trace_summary:main",
        "Where decode rounds spend their time, from torch.profiler traces of SGLang: host, launches, syncs, GPU.",
    ),
}
TUNERS = {
    "topk": Tool(
        "ddbench.kernels.topk_tune:main",
        "Time every launch of the Triton top-K on the same cells; write cells.csv and best.csv.",
    ),
    "build": Tool(
        "ddbench.kernels.build_tune:main",
        "Time every launch of the Triton tree build on the same lists; write cells.csv and best.csv.",
    ),
}
# `ddbench kernels --out X` (options, no command) is the former `ddbench kernels`: the benchmark.
app = typer.Typer(
    help="The draft side's GPU kernels: benchmark, launch-setting searches, profiler traces.",
    no_args_is_help=True,
    cls=lazy_group(TOOLS, default="bench"),
)
tune = typer.Typer(help="Triton launch settings, searched.", no_args_is_help=True, cls=lazy_group(TUNERS))
app.add_typer(tune, name="tune")

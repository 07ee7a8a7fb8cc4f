"""`ddbench`: sweep DDTree against AR and DFlash on SGLang or the reference engine, then report, plot, compare.

    ddbench sweep|report|plot|compare|baseline|serve   measure and read results (ddbench/harness/)
    ddbench check diverge|replay|sampled                is the output right? (ddbench/check/)
    ddbench model cost|cost-sglang|project|strength|recommend|accept
                                                        cost, projected speed, acceptance (ddbench/model/)
    ddbench kernels bench|tune topk|tune build|trace    the draft side's kernels (ddbench/kernels/)
    ddbench testbed prepare|pad-heads|inflate|train-prompts|distill|train
                                                        the CPU target and its drafter (ddbench/testbed/)

`ddbench COMMAND --help` explains each knob. The names the commands had before the roles (`ddbench diverge`,
`replay`, `recommend`, `project`, `cost`, `cost-sglang`, `trace`, and `ddbench kernels --out ...` for the
benchmark) still work for one release, hidden, with a note on stderr.
"""

import typer

from ddbench.check.cli import app as check_app
from ddbench.commands import lazy_group
from ddbench.harness.cli import app as harness_app
from ddbench.kernels.cli import app as kernels_app
from ddbench.model.cli import app as model_app
from ddbench.testbed.cli import app as testbed_app

ALIASES = {  # old name -> new command; hidden, for one release
    "diverge": "check diverge",
    "replay": "check replay",
    "recommend": "model recommend",
    "project": "model project",
    "cost": "model cost",
    "cost-sglang": "model cost-sglang",
    "trace": "kernels trace",
}

app = typer.Typer(
    help=__doc__.split("\n")[0], no_args_is_help=True, add_completion=False, cls=lazy_group(aliases=ALIASES)
)
app.registered_commands += harness_app.registered_commands  # sweep, report, plot, compare, baseline, serve
app.add_typer(check_app, name="check")
app.add_typer(model_app, name="model")
app.add_typer(kernels_app, name="kernels")
app.add_typer(testbed_app, name="testbed")


def main() -> None:
    app(prog_name="ddbench")


if __name__ == "__main__":
    main()

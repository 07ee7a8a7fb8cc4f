"""The command tree: every command of every role answers --help, the former names still run the new commands
(hidden, with a note on stderr), and listing a group imports none of its tools."""

import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from ddbench.cli import ALIASES, app

ROLES = {
    "": {"sweep", "report", "plot", "compare", "baseline", "serve", "check", "model", "kernels", "testbed"},
    "check": {"diverge", "load", "replay", "sampled"},
    "model": {"cost", "cost-sglang", "project", "strength", "recommend", "accept", "calibrate"},
    "kernels": {"bench", "tune", "trace"},
    "kernels tune": {"topk", "build"},
    "testbed": {"prepare", "pad-heads", "inflate", "train-prompts", "distill", "train"},
    "testbed distill": {"train", "eval"},
}


def commands(group=None, ctx=None, path=()) -> list[tuple[str, ...]]:
    """Every command path under `group` (the root by default), hidden ones left out, groups included."""
    group = group or typer.main.get_command(app)
    ctx = ctx or typer.Context(group, info_name="ddbench")
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command.hidden or name in ALIASES and not path:
            continue
        found.append((*path, name))
        if hasattr(command, "list_commands"):
            found += commands(command, typer.Context(command, info_name=name, parent=ctx), (*path, name))
    return found


ALL = commands()


def ddbench(*args: str):
    return CliRunner().invoke(app, list(args), prog_name="ddbench")


def test_each_role_lists_its_commands():
    listed = {}
    for path in ALL:
        listed.setdefault(" ".join(path[:-1]), set()).add(path[-1])
    assert listed == ROLES


@pytest.mark.parametrize("path", ALL, ids=" ".join)
def test_every_command_answers_help(path):
    result = ddbench(*path, "--help")
    assert result.exit_code == 0, result.output
    assert f"Usage: ddbench {' '.join(path)} " in " ".join(result.output.split())
    assert result.stderr == ""


@pytest.mark.parametrize("old", sorted(ALIASES))
def test_former_names_run_the_new_commands(old):
    new = ddbench(*ALIASES[old].split(), "--help")
    result = ddbench(old, "--help")
    assert result.exit_code == 0, result.output
    words = " ".join(new.stdout.split()).replace(f"ddbench {ALIASES[old]}", f"ddbench {old}")
    assert " ".join(result.stdout.split()) == words
    note = f"note: `ddbench {old}` is `ddbench {ALIASES[old]}` now; the old name goes in a later release\n"
    assert result.stderr == note


def test_former_names_are_hidden():
    listing = ddbench("--help").stdout.splitlines()
    listed = {line.split()[1] for line in listing if line.startswith("│ ") and line[2] != " "}
    assert listed == {"--help", *ROLES[""]}


def test_kernels_with_options_and_no_command_is_the_benchmark():
    result = ddbench("kernels", "--smoke", "--help")
    assert result.exit_code == 0, result.output
    assert "Usage: ddbench kernels bench" in result.stdout and "--logit-scale" in result.stdout
    assert result.stderr.startswith("note: `ddbench kernels` is `ddbench kernels bench` now")
    assert ddbench("kernels", "--help").stdout.count("--logit-scale") == 0


def test_listing_the_commands_imports_no_tool():
    """`ddbench --help` and each role's --help stay fast: torch (and every tool module) is imported only when a
    tool runs or shows its own help."""
    script = (
        "import sys; from typer.testing import CliRunner; from ddbench.cli import app\n"
        "for args in ([], ['check'], ['model'], ['kernels'], ['kernels', 'tune'], ['testbed']):\n"
        "    assert CliRunner().invoke(app, [*args, '--help']).exit_code == 0\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('ddbench.') and m.count('.') > 1\n"
        "             and not m.endswith('.cli')))"
    )
    imported = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert imported.strip() == "[]"

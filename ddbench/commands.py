"""What the commands of every role share: consoles sized for logs, the one-line error, the progress display,
and command groups that import a tool only when it runs.

A tool module (torch, transformers) takes seconds to import, so a group names its tools instead of importing
them: `lazy_group({"bench": Tool("ddbench.kernels.kernel_bench:main", "one line of help")})`. `ddbench kernels
--help` lists them from those lines; `ddbench kernels bench ...` (its --help too) imports the module and runs
its Typer function (or Typer app, for a tool with sub-commands). Old command names stay as hidden aliases of
the new ones for one release and say so on stderr when used.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Any

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup

WIDTH_WHEN_PIPED = 160  # Rich's 80 columns would fold the tables in logs and files


def console(stderr: bool = False) -> Console:
    """A console on the current stdout/stderr, wide when it is not a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else WIDTH_WHEN_PIPED)


def fail(message: str) -> typer.Exit:
    """Print a one-line error on stderr; the caller raises the returned Exit(2)."""
    typer.echo(f"error: {message.splitlines()[0] if message else 'unknown error'}", err=True)
    return typer.Exit(code=2)


def progress_display():
    """The progress display of long runs (sweeps, baselines, inflation checks), on stderr."""
    from ddbench.harness.progress import RichProgress

    return RichProgress(console(stderr=True))


@dataclass(frozen=True)
class Tool:
    """A command whose code is imported when it runs: "module:attribute" naming a Typer function or app, and the
    line `--help` of its group shows."""

    target: str
    help: str


class LazyGroup(TyperGroup):
    """A Typer group with, besides its own commands, `tools` imported when run, `aliases` (old name -> the path of
    the new command under this group, hidden) and a `default` command that options without a command go to."""

    tools: dict[str, Tool] = {}
    aliases: dict[str, tuple[str, ...]] = {}
    default: str | None = None
    _listing = False  # while help is printed: tools are described, not imported

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return [*super().list_commands(ctx), *self.tools, *self.aliases]

    def get_command(self, ctx: typer.Context, name: str) -> Any:
        if name in self.aliases:
            if self._listing:
                return TyperCommand(name, hidden=True)
            command = self
            for part in self.aliases[name]:  # down the groups: ("check", "diverge")
                command = command.get_command(ctx, part) if hasattr(command, "get_command") else None
            return command
        if name not in self.tools:
            return super().get_command(ctx, name)
        tool = self.tools[name]
        if self._listing:
            return TyperCommand(name, help=tool.help)
        module, _, attribute = tool.target.partition(":")
        loaded = getattr(importlib.import_module(module), attribute)
        if not isinstance(loaded, typer.Typer):
            app = typer.Typer(add_completion=False)
            app.command(name)(loaded)
            loaded = app
        command = typer.main.get_command(loaded)
        command.name = name
        return command

    def format_help(self, ctx: typer.Context, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if self.default and args and args[0].startswith("-") and args[0] not in self.get_help_option_names(ctx):
            _say_renamed(ctx.command_path, f"{ctx.command_path} {self.default}")
            args = [self.default, *args]
        return super().parse_args(ctx, args)

    def resolve_command(self, ctx: typer.Context, args: list[str]):
        if args and args[0] in self.aliases:
            _say_renamed(f"{ctx.command_path} {args[0]}", " ".join([ctx.command_path, *self.aliases[args[0]]]))
        return super().resolve_command(ctx, args)


def _say_renamed(old: str, new: str) -> None:
    typer.echo(f"note: `{old}` is `{new}` now; the old name goes in a later release", err=True)


def lazy_group(
    tools: dict[str, Tool] | None = None, aliases: dict[str, str] | None = None, default: str | None = None
) -> type[LazyGroup]:
    """A LazyGroup class for `typer.Typer(cls=...)`; aliases as "old": "new command path"."""
    paths = {old: tuple(new.split()) for old, new in (aliases or {}).items()}
    return type("LazyGroup", (LazyGroup,), {"tools": dict(tools or {}), "aliases": paths, "default": default})

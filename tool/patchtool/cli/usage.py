"""The command line's commands and groups, and its usage errors, on typer's public API.

Every command and group below the root also takes the global options the root declares, given
after it (their parameters: ``get_params``), and puts them on the invocation it passes down
(``invoke``). A command line that cannot be read is reported
in typer's own words (click's, which typer vendors), with the usage line and a hint, or under
``--json`` as the envelope; either way with the documented usage exit code.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from patchtool.cli.context import GLOBALS, invocation
from patchtool.cli.render import envelope
from patchtool.errors import ExitCode, Problem
from patchtool.urls import redact

HELP_OPTIONS = ("-h", "--help")


def _located(parse: Callable[[Any, list[str]], list[str]], ctx: Any, args: list[str]) -> list[str]:
    """``parse(ctx, args)``, its usage errors told which command they are about (click's parser
    leaves some without, such as an option missing its value)."""
    try:
        return parse(ctx, args)
    except typer.TyperException as exc:
        if getattr(exc, "ctx", ctx) is None:
            ctx.fail(exc.format_message())
        raise


def _with_globals(command: Any, ctx: Any) -> list[Any]:
    """``command``'s own parameters, then the global options of the root command (none for the
    root itself, which declares them), then help."""
    root = ctx.find_root().command
    found = [*command.params, *(p for p in root.params if p.name in GLOBALS and root is not command)]
    help_option = command.get_help_option(ctx)
    return [*found, help_option] if help_option is not None else found


def _taking_globals(ctx: Any) -> None:
    """The global options given here, taken off the parameters and onto the invocation passed down."""
    ctx.obj = invocation(ctx).taking(**{name: ctx.params.pop(name) for name in GLOBALS if name in ctx.params})


class Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _with_globals(self, ctx)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return _located(super().parse_args, ctx, args)

    def invoke(self, ctx: Any) -> Any:
        _taking_globals(ctx)
        return super().invoke(ctx)


class Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _with_globals(self, ctx)

    def invoke(self, ctx: Any) -> Any:
        _taking_globals(ctx)
        return super().invoke(ctx)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return _located(super().parse_args, ctx, args)

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name = args[0]
        if not name.startswith("-") and self.get_command(ctx, name) is None and not ctx.resilient_parsing:
            close = difflib.get_close_matches(name, self.list_commands(ctx), n=1)
            ctx.fail(f"No such command {name!r}." + (f" Did you mean {close[0]!r}?" if close else ""))
        return super().resolve_command(ctx, args)


def report(exc: typer.TyperException, *, as_json: bool) -> int:
    """A command line that could not be read: the usage and the message, or under --json the envelope."""
    ctx = getattr(exc, "ctx", None)  # the command it is about, where click knows it
    path = ctx.command_path if ctx is not None else "patchtool"
    text = exc.format_message()
    hint = f"see `{path} --help`"
    if ctx is not None and isinstance(ctx.command, Group):
        hint = f"{hint}; its commands: {', '.join(ctx.command.list_commands(ctx))}"
    if as_json:
        problem = Problem(message=text, code="UsageError", hint=hint)
        command = path.removeprefix("patchtool").strip() or "patchtool"
        sys.stdout.write(redact(envelope(command, ExitCode.USAGE, None, (problem,))) + "\n")
        sys.stdout.flush()
    else:
        pieces = ctx.command.collect_usage_pieces(ctx) if ctx is not None else []
        sys.stderr.write(redact(f"usage: {' '.join([path, *pieces])}\n{path}: error: {text}\n  ({hint})\n"))
        sys.stderr.flush()
    return int(ExitCode.USAGE)

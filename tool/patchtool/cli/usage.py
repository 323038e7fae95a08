"""The two places patchtool reaches below typer's public API, kept here together.

1. Values. typer 0.29 converts every non-flag option through a pydantic ``TypeAdapter``: importing
   pydantic and building the adapters costs about as much as importing typer and GitPython
   together, on every command. Our options are only strings, paths, whole numbers and flags, so
   each parameter gets a plain conversion instead (typer's own lazy ``_runtime_param`` slot); a
   typer without that slot keeps its own conversion, slower but the same.
2. Usage errors. With ``standalone_mode=False`` click raises them; they are reported here in
   the wording the command line has always used (argparse's), as text or as the ``--json``
   envelope, with the documented usage exit code.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from typer._click import exceptions as click_errors
from typer._coercion import RuntimeParam
from typer.core import TyperCommand, TyperGroup

from patchtool.cli.render import envelope
from patchtool.errors import ExitCode, Problem

UsageError = click_errors.UsageError
HELP_OPTIONS = ["-h", "--help"]


class UnknownCommand(click_errors.UsageError):
    def __init__(self, name: str, ctx: Any, choices: list[str]) -> None:
        super().__init__(f"No such command {name!r}.", ctx)
        self.name = name
        self.choices = choices


def _located(parse: Callable[[Any, list[str]], list[str]], ctx: Any, args: list[str]) -> list[str]:
    """``parse(ctx, args)``, its usage errors told which command they are about (typer's parser
    leaves some without)."""
    try:
        return parse(ctx, args)
    except click_errors.UsageError as exc:
        if exc.ctx is None:
            exc.ctx, exc.cmd = ctx, ctx.command
        raise


class Command(TyperCommand):
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return _located(super().parse_args, ctx, args)


class Group(TyperGroup):
    """A group whose commands are made when first named (``lazy``: name -> what makes it), and
    whose unknown command is an error of its own kind, reported in our words."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.lazy: dict[str, Callable[[], Any]] = {}

    def list_commands(self, ctx: Any) -> list[str]:
        return [*self.lazy, *(name for name in self.commands if name not in self.lazy)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            self.commands[cmd_name] = self.lazy[cmd_name]()
        return self.commands.get(cmd_name)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return _located(super().parse_args, ctx, args)

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name = args[0]
        if not name.startswith("-") and self.get_command(ctx, name) is None and not ctx.resilient_parsing:
            raise UnknownCommand(name, ctx, self.list_commands(ctx))
        return super().resolve_command(ctx, args)


# -- 1. values -----------------------------------------------------------------------------------

def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"invalid int value: {text!r}") from None


_CONVERT: dict[Any, Any] = {str: str, Path: Path, int: _whole_number}


@dataclasses.dataclass(frozen=True)
class _Plain(RuntimeParam):
    """str, Path and int values (one, or a list of them), converted without pydantic."""

    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        inner, many = _shape(self.annotation)
        convert = _CONVERT.get(inner)
        if inner is bool:
            return bool(value)
        assert convert is not None
        try:
            if many:
                return [convert(v) for v in value]
            return convert(value)
        except ValueError as exc:
            raise click_errors.BadParameter(str(exc), ctx=ctx, param=param) from None


def _shape(annotation: Any) -> tuple[Any, bool]:
    """(the value's type, whether it is a list), through ``X | None`` and ``Annotated``."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = rest[0] if len(rest) == 1 else annotation
    if typing.get_origin(annotation) is list:
        return typing.get_args(annotation)[0], True
    return annotation, False


_VALUE_NAME = {str: "TEXT", Path: "PATH", int: "N"}


def plain_values(command: Any) -> None:
    """Give every parameter of ``command`` and its subcommands the plain conversion it can use,
    and a value name for the help where it has none (TEXT, PATH, N; nothing for a flag, rather
    than typer's ``<bool>``)."""
    help_option = command.get_help_option(typer.Context(command, help_option_names=HELP_OPTIONS))
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is None:
            continue
        inner, _ = _shape(descriptor.annotation)
        if getattr(param, "_runtime_param", ()) is None and (inner in _CONVERT or inner is bool):
            param._runtime_param = _Plain(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation)
        if param.metavar is None and getattr(param, "param_type_name", "") == "option":
            param.metavar = "" if getattr(param, "is_flag", False) else _VALUE_NAME.get(inner)
    for sub in getattr(command, "commands", {}).values():
        plain_values(sub)


# -- 2. usage errors -----------------------------------------------------------------------------

def _param_name(param: Any) -> str:
    opts = getattr(param, "opts", None) or []
    if getattr(param, "param_type_name", "") == "option" and opts:
        return str(opts[0])
    return str(getattr(param, "metavar", None) or (param.name or "").upper())


def message(exc: click_errors.UsageError) -> str:
    """The error in argparse's words: what the scripts and the tests of patchtool have always read."""
    if isinstance(exc, UnknownCommand):
        close = difflib.get_close_matches(exc.name, exc.choices, n=1)
        guess = f"; did you mean {close[0]!r}?" if close else ""
        return f"argument COMMAND: invalid choice: {exc.name!r} (choose from {', '.join(exc.choices)}){guess}"
    if isinstance(exc, click_errors.NoSuchOption):
        guess = f"; did you mean {', '.join(sorted(exc.possibilities))}?" if exc.possibilities else ""
        return f"unrecognized arguments: {exc.option_name}{guess}"
    if isinstance(exc, click_errors.MissingParameter):
        return f"the following arguments are required: {_param_name(exc.param)}"
    if isinstance(exc, click_errors.BadOptionUsage) and "requires an argument" in exc.message:
        return f"argument {exc.option_name}: expected one argument"
    if isinstance(exc, click_errors.BadParameter) and exc.param is not None:
        return f"argument {_param_name(exc.param)}: {exc.message}"
    if exc.message.startswith("Got unexpected extra argument"):
        return "unrecognized arguments: " + exc.message.split(" (", 1)[-1].removesuffix(")")
    if exc.ctx is not None and isinstance(exc.ctx.command, Group) and exc.message == "Missing command.":
        return f"missing command (choose from {', '.join(exc.ctx.command.list_commands(exc.ctx))})"
    return exc.format_message()


def report(exc: click_errors.UsageError, *, as_json: bool) -> int:
    """A command line that could not be read: the usage and the message, or under --json the envelope."""
    path = exc.ctx.command_path if exc.ctx is not None else "patchtool"
    text = message(exc)
    hint = f"see `{path} --help`"
    if as_json:
        problem = Problem(message=text, code="UsageError", hint=hint)
        command = path.removeprefix("patchtool").strip() or "patchtool"
        sys.stdout.write(envelope(command, ExitCode.USAGE, None, (problem,)) + "\n")
        sys.stdout.flush()
    else:
        pieces = exc.ctx.command.collect_usage_pieces(exc.ctx) if exc.ctx is not None else []
        sys.stderr.write(f"usage: {' '.join([path, *pieces])}\n{path}: error: {text}\n  ({hint})\n")
        sys.stderr.flush()
    return int(ExitCode.USAGE)

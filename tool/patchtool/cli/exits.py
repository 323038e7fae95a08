"""Where a command's result or its error becomes output and an exit code: the one place.

A command is a thin function over the core that returns ``Shown``: its result as data (the
``--json`` envelope's) and how that reads as text. ``command`` declares what it does to the
repository (a writing command holds the lock alone; one that edits the series also waits until no
rebase is in progress) and where it may write, and runs it through ``execute``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from patchtool import errors, progress
from patchtool.cli import confinement
from patchtool.cli.context import Invocation, invocation
from patchtool.cli.progressbar import RichReporter
from patchtool.cli.render import Style, envelope, problems_text, series_text
from patchtool.errors import AccessError, ApplyConflict, ExitCode, InternalError, PatchtoolError, Payload, Problem
from patchtool.urls import redact


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Shown:
    """A command's result: the data of its JSON envelope, and how it reads as text."""

    data: Payload | dict[str, Any] | None
    text: Callable[[Style], str]
    code: ExitCode = ExitCode.OK
    problems: tuple[Problem, ...] = ()


def command(
    *,
    writes: bool = False,
    edits_series: bool = False,
    creates: bool = False,
    outputs: tuple[str, ...] = (),
    reports: tuple[str, ...] = (),
    editor: bool = False,
    dry_run: str | None = None,
) -> Callable[[Callable[..., Shown]], Callable[..., int]]:
    """A command ``fn(ctx, ...)``, run through ``execute`` with what it declares:
    ``writes``: the command changes the repository, so it holds the lock alone;
    ``creates``: it makes the repository in the directory ``--root`` (or the current one) names;
    ``edits_series``: it changes the series, so it waits until no rebase is in progress;
    ``outputs``: its options that name a tree for it to write (beside the repository and cache);
    ``reports``: its options that name a file it writes whole, through ``write_report``;
    ``editor``: it may run the user's $EDITOR (through ``outside``);
    ``dry_run``: its option that makes a writing command touch nothing (then it reads)."""

    def decorate(fn: Callable[..., Shown]) -> Callable[..., int]:
        options = inspect.signature(fn).parameters
        unknown = [o for o in ("ctx", *outputs, *reports, *([dry_run] if dry_run else [])) if o not in options]
        assert not unknown, f"{fn.__name__}: no parameter {unknown}"

        @functools.wraps(fn)
        def run(ctx: typer.Context, **given: Any) -> int:
            ctx.obj = dataclasses.replace(
                invocation(ctx),
                command=ctx.command_path.partition(" ")[2],
                writes=(writes or edits_series or creates) and not (dry_run and given[dry_run]),
                edits_series=edits_series,
                creates=creates,
                outputs=tuple(Path(given[o]) for o in (*outputs, *reports) if given[o] is not None),
                reports=tuple(Path(given[o]) for o in reports if given[o] is not None),
                editor=editor,
            )
            return execute(ctx, lambda: fn(ctx, **given))

        return run

    return decorate


def execute(ctx: typer.Context, body: Callable[[], Shown]) -> int:
    """Run a command's body and show its result; the one place where an error becomes a message
    and an exit code."""
    inv = invocation(ctx)
    plain = inv.as_json or not sys.stdout.isatty() or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb"
    style = Style(colour=not plain)
    try:
        confinement.check_outputs(inv)
        inv = ctx.obj = confinement.confined(ctx, inv)
        with _progress_shown(inv.as_json):
            return _show(inv, body(), style)
    except errors.OutputLost:  # nothing more can be shown where the output went; main says so on stderr
        raise
    except ApplyConflict as exc:
        return _conflict(inv, exc, style)
    except PatchtoolError as exc:
        return _fail(inv, exc, style)
    except (PermissionError, IsADirectoryError, NotADirectoryError) as exc:
        return _fail(
            inv,
            confinement.refused_outside(inv, exc)
            or AccessError(
                f"cannot use {exc.filename or 'a file'}: {exc.strerror}",
                hint="check its permissions, or point patchtool elsewhere (--root, --cache-dir, --out)",
            ),
            style,
        )
    except OSError as exc:
        return _fail(
            inv,
            AccessError(f"{exc.filename or 'a file'}: {exc.strerror or exc}", hint="check the disk and the path"),
            style,
        )
    except KeyboardInterrupt:
        _echo("interrupted", err=True)
        return 130
    except Exception as exc:  # noqa: BLE001 -- a bug, too, is a message and an exit code
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return _fail(
            inv,
            InternalError(
                f"internal error: {type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno})",
                hint="this is a bug in patchtool; please report it with the command you ran",
            ),
            style,
        )


def _progress_shown(as_json: bool) -> contextlib.AbstractContextManager[None]:
    """Progress bars on stderr, only where a person watches it (a terminal) and never under --json."""
    quiet = as_json or not sys.stderr.isatty()
    return contextlib.nullcontext() if quiet else progress.reporting(RichReporter(sys.stderr))


def _echo(text: str, *, err: bool = False) -> None:
    """Write a command's output or error: every one, text or ``--json``, passes here, so no url's
    credentials (a pin's, a remote's in git's own words) are printed (``urls.redact``)."""
    stream = sys.stderr if err else sys.stdout
    try:
        stream.write(redact(text) + "\n")
        stream.flush()
    except BrokenPipeError:  # the reader went away (`| head`): not the command's failure
        reader_gone(stream)
    except OSError as exc:  # a full disk, /dev/full: the output is lost, and that is the command's failure
        reader_gone(stream)
        raise errors.OutputLost.writing("error" if err else "output", exc) from None


def reader_gone(stream: Any) -> None:
    """Send the rest of ``stream``'s output nowhere, quietly (a closed pipe is the reader's choice,
    and the interpreter's last flush must not turn it into a traceback)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)


def _show(inv: Invocation, shown: Shown, style: Style) -> int:
    if inv.as_json:
        data = shown.data if shown.data is None or isinstance(shown.data, dict) else shown.data.to_dict()
        _echo(envelope(inv.command, shown.code, data, shown.problems))
    elif text := shown.text(style):
        _echo(text, err=shown.code not in (ExitCode.OK, ExitCode.PROBLEMS, ExitCode.CONFLICT, ExitCode.PREDICTED))
    return int(shown.code)


def _conflict(inv: Invocation, exc: ApplyConflict, style: Style) -> int:
    result = exc.result

    def text(style: Style) -> str:
        # the workflows' types: only a command that stopped loads them (every command would, at its start);
        # rich: the text alone draws it, --json never loads it
        from patchtool.cli.prose import fill, rebase_text
        from patchtool.rebase.transaction import RebaseReport
        from patchtool.series.apply import SeriesResult

        if isinstance(result, RebaseReport):  # a rebase's stop and what to do there, wrapped to the terminal
            error = fill(exc.message, style, prefix=style.bad("error") + ": ", indent=2)
            out = f"{rebase_text(result, style)}\n{error}"
            return out + (f"\n{fill(exc.hint, style, prefix='  hint: ', indent=4)}" if exc.hint else "")
        shown = series_text(result, style) if isinstance(result, SeriesResult) else ""
        out = f"{shown}\n{style.bad('error')}: {exc.message}"
        return out + (f"\n  hint: {exc.hint}" if exc.hint else "")

    return _show(inv, Shown(data=exc.data, text=text, code=ExitCode.CONFLICT, problems=exc.as_problems()), style)


def _fail(inv: Invocation, exc: PatchtoolError, style: Style) -> int:
    problems = exc.as_problems()
    if inv.as_json:
        _echo(envelope(inv.command, exc.exit_code, None, problems))
    else:
        _echo(problems_text(problems, style), err=True)
    return int(exc.exit_code)

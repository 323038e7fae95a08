"""The user's ``$VISUAL``/``$EDITOR`` on a text patchtool checks: a patch's entry (``edit``) and a
registry entry (``retread add --edit``).

The editor is the user's own program: it runs where the confinement does not reach
(``confinement.outside``), free to write its history, swap and backup files where it always does, and
with the terminal, which no other process patchtool starts holds. While it runs, Ctrl-C and
Ctrl-\\ are its own: patchtool waits, as git does. The text lives in the cache
(``<cache>/edits/``), which the command may write. When what was saved does not pass the check
and there is a terminal, patchtool shows the problems and asks ``edit again? [Y/n]`` (as
``crontab -e`` does), then opens the editor on the same text with the problems at the top, as
comments. Without a terminal, or when the answer is no, the text stays in its file and the error
names it: nothing typed is lost. So it does when the editor exits with an error after the text was
saved (vim after an error in the session, a wrapper that fails); only an unchanged text goes.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from patchtool import fsroot
from patchtool.cli.confinement import outside
from patchtool.cli.context import Invocation
from patchtool.cli.render import Style, printable, problems_text
from patchtool.errors import InvalidInput, PatchtoolError, Problem, UsageError
from patchtool.inputs import read_named_text

T = TypeVar("T")
FOLDER = "edits"  # in the cache: where the text being edited lives, and stays when it is not taken


def edit_until_valid(
    inv: Invocation,
    text: str,
    *,
    stem: str,
    header: str,
    accept: Callable[[str], T],
    nothing: str,
    again: Callable[[Path], str],
    empty: str | None = None,
) -> T:
    """``accept(text as the user saved it)``, the editor opened again on a problem while the user
    says so. ``stem``: the file's name before its random part; ``header``: comment lines above the
    text, taken off again; ``nothing``: what was not done, for the editor's failure (``nothing was
    written``); ``again``: the command that takes the kept file; ``empty``: the message when
    nothing but comments was saved (the user gave up), or None when that is for ``accept``."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        argv = shlex.split(editor)
    except ValueError as exc:
        raise UsageError(f"cannot run the editor ({editor}): {exc}; {nothing}") from None
    folder = fsroot.Root(inv.cache_root() / FOLDER)
    name = f"{stem}.{os.urandom(4).hex()}.toml"
    path = folder.path / name
    top = header
    folder.write(name, top + text)
    done = False
    try:
        while True:
            if (code := _run(inv, editor, [*argv, str(path)], nothing)) != 0:
                failed = UsageError(f"the editor ({editor}) exited with {code}; {nothing}")
                if _without(read_named_text(path, what="the edited text"), top) == text:
                    done = True  # nothing typed: the user gave up
                    raise failed
                raise _kept(failed, path, again(path))  # saved, then the editor failed: keep what was typed
            saved = _without(read_named_text(path, what="the edited text"), top)
            if empty is not None and not _content(saved):
                done = True
                raise UsageError(empty)
            try:
                result = accept(saved)
            except PatchtoolError as exc:
                if isinstance(exc, UsageError | InvalidInput) and _again(exc):
                    top = _problems_block(exc) + header
                    folder.write(name, top + saved)
                    continue
                raise _kept(exc, path, again(path)) from None
            done = True
            return result
    finally:
        if done:
            folder.unlink(name)


def _run(inv: Invocation, editor: str, argv: list[str], nothing: str) -> int:
    try:
        with _signals_to_the_editor():
            return outside(inv, lambda: subprocess.run(argv, check=False).returncode)
    except OSError as exc:
        raise UsageError(f"cannot run the editor ({editor}): {exc}; {nothing}") from None


@contextlib.contextmanager
def _signals_to_the_editor() -> Iterator[None]:
    """Ctrl-C and Ctrl-\\ reach the editor (the terminal's foreground group) and do nothing here:
    handled, not ignored, so the editor starts with them as they were."""
    try:
        saved = {sig: signal.signal(sig, lambda _signum, _frame: None) for sig in (signal.SIGINT, signal.SIGQUIT)}
    except ValueError:  # not the main thread: signals are the main thread's to handle
        yield
        return
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _without(text: str, top: str) -> str:
    """``text`` without the comment lines patchtool put above it (those the user left)."""
    if text.startswith(top):
        return text[len(top) :]
    ours = set(top.splitlines(keepends=True))
    lines = text.splitlines(keepends=True)
    first = next((i for i, line in enumerate(lines) if line not in ours), len(lines))
    return "".join(lines[first:])


def _content(text: str) -> bool:
    return any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines())


def _again(exc: PatchtoolError) -> bool:
    """At a terminal: the problems, and whether the user edits again (Enter: yes; EOF: no)."""
    if sys.stdin is None or not sys.stdin.isatty():
        return False
    sys.stderr.write(problems_text(exc.as_problems(), Style(colour=False)) + "\nedit again? [Y/n] ")
    sys.stderr.flush()
    return bool(answer := sys.stdin.readline()) and answer.strip().lower() in ("", "y", "yes")


def _problems_block(exc: PatchtoolError) -> str:
    """The problems as comment lines for the top of the text (taken off when it is saved)."""
    lines = ["# patchtool: what you saved was not taken; fix it below, save and quit (these lines go):"]
    for problem in exc.as_problems():
        lines += [f"#   {line}" for line in printable(f"error: {problem.render()}").splitlines()]
    return "\n".join(lines) + "\n#\n"


def _kept(exc: PatchtoolError, path: Path, again: str) -> PatchtoolError:
    """``exc``, naming the file that keeps what the user typed."""
    exc.problems = (
        *exc.as_problems(),
        Problem(message=f"what you typed is kept in {path}", hint=f"fix it there, then `{again}`", code="kept"),
    )
    return exc


def read_entry(path: Path) -> str:
    """The entry ``--from-file`` names, as the editor would have left it (a kept edit)."""
    try:
        return read_named_text(path, what="the --from-file entry")
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist", file=str(path)) from None

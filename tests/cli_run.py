"""patchtool's command line for the tests: run in the test's own process (``in_process``, most
tests), or as a process of its own (``spawned``, the end-to-end tests: Landlock, signals and kills,
what a shell sees). Both answer a ``subprocess.CompletedProcess``, so a test reads its result the
same way whichever it uses.

``in_process`` runs ``patchtool.cli.main(argv)``, the entry a caller's process uses: it never
confines the process with Landlock (only the console script, ``main()`` with no argv, does), so
pytest is never confined. The process-global state a command line sees is the test's for the call
and put back after it: the environment, the current directory, the standard streams.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, overload


@overload
def in_process(
    args: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    input: str | bytes | None = None,
    text: Literal[True] = True,
) -> subprocess.CompletedProcess[str]: ...


@overload
def in_process(
    args: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    input: str | bytes | None = None,
    text: Literal[False],
) -> subprocess.CompletedProcess[bytes]: ...


def in_process(
    args: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    input: str | bytes | None = None,
    text: bool = True,
) -> subprocess.CompletedProcess[Any]:
    """``patchtool ARGS`` run in this process as ``subprocess.run([... "patchtool", *args], cwd=cwd,
    env=env, capture_output=True, text=text)`` runs it in another: ``env`` (the whole environment,
    as for ``subprocess.run``) and ``cwd`` hold for the call, output is captured as bytes and read
    back as a process's would be, an uncaught exception is a traceback on stderr and exit 1."""
    from patchtool.cli import main

    argv = [os.fspath(a) for a in args]
    data = input.encode() if isinstance(input, str) else (input or b"")
    out, err = io.BytesIO(), io.BytesIO()
    with _environment(env), _directory(cwd), _streams(data, out, err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception:
            sys.stderr.write(traceback.format_exc())
            code = 1
    stdout, stderr = out.getvalue(), err.getvalue()
    if text:
        return subprocess.CompletedProcess(["patchtool", *argv], code, _as_text(stdout), _as_text(stderr))
    return subprocess.CompletedProcess(["patchtool", *argv], code, stdout, stderr)


def spawned(
    args: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    input: str | bytes | None = None,
    text: bool = True,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[Any]:
    """``python -m patchtool ARGS`` as a process of its own: the real entry point, which confines
    itself with Landlock, for the tests that need a process (an exit status a shell sees, signals)."""
    return subprocess.run(
        [sys.executable, "-m", "patchtool", *map(os.fspath, args)],
        cwd=cwd,
        env=None if env is None else dict(env),
        input=input,
        capture_output=True,
        text=text,
        timeout=timeout,
        check=False,
    )


def _as_text(data: bytes) -> str:
    """Bytes as ``subprocess.run(text=True)`` reads a child's output: the locale's encoding, strictly,
    with universal newlines."""
    return io.TextIOWrapper(io.BytesIO(data)).read()


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    if env is None:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _directory(cwd: Path | str | None) -> Iterator[None]:
    if cwd is None:
        yield
        return
    saved = os.getcwd()
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved)


@contextlib.contextmanager
def _streams(data: bytes, out: io.BytesIO, err: io.BytesIO) -> Iterator[None]:
    """sys.stdin reads ``data``; sys.stdout and sys.stderr write into ``out`` and ``err``, encoded
    as a process's own streams would be ($PYTHONIOENCODING, else UTF-8)."""
    encoding, _, errors = os.environ.get("PYTHONIOENCODING", "").partition(":")
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    sys.stdout, sys.stderr = (
        io.TextIOWrapper(
            stream, encoding=encoding or "utf-8", errors=errors or default, newline="\n", write_through=True
        )
        for stream, default in ((out, "strict"), (err, "backslashreplace"))
    )
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
            stream.detach()
        sys.stdin, sys.stdout, sys.stderr = saved


MAINTAINER = {
    "GIT_AUTHOR_NAME": "Fork Maintainer",
    "GIT_AUTHOR_EMAIL": "fork@example.org",
    "GIT_COMMITTER_NAME": "Fork Maintainer",
    "GIT_COMMITTER_EMAIL": "fork@example.org",
}


def as_maintainer(where: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``patchtool ARGS`` in ``where``, as a fork's maintainer runs it: their git identity, the
    upstream cache ``cache``."""
    return in_process([*args], cwd=where, env={**os.environ, "PATCHTOOL_CACHE_DIR": str(cache), **MAINTAINER})


def ok_data(res: subprocess.CompletedProcess[str]) -> Any:
    """The ``data`` of a ``--json`` run that must have succeeded."""
    import json

    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)["data"]

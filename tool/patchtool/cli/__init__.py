"""The command line: the typer app, its commands and the rendering of their results."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchtool import errors


def main(argv: list[str] | None = None) -> int:
    import sys

    _closed_streams_to_devnull()
    _names_written_as_bytes()
    from patchtool.cli.app import main as run
    from patchtool.cli.exits import reader_gone
    from patchtool.errors import OutputLost

    try:
        code = run(argv)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader of --version or --help went away: quietly, as for any output
        reader_gone(sys.stdout)
        return 0
    except OutputLost as exc:
        return _output_lost(exc)
    except OSError as exc:  # --version or --help written to a full disk or /dev/full
        reader_gone(sys.stdout)
        return _output_lost(OutputLost.writing("output", exc))
    return code


def _output_lost(exc: errors.OutputLost) -> int:
    """Say on stderr that the output was lost, as far as stderr can still be written."""
    import sys

    from patchtool.cli.exits import reader_gone
    from patchtool.urls import redact

    try:
        sys.stderr.write(redact(f"error: {exc.as_problems()[0].render()}\n"))
        sys.stderr.flush()
    except OSError:
        reader_gone(sys.stderr)
    return int(exc.exit_code)


def _closed_streams_to_devnull() -> None:
    """A standard stream the caller closed (``>&-``, ``<&-``) reads and writes nothing instead of
    failing on first use: descriptors 0-2 are opened on /dev/null where they are closed (so no file
    the command opens takes their number), and sys.stdin/stdout/stderr made over them."""
    import os
    import sys

    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            if (got := os.open(os.devnull, os.O_RDWR)) != fd:
                os.dup2(got, fd)
                os.close(got)
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False))  # noqa: SIM115 -- the process's own stream


def _names_written_as_bytes() -> None:
    """A file name that is not UTF-8 (held, as Python holds it, with surrogate escapes) is written
    to stdout and stderr as its own bytes, as git writes it, whatever the locale's error handler."""
    import io
    import sys

    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="surrogateescape")

"""The command line: the typer app, its commands and the rendering of their results."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    import sys

    _closed_streams_to_devnull()
    from patchtool.cli.app import main as run
    from patchtool.cli.runner import reader_gone

    try:
        code = run(argv)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader of --version or --help went away: quietly, as for any output
        reader_gone(sys.stdout)
        return 0
    return code


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
            got = os.open(os.devnull, os.O_RDWR)
            if got != fd:
                os.dup2(got, fd)
                os.close(got)
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False))

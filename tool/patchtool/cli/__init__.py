"""The command line: the typer app, its commands and the rendering of their results."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    import sys

    if argv is None:  # this process's own command line: a stopped rebase's warm process may run it
        if "rebase" in sys.argv[1:]:  # any other command does not even import the module
            from patchtool.cli import warm

            code = warm.run(sys.argv[1:])
            if code is not None:
                return code
    from patchtool.cli.app import main as run
    from patchtool.cli.runner import reader_gone

    try:
        code = run(argv)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader of --version or --help went away: quietly, as for any output
        reader_gone(sys.stdout)
        return 0
    return code

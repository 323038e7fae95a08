"""The command line: the typer app, its commands and the rendering of their results."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from patchtool.cli.app import main as run

    return run(argv)

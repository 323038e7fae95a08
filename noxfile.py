"""Sessions for the patch repository. `nox -l` lists them; each passes *session.posargs through."""

from __future__ import annotations

import nox

nox.options.sessions = ["check", "tests"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
def tests(session: nox.Session) -> None:
    """Run every test tier: parsing, git mechanics, and real sglang from PyPI (cached in .cache/)."""
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy --strict on tool/."""
    session.install("-e", ".[lint]")
    session.run("ruff", "check", "tool", "tests", "noxfile.py")
    session.run("mypy", *session.posargs)


@nox.session
def apply(session: nox.Session) -> None:
    """Build the patched tree: the pinned sglang plus the series, in build/<pin> (pass --pin P to choose)."""
    session.install("-e", ".")
    session.run("patchtool", "apply", "--force", *session.posargs)


@nox.session
def check(session: nox.Session) -> None:
    """What a pull request must pass: manifest, pins, patch files, application and assumption checks."""
    session.install("-e", ".")
    session.run("patchtool", "check", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Time check/apply of a 30-patch series against plain git on real sglang (see bench/README.md)."""
    session.install("-e", ".")
    session.run("patchtool", "check")  # imports the pin into the cache if needed
    session.run("python", "bench/run.py", "--patchtool", "patchtool", *session.posargs)

"""The sglang fork's sessions. `nox -l` is this menu; `nox -s NAME` runs one; `nox` alone runs check and tests.

Start here: `nox -s wheel` builds the patched sglang wheel into dist/, `nox -s tests`
runs every test tier. What follows `--` goes to the command a session runs, e.g.
`nox -s wheel -- --json`.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import nox
from packaging.version import InvalidVersion, Version

nox.options.sessions = ["check", "tests"]
nox.options.reuse_existing_virtualenvs = True

ROOT = Path(__file__).parent
# git pins build through pypa/build; the tests build sglang from a git checkout without isolation
BUILD_DEPS = ["build>=1.2"]
# the tests on every core; the workers share the real-upstream cache and wait on its lock (tests/conftest.py)
PARALLEL = ["-n", "auto"]
TEST_BUILD_DEPS = [*BUILD_DEPS, "setuptools>=68", "setuptools-scm>=8", "wheel"]  # sglang 0.5.10.post1 builds with wheel


def _pin_version(path: Path) -> Version:
    try:
        return Version(tomllib.loads(path.read_text(encoding="utf-8"))["version"])
    except (OSError, KeyError, TypeError, ValueError, InvalidVersion):
        return Version("0")  # a broken pin sorts first; `patchtool check` names what is wrong


PINS = [p.stem for p in sorted((ROOT / "upstream-pins").glob("*.toml"), key=lambda p: (_pin_version(p), p.stem))]
NEWEST_PIN = PINS[-1] if PINS else None


def _wanted_pins(pins: list[str]) -> list[str]:
    """The pins worth a wheel: the active one and those some patch's applies_to admits (an old pin a
    rebase left behind is not offered; `patchtool pin list` shows it, `patchtool pin remove` drops it)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        manifest = tomllib.loads((ROOT / "patchset.toml").read_text(encoding="utf-8"))
        specs = [SpecifierSet(str(p.get("applies_to", ""))) for p in manifest.get("patch", [])]
    except (OSError, ValueError, AttributeError, InvalidSpecifier):
        return pins  # a broken manifest: offer every pin; `patchtool check` names what is wrong
    return [
        p
        for p in pins
        if p == manifest.get("pin") or any(_pin_version(ROOT / "upstream-pins" / f"{p}.toml") in s for s in specs)
    ]


WHEEL_PINS = _wanted_pins(PINS)


@nox.session
def wheel(session: nox.Session) -> None:
    """Build the patched sglang wheel for the active pin into dist/ (`-- --pin P` for another pin)."""
    session.install("-e", ".", *BUILD_DEPS)
    session.run("patchtool", "build", "--out", "dist", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """Run every test tier: parsing, git mechanics, and real sglang from PyPI (cached in .cache/),
    on every core (pytest-xdist; the workers share one real-upstream cache). Arguments after
    `--` go to pytest after those: `nox -s tests -- tests/test_cli.py`, `-- -n 0` for one process."""
    session.install("-e", ".[test]", *TEST_BUILD_DEPS)
    session.run("pytest", *PARALLEL, *session.posargs)


@nox.session(name="tests-busy", default=False)
def tests_busy(session: nox.Session) -> None:
    """The README's test run on a busy machine: one spinning process per core beside `pytest -n auto`,
    $PATCHTOOL_BUSY_RUNS times in a row (default 3). No test may depend on the wall clock; run this
    before resolving an issue that touches tests with processes, locks or limits (CONTRIBUTING.md)."""
    import subprocess
    import sys

    session.install("-e", ".[test]", *TEST_BUILD_DEPS)
    runs = int(os.environ.get("PATCHTOOL_BUSY_RUNS", "3"))
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        for n in range(1, runs + 1):
            session.log(f"busy run {n} of {runs}, beside {len(spinners)} spinning processes")
            session.run("pytest", *PARALLEL, *session.posargs)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@nox.session(default=False)
def fuzz(session: nox.Session) -> None:
    """The model of the editing commands (tests/hostile/test_model.py) and the generative hostile test
    (tests/hostile/test_generative.py) with random seeds, run longer.

    $PATCHTOOL_FUZZ_EXAMPLES examples (default 200) of up to $PATCHTOOL_FUZZ_STEPS steps (default 30); CI
    runs it derandomized and small. A failure is kept in .cache/hypothesis-model/ and replayed first next time.
    """
    session.install("-e", ".[test]")
    budget = {
        "PATCHTOOL_FUZZ_EXAMPLES": os.environ.get("PATCHTOOL_FUZZ_EXAMPLES", "200"),
        "PATCHTOOL_FUZZ_STEPS": os.environ.get("PATCHTOOL_FUZZ_STEPS", "30"),
    }
    session.run(
        "pytest", "tests/hostile/test_model.py", "tests/hostile/test_generative.py", *session.posargs, env=budget
    )


@nox.session
def docs(session: nox.Session) -> None:
    """Build the reference (docs/, mkdocs.yml) with mkdocs --strict: a broken link or anchor fails.

    The site goes to the session's temporary directory; to read it, `mkdocs serve` in an environment
    with the same mkdocs-material."""
    session.install("mkdocs-material>=9.5,<10")
    site = Path(session.create_tmp()) / "site"
    session.run(
        "mkdocs", "build", "--strict", "--site-dir", str(site), *session.posargs, env={"NO_MKDOCS_2_WARNING": "1"}
    )  # Material's banner about MkDocs 2.0 is not about these docs


@nox.session
def check(session: nox.Session) -> None:
    """What a pull request must pass: manifest, pins, patch files, application and assumption checks."""
    session.install("-e", ".")
    session.run("patchtool", "check", *session.posargs)


LINTED = ("tool", "tests", "bench", "noxfile.py")


@nox.session
def lint(session: nox.Session) -> None:
    """What `.ci/run` and `.pre-commit-config.yaml` check: ruff's lint and format, mypy --strict on tool/."""
    session.install("-e", ".[lint]", *BUILD_DEPS)
    session.run("ruff", "check", *LINTED)
    session.run("ruff", "format", "--check", *LINTED)
    session.run("mypy", *session.posargs)


@nox.session
def apply(session: nox.Session) -> None:
    """Build the patched tree: the pinned sglang plus the series, in build/<pin> (pass --pin P to choose)."""
    session.install("-e", ".")
    session.run("patchtool", "apply", "--force", *session.posargs)


@nox.session(default=False)
@nox.parametrize("pin", [nox.param(p, id=p) for p in WHEEL_PINS])
def wheels(session: nox.Session, pin: str) -> None:
    """The patched wheel for one pin in upstream-pins/ that the series is for (the active one, and those some
    patch's applies_to admits), into dist/ (`nox -s wheels` builds each)."""
    session.install("-e", ".", *BUILD_DEPS)
    session.run("patchtool", "build", "--pin", pin, "--out", "dist", *session.posargs)


@nox.session(default=False)
def scan(session: nox.Session) -> None:
    """The series against the 4 newest upstream releases (a patch x version matrix, also as the page
    scan.html), then the rebase report for the newest as rebase-report.html and rebase-report.md:
    what the nightly runs. Each page is one self-contained file. `-- --json` for the matrix."""
    session.install("-e", ".")
    for report in ("rebase-report.html", "rebase-report.md"):  # stdout stays the matrix alone
        session.run(
            "patchtool",
            "rebase",
            "--to",
            "latest",
            "--dry-run",
            "--report",
            report,
            success_codes=[0, 3, 5],
            silent=True,
        )
    # last, so the reports exist either way: exit 5 (conflicts predicted) fails the session, and the nightly
    session.run("patchtool", "scan", "--newest", "4", "--html", "scan.html", *session.posargs)


@nox.session(name="check-newest", default=False)
def check_newest(session: nox.Session) -> None:
    """`check` against the newest pin in upstream-pins/ (what the nightly runs until `patchtool scan` does)."""
    if NEWEST_PIN is None:
        session.error("no pins in upstream-pins/")
    session.install("-e", ".")
    session.run("patchtool", "check", "--pin", NEWEST_PIN, *session.posargs)


@nox.session(venv_backend="none", default=False)
def gpu(session: nox.Session) -> None:
    """The GPU checks (tests/gpu) under a 7-minute budget, in the GPU image's own python3 (or
    $PATCHTOOL_GPU_PYTHON), which must have torch, triton and pytest: nothing is installed. Writes
    gpu-results/<start>-<device>.json. `-- --tree gpu-tree.tar.gz` where the patched tree cannot be
    built; `-- --help` for the rest."""
    python = os.environ.get("PATCHTOOL_GPU_PYTHON", "python3")
    session.run(python, "tests/gpu/run.py", *session.posargs, external=True)


@nox.session
def bench(session: nox.Session) -> None:
    """Time check/apply of a 30-patch series against plain git on real sglang (see bench/README.md)."""
    session.install("-e", ".")
    session.run("patchtool", "check")  # imports the pin into the cache if needed
    session.run("python", "bench/run.py", "--patchtool", "patchtool", *session.posargs)


@nox.session(name="bench-wheel")
def bench_wheel(session: nox.Session) -> None:
    """Time `patchtool build` against `wheel unpack` + `wheel pack` of the same sglang wheel (bench/README.md)."""
    session.install("-e", ".", "wheel")
    session.run("patchtool", "check")  # downloads and imports the pin's wheel if needed
    session.run("python", "bench/wheel_bench.py", "--patchtool", "patchtool", *session.posargs)

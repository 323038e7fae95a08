"""The standard build frontend (pypa/build), used as a library to build a wheel from a checkout.

Only the extra environment is ours (the pretend version, SOURCE_DATE_EPOCH); the
backend runs in build's own subprocess, isolated in a fresh environment by default. No process the
build starts holds the user's terminal: the backend's hooks run with stdin from /dev/null, their
output captured, in a session of their own; build's own installers (pip) run while this process's
stdin is /dev/null (build captures their output).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from patchtool.errors import BuildError, UsageError

_TAIL = 40  # lines of backend output quoted when a build fails


def build_wheel(srcdir: Path, outdir: Path, *, env: Mapping[str, str], isolation: bool) -> tuple[Path, tuple[str, ...]]:
    """Build one wheel of the project at ``srcdir`` into ``outdir``; ``env`` reaches the backend.

    Returns the wheel and the warnings the backend raised (build re-raises them in this
    process; they are returned, not printed).
    """
    with warnings.catch_warnings(record=True) as caught, _stdin_not_a_terminal():
        warnings.simplefilter("always")
        wheel = _build(srcdir, outdir, env=env, isolation=isolation)
    return wheel, tuple(dict.fromkeys(str(w.message).strip().split("\n", 1)[0] for w in caught))


def _build(srcdir: Path, outdir: Path, *, env: Mapping[str, str], isolation: bool) -> Path:
    try:
        import build
        import build.env
    except ImportError:
        raise UsageError(
            "building from a git pin needs the 'build' package (pypa/build)", hint="pip install build"
        ) from None

    def runner(cmd: Sequence[str], cwd: str | None = None, extra_environ: Mapping[str, str] | None = None) -> None:
        _quiet(cmd, cwd, {**(extra_environ or {}), **env})

    try:
        if isolation:
            with build.env.DefaultIsolatedEnv() as venv:
                builder = build.ProjectBuilder.from_isolated_env(venv, srcdir, runner=runner)
                venv.install(builder.build_system_requires)
                venv.install(builder.get_requires_for_build("wheel"))
                return Path(builder.build("wheel", outdir))
        builder = build.ProjectBuilder(srcdir, runner=runner)
        missing = builder.check_dependencies("wheel")
        if missing:
            names = sorted(chain[-1] for chain in missing)
            raise UsageError(
                f"--no-isolation, but the build needs {', '.join(names)}, which is not installed",
                hint=f"pip install {' '.join(names)}, or build with isolation",
            )
        return Path(builder.build("wheel", outdir))
    except build.BuildBackendException as exc:
        output = getattr(exc.exception, "output", None) or b""
        tail = "\n".join(output.decode("utf-8", "replace").splitlines()[-_TAIL:])
        raise BuildError(
            f"the build backend failed in {srcdir.name}/: {exc}\n{tail}".rstrip(),
            hint="build the patched tree by hand (patchtool apply) to see the whole log",
        ) from None
    except build.FailedProcessError as exc:
        raise BuildError(
            f"installing the build requirements failed: {exc}", hint="check the network, or build with --no-isolation"
        ) from None
    except build.BuildException as exc:
        raise BuildError(f"the build could not start: {exc}") from None


def _quiet(cmd: Sequence[str], cwd: str | None, env: Mapping[str, str]) -> None:
    """A backend hook as pyproject_hooks' quiet runner runs it (output captured, quoted when it
    fails), with no terminal: stdin from /dev/null and a session of its own."""
    subprocess.run(
        list(cmd),
        cwd=cwd,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        check=True,
    )


@contextlib.contextmanager
def _stdin_not_a_terminal() -> Iterator[None]:
    """This process's stdin on /dev/null while it builds, where it was a terminal: build starts
    its installers with the stdin it finds, and no process of a build may hold the terminal."""
    if not os.isatty(0):
        yield
        return
    saved = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
        os.close(devnull)
        yield
    finally:
        os.dup2(saved, 0)
        os.close(saved)

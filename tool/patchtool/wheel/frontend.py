"""The standard build frontend (pypa/build), used as a library to build a wheel from a checkout.

Only the extra environment is ours (the pretend version, SOURCE_DATE_EPOCH); the
backend runs in build's own subprocess, isolated in a fresh environment by default.

The backend is someone else's code (the git pin's repository chose it), so each of its hook
processes runs without a terminal, in a Landlock sandbox (``confine.Sandbox``): it writes only
beneath the tree it builds and two temporary directories of its own (one for the wheel); it reads
only those, the system's directories, the Python that runs it, the isolated environment (without
writing there) and the ``reads`` it is given; it opens no TCP connection. Its build requirements
are installed before, by pip, in a sandbox of pip's own (``_install``): it writes only the isolated
environment and its own temporary directory, and connects only to the index's ports.

What the backend leaves is read as hostile: its wheel is taken only as a regular file named
directly in its wheel directory, opened without following a link, and copied through that
descriptor into the output directory, which the sandbox may not write (``_take_wheel``).
"""

from __future__ import annotations

import configparser
import contextlib
import errno
import functools
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import urllib.parse
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from patchtool import confine
from patchtool.errors import BuildError, UsageError

_TAIL = 40  # lines of backend output quoted when a build fails
# Sockets the backend could otherwise find by name and use: the ssh agent holds the user's keys.
_UNSET = ("SSH_AUTH_SOCK",)


def build_wheel(
    srcdir: Path,
    outdir: Path,
    *,
    env: Mapping[str, str],
    isolation: bool,
    confined: bool = True,
    reads: Sequence[Path] = (),
) -> tuple[Path, tuple[str, ...]]:
    """Build one wheel of the project at ``srcdir`` into ``outdir``; ``env`` reaches the backend.

    ``confined``: the backend runs in its sandbox where the kernel has Landlock; ``reads``: more
    directories it may read (the checkout around ``srcdir``, its git directory).

    Returns the wheel and the warnings the backend raised (build re-raises them in this
    process; they are returned, not printed).
    """
    with warnings.catch_warnings(record=True) as caught, _stdin_not_a_terminal():
        warnings.simplefilter("always")
        wheel = _build(srcdir, outdir, env=env, isolation=isolation, confined=confined, reads=reads)
    return wheel, tuple(dict.fromkeys(str(w.message).strip().split("\n", 1)[0] for w in caught))


def _build(
    srcdir: Path, outdir: Path, *, env: Mapping[str, str], isolation: bool, confined: bool, reads: Sequence[Path]
) -> Path:
    try:
        import build
        import build.env
    except ImportError:
        raise UsageError(
            "building from a git pin needs the 'build' package (pypa/build)", hint="pip install build"
        ) from None

    srcdir, outdir = srcdir.absolute(), outdir.absolute()
    outdir.mkdir(parents=True, exist_ok=True)
    sandboxed = confined and confine.support().usable
    try:
        with contextlib.ExitStack() as stack:
            venv = stack.enter_context(build.env.DefaultIsolatedEnv()) if isolation else None
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="patchtool-backend-")))
            # the backend's wheel directory: its own, beside (not in) scratch, so it cannot be swapped for a link
            wheels = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="patchtool-wheel-")))
            box = confine.Sandbox(
                writes=(srcdir, wheels, scratch),
                reads=(*confine.SYSTEM, *confine.python_reads(), *([Path(venv.path)] if venv else []), *reads),
            )
            environ = {k: v for k, v in os.environ.items() if not (sandboxed and k in _UNSET)}

            def runner(
                cmd: Sequence[str], cwd: str | None = None, extra_environ: Mapping[str, str] | None = None
            ) -> None:
                subprocess.run(
                    confine.sandboxed(cmd, box) if sandboxed else confine.reaped(cmd),
                    cwd=cwd,
                    env={**environ, **(extra_environ or {}), **env, "TMPDIR": str(scratch)},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # no terminal to read from or signal
                    check=True,
                )
                _hook_output_is_plain(Path(cmd[-1]))

            stack.enter_context(_temporary_files_in(scratch))  # where the hooks' input and output files are
            if venv is not None:
                pipdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="patchtool-pip-")))
                builder = build.ProjectBuilder.from_isolated_env(venv, srcdir, runner=runner)
                install = functools.partial(
                    _install, Path(venv.path), venv.python_executable, pipdir, environ, sandboxed
                )
                install(_by_name(builder.build_system_requires, "its [build-system] requires"))
                install(_by_name(builder.get_requires_for_build("wheel"), "its backend's requirements"))
                return _take_wheel(builder.build("wheel", wheels), wheels, outdir)
            builder = build.ProjectBuilder(srcdir, runner=runner)
            if missing := builder.check_dependencies("wheel"):
                names = sorted(chain[-1] for chain in missing)
                raise UsageError(
                    f"--no-isolation, but the build needs {', '.join(names)}, which is not installed",
                    hint=f"pip install {' '.join(names)}, or build with isolation",
                )
            return _take_wheel(builder.build("wheel", wheels), wheels, outdir)
    except build.BuildBackendException as exc:
        if isinstance(exc.exception, BuildError):  # raised by the runner, wrapped by build
            raise exc.exception from None
        output = getattr(exc.exception, "output", None) or b""
        tail = "\n".join(output.decode("utf-8", "replace").splitlines()[-_TAIL:])
        hint = "build the patched tree by hand (patchtool apply) to see the whole log"
        if sandboxed:
            hint = (
                f"the backend runs confined (Landlock): it may write only beneath {srcdir} and its "
                "temporary directories (its TMPDIR and its wheel's), read only those, the system's and "
                f"Python's directories, and open no TCP connection; a 'Permission denied' outside them is "
                f"that ({confine.OPT_OUT}=0 builds unconfined); {hint}"
            )
        raise BuildError(f"the build backend failed in {srcdir.name}/: {exc}\n{tail}".rstrip(), hint=hint) from None
    except (build.FailedProcessError, subprocess.CalledProcessError) as exc:  # venv.install raises the latter
        raise BuildError(
            f"installing the build requirements failed: {exc}", hint="check the network, or build with --no-isolation"
        ) from None
    except build.BuildException as exc:
        raise BuildError(f"the build could not start: {exc}") from None


def _hook_output_is_plain(control: Path) -> None:
    """The hook's control directory (pyproject_hooks makes it in the backend's writable TMPDIR) is
    still a directory and its ``output.json``, when there is one, a regular file: patchtool reads it
    unconfined once the hook and all it started have ended, so a link there would read what the
    backend may not, and a FIFO would hold patchtool for good. Found by an attack."""
    for path, kind, plain in (
        (control, "directory", stat.S_ISDIR),
        (control / "output.json", "regular file", stat.S_ISREG),
    ):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return  # no answer: pyproject_hooks says the hook failed
        if not plain(mode):
            raise BuildError(
                f"the build backend replaced its hook's {path.name} with something other than a {kind}; "
                "refusing to read it",
                hint="a backend may write its wheel and its tree, not the files the hook answers through",
            )


def _take_wheel(returned: str, wheels: Path, outdir: Path) -> Path:
    """The wheel the backend named, copied into ``outdir``: build joins the name the hook returned
    onto ``wheels``, and it must be a bare file name there (no ``/``, not ``..``) of a regular
    file, opened without following a link and read through that descriptor, so patchtool, which
    may read what the sandbox may not, ships nothing the backend could not read itself."""
    name = returned.removeprefix(str(wheels) + os.sep)
    if "/" in name or name in ("", ".", "..") or "\0" in name:
        raise BuildError(
            f"the build backend named {name!r} as its wheel, which is not a file name in its wheel "
            "directory; refusing it",
            hint="a build_wheel hook returns the bare file name of the wheel it wrote into wheel_directory",
        )
    directory = os.open(wheels, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:  # O_NONBLOCK: a FIFO would block the open; O_NOFOLLOW: a link fails with ELOOP
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory)
        except OSError as exc:
            what = "a symbolic link" if exc.errno == errno.ELOOP else f"not to be opened ({exc.strerror})"
        else:
            with open(fd, "rb") as src:
                if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
                    what = "not a regular file"
                else:
                    target = outdir / name
                    out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
                    with open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
                    return target
    finally:
        os.close(directory)
    raise BuildError(
        f"the build backend named {name!r} as its wheel, which is {what}; refusing it",
        hint="patchtool takes only a regular file that the backend wrote into its wheel directory",
    )


def _install(
    venv: Path, python: str, pipdir: Path, environ: Mapping[str, str], sandboxed: bool, requirements: Sequence[str]
) -> None:
    """pip installs ``requirements`` into the isolated environment ``venv``, as pypa/build would,
    but in a sandbox of its own: a requirement is the project's choice, and an installed wheel's
    ``.pth`` file runs in every later start of the environment's Python (pip's next install among
    them). pip may write only the environment and ``pipdir`` (its temporary files and a cache of
    its own, so nothing it runs plants a wheel in the user's pip cache), read what the backend may
    read and pip's configuration, and connect to the index's ports alone."""
    if not requirements:
        return
    listed = pipdir / "requirements.txt"
    listed.write_text("\n".join(requirements) + "\n", encoding="utf-8")
    has_pip = any(venv.glob("lib/python*/site-packages/pip/__init__.py"))  # else build's venv uses the outer pip
    pip = [python, "-Im", "pip"] if has_pip else [sys.executable, "-m", "pip", "--python", python]
    cmd = [
        *pip,
        "install",
        "--use-pep517",
        "--no-warn-script-location",
        "--no-compile",
        "--no-input",
        "-r",
        str(listed),
    ]
    box = confine.Sandbox(
        writes=(venv, pipdir),
        reads=(*confine.SYSTEM, *confine.python_reads(), *_pip_reads()),
        connects=_index_ports(),
    )
    res = subprocess.run(
        confine.sandboxed(cmd, box) if sandboxed else confine.reaped(cmd),
        env={
            **environ,
            "TMPDIR": str(pipdir),
            "PIP_CACHE_DIR": str(pipdir / "cache"),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        },
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        check=False,
    )
    if res.returncode:
        tail = "\n".join(res.stdout.decode("utf-8", "replace").splitlines()[-_TAIL:])
        hint = "check the network and the requirements' names, or install them yourself and build with --no-isolation"
        if sandboxed:
            hint = (
                f"pip runs confined (Landlock): it may write only the build's environment and its own temporary "
                f"directory, read the system's and Python's directories and its configuration, and connect to the "
                f"ports of the index ({', '.join(map(str, box.connects))}); {hint}"
            )
        raise BuildError(
            f"installing the build requirements failed (pip exit {res.returncode}): {', '.join(requirements)}\n{tail}",
            hint=hint,
        )


def _pip_config_files() -> list[Path]:
    """pip's configuration files, as pip looks for them on Linux (a site file in the environment aside)."""
    home = Path(os.path.expanduser("~"))
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    dirs = [Path(d) for d in (os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep) if d]
    files = [
        *(d / "pip" / "pip.conf" for d in dirs),
        Path("/etc/pip.conf"),
        home / ".pip" / "pip.conf",
        xdg / "pip" / "pip.conf",
    ]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    return files


def _pip_settings() -> list[str]:
    """Every word of pip's settings: its ``PIP_*`` variables, the proxies, and its configuration files."""
    text = [value for key, value in os.environ.items() if key.startswith("PIP_") or key.lower().endswith("_proxy")]
    for file in _pip_config_files():
        parser = configparser.RawConfigParser()
        with contextlib.suppress(OSError, configparser.Error, UnicodeDecodeError):
            parser.read(file, encoding="utf-8")
        text += [value for section in parser.sections() for _, value in parser.items(section)]
    return " ".join(text).split()


def _pip_reads() -> list[Path]:
    """What pip reads beside Python and the system: its configuration and the local files and
    directories its settings name (a ``file:`` index, find-links, constraints, certificates)."""
    out = _pip_config_files()
    out += [Path(os.environ[k]) for k in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR") if os.environ.get(k)]
    for word in _pip_settings():
        if word.startswith("file:"):  # a local index: its pages link to files beside them (<root>/simple, <root>/files)
            path = Path(urllib.parse.unquote(urllib.parse.urlsplit(word).path))
            out += [path, path.parent] if path.is_absolute() and path.parent != path else []
        elif word.startswith("/"):
            out.append(Path(word))
    return out


def _index_ports() -> tuple[int, ...]:
    """The TCP ports pip may connect to: https and http, and every port a url in pip's settings
    (an index, find-links, a proxy) names."""
    ports = {443, 80}
    for word in _pip_settings():
        if "://" in word:
            with contextlib.suppress(ValueError):
                ports.add(urllib.parse.urlsplit(word).port or 443)
    return tuple(sorted(ports))


def _by_name(requirements: Iterable[str], what: str) -> list[str]:
    """``requirements`` as pip is to install them, each one named on the index: a direct reference
    (``name @ file:///...``, ``name @ https://...``) is refused, since pip would build or fetch
    what the project (or its sandboxed backend, which writes its own tree) chose, outside the
    sandbox."""
    from packaging.requirements import InvalidRequirement, Requirement

    out = sorted(requirements)
    for text in out:
        try:
            direct = Requirement(text).url
        except InvalidRequirement as exc:
            raise BuildError(f"the build names a requirement pip cannot read in {what}: {text!r} ({exc})") from None
        if direct:
            raise BuildError(
                f"the build asks for {text!r} in {what}: a direct reference, which pip would build or fetch "
                "outside the backend's sandbox; patchtool installs build requirements only by name",
                hint="install it yourself and build with --no-isolation, if you trust it",
            )
    return out


@contextlib.contextmanager
def _temporary_files_in(directory: Path) -> Iterator[None]:
    """This process's temporary files go to ``directory`` for a while: pyproject_hooks passes each
    hook its input and takes its output through a temporary directory, which the sandbox must
    reach."""
    before = tempfile.tempdir
    tempfile.tempdir = str(directory)
    try:
        yield
    finally:
        tempfile.tempdir = before


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

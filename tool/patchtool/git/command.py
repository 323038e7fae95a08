"""How patchtool runs git: GitPython's command wrapper (``git.Git``), isolated, with its failures
mapped to ``GitError``.

Every git process patchtool starts goes through ``Runner`` (or, for GitPython's persistent
``cat-file``, through the same ``Git`` subclass), so the isolation and the error mapping are
written once:

- git sees neither the user's configuration (``GIT_CONFIG_GLOBAL=/dev/null``, no system file) nor
  ``GIT_*`` variables inherited from the caller (a hook's ``GIT_DIR`` or ``GIT_INDEX_FILE`` would
  point git at another repository or index). GitPython builds each child's environment from
  ``os.environ`` and can only add to it, so an inherited variable is removed with ``env -u``;
- ``GitCommandError``/``GitCommandNotFound`` become ``GitError`` (exit 70), naming the command.

GitPython is imported on first use: a command that never runs git does not pay for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from patchtool.errors import GitError

if TYPE_CHECKING:
    import git as gitpython

T = TypeVar("T")

# what every git command sees instead of the user's configuration and language
ISOLATION = MappingProxyType({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                              "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANGUAGE": "C"})
# what decides who the user is to git: their identity variables and where their configuration is
USER_IDENTITY_ENV = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE", "GIT_COMMITTER_NAME",
                     "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM",
                     "GIT_CONFIG_NOSYSTEM")


@functools.cache
def _load() -> None:
    """Import GitPython, once, when git is first run; the `git version` it runs on import is
    isolated like every other git command (a broken ~/.gitconfig must not stop patchtool)."""
    try:
        with _isolated_environ():
            import git  # noqa: F401
    except ImportError as exc:
        raise _not_runnable(exc) from None


@contextlib.contextmanager
def _isolated_environ() -> Iterator[None]:
    """``os.environ`` as an isolated git child sees it, for the duration: GitPython's own
    `git version` takes its environment from ``os.environ`` and nothing else."""
    inherited = [k for k in os.environ if k.startswith("GIT_") and not k.startswith("GIT_PYTHON_")]
    saved = {k: os.environ.get(k) for k in (*inherited, *ISOLATION)}
    for key in inherited:
        del os.environ[key]
    os.environ.update(ISOLATION)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _not_runnable(exc: ImportError) -> GitError:
    """Why GitPython could not start, said as what failed: no git, or git's own words."""
    if isinstance(exc, ModuleNotFoundError) and exc.name == "git":
        return GitError("GitPython is not installed", hint="install patchtool with its dependencies")
    cause = exc.__cause__
    status = getattr(cause, "status", None)
    if status is None:  # GitPython found no git to run
        return GitError("git is not installed or not on PATH", hint="install git and put it on PATH")
    said = str(getattr(cause, "stderr", "")).strip().removeprefix("stderr: ").strip("'")
    return GitError(f"git does not run: `git version` failed ({status}): {said}",
                    hint="run `git version` to see it fail; fix or reinstall git")


@functools.cache
def _isolated_class() -> type[gitpython.Git]:
    _load()
    import git

    class IsolatedGit(git.Git):
        """``git.Git`` whose every child (commands, persistent cat-file) runs isolated."""

        _keep: frozenset[str] = frozenset()  # inherited GIT_* variables this flavour passes on
        _extra: Mapping[str, str] = ISOLATION

        def execute(self, command: Any, istream: Any = None, **kwargs: Any) -> Any:  # type: ignore[override]
            env = {**self._extra, **(kwargs.pop("env", None) or {})}
            inherited = sorted(k for k in os.environ if k.startswith("GIT_") and not k.startswith("GIT_PYTHON_")
                               and k not in env and k not in self._keep)
            if inherited:
                command = [_env_program(), *(f for k in inherited for f in ("-u", k)), *command]
            return super().execute(command, istream, env=env, **kwargs)

    return IsolatedGit


@functools.cache
def _user_class() -> type[gitpython.Git]:
    class UserGit(_isolated_class()):  # type: ignore[misc]
        """The flavour that sees the user's identity and configuration (for ``git var``)."""

        _keep = frozenset(USER_IDENTITY_ENV)
        _extra: Mapping[str, str] = MappingProxyType({"LC_ALL": "C", "LANGUAGE": "C", "GIT_TERMINAL_PROMPT": "0"})

    return UserGit


@functools.cache
def _env_program() -> str:
    return shutil.which("env") or "/usr/bin/env"


def new_git(working_dir: Path | None = None, *, user: bool = False) -> gitpython.Git:
    """A fresh isolated ``git.Git`` (one per thread: its persistent cat-file is not shared)."""
    cls = _user_class() if user else _isolated_class()
    return cls(str(working_dir) if working_dir is not None else None)


@contextlib.contextmanager
def mapped(what: str) -> Iterator[None]:
    """GitPython's failures as GitError: the one place they are translated."""
    _load()
    import git

    try:
        yield
    except git.GitCommandNotFound:
        raise GitError("git is not installed or not on PATH") from None
    except git.GitCommandError as exc:
        said = exc.stderr.strip() if isinstance(exc.stderr, str) else ""
        raise GitError(f"{what} failed ({exc.status}): {said}") from None


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    returncode: int
    stdout: bytes
    stderr: str


class Runner:
    """Runs git commands for one repository (``--git-dir``) or in one directory (``cwd``)."""

    def __init__(self, *, git_dir: Path | None = None, cwd: Path | None = None, user: bool = False) -> None:
        self._prefix = (f"--git-dir={git_dir}",) if git_dir is not None else ()
        self._cwd, self._user = cwd, user

    @functools.cached_property
    def _git(self) -> gitpython.Git:
        """Made on the first command: a Runner that runs none imports no GitPython."""
        return new_git(self._cwd, user=self._user)

    def run(self, *args: str, input: bytes | None = None, env: dict[str, str] | None = None,
            check: bool = True) -> Result:
        argv = ["git", *self._prefix, *args]
        with mapped(_name(args)):
            if input is None:
                status, out, err = self._git.execute(argv, env=env, with_extended_output=True,
                                                     with_exceptions=False, stdout_as_string=False,
                                                     strip_newline_in_stdout=False)
            else:
                proc = Process(self._git.execute(argv, istream=subprocess.PIPE, as_process=True, env=env))
                out, raw = proc.popen.communicate(input)
                status, err = proc.popen.returncode, raw.decode(errors="replace")
        result = Result(status, out or b"", err)
        if check and status != 0:
            raise GitError(f"{_name(args)} failed ({status}): {err.strip()}")
        return result

    def out(self, *args: str, env: dict[str, str] | None = None) -> str:
        """stdout of a command that must succeed, stripped."""
        return self.run(*args, env=env).stdout.decode().strip()

    def start(self, *args: str, stdin: bool = False, stdout: bool = True) -> Process:
        """A git process left running."""
        argv = ["git", *self._prefix, *args]
        with mapped(_name(args)):
            return Process(self._git.execute(argv, istream=subprocess.PIPE if stdin else None, as_process=True,
                                             with_stdout=stdout))


class Process:
    """A git process left running: GitPython's ``AutoInterrupt``, which kills it if it is dropped
    unfinished, and the ``Popen`` under it."""

    def __init__(self, running: Any) -> None:
        self._running = running  # held: dropping it ends the process
        assert running.proc is not None
        self.popen: subprocess.Popen[bytes] = running.proc


def _name(args: Sequence[str]) -> str:
    """``git <subcommand> ...`` for messages: no paths, no contents."""
    sub = next((a for a in args if not a.startswith("-")), "")
    return f"git {sub}" + (" ..." if len(args) > 1 else "")


class Pending(Generic[T]):
    """A git command running alongside the caller's work: started early, read when needed."""

    def __init__(self, runner: Runner, args: Sequence[str], convert: Callable[[bytes], T]) -> None:
        self._name = _name(args)
        self._convert = convert
        self._proc = runner.start(*args)

    def result(self) -> T:
        out, err = self._proc.popen.communicate()
        if self._proc.popen.returncode:
            raise GitError(f"{self._name} failed ({self._proc.popen.returncode}): "
                           f"{err.decode(errors='replace').strip()}")
        return self._convert(out)

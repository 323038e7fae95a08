"""How patchtool runs git: GitPython's command wrapper (``git.Git``), isolated, with its failures
mapped to ``GitError``.

Every git process patchtool starts goes through ``Runner`` (or, for GitPython's persistent
``cat-file``, through the same ``Git`` subclass), so the isolation and the error mapping are
written once:

- git sees neither the user's configuration (``GIT_CONFIG_GLOBAL=/dev/null``, no system file) nor
  ``GIT_*`` variables inherited from the caller (a hook's ``GIT_DIR`` or ``GIT_INDEX_FILE`` would
  point git at another repository or index). GitPython builds each child's environment from
  ``os.environ`` and can only add to it, so an inherited variable is removed with ``env -u``;
- ``GitCommandError``/``GitCommandNotFound`` become ``GitError`` (exit 70), naming the command;
- no data is ever read as an option: a command is its subcommand, its fixed options (each one
  word starting with ``-``, a value attached: ``-mTEXT``, ``--format=F``), then its data (refs,
  revisions, urls, paths) after ``--end-of-options`` and its pathspecs after ``--``, as ``Argv``
  builds them. For the few commands git 2.39 does not end options for, data that starts with a
  dash is refused instead;
- no git talks to a remote by a protocol the user did not allow: https alone
  (``GIT_ALLOW_PROTOCOL``, ``GIT_PROTOCOL_FROM_USER=0``); a fetch that the user allowed local urls
  for widens it (``remote_env``). No ``-c`` is ever given.

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
ISOLATION = MappingProxyType(
    {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
        "LANGUAGE": "C",
        "GIT_PROTOCOL_FROM_USER": "0",
        "GIT_ALLOW_PROTOCOL": "https",
    }
)
# the commands git 2.39 does not end options for at --end-of-options (they reject it, take it as
# a revision, or print it: rev-parse): their data goes in place, and data starting with "-" is refused
NO_END_OF_OPTIONS = frozenset({"check-ref-format", "checkout", "range-diff", "reset", "rev-parse", "var"})
# what decides who the user is to git: their identity variables and where their configuration is
USER_IDENTITY_ENV = (
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_COMMITTER_DATE",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
)


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
    return GitError(
        f"git does not run: `git version` failed ({status}): {said}",
        hint="run `git version` to see it fail; fix or reinstall git",
    )


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
            inherited = sorted(
                k
                for k in os.environ
                if k.startswith("GIT_") and not k.startswith("GIT_PYTHON_") and k not in env and k not in self._keep
            )
            if inherited:
                command = [_env_program(), *(f for k in inherited for f in ("-u", k)), *command]
            # no terminal: stdin is /dev/null unless given (GitPython's default), output is piped, and
            # a session of its own leaves git no controlling terminal to push keystrokes into
            return super().execute(command, istream, env=env, start_new_session=True, **kwargs)

    return IsolatedGit


@functools.cache
def _user_class() -> type[gitpython.Git]:
    class UserGit(_isolated_class()):  # type: ignore[misc]
        """The flavour that sees the user's identity and configuration (for ``git var``)."""

        _keep = frozenset(USER_IDENTITY_ENV)
        _extra: Mapping[str, str] = MappingProxyType(
            {
                "LC_ALL": "C",
                "LANGUAGE": "C",
                "GIT_TERMINAL_PROMPT": "0",
                "GIT_PROTOCOL_FROM_USER": "0",
                "GIT_ALLOW_PROTOCOL": "https",
            }
        )

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


def remote_env(*, allow_local: bool) -> dict[str, str]:
    """What a git that fetches from a remote the user chose runs with: https alone, or with
    ``allow_local`` (the user's ``--allow-local-urls``) plain http and local repositories too."""
    return {"GIT_PROTOCOL_FROM_USER": "0", "GIT_ALLOW_PROTOCOL": "https:http:file" if allow_local else "https"}


LOCAL_ONLY_ENV = MappingProxyType({"GIT_PROTOCOL_FROM_USER": "0", "GIT_ALLOW_PROTOCOL": "file"})
"""What a fetch between two of patchtool's own repositories runs with: local transport alone."""


@dataclasses.dataclass(frozen=True, slots=True)
class Argv:
    """One git command line: the subcommand, its fixed options, its data after
    ``--end-of-options`` and its pathspecs after ``--``. The one place a command line is built."""

    command: str
    options: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    paths: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for option in self.options:
            if not option.startswith("-") or option in ("--", "--end-of-options"):
                raise ValueError(f"git {self.command}: {option!r} is not an option; data goes in args or paths")
        if self.command in NO_END_OF_OPTIONS:
            for word in (*self.args, *(self.paths or ())):
                if word.startswith("-"):
                    raise GitError(f"refusing to run git {self.command} with {word!r}: it would be read as an option")

    def words(self) -> list[str]:
        out = [*self.command.split(" "), *self.options]  # "worktree add": a subcommand's subcommand
        if self.args:
            out += self.args if self.command in NO_END_OF_OPTIONS else ["--end-of-options", *self.args]
        if self.paths is not None:
            out += ["--", *self.paths]
        return out

    @property
    def name(self) -> str:
        """``git <subcommand> ...`` for messages: no paths, no contents."""
        return f"git {self.command}" + (" ..." if self.options or self.args or self.paths else "")


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

    def run(
        self,
        command: str,
        *options: str,
        args: Sequence[str] = (),
        paths: Sequence[str] | None = None,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
    ) -> Result:
        """``git command options... --end-of-options args... -- paths...``."""
        argv = Argv(command, options, tuple(args), None if paths is None else tuple(paths))
        full = ["git", *self._prefix, *argv.words()]
        with mapped(argv.name):
            if input is None:
                status, out, err = self._git.execute(
                    full,
                    env=dict(env or {}),
                    with_extended_output=True,
                    with_exceptions=False,
                    stdout_as_string=False,
                    strip_newline_in_stdout=False,
                )
            else:
                proc = Process(self._git.execute(full, istream=subprocess.PIPE, as_process=True, env=dict(env or {})))
                out, raw = proc.popen.communicate(input)
                status, err = proc.popen.returncode, raw.decode(errors="replace")
        result = Result(status, out or b"", err)
        if check and status != 0:
            raise GitError(f"{argv.name} failed ({status}): {err.strip()}")
        return result

    def out(
        self,
        command: str,
        *options: str,
        args: Sequence[str] = (),
        paths: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> str:
        """stdout of a command that must succeed, stripped."""
        return self.run(command, *options, args=args, paths=paths, env=env).stdout.decode().strip()

    def start(self, argv: Argv, *, stdin: bool = False, stdout: bool = True) -> Process:
        """A git process left running."""
        with mapped(argv.name):
            return Process(
                self._git.execute(
                    ["git", *self._prefix, *argv.words()],
                    istream=subprocess.PIPE if stdin else None,
                    as_process=True,
                    with_stdout=stdout,
                )
            )


class Process:
    """A git process left running: GitPython's ``AutoInterrupt``, which kills it if it is dropped
    unfinished, and the ``Popen`` under it."""

    def __init__(self, running: Any) -> None:
        self._running = running  # held: dropping it ends the process
        assert running.proc is not None
        self.popen: subprocess.Popen[bytes] = running.proc


class Pending(Generic[T]):
    """A git command running alongside the caller's work: started early, read when needed."""

    def __init__(self, runner: Runner, argv: Argv, convert: Callable[[bytes], T]) -> None:
        self._name = argv.name
        self._convert = convert
        self._proc = runner.start(argv)

    def result(self) -> T:
        out, err = self._proc.popen.communicate()
        if self._proc.popen.returncode:
            raise GitError(
                f"{self._name} failed ({self._proc.popen.returncode}): {err.decode(errors='replace').strip()}"
            )
        return self._convert(out)

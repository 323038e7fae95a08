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
  for widens it (``remote_env``). No ``-c`` is ever given;
- git runs no program a repository chose: every key git reads under a fixed name to run a program
  (``NEUTRAL_CONFIG``: ``core.fsmonitor``, ``core.hooksPath``, the editors, the pager, credential
  helpers, gpg, ...) is set for every process through ``GIT_CONFIG_COUNT``, the command line's
  scope, which no repository file outranks; the families whose names a repository picks
  (``filter.<x>.*``, ``diff.<x>.command``, ``merge.<x>.driver``, ``url.<x>.insteadOf``, includes,
  ``REFUSED_CONFIG``) are read from the repository's configuration files as data and refused by
  name before git runs (``check_config``); diffs run with ``--no-ext-diff --no-textconv``;
- git finds no repository by itself: a command names its git directory (``--git-dir``, and
  ``--work-tree`` for a checked-out tree), found by patchtool's own rule (``discover``: the nearest
  ``.git`` directory or ``gitdir:`` file at or above, never a directory shaped like a bare
  repository); a command that needs no repository runs with ``GIT_DIR`` naming none, so git's
  discovery never reads a stranger's configuration.

GitPython is imported on first use: a command that never runs git does not pay for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from patchtool import confine
from patchtool.errors import GitError, InvalidInput
from patchtool.git import owned

if TYPE_CHECKING:
    import git as gitpython

T = TypeVar("T")

# Every key git reads under a fixed name that makes it run a program, or that lets a repository
# choose what runs: each git process patchtool starts gets these values at the command line's scope
# (GIT_CONFIG_COUNT), which no repository, worktree or included file outranks. docs/trust.md lists them.
NEUTRAL_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),  # a program run on every index refresh (status, add, checkout, ...)
    ("core.hooksPath", os.devnull),  # no hook: git looks for /dev/null/<hook>, which cannot exist
    ("core.sshCommand", "false"),
    ("core.gitProxy", "false"),
    ("core.askPass", ""),
    ("core.editor", ":"),  # ":" is git's "no editor"
    ("sequence.editor", ":"),
    ("core.pager", "cat"),
    ("core.alternateRefsCommand", "true"),  # prints no refs
    ("credential.helper", ""),  # an empty value empties the list, url-specific helpers included
    ("gpg.program", "false"),
    ("gpg.openpgp.program", "false"),
    ("gpg.x509.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.ssh.defaultKeyCommand", "false"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("merge.verifySignatures", "false"),
    ("protocol.allow", "never"),  # GIT_ALLOW_PROTOCOL decides; this stands under it
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("safe.bareRepository", "explicit"),  # the user's own setting, lost with GIT_CONFIG_GLOBAL=/dev/null
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)


def _config_env(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    env = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for n, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = key, value
    return env


def config_env(*extra: tuple[str, str]) -> dict[str, str]:
    """The environment that sets ``extra`` for one git process, beside the neutral values (an
    environment of its own with ``GIT_CONFIG_COUNT`` would replace them)."""
    return _config_env((*NEUTRAL_CONFIG, *extra))


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
        "GIT_PAGER": "cat",
        "GIT_NO_LAZY_FETCH": "1",
        **_config_env(NEUTRAL_CONFIG),
    }
)
# Configuration whose names the repository picks (a driver, a filter, a url rewrite, a file to
# include): no fixed value can neutralise them, so a repository whose configuration holds one is
# refused by name before git runs in it: (section, key), the key None for every key of the section
# (a subsection's name, the part the repository picks, may be anything).
REFUSED_CONFIG: tuple[tuple[str, str | None], ...] = (
    ("filter", None),  # filter.<x>.clean/smudge/process: run on checkout and add
    ("diff", "command"),  # diff.<x>.command: an external diff driver
    ("diff", "textconv"),
    ("merge", "driver"),  # merge.<x>.driver: run by a merge
    ("remote", "uploadpack"),
    ("remote", "receivepack"),
    ("remote", "proxy"),
    ("url", "insteadof"),  # url.<x>.insteadOf: a url the repository rewrites
    ("url", "pushinsteadof"),
    ("include", "path"),  # include.path and includeIf.<cond>.path: another file read as configuration
    ("includeif", "path"),
    ("trailer", "command"),  # trailer.<x>.command and .cmd: run by interpret-trailers
    ("trailer", "cmd"),
)
# diff commands take these so no attribute or configuration runs a driver or a converter
NO_DRIVERS = ("--no-ext-diff", "--no-textconv")
_DIFF_COMMANDS = frozenset({"diff", "diff-tree", "diff-index", "diff-files", "log", "show", "format-patch"})
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
    saved = {k: os.environ.get(k) for k in (*inherited, *ISOLATION, "GIT_DIR")}
    for key in inherited:
        del os.environ[key]
    os.environ.update(ISOLATION)
    os.environ["GIT_DIR"] = os.devnull  # `git version` needs no repository: it finds none
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
            # a Landlock domain of its own (confine.child_preexec): under the confinement no git, nor
            # what it runs, can trace or write into this process, and steer its unconfined thread
            if (preexec := confine.child_preexec(kwargs.pop("preexec_fn", None))) is not None:
                kwargs["preexec_fn"] = preexec
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
                "GIT_PAGER": "cat",
                **_config_env(NEUTRAL_CONFIG),
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


def remote_env(*, allow_local: bool, by_id: bool = False) -> dict[str, str]:
    """What a git that fetches from a remote the user chose runs with: https alone, or with
    ``allow_local`` (the user's ``--allow-local-urls``) plain http and local repositories too.
    ``by_id``: objects wanted by id, sent whatever the repository has (no haves told, as git's own
    fetch of a partial clone's missing objects), since the commits that reach them are here."""
    noop = (("fetch.negotiationAlgorithm", "noop"),) if by_id else ()
    return {
        "GIT_PROTOCOL_FROM_USER": "0",
        "GIT_ALLOW_PROTOCOL": "https:http:file" if allow_local else "https",
        **_config_env((*NEUTRAL_CONFIG, *FETCH_CONFIG, *noop)),
    }


# a fetch slower than 1 KiB/s for 60 s is given up, as a download's every wait is (upstream/index.py);
# what it receives is kept as one pack, whatever its count of objects, so its size bounds the pack (limits.py)
FETCH_CONFIG: tuple[tuple[str, str], ...] = (
    ("http.lowSpeedLimit", "1024"),
    ("http.lowSpeedTime", "60"),
    ("transfer.unpackLimit", "1"),
    ("fetch.unpackLimit", "1"),
)


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
        out = [*self.command.split(" "), *(NO_DRIVERS if self.command in _DIFF_COMMANDS else ()), *self.options]
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


# the most of a pointer file patchtool reads: git reads a `.git` file of at most 1 MiB, and no path
# the kernel resolves is longer than PATH_MAX (4096)
_POINTER_MAX = 1 << 20


def read_pointer(file: Path, *, prefix: bytes = b"") -> str:
    """The path a git pointer file holds (a linked worktree's ``commondir``; a ``.git`` file, after
    its ``prefix`` ``gitdir: ``), read as git 2.39 reads it (``get_common_dir_noenv``,
    ``read_gitfile_gently``): its bytes, with only the newlines and carriage returns at its end
    taken off, never other white space, so ``../../evil `` names ``evil `` as git opens it. Decoded
    as the file system's names are (``os.fsdecode``), so a path that is not UTF-8 is the same path.
    InvalidInput for a file git could not read, or would read otherwise than its bytes say: none
    or empty, not a regular file, over 1 MiB, without the prefix, or with a NUL byte (git would stop
    at it)."""
    try:  # follows a link, as git's open() does; a FIFO opens without waiting, then is refused
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            data = f.read(_POINTER_MAX + 1)
    except OSError as exc:
        raise _unreadable(file, exc.strerror or str(exc)) from None
    if not data:
        raise _unreadable(file, "it is empty")
    if len(data) > _POINTER_MAX:
        raise _unreadable(file, f"it is over {_POINTER_MAX} bytes")
    if not data.startswith(prefix):
        raise _unreadable(file, f"it does not start with {prefix.decode()!r}")
    text = data[len(prefix) :].rstrip(b"\r\n")
    if b"\0" in text:
        raise _unreadable(file, "it holds a NUL byte")
    if prefix and not text:
        raise _unreadable(file, "it names no path")
    return os.fsdecode(text)


def _unreadable(file: Path, why: str) -> InvalidInput:
    return InvalidInput(
        f"cannot read the git pointer file {file} as git does: {why}",
        file=str(file),
        hint="git writes it when it adds a worktree; if the repository is yours, `git worktree repair` puts it "
        "back, else do not use the repository; patchtool runs no git on it",
    )


def common_dir(git_dir: Path) -> Path:
    """The common directory of the repository at ``git_dir``, as git 2.39 finds it
    (``get_common_dir_noenv``): ``git_dir`` itself without a ``commondir`` file, else the path
    that file names (``read_pointer``), relative to ``git_dir`` unless absolute, resolved as git
    resolves it (links first, then ``..``). InvalidInput when it cannot be read or names nothing."""
    pointer = git_dir / "commondir"
    if not os.path.exists(pointer):  # git's file_exists(): stat(), which follows a link
        return git_dir
    named = os.path.join(git_dir, read_pointer(pointer))  # an absolute path replaces git_dir
    try:
        return Path(os.path.realpath(named, strict=True))
    except OSError as exc:
        raise _unreadable(pointer, f"it names {named}, which cannot be resolved: {exc.strerror}") from None


def discover(path: Path) -> tuple[Path, Path] | None:
    """patchtool's own discovery rule: (the git directory, the work tree's top) of the nearest
    ``.git`` directory or ``gitdir:`` file at or above ``path``, None when there is none. Unlike
    git's, it never takes a directory shaped like a bare repository (``HEAD``, ``config``,
    ``objects/`` committed into a patch repository) for one. A ``gitdir:`` file is read as git
    reads it (``read_pointer``)."""
    here = Path(os.path.abspath(path))
    for top in (here, *here.parents):
        dot = top / ".git"
        if dot.is_dir():
            return dot, top
        if dot.is_file():
            try:
                named = read_pointer(dot, prefix=b"gitdir: ")
            except InvalidInput:
                return None  # git refuses it too
            git_dir = Path(os.path.realpath(os.path.join(top, named)))  # as git resolves it
            return (git_dir, top) if git_dir.is_dir() else None
        if os.path.lexists(dot):
            return None  # something else named .git: git refuses it too
    return None


def config_files(git_dir: Path) -> list[Path]:
    """The configuration files git reads for the repository at ``git_dir`` (beside the user's and
    the system's, which patchtool's git never reads): its own, and the common directory's of a
    linked worktree (``common_dir``, read exactly as git reads it), with their per-worktree files."""
    dirs = [git_dir]
    common = common_dir(git_dir)
    if common != git_dir:
        dirs.append(common)
    dirs += sorted((dirs[-1] / "worktrees").glob("*/"))  # each linked worktree's own config.worktree
    return [d / name for d in dirs for name in ("config", "config.worktree") if (d / name).is_file()]


_CHECKED: set[tuple[str, int, int, int]] = set()  # the configuration files found clean, by content


def check_config(git_dir: Path) -> None:
    """Refuse (InvalidInput, naming the file and key) a repository whose configuration holds a key
    of ``REFUSED_CONFIG``: a driver, a filter, a url rewrite or an include, whose names the
    repository picks, so no fixed value could neutralise them. The files are read as data (``git
    config --file F --no-includes``, which runs nothing), once per content. A repository patchtool
    owns (the cache's), or a worktree of one, is first put back to what patchtool wrote
    (``owned.restore``)."""
    if (common := owned.owner(git_dir)) is not None:
        owned.restore(common)
    for file in config_files(git_dir):
        try:
            st = file.stat()
        except OSError:
            continue
        stamp = (str(file), st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp in _CHECKED:
            continue
        res = Runner().run("config", f"--file={file}", "--no-includes", "--null", "--name-only", "--list", check=False)
        if res.returncode != 0:
            raise InvalidInput(
                f"git cannot read the configuration {file}: {res.stderr.strip()}",
                file=str(file),
                hint="repair or remove the file; patchtool runs no git on a repository it cannot read",
            )
        for name in res.stdout.decode("utf-8", "replace").split("\0"):
            section, _, rest = name.lower().partition(".")
            key = rest.rpartition(".")[2]
            if any(section == s and k in (None, key) for s, k in REFUSED_CONFIG):
                raise InvalidInput(
                    f"the git configuration {file} sets {name}, which makes git run a program or read "
                    "another file the repository chose; patchtool runs no git on it",
                    file=str(file),
                    hint=f"if you set it yourself, remove it (`git config --file {file} --unset-all {name}`); "
                    "if the repository came with it, do not use the repository",
                )
        _CHECKED.add(stamp)


class Runner:
    """Runs git commands for one repository (``git_dir``, with its checked-out ``work_tree`` where
    a command needs one) or, with neither, for none: ``GIT_DIR`` then names no repository, so git
    finds none by itself (``init`` alone runs without it: it names the directory it makes)."""

    def __init__(
        self,
        *,
        git_dir: Path | None = None,
        work_tree: Path | None = None,
        cwd: Path | None = None,
        user: bool = False,
    ) -> None:
        self._git_dir = git_dir
        self._prefix = (
            *((f"--git-dir={git_dir}",) if git_dir is not None else ()),
            *((f"--work-tree={work_tree}",) if work_tree is not None else ()),
        )
        self._cwd, self._user = cwd or work_tree, user

    @functools.cached_property
    def _git(self) -> gitpython.Git:
        """Made on the first command: a Runner that runs none imports no GitPython. The
        repository's configuration is checked first (``check_config``)."""
        if self._git_dir is not None:
            check_config(self._git_dir)
        return new_git(self._cwd, user=self._user)

    def _env(self, command: str, env: Mapping[str, str] | None) -> dict[str, str]:
        if self._git_dir is None and command != "init":
            return {"GIT_DIR": os.devnull, **(env or {})}  # no repository: git discovers none
        return dict(env or {})

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
        env = self._env(command, env)
        with mapped(argv.name):
            if input is None:
                status, out, err = self._git.execute(
                    full,
                    env=env,
                    with_extended_output=True,
                    with_exceptions=False,
                    stdout_as_string=False,
                    strip_newline_in_stdout=False,
                )
            else:
                proc = Process(self._git.execute(full, istream=subprocess.PIPE, as_process=True, env=env))
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

    def start(
        self,
        argv: Argv,
        *,
        stdin: bool = False,
        stdout: bool = True,
        env: Mapping[str, str] | None = None,
        preexec: Callable[[], None] | None = None,
    ) -> Process:
        """A git process left running; ``preexec`` runs in the child before git (a resource limit)."""
        with mapped(argv.name):
            return Process(
                self._git.execute(
                    ["git", *self._prefix, *argv.words()],
                    env=self._env(argv.command, env),
                    istream=subprocess.PIPE if stdin else None,
                    as_process=True,
                    with_stdout=stdout,
                    **({"preexec_fn": preexec} if preexec is not None else {}),
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

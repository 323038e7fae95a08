"""What every command shares: the global options, the repository's lock, the cache, and the one
place where an error becomes a message and an exit code.

A command is a thin function over the core that returns ``Shown``: its result as data (the
``--json`` envelope's) and how that reads as text. ``CommandSet.command`` turns it into a typer
command that also takes the global options, and says what it does to the repository: a writing
command holds the lock alone; one that edits the series also waits until no rebase is in progress.

The same declaration says where the command may write, and on Linux the process holds itself to
it with Landlock before the command's body runs (``confine``): the repository (writing commands
only), the cache, a private temporary directory and the directory of each tree the user named
(``outputs``). A report file the user named (``reports``) is granted nothing: the command hands
its text to ``write_report``, which writes that one file from a thread the confinement does not
hold (``confine.Unconfined``); the user's ``$EDITOR`` runs from there too (``outside``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from patchtool import errors, paths
from patchtool.cli.completion import pin_names
from patchtool.cli.render import Style, envelope, problems_text
from patchtool.errors import (
    AccessError,
    ApplyConflict,
    ExitCode,
    InternalError,
    PatchtoolError,
    Payload,
    Problem,
    UsageError,
)
from patchtool.urls import redact

if TYPE_CHECKING:
    from patchtool.confine import Unconfined
    from patchtool.upstream.cache import Cache

T = TypeVar("T")

GLOBAL = "Global options (before or after the command)"
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one versioned JSON envelope and nothing else.", rich_help_panel=GLOBAL)
]
RootOption = Annotated[
    Path | None,
    typer.Option(
        "--root",
        metavar="DIR",
        rich_help_panel=GLOBAL,
        help="The patch repository (default: nearest parent with patchset.toml).",
    ),
]
CacheDirOption = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        metavar="DIR",
        rich_help_panel=GLOBAL,
        help="Upstream cache (default: $PATCHTOOL_CACHE_DIR, else $XDG_CACHE_HOME/patchtool or ~/.cache/patchtool).",
    ),
]
AllowLocalOption = Annotated[
    bool,
    typer.Option(
        "--allow-local-urls",
        rich_help_panel=GLOBAL,
        help="Let the repository's urls be plain http or local git repositories, not only https "
        "(as $PATCHTOOL_ALLOW_LOCAL_URLS=1).",
    ),
]
AllowLocalInOption = Annotated[
    Path | None,
    typer.Option(
        "--allow-local-urls-in",
        metavar="DIR",
        rich_help_panel=GLOBAL,
        help="As --allow-local-urls, and let local urls (file:, a git path) name what lies beneath DIR, "
        "and nothing else (as $PATCHTOOL_ALLOW_LOCAL_URLS=DIR).",
    ),
]
PinOption = Annotated[
    str | None,
    typer.Option(
        "--pin", metavar="NAME", help="A pin in upstream-pins/ (default: the active one).", autocompletion=pin_names
    ),
]

_GLOBALS = [
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
    for name, default, annotation in (
        ("global_json", False, JsonOption),
        ("global_root", None, RootOption),
        ("global_cache_dir", None, CacheDirOption),
        ("global_allow_local", False, AllowLocalOption),
        ("global_allow_local_in", None, AllowLocalInOption),
    )
]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Shown:
    """A command's result: the data of its JSON envelope, and how it reads as text."""

    data: Payload | dict[str, Any] | None
    text: Callable[[Style], str]
    code: ExitCode = ExitCode.OK
    problems: tuple[Problem, ...] = ()


@dataclasses.dataclass(kw_only=True, slots=True)
class Invocation:
    """The command this process runs: its name, its global options, whether it writes, the lock it holds."""

    command: str = "patchtool"
    as_json: bool = False
    root: Path | None = None
    cache_dir: Path | None = None
    allow_local_urls: bool = False
    allow_local_in: Path | None = None  # --allow-local-urls-in DIR
    writes: bool = False
    edits_series: bool = False
    creates: bool = False  # the command makes the repository (``init``): it is the directory named, not found
    confine: bool = False  # this process runs patchtool's own command line: it confines itself
    outputs: tuple[Path, ...] = ()  # the paths the command line names for the command to write
    reports: tuple[Path, ...] = ()  # those of ``outputs`` that are files written whole (``write_report``)
    editor: bool = False  # the command may run the user's $EDITOR (``outside`` the confinement)
    confined_to: tuple[Path, ...] = ()  # where Landlock lets this process write, once it does
    unconfined: Unconfined | None = None  # the thread left unconfined, once the process is
    held: contextlib.ExitStack = dataclasses.field(default_factory=contextlib.ExitStack)
    recovered: list[str] = dataclasses.field(default_factory=list)

    def take(
        self,
        as_json: bool,
        root: Path | None,
        cache_dir: Path | None,
        allow_local: bool = False,
        allow_local_in: Path | None = None,
    ) -> None:
        """Global options, given before the command or after it (after wins)."""
        self.as_json = self.as_json or as_json
        self.allow_local_urls = self.allow_local_urls or allow_local
        self.allow_local_in = allow_local_in if allow_local_in is not None else self.allow_local_in
        self.root = root if root is not None else self.root
        self.cache_dir = cache_dir if cache_dir is not None else self.cache_dir


_current = Invocation()


def begin(*, confine: bool = False) -> Invocation:
    """A new invocation; ``confine``: the process is patchtool's own (its command line), so the
    command may take away its own rights to write (a caller running it in its process is not)."""
    global _current
    _current = Invocation(confine=confine)
    return _current


def current() -> Invocation:
    return _current


def default_cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "patchtool"


def root() -> Path:
    """The patch repository, locked for this command: exclusively for a writing command (which
    first finishes a write an earlier one committed but did not complete), shared for a reading
    one. The one place the lock is taken."""
    from patchtool.project import journal, lock

    inv = _current
    found = _located(inv)
    exclusive = inv.writes
    inv.held.enter_context(lock.held(found, exclusive=exclusive))
    if exclusive:
        inv.recovered += journal.recover(found)
    if exclusive and inv.edits_series:
        from patchtool.project.stopped import refuse_in_progress

        refuse_in_progress(found, inv.command)
    return found


def _located(inv: Invocation) -> Path:
    """The patch repository this command is about: ``--root``, else found from the current directory."""
    from patchtool.project.manifest import MANIFEST_NAME
    from patchtool.project.repository import Project

    if inv.creates:
        made = (inv.root or Path.cwd()).absolute()
        if not made.is_dir():
            raise UsageError(f"--root {inv.root}: no such directory", hint="make the directory first")
        return made
    if inv.root is None:
        return Project.find(Path.cwd())
    found = inv.root.absolute()
    if not (found / MANIFEST_NAME).is_file():
        raise UsageError(f"--root {inv.root}: no {MANIFEST_NAME} there", hint="pass the patch repository's directory")
    return found


def _cache_root(inv: Invocation) -> Path:
    env = os.environ.get("PATCHTOOL_CACHE_DIR")  # read here, at the edge, and nowhere else
    return (inv.cache_dir or (Path(env) if env else None) or default_cache_dir()).absolute()


def cache_root() -> Path:
    """The cache's directory (``--cache-dir``, ``$PATCHTOOL_CACHE_DIR``, else the default)."""
    return _cache_root(_current)


def cache() -> Cache:
    from patchtool.upstream.cache import Cache
    from patchtool.upstream.index import INDEX_URL_ENV
    from patchtool.urls import LocalUrls, allowed_by_environment

    local = allowed_by_environment()
    if _current.allow_local_in is not None:
        local = LocalUrls(allowed=True, beneath=Path(os.path.abspath(_current.allow_local_in)))
    elif _current.allow_local_urls:
        local = LocalUrls(allowed=True, beneath=local.beneath)
    return Cache(_cache_root(_current), index_url=os.environ.get(INDEX_URL_ENV) or None, allow_local=local)


def landlock_wanted() -> bool:
    """Whether commands confine themselves: yes, unless ``PATCHTOOL_LANDLOCK=0`` (for debugging)."""
    from patchtool.confine import OPT_OUT

    return os.environ.get(OPT_OUT, "1").strip().lower() not in ("0", "no", "off", "false")


def _confine(inv: Invocation) -> None:
    """Hold this process, and every child it starts, to writing where the command may (Landlock):
    the cache (made first: a rule needs a directory to hold on to), a private temporary directory
    in it, the repository for a writing command, and the directory of each tree the command line
    names. A report file it names is written from a thread started first, which the confinement
    does not hold (``write_report``); so is the user's $EDITOR run (``outside``). Without a usable
    Landlock this does nothing (``--version`` says so)."""
    if not inv.confine or not landlock_wanted():
        return
    from patchtool import confine

    if not confine.support().usable:
        return
    cache_root = _cache_root(inv)
    trees = [cache_root]
    _private_tmp(inv, cache_root)
    if inv.writes:
        with contextlib.suppress(PatchtoolError):  # no repository: the command's body says so, unconfined by it
            trees.append(_located(inv))
    trees += [tree for tree in map(_output_tree, _trees(inv)) if tree is not None]
    if inv.reports or inv.editor:
        inv.unconfined = confine.Unconfined()
        inv.held.callback(inv.unconfined.close)
    confine.confine(trees)
    inv.confined_to = tuple(Path(os.path.realpath(tree)) for tree in trees)


def _trees(inv: Invocation) -> list[Path]:
    """The outputs the command writes beneath their directory (not a report file written whole)."""
    reports = {report.absolute() for report in inv.reports}
    return [output for output in inv.outputs if output.absolute() not in reports]


def outside(fn: Callable[[], T]) -> T:
    """``fn()`` run where the confinement does not reach when the process is confined (the user's
    $EDITOR, a report file), else here; its result returned, its exception raised here."""
    inv = _current
    if inv.unconfined is None:
        return fn()
    return inv.unconfined.call(fn)


def write_report(path: Path, data: str | bytes, *, repository: Path | None) -> None:
    """The report file ``path`` the command line named (``reports``), written whole: from the
    thread the confinement does not hold, so the command is granted nothing beside it."""
    from patchtool import fsroot

    inv = _current
    if inv.unconfined is not None and path.absolute() not in {report.absolute() for report in inv.reports}:
        raise InternalError(f"{path} is not a report file the command line named")
    try:
        outside(lambda: fsroot.write_output(path, data, repository=repository))
    except PermissionError as exc:  # the file's own mode or its directory's: not the confinement's
        raise AccessError(
            f"cannot write {exc.filename or path}: {exc.strerror}", hint="check its permissions, or name another file"
        ) from None


def _private_tmp(inv: Invocation, cache_root: Path) -> Path:
    """A temporary directory of this command's own, the one its code and its children use
    (``TMPDIR``), removed when it ends. It lies in the cache, not the shared one: a confined
    process may remove only what lies beneath the trees it may write, and the shared temporary
    directory stays closed to its writes."""
    import shutil
    import tempfile

    parent = cache_root / "tmp"
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=parent))
    inv.held.callback(shutil.rmtree, tmp, ignore_errors=True)
    os.environ["TMPDIR"] = tempfile.tempdir = str(tmp)
    return tmp


def _refused_outside(inv: Invocation, exc: OSError) -> AccessError | None:
    """The error for a write Landlock refused outside what the command may write; None for an
    ordinary permission problem: a path beneath those trees, or one the file's own mode refuses
    to read (Landlock restricts writes alone)."""
    if not inv.confined_to or not isinstance(exc, PermissionError) or not isinstance(exc.filename, str | os.PathLike):
        return None
    filename = os.fspath(exc.filename)
    where = Path(os.path.realpath(filename))
    if any(where.is_relative_to(tree) for tree in inv.confined_to):
        return None
    if os.path.lexists(filename) and not os.access(filename, os.R_OK):
        return None
    allowed = ", ".join(map(str, inv.confined_to))
    return AccessError(
        f"refused to write {filename}: `patchtool {inv.command}` may write only beneath {allowed}",
        hint="patchtool confines every command with Landlock to the repository (writing commands), the cache, "
        "its temporary directory and the directory of each output tree the command line names; a write "
        "elsewhere is a bug in patchtool, please report it (PATCHTOOL_LANDLOCK=0 turns the confinement off to debug)",
    )


def _outputs_follow_no_repository_link(inv: Invocation) -> None:
    """An output the command line names inside the repository (``--into build/tree``) is reached
    through no symbolic link there: a stranger's repository may commit ``build -> /anywhere``, and
    the user who typed a path inside the repository meant the repository. Outside it, a path is
    followed as the user named it."""
    if not inv.outputs:
        return
    try:
        root = Path(os.path.abspath(_located(inv)))
    except PatchtoolError:
        return
    for output in inv.outputs:
        target = Path(os.path.abspath(output))
        if not target.is_relative_to(root) or target == root:
            continue
        here = root
        for part in target.relative_to(root).parts:
            here = here / part
            if here.is_symlink():
                rel = here.relative_to(root).as_posix()
                what = (
                    f"{output} is a symbolic link"
                    if here == target
                    else f"{output} lies through {rel}, a symbolic link"
                )
                raise UsageError(
                    f"{what} in the repository; patchtool writes nothing through one",
                    file=rel,
                    hint="name an output outside the repository, or remove the link",
                )
            if not here.exists():
                break


def _outputs_in_directories(inv: Invocation) -> None:
    """Every output the command line names lies in a directory that exists: patchtool makes none
    for it, so the confinement grants that directory and no ancestor. An output under a component
    named ``.git`` is left to the command, which refuses it with its own reason (``checkout --path``,
    ``export --quilt``); a missing directory there grants nothing either."""
    for output in inv.outputs:
        if any(paths.is_dotgit(part) for part in Path(os.path.abspath(output)).parts):
            continue
        parent = output.absolute().parent
        if not parent.is_dir():
            raise UsageError(
                f"{output}: there is no directory {parent}; patchtool makes no directory for an output",
                hint=f"create it first (mkdir -p {parent}), or name a path in a directory that exists",
            )


def _output_tree(path: Path) -> Path | None:
    """Where writing the tree ``path`` needs rights: the directory that holds it (a tree is staged
    beside it and moved into place), which exists (``_outputs_in_directories``). Something there
    already that is neither a file nor a directory (a device, a FIFO) grants nothing."""
    target = path.absolute()
    if target.exists() and not (target.is_file() or target.is_dir()):
        return None
    return target.parent


def knob(kind: str, spec: str) -> dict[str, str]:
    """``--flag NAME=VALUES-REGEX`` as a registry knob."""
    name, _, values = spec.partition("=")
    return {"type": kind, "name": name, **({"values": values} if values else {})}


# -- commands ------------------------------------------------------------------------------------


class CommandSet:
    """The commands of one module, each made into a click command only when the command line
    names it (or asks for help or completion): a command pays for its own options alone."""

    def __init__(self, group: str = "") -> None:
        self.group = group
        self._commands: dict[str, Declared] = {}

    def command(
        self,
        name: str,
        *,
        writes: bool = False,
        edits_series: bool = False,
        creates: bool = False,
        outputs: tuple[str, ...] = (),
        reports: tuple[str, ...] = (),
        editor: bool = False,
        dry_run: str | None = None,
    ) -> Callable[[Callable[..., Shown]], Callable[..., Shown]]:
        """``writes``: the command changes the repository, so it holds the lock alone;
        ``creates``: it makes the repository in the directory ``--root`` (or the current one) names;
        ``edits_series``: it changes the series, so it waits until no rebase is in progress;
        ``outputs``: its options that name a tree for it to write (beside the repository and cache);
        ``reports``: its options that name a file it writes whole, through ``write_report``;
        ``editor``: it may run the user's $EDITOR (through ``outside``);
        ``dry_run``: its option that makes a writing command touch nothing (then it reads)."""

        def decorate(fn: Callable[..., Shown]) -> Callable[..., Shown]:
            options = inspect.signature(fn).parameters
            unknown = [o for o in (*outputs, *reports, *([dry_run] if dry_run else [])) if o not in options]
            assert not unknown, f"{name}: no option {unknown}"
            self._commands[name] = Declared(
                fn=fn,
                writes=writes or edits_series or creates,
                edits_series=edits_series,
                creates=creates,
                outputs=outputs,
                reports=reports,
                editor=editor,
                dry_run=dry_run,
            )
            return fn

        return decorate

    def names(self) -> list[str]:
        return list(self._commands)

    def build(self, name: str) -> Any:
        """The click command of command ``name``."""
        from patchtool.cli.usage import HELP_OPTIONS, Command

        app = typer.Typer(
            add_completion=False, rich_markup_mode="markdown", context_settings={"help_option_names": HELP_OPTIONS}
        )
        app.command(name, cls=Command)(_command(self._commands[name], f"{self.group} {name}".strip()))
        return typer.main.get_command(app)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Declared:
    """A command as its module declares it: its function and what it may do (``CommandSet.command``)."""

    fn: Callable[..., Shown]
    writes: bool
    edits_series: bool
    creates: bool
    outputs: tuple[str, ...]
    reports: tuple[str, ...]
    editor: bool
    dry_run: str | None


def _command(declared: Declared, name: str) -> Callable[..., int]:
    """The command as typer sees it: its own options and the global ones; it runs through ``execute``."""
    fn = declared.fn
    signature = inspect.signature(fn, eval_str=True)

    @functools.wraps(fn)
    def run(
        *,
        global_json: bool = False,
        global_root: Path | None = None,
        global_cache_dir: Path | None = None,
        global_allow_local: bool = False,
        global_allow_local_in: Path | None = None,
        **options: Any,
    ) -> int:
        inv = _current
        inv.take(global_json, global_root, global_cache_dir, global_allow_local, global_allow_local_in)
        inv.command, inv.edits_series, inv.creates = name, declared.edits_series, declared.creates
        inv.writes = declared.writes and not (declared.dry_run and options[declared.dry_run])
        inv.outputs = tuple(Path(options[o]) for o in (*declared.outputs, *declared.reports) if options[o] is not None)
        inv.reports = tuple(Path(options[o]) for o in declared.reports if options[o] is not None)
        inv.editor = declared.editor
        return execute(lambda: fn(**options))

    run.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*signature.parameters.values(), *_GLOBALS], return_annotation=int
    )
    return run


def execute(body: Callable[[], Shown]) -> int:
    """Run a command's body and show its result; the one place where an error becomes a message
    and an exit code."""
    inv = _current
    style = Style(
        colour=not inv.as_json
        and sys.stdout.isatty()
        and not os.environ.get("NO_COLOR")
        and os.environ.get("TERM") != "dumb"
    )
    try:
        _outputs_follow_no_repository_link(inv)
        _outputs_in_directories(inv)
        _confine(inv)
        with _progress_shown(inv.as_json):
            return _show(inv, body(), style)
    except errors.OutputLost:  # nothing more can be shown where the output went; main says so on stderr
        raise
    except ApplyConflict as exc:
        return _conflict(inv, exc, style)
    except PatchtoolError as exc:
        return _fail(inv, exc, style)
    except (PermissionError, IsADirectoryError, NotADirectoryError) as exc:
        return _fail(
            inv,
            _refused_outside(inv, exc)
            or AccessError(
                f"cannot use {exc.filename or 'a file'}: {exc.strerror}",
                hint="check its permissions, or point patchtool elsewhere (--root, --cache-dir, --out)",
            ),
            style,
        )
    except OSError as exc:
        return _fail(
            inv,
            AccessError(f"{exc.filename or 'a file'}: {exc.strerror or exc}", hint="check the disk and the path"),
            style,
        )
    except KeyboardInterrupt:
        _echo("interrupted", err=True)
        return 130
    except Exception as exc:
        import traceback

        where = traceback.extract_tb(exc.__traceback__)[-1]
        return _fail(
            inv,
            InternalError(
                f"internal error: {type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno})",
                hint="this is a bug in patchtool; please report it with the command you ran",
            ),
            style,
        )


@contextlib.contextmanager
def _progress_shown(as_json: bool) -> Iterator[None]:
    """Progress bars on stderr, only where a person watches it (a terminal) and never under --json."""
    if as_json or not sys.stderr.isatty():
        yield
        return
    from patchtool import progress
    from patchtool.cli.progressbar import RichReporter

    with progress.reporting(RichReporter(sys.stderr)):
        yield


def _echo(text: str, *, err: bool = False) -> None:
    """Write a command's output or error: every one, text or ``--json``, passes here, so no url's
    credentials (a pin's, a remote's in git's own words) are printed (``urls.redact``)."""
    stream = sys.stderr if err else sys.stdout
    try:
        stream.write(redact(text) + "\n")
        stream.flush()
    except BrokenPipeError:  # the reader went away (`| head`): not the command's failure
        reader_gone(stream)
    except OSError as exc:  # a full disk, /dev/full: the output is lost, and that is the command's failure
        reader_gone(stream)
        raise errors.OutputLost.writing("error" if err else "output", exc) from None


def reader_gone(stream: Any) -> None:
    """Send the rest of ``stream``'s output nowhere, quietly (a closed pipe is the reader's choice,
    and the interpreter's last flush must not turn it into a traceback)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)


def _show(inv: Invocation, shown: Shown, style: Style) -> int:
    if inv.as_json:
        data = shown.data if shown.data is None or isinstance(shown.data, dict) else shown.data.to_dict()
        _echo(envelope(inv.command, shown.code, data, shown.problems))
    else:
        text = shown.text(style)
        if text:
            _echo(text, err=shown.code not in (ExitCode.OK, ExitCode.PROBLEMS, ExitCode.CONFLICT, ExitCode.PREDICTED))
    return int(shown.code)


def _conflict(inv: Invocation, exc: ApplyConflict, style: Style) -> int:
    from patchtool.cli.render import series_text

    result = exc.result

    def text(style: Style) -> str:
        from patchtool.cli.prose import fill, rebase_text
        from patchtool.rebase.transaction import RebaseReport
        from patchtool.series.apply import SeriesResult

        shown = (
            rebase_text(result, style)
            if isinstance(result, RebaseReport)
            else series_text(result, style)
            if isinstance(result, SeriesResult)
            else ""
        )
        if isinstance(result, RebaseReport):  # a rebase's stop and what to do there, wrapped to the terminal
            out = f"{shown}\n{fill(exc.message, style, prefix=style.bad('error') + ': ', indent=2)}"
            return out + (f"\n{fill(exc.hint, style, prefix='  hint: ', indent=4)}" if exc.hint else "")
        out = f"{shown}\n{style.bad('error')}: {exc.message}"
        return out + (f"\n  hint: {exc.hint}" if exc.hint else "")

    return _show(inv, Shown(data=exc.data, text=text, code=ExitCode.CONFLICT, problems=exc.as_problems()), style)


def _fail(inv: Invocation, exc: PatchtoolError, style: Style) -> int:
    problems = exc.as_problems()
    if inv.as_json:
        _echo(envelope(inv.command, exc.exit_code, None, problems))
    else:
        _echo(problems_text(problems, style), err=True)
    return int(exc.exit_code)

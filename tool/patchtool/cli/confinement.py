"""Where a command may write, held with Landlock before its body runs.

A command's declaration (``exits.command``) says where: the repository (writing commands only), the
cache, a private temporary directory and the directory of each tree the user named (``outputs``).
A report file the user named (``reports``) is granted nothing: the command hands its text to
``write_report``, which writes that one file from a thread the confinement does not hold
(``confine.Unconfined``); the user's ``$EDITOR`` runs from there too (``outside``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer

from patchtool import confine, fsroot, paths
from patchtool.cli.context import Invocation
from patchtool.errors import AccessError, InternalError, PatchtoolError, UsageError

T = TypeVar("T")


def landlock_wanted() -> bool:
    """Whether commands confine themselves: yes, unless ``PATCHTOOL_LANDLOCK=0`` (for debugging)."""
    return os.environ.get(confine.OPT_OUT, "1").strip().lower() not in ("0", "no", "off", "false")


def confined(ctx: typer.Context, inv: Invocation) -> Invocation:
    """``inv`` once this process, and every child it starts, writes only where the command may
    (Landlock): the cache (made first: a rule needs a directory to hold on to), a private temporary
    directory in it, the repository for a writing command, and the directory of each tree the
    command line names. A report file it names is written from a thread started first, which the
    confinement does not hold (``write_report``); so is the user's $EDITOR run (``outside``).
    Without a usable Landlock this does nothing (``--version`` says so)."""
    if not inv.confine or not landlock_wanted() or not confine.support().usable:
        return inv
    cache_root = inv.cache_root()
    trees = [cache_root]
    _private_tmp(ctx, cache_root)
    if inv.writes:
        with contextlib.suppress(PatchtoolError):  # no repository: the command's body says so, unconfined by it
            trees.append(inv.located())
    trees += [tree for tree in map(_output_tree, _trees(inv)) if tree is not None]
    unconfined = None
    if inv.reports or inv.editor:
        unconfined = confine.Unconfined()
        ctx.call_on_close(unconfined.close)
    confine.confine(trees)
    return dataclasses.replace(
        inv, unconfined=unconfined, confined_to=tuple(Path(os.path.realpath(tree)) for tree in trees)
    )


def _trees(inv: Invocation) -> list[Path]:
    """The outputs the command writes beneath their directory (not a report file written whole)."""
    reports = {report.absolute() for report in inv.reports}
    return [output for output in inv.outputs if output.absolute() not in reports]


def outside(inv: Invocation, fn: Callable[[], T]) -> T:
    """``fn()`` run where the confinement does not reach when the process is confined (the user's
    $EDITOR, a report file), else here; its result returned, its exception raised here."""
    return fn() if inv.unconfined is None else inv.unconfined.call(fn)


def write_report(inv: Invocation, path: Path, data: str | bytes, *, repository: Path | None) -> None:
    """The report file ``path`` the command line named (``reports``), written whole: from the
    thread the confinement does not hold, so the command is granted nothing beside it."""
    if inv.unconfined is not None and path.absolute() not in {report.absolute() for report in inv.reports}:
        raise InternalError(f"{path} is not a report file the command line named")
    try:
        outside(inv, lambda: fsroot.write_output(path, data, repository=repository))
    except PermissionError as exc:  # the file's own mode or its directory's: not the confinement's
        raise AccessError(
            f"cannot write {exc.filename or path}: {exc.strerror}", hint="check its permissions, or name another file"
        ) from None


def _private_tmp(ctx: typer.Context, cache_root: Path) -> Path:
    """A temporary directory of this command's own, the one its code and its children use
    (``TMPDIR``), removed when it ends. It lies in the cache, not the shared one: a confined
    process may remove only what lies beneath the trees it may write, and the shared temporary
    directory stays closed to its writes."""
    parent = cache_root / "tmp"
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=parent))
    ctx.call_on_close(functools.partial(shutil.rmtree, tmp, ignore_errors=True))
    os.environ["TMPDIR"] = tempfile.tempdir = str(tmp)  # the process is confined: its own, and its children's
    return tmp


def refused_outside(inv: Invocation, exc: OSError) -> AccessError | None:
    """The error for a write Landlock refused outside what the command may write; None for an
    ordinary permission problem: a path beneath those trees, or one the file's own mode refuses
    to read (Landlock restricts writes alone)."""
    if not inv.confined_to or not isinstance(exc, PermissionError) or not isinstance(exc.filename, str | os.PathLike):
        return None
    filename = os.fspath(exc.filename)
    if any(Path(os.path.realpath(filename)).is_relative_to(tree) for tree in inv.confined_to):
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


def check_outputs(inv: Invocation) -> None:
    """Every output the command line names is one patchtool may write: through no link in the
    repository, in a directory that exists."""
    _outputs_follow_no_repository_link(inv)
    _outputs_in_directories(inv)


def _outputs_follow_no_repository_link(inv: Invocation) -> None:
    """An output the command line names inside the repository (``--into build/tree``) is reached
    through no symbolic link there: a stranger's repository may commit ``build -> /anywhere``, and
    the user who typed a path inside the repository meant the repository. Outside it, a path is
    followed as the user named it."""
    if not inv.outputs:
        return
    try:
        root = Path(os.path.abspath(inv.located()))
    except PatchtoolError:
        return
    for output in inv.outputs:
        target = Path(os.path.abspath(output))
        if not target.is_relative_to(root) or target == root:
            continue
        here = root
        for part in target.relative_to(root).parts:
            if (here := here / part).is_symlink():
                rel = here.relative_to(root).as_posix()
                how = "is" if here == target else f"lies through {rel},"
                raise UsageError(
                    f"{output} {how} a symbolic link in the repository; patchtool writes nothing through one",
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
        if not (parent := output.absolute().parent).is_dir():
            raise UsageError(
                f"{output}: there is no directory {parent}; patchtool makes no directory for an output",
                hint=f"create it first (mkdir -p {parent}), or name a path in a directory that exists",
            )


def _output_tree(path: Path) -> Path | None:
    """Where writing the tree ``path`` needs rights: the directory that holds it (a tree is staged
    beside it and moved into place), which exists (``_outputs_in_directories``). Something there
    already that is neither a file nor a directory (a device, a FIFO) grants nothing."""
    target = path.absolute()
    return None if target.exists() and not (target.is_file() or target.is_dir()) else target.parent

"""Several files of the patch repository written as one transaction.

Every new file is first written under ``.patchtool/staged/``. Then the journal,
``.patchtool/journal.json``, naming each move and each removal, is written atomically: that is
the commit point. Only then are the files moved into place and the removals done. A process
killed before the journal exists changed nothing in the repository; one killed after it leaves a
journal that the next writing command finishes (``recover``), since every step of it can be done
again. Reading commands never write: they refuse a pending journal with a message (``pending``).
rebase, export, import and drop all write through here.

A journal is hostile input like every file in the repository: it is validated whole before any
step is taken. It may only move files of its own staging (``.patchtool/staged/<dest>`` to
``<dest>``) onto series files (the manifest, patch files, pin files, the registry's ``.toml``, the
top ``.gitignore`` that ``init`` writes),
remove series files and remove trees inside ``.patchtool/``; every
path resolves inside the root with no symbolic link leading out; and one that git tracks is
refused (``statedir.refuse_tracked``), never acted on.
"""

from __future__ import annotations

import dataclasses
import json
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from patchtool import fsroot, paths
from patchtool.errors import InvalidInput
from patchtool.inputs import loads_json
from patchtool.project import statedir

JOURNAL = f"{statedir.STATE_DIR}/journal.json"
GITIGNORE = ".gitignore"
STAGED = f"{statedir.STATE_DIR}/staged"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Record:
    """What a committed transaction does: moves (staged file -> destination), removals."""

    moves: tuple[tuple[str, str], ...]
    remove: tuple[str, ...]
    remove_trees: tuple[str, ...]

    @classmethod
    def from_dict(cls, data: Any) -> Record:
        """The record, or InvalidInput naming the first entry that is not one patchtool writes."""

        def bad(why: str) -> InvalidInput:
            return InvalidInput(
                f"{why}; refusing to act on it",
                file=JOURNAL,
                hint=f"patchtool writes no such journal: delete {JOURNAL} (and {STAGED}/) "
                "after checking the repository",
            )

        if not isinstance(data, dict) or data.get("schema") != 1:
            raise bad("not a journal of schema 1")
        if set(data) != {"schema", "moves", "remove", "remove_trees"}:
            raise bad(f"unexpected keys {sorted(set(data) - {'schema', 'moves', 'remove', 'remove_trees'})}")
        moves, remove, trees = data["moves"], data["remove"], data["remove_trees"]
        if not all(isinstance(x, list) for x in (moves, remove, trees)):
            raise bad("moves, remove and remove_trees must be lists")
        for move in moves:
            if not (isinstance(move, list) and len(move) == 2 and all(isinstance(p, str) for p in move)):
                raise bad(f"move {move!r} is not [staged, destination]")
            src, dest = move
            if src != f"{STAGED}/{dest}":
                raise bad(f"move {src!r} -> {dest!r} is not a file of its own staging")
            _check_dest(dest, bad)
        for rel in remove:
            if not isinstance(rel, str):
                raise bad(f"removal {rel!r} is not a path")
            _check_dest(rel, bad)
        for rel in trees:
            if not (
                isinstance(rel, str) and rel.startswith(f"{statedir.STATE_DIR}/") and not rel.startswith(f"{STAGED}")
            ):
                raise bad(f"tree removal {rel!r} is outside {statedir.STATE_DIR}/")
            if why := paths.tree_path_problem(rel):
                raise bad(why)
        return cls(moves=tuple((src, dest) for src, dest in moves), remove=tuple(remove), remove_trees=tuple(trees))

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "moves": [list(m) for m in self.moves],
            "remove": list(self.remove),
            "remove_trees": list(self.remove_trees),
        }


def _check_dest(rel: str, bad: Any) -> None:
    if why := paths.tree_path_problem(rel):
        raise bad(why)
    if rel == statedir.STATE_DIR or rel.startswith(f"{statedir.STATE_DIR}/"):
        raise bad(f"{rel!r} is inside {statedir.STATE_DIR}/")
    if not _series_file(rel):
        raise bad(f"{rel!r} is no series file (patchset.toml, patches/, upstream-pins/, a registry's .toml)")


def _series_file(rel: str) -> bool:
    """What a transaction writes or removes: the manifest, patch files, pin files and the
    registry (a ``.toml`` the manifest names), and the top ``.gitignore`` (``init``: it can only
    hide files from git). Nothing else is a journal's to touch, whoever wrote it: a journal in an
    unpacked archive (no git to say it was committed) plants no ``.envrc``."""
    return (
        rel in ("patchset.toml", GITIGNORE) or rel.startswith(("patches/", "upstream-pins/")) or rel.endswith(".toml")
    )


def changed_files(root: Path, files: Mapping[str, str]) -> list[str]:
    """The paths of ``files`` whose text differs from what the repository has. Every destination
    is read: one that cannot be reached (a link, a file where a directory should be) is refused
    here, before anything is written."""
    return [rel for rel, text in files.items() if paths.read_text_if_present(root, rel) != text]


def commit(
    root: Path, files: Mapping[str, str], *, remove: Sequence[str] = (), remove_trees: Sequence[str] = ()
) -> list[str]:
    """Write ``files`` (repository path -> text; a byte-identical file is left alone), remove the
    files in ``remove`` and the directories in ``remove_trees``, all or nothing. The paths
    written, then ``-path`` for each file removed."""
    recover(root)
    disk = fsroot.Root(root)
    changed = changed_files(root, files)
    gone = [rel for rel in dict.fromkeys(remove) if rel not in files and disk.kind(rel) is not None]
    moves = tuple((f"{STAGED}/{rel}", rel) for rel in changed)
    record = Record(moves=moves, remove=tuple(gone), remove_trees=tuple(remove_trees))
    Record.from_dict(record.to_dict())  # what recovery would refuse is never written
    statedir.ensure(root)
    disk.rmtree(STAGED)
    try:
        for staged, rel in moves:
            disk.create(staged, files[rel])
        tmp = f"{STAGED}/.journal.json"  # with the staged files: gone with them if never committed
        disk.create(tmp, json.dumps(record.to_dict(), indent=2))
    except BaseException:
        disk.rmtree(STAGED)
        statedir.tidy(root)
        raise
    disk.rename(tmp, JOURNAL)  # the commit point
    _finish(root, record)
    return [dest for _, dest in moves] + [f"-{rel}" for rel in gone]


def pending(root: Path) -> bool:
    """Whether a committed transaction waits to be finished."""
    return (root / JOURNAL).exists() or (root / JOURNAL).is_symlink()


def recover(root: Path) -> list[str]:
    """Finish a transaction an earlier process committed but did not complete (the paths it
    writes); drop the staged files of one that never reached its commit point. The journal is
    validated whole first: one that is invalid, tracked by git or reaching outside is refused."""
    staged = fsroot.Root(root).kind(STAGED) is not None
    if not staged and not pending(root):
        return []  # nothing to act on: git is not asked what it tracks
    statedir.refuse_tracked(root)
    if not pending(root):
        fsroot.Root(root).rmtree(STAGED)
        statedir.tidy(root)
        return []
    try:
        data = loads_json(paths.read_inside(root, JOURNAL).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidInput(
            f"the journal cannot be read ({exc}): an interrupted write cannot be finished",
            file=JOURNAL,
            hint=f"check the repository with `git status`, then delete {JOURNAL} and {STAGED}/",
        ) from None
    record = Record.from_dict(data)
    _finish(root, record)
    return [dest for _, dest in record.moves]


def _finish(root: Path, record: Record) -> None:
    disk = fsroot.Root(root)
    moved: dict[str, None] = {}  # the directories moved into: each synced once, before the journal goes
    for src, dest in record.moves:
        if (kind := disk.kind(src)) is not None:  # None: moved already by a process that was killed after it
            if kind != stat.S_IFREG:
                raise InvalidInput(f"{src} is not a file patchtool staged; refusing to move it", file=src)
            disk.rename(src, dest, sync=False)
            moved[dest.rpartition("/")[0]] = None
    for directory in moved:
        disk.sync(directory)
    for rel in record.remove:
        disk.unlink(rel)
    for rel in record.remove_trees:
        if disk.kind(rel) == stat.S_IFDIR:
            disk.rmtree(rel)
    disk.rmtree(STAGED)
    disk.unlink(JOURNAL)
    disk.sync(statedir.STATE_DIR)
    statedir.tidy(root)

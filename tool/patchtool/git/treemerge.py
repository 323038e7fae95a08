"""A patch merged onto the tree being built, file by file, in memory: the 3-way merge of a rebase.

For every file a commit of the old chain changes there are three sides: the file before the
patch at the old pin (base), after it (theirs), and in the tree being built on the new pin
(ours). Where two sides agree the answer needs no merge, as in merge-ort; where all three differ
git merges the contents (``git merge-file``: xdiff's 3-way merge, the one merge-ort uses). A file
upstream renamed between the pins is followed to its new path; a file upstream deleted is a
modify/delete conflict, which the rebase reports as "target gone".

The tree being built is a ``Workspace``: a start commit plus, in memory, every file the replay
changed. Nothing is written here; ``rebase`` writes the commits in one batch at the end.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import posixpath
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Self

from patchtool import git
from patchtool.errors import GitError
from patchtool.git import memo


@dataclasses.dataclass(frozen=True, slots=True)
class File:
    mode: str
    blob: str | None  # None until written: the content exists only in ``data``
    data: bytes | None = None


class ConflictKind(enum.StrEnum):
    """What clashed, in merge-ort's words (its ``CONFLICT (...)`` messages); binary sides, which
    merge-ort calls a content conflict, are a kind of their own: nothing may read them as text."""

    CONTENT = "content"
    BINARY = "binary"
    MODIFY_DELETE = "modify/delete"
    DELETE_MODIFY = "delete/modify"
    ADD_ADD = "add/add"
    MODE = "mode"
    DISTINCT_TYPES = "distinct types"
    RENAME_ADD = "rename/add"
    RENAME_RENAME = "rename/rename"
    RENAME_DELETE = "rename/delete"
    FILE_DIRECTORY = "file/directory"
    FILE_LOCATION = "file location"


@dataclasses.dataclass(frozen=True, slots=True)
class Conflict:
    path: str
    kind: ConflictKind
    message: str
    data: bytes | None = None  # the file with conflict markers, where there is one
    # the sides as git's index records a conflict (stages 1, 2, 3), each None where it has no file
    base: File | None = None
    ours: File | None = None
    theirs: File | None = None
    in_the_way: str | None = None  # a file/directory conflict: upstream's path in the patch's way


@dataclasses.dataclass(frozen=True, slots=True)
class PatchMerge:
    files: dict[str, File | None]  # what the patch's paths become (None: deleted)
    conflicts: tuple[Conflict, ...]
    renamed: tuple[str, ...]  # "old -> new" for files followed through an upstream rename
    gone: tuple[str, ...]  # paths the patch changes that upstream deleted

    @property
    def clean(self) -> bool:
        return not self.conflicts


class Workspace:
    """The tree a replay builds: ``start``'s files plus the changes made so far, in memory, and
    the content merges made on it (``merge_file``); ``close`` (or ``with``) ends them."""

    def __init__(
        self,
        repo: git.Repo,
        reader: git.ObjectReader,
        start: str,
        paths: Iterable[str],
        renames: Callable[[str], str | None],
    ) -> None:
        self.repo = repo
        self.reader = reader
        self.start = start
        self._looked_up = set(paths)
        found = repo.entries(start, list(self._looked_up))
        self._start_files = {p: File(mode, sha) for p, (mode, sha) in found.items()}
        self._changed: dict[str, File | None] = {}
        self._renames = renames
        self._merger = git.FileMerger(repo)

    @functools.cached_property
    def _tree(self) -> str:
        """``start``'s tree, read on the first lookup."""
        return self.repo.tree_of(self.start)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._merger.close()

    def merge_file(
        self, ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str], *, style: str = "merge"
    ) -> tuple[bytes, int]:
        """One file's content merge, as merge-ort makes it (``git.FileMerger.merge``)."""
        return self._merger.merge(ours, base, theirs, labels, style=style)

    def get(self, path: str) -> File | None:
        if path in self._changed:
            return self._changed[path]
        if path not in self._looked_up:
            self._looked_up.add(path)
            if (found := self.reader.entry(self._tree, path)) is not None:
                self._start_files[path] = File(*found)
        return self._start_files.get(path)

    def data(self, file: File) -> bytes:
        if file.data is not None:
            return file.data
        assert file.blob is not None
        if (content := self.reader.blob(file.blob)) is None:
            raise GitError(f"blob {file.blob} is missing from the cache")
        return content

    def text(self, path: str) -> str | None:
        file = self.get(path)
        return None if file is None else self.data(file).decode("utf-8", "surrogateescape")

    def files_under(self, path: str) -> list[str]:
        """The files under the directory ``path`` in the tree being built (none: not a directory)."""
        below = f"{path}/"
        start = [p for p in self.reader.files_under(self._tree, path) if self.get(p) is not None]
        return sorted({*start, *(p for p, f in self._changed.items() if p.startswith(below) and f is not None)})

    def renamed_to(self, path: str) -> str | None:
        """Where upstream moved ``path`` between the two pins, if it did."""
        return self._renames(path)

    def changed_upstream(self) -> list[str]:
        """The files upstream added or changed between the two pins, where the workspace knows
        the pins (a replay onto a new upstream): where a file it moved may have gone."""
        return self._renames.changed() if isinstance(self._renames, Renames) else []

    def update(self, files: dict[str, File | None]) -> None:
        self._changed.update(files)

    def same(self, files: dict[str, File | None]) -> bool:
        """Whether ``files`` is what the workspace already holds (applying them changes nothing)."""
        for path, want in files.items():
            have = self.get(path)
            if (have is None) != (want is None):
                return False
            if have is not None and want is not None and (have.mode != want.mode or self.data(have) != self.data(want)):
                return False
        return True


class Renames:
    """Where upstream moved a file between two pins, as git's rename detection finds it.

    Asked only for files the series changes that are gone from the new pin; each answer is
    remembered in the cache (``memo``), since two trees never change, so the next rebase, scan
    or ``--continue`` asks git nothing.
    """

    def __init__(self, repo: git.Repo, old_tree: str, new_tree: str) -> None:
        self.repo = repo
        self.old_tree, self.new_tree = old_tree, new_tree
        self.key = f"{old_tree}-{new_tree}"
        self._known: dict[str, str | None] | None = None
        self._changed: list[str] | None = None

    def changed(self) -> list[str]:
        """The files of the new tree added or changed since the old (``git diff-tree``)."""
        if self._changed is None:
            self._changed = self.repo.paths_changed(self.old_tree, self.new_tree, "AM")
        return self._changed

    def __call__(self, path: str) -> str | None:
        if self._known is None:
            self._known = memo.recall(self.repo.git_dir, "renames", self.key) or {}
        assert self._known is not None
        if path not in self._known:
            self._known[path] = self.repo.renames(self.old_tree, self.new_tree, [path]).get(path)
            memo.remember(self.repo.git_dir, "renames", self.key, self._known)
        return self._known[path]


def _is_binary(*contents: bytes) -> bool:
    return any(b"\0" in c[:8000] for c in contents)


def merge_patch(
    ws: Workspace,
    changes: Sequence[git.RawChange],
    labels: tuple[str, str, str],
    *,
    style: str = "merge",
    commit: str | None = None,
) -> PatchMerge:
    """The 3-way merge of one commit of the old chain (``changes``; ``commit``: that commit,
    whose tree says which directories the patch moved) onto the workspace, conflict markers in
    ``style`` (a ``merge.conflictStyle``)."""
    files: dict[str, File | None] = {}
    conflicts: list[Conflict] = []
    renamed: list[str] = []
    gone: list[str] = []
    for c in changes:
        theirs = File(c.new_mode, c.new_blob) if c.new_path and c.new_mode and c.new_blob else None
        if c.old_path is None:  # the patch adds a file
            assert c.new_path is not None and theirs is not None
            added = _added(ws, c.new_path, files, theirs, labels, style)
            if isinstance(added, Conflict):
                conflicts.append(added)
            else:
                files[c.new_path] = added
            continue
        base = File(c.old_mode or "100644", c.old_blob)
        path = c.old_path
        if (ours := ws.get(path)) is None:
            moved = ws.renamed_to(path)
            if moved is not None and ws.get(moved) is not None:
                renamed.append(f"{path} -> {moved} (renamed upstream)")
                path, ours = moved, ws.get(moved)
        if ours is None:
            if theirs is None:  # both deleted it
                continue
            gone.append(c.old_path)
            conflicts.append(
                Conflict(
                    c.old_path,
                    ConflictKind.MODIFY_DELETE,
                    (f"CONFLICT (modify/delete): {c.old_path} deleted upstream and modified by the patch"),
                    base=base,
                    theirs=theirs,
                )
            )
            continue
        if theirs is None and path != c.old_path:  # upstream renamed it, the patch deletes it
            conflicts.append(
                Conflict(
                    path,
                    ConflictKind.RENAME_DELETE,
                    (f"CONFLICT (rename/delete): {c.old_path} renamed to {path} upstream and deleted by the patch"),
                    base=base,
                    ours=ours,
                )
            )
            continue
        if theirs is None:  # the patch deletes the file
            if _same(ws, ours, base):
                files[path] = None
            else:
                conflicts.append(
                    Conflict(
                        path,
                        ConflictKind.DELETE_MODIFY,
                        (f"CONFLICT (delete/modify): {path} changed upstream and deleted by the patch"),
                        base=base,
                        ours=ours,
                    )
                )
            continue
        target = path if c.new_path == c.old_path else c.new_path
        assert target is not None
        if path not in (target, c.old_path):  # upstream renamed it one way, the patch another
            conflicts.append(_rename_rename(ws, c.old_path, path, target, ours, base, theirs, labels, style))
            continue
        if target != path:  # the patch renames the file
            if ws.get(target) is not None:
                conflicts.append(
                    Conflict(
                        target,
                        ConflictKind.RENAME_ADD,
                        (f"CONFLICT (rename/add): the patch renames {path} to {target}, which exists upstream"),
                    )
                )
                continue
            files[path] = None
        merged = _modified(ws, path, target, ours, base, theirs, labels, style)
        if isinstance(merged, Conflict):
            conflicts.append(merged)
        else:
            files[target] = merged
    if commit is not None:
        conflicts += directory_renames(ws, changes, files, ws.repo.tree_of(commit))
    for path, clash in in_the_way(ws, files):
        del files[path]  # the patch's file waits beside the tree, which keeps upstream's as it is
        conflicts.append(clash)
    return PatchMerge(files=files, conflicts=tuple(conflicts), renamed=tuple(renamed), gone=tuple(gone))


def _moved_dirs(pairs: Iterable[tuple[str, str]], gone: Callable[[str], bool]) -> dict[str, str]:
    """The directories one side moved away, each to where most of its files went: merge-ort's
    directory rename counts. A file's rename counts for its directory and, while the names below
    them agree (``d/sub/a -> e/sub/a`` gives ``d/sub -> e/sub`` and ``d -> e``), for the
    directories above; only a directory that side left entirely (``gone``) counts as moved."""
    counts: dict[str, Counter[str]] = {}
    for old, new in pairs:
        a, b = posixpath.dirname(old), posixpath.dirname(new)
        while a and gone(a):
            counts.setdefault(a, Counter())[b] += 1
            if not b or posixpath.basename(a) != posixpath.basename(b):
                break
            a, b = posixpath.dirname(a), posixpath.dirname(b)
    return {d: c.most_common(1)[0][0] for d, c in counts.items()}


def _moved_above(path: str, moves: dict[str, str]) -> tuple[str, str] | None:
    """The deepest directory above ``path`` that was moved, and where (merge-ort's check_dir_renamed)."""
    d = posixpath.dirname(path)
    while d and d not in moves:
        d = posixpath.dirname(d)
    return (d, moves[d]) if d else None


def directory_renames(
    ws: Workspace, changes: Sequence[git.RawChange], files: dict[str, File | None], patch_tree: str
) -> list[Conflict]:
    """merge-ort's directory rename detection, as conflicts ("file location"): a file upstream
    added in a directory the patch moved away entirely, and a file the patch adds in a directory
    upstream moved away. Each file is taken to where git puts it (the conflict's path) and out of
    the directory left behind (``files`` changes), so nothing stays behind unsaid."""
    out: list[Conflict] = []
    touched = {p for c in changes for p in (c.old_path, c.new_path) if p}
    renamed = [(c.old_path, c.new_path) for c in changes if c.status.startswith("R") and c.old_path and c.new_path]
    moves = _moved_dirs(renamed, lambda d: not ws.reader.files_under(patch_tree, d))
    for p in sorted({p for d in moves for p in ws.files_under(d)}):  # (A) the patch moved d/ to e/
        f = ws.get(p)
        found = _moved_above(p, moves)
        if p in touched or f is None or found is None:
            continue
        d, e = found
        there = e + p[len(d) :]
        files[p] = None
        out.append(
            Conflict(
                there,
                ConflictKind.FILE_LOCATION,
                (
                    f"CONFLICT (file location): upstream added {p} in {d}, which the patch renamed to {e}; "
                    f"git would put it at {there}, and so it is left there"
                ),
                ws.data(f),
                ours=f,
            )
        )
    added = {c.new_path for c in changes if c.new_path and c.new_path != c.old_path}

    def upstream_moved(path: str) -> tuple[str, str] | None:
        """The deepest directory above ``path`` that upstream moved away, and where, counted over
        the files it had at the old pin."""
        d = posixpath.dirname(path)
        while d and not ws.files_under(d):
            was = {p for p in ws.reader.files_under(patch_tree, d) if p not in added}
            was |= {c.old_path for c in changes if c.old_path and c.old_path.startswith(f"{d}/")}
            pairs = ((p, m) for p in sorted(was) if (m := ws.renamed_to(p)))
            if (e := _moved_dirs(pairs, lambda x: not ws.files_under(x)).get(d)) is not None:
                return d, e
            d = posixpath.dirname(d)
        return None

    for c in changes:  # (B) upstream moved d/ to e/, the patch adds a file in d/
        if c.old_path is not None or c.new_path is None or c.new_path not in files:
            continue
        if (found := upstream_moved(c.new_path)) is None:
            continue
        d, e = found
        f = files.pop(c.new_path)
        assert f is not None
        there = e + c.new_path[len(d) :]
        out.append(
            Conflict(
                there,
                ConflictKind.FILE_LOCATION,
                (
                    f"CONFLICT (file location): the patch adds {c.new_path} in {d}, which upstream renamed to {e}; "
                    f"git would put it at {there}, and so it is left there"
                ),
                ws.data(f),
                theirs=f,
            )
        )
    return out


def in_the_way(ws: Workspace, files: dict[str, File | None]) -> list[tuple[str, Conflict]]:
    """The file/directory conflicts of writing ``files`` onto the tree ``ws`` builds, as merge-ort
    finds them: a file under a path that is a file (or a link) there, or at a path that is a
    directory there. Each is (the path, its conflict), the conflict at the path where the patch's
    file is left instead (``~patch`` after the name in the way), as git leaves one side aside."""
    out = []
    for path, f in files.items():
        if f is None:
            continue
        parts = path.split("/")
        above = next(
            (
                a
                for a in ("/".join(parts[:i]) for i in range(1, len(parts)))
                if (files[a] if a in files else ws.get(a)) is not None
            ),
            None,
        )
        if above is not None:
            aside, way = f"{above}~patch{path[len(above) :]}", above
            why = f"the patch adds {path}, but {above} is a file upstream"
        elif inside := [p for p in ws.files_under(path) if p not in files or files[p] is not None]:
            aside, way = f"{path}~patch", path
            why = f"the patch adds the file {path}, but upstream has a directory there ({inside[0]})"
        else:
            continue
        out.append(
            (
                path,
                Conflict(
                    aside,
                    ConflictKind.FILE_DIRECTORY,
                    f"CONFLICT (file/directory): {why}; the patch's file is left at {aside}",
                    ws.data(f),
                    theirs=f,
                    in_the_way=way,
                ),
            )
        )
    return out


def _rename_rename(
    ws: Workspace,
    was: str,
    ours_path: str,
    target: str,
    ours: File,
    base: File,
    theirs: File,
    labels: tuple[str, str, str],
    style: str,
) -> Conflict:
    """Upstream renamed ``was`` to ``ours_path``, the patch to ``target``: a conflict, as merge-ort
    makes it, with the contents merged at the patch's name and upstream's file left where it is."""
    merged = _content(ws, target, ours, base, theirs, labels, style)
    return Conflict(
        target,
        ConflictKind.RENAME_RENAME,
        f"CONFLICT (rename/rename): {was} renamed to {ours_path} upstream and to {target} by the patch",
        merged.data if isinstance(merged, Conflict) else ws.data(merged),
        base=base,
        ours=ours,
        theirs=theirs,
    )


def _added(
    ws: Workspace, path: str, files: dict[str, File | None], theirs: File, labels: tuple[str, str, str], style: str
) -> File | Conflict:
    """A file the patch adds: as it is, or merged with the one upstream added there (add/add)."""
    ours = files.get(path) if path in files else ws.get(path)
    if ours is None or (ours.blob == theirs.blob and ours.mode == theirs.mode):
        return theirs
    if _type(ours.mode) != _type(theirs.mode):
        return _distinct_types(ws, path, ours, None, theirs)
    merged = _content(ws, path, ours, None, theirs, labels, style)
    if isinstance(merged, Conflict):
        return _merge_conflict(ConflictKind.ADD_ADD, path, None, ours, theirs, merged.data)
    return merged


def _modified(
    ws: Workspace,
    path: str,
    target: str,
    ours: File,
    base: File,
    theirs: File,
    labels: tuple[str, str, str],
    style: str,
) -> File | Conflict:
    """A file the patch modifies (at ``path`` upstream; ``target`` when the patch renames it),
    merged with what upstream made of it: its type, its mode, then its content."""
    if _type(ours.mode) != _type(theirs.mode) and not (_same(ws, ours, base) or _same(ws, theirs, base)):
        return _distinct_types(ws, target, ours, base, theirs)
    if (mode := _mode(ours.mode, base.mode, theirs.mode)) is None:
        return Conflict(
            target,
            ConflictKind.MODE,
            (f"CONFLICT (mode): {path} has mode {ours.mode} upstream and {theirs.mode} in the patch"),
            base=base,
            ours=ours,
            theirs=theirs,
        )
    merged = _content(ws, target, ours, base, theirs, labels, style)
    return merged if isinstance(merged, Conflict) else dataclasses.replace(merged, mode=mode)


def _type(mode: str) -> str:
    """The file type a mode stands for, as merge-ort tells them apart (100644 and 100755 are one)."""
    return {"120000": "symlink", "160000": "gitlink"}.get(mode, "regular file")


def _same(ws: Workspace, a: File, b: File) -> bool:
    """Whether two sides are one file, mode and content: what merge-ort takes as unchanged."""
    if a.mode != b.mode:
        return False
    return a.blob == b.blob if a.blob is not None and b.blob is not None else ws.data(a) == ws.data(b)


def _distinct_types(ws: Workspace, path: str, ours: File, base: File | None, theirs: File) -> Conflict:
    """Upstream and the patch made ``path`` files of different types (a symlink, a regular file, a
    gitlink): a conflict, upstream's file left at ``path`` and the patch's beside it, as merge-ort
    records one (the base with the side of its own type)."""
    aside = f"{path}~patch"
    return Conflict(
        aside,
        ConflictKind.DISTINCT_TYPES,
        (
            f"CONFLICT (distinct types): {path} is a {_type(ours.mode)} upstream and a {_type(theirs.mode)} in the "
            f"patch; the patch's file is left at {aside}"
        ),
        ws.data(theirs),
        base=base if base is not None and _type(base.mode) == _type(theirs.mode) else None,
        theirs=theirs,
        in_the_way=path,
    )


def _mode(ours: str, base: str, theirs: str) -> str | None:
    if ours in (base, theirs):
        return theirs
    if theirs == base:
        return ours
    return None


def _content(
    ws: Workspace,
    path: str,
    ours: File,
    base: File | None,
    theirs: File,
    labels: tuple[str, str, str],
    style: str = "merge",
) -> File | Conflict:
    if base is not None and ours.blob is not None and ours.blob == base.blob:
        return theirs
    if base is not None and theirs.blob == base.blob:
        return ours
    if ours.blob is not None and ours.blob == theirs.blob:
        return ours
    ours_data, theirs_data = ws.data(ours), ws.data(theirs)
    base_data = ws.data(base) if base is not None else b""
    if ours_data == theirs_data:
        return ours
    if base is not None and ours_data == base_data:
        return theirs
    if _type(theirs.mode) != "regular file":  # two link targets (or commits) are not merged line by line
        return _merge_conflict(ConflictKind.CONTENT, path, base, ours, theirs)
    if _is_binary(ours_data, base_data, theirs_data):
        return _merge_conflict(ConflictKind.BINARY, path, base, ours, theirs)
    data, count = ws.merge_file(ours_data, base_data, theirs_data, labels, style=style)
    if count:
        return _merge_conflict(ConflictKind.CONTENT, path, base, ours, theirs, data)
    return File(theirs.mode, None, data)


def _merge_conflict(
    kind: ConflictKind, path: str, base: File | None, ours: File, theirs: File, data: bytes | None = None
) -> Conflict:
    """The sides of ``path`` left unmerged, in merge-ort's words: ``CONFLICT (<kind>): Merge conflict in``."""
    return Conflict(
        path, kind, f"CONFLICT ({kind}): Merge conflict in {path}", data, base=base, ours=ours, theirs=theirs
    )

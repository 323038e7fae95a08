"""A whole patch applied to the tree a replay builds, as text, the way ``git apply`` would.

The replay uses it only to classify: a patch whose every hunk lands where it said is "applied
unchanged"; one whose hunks moved is "applied with shifted context", and says which hunk of
which file moved where (``MovedHunk``). Placement itself is decided by the 3-way merge.
"""

from __future__ import annotations

import dataclasses

from patchtool.diff import textpatch
from patchtool.diff.model import Diff, FileDiff, lines_of
from patchtool.git import treemerge as merge


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MovedHunk:
    """A hunk that applied away from the line its header names."""

    file: str
    hunk: int  # 1-based, within the file
    old_line: int  # where the patch put it: its header's line in the new file
    new_line: int  # where it applied

    @property
    def offset(self) -> int:
        return self.new_line - self.old_line

    def describe(self) -> str:
        return f"hunk {self.hunk}: line {self.old_line} -> {self.new_line} (offset {self.offset:+d})"

    def to_dict(self) -> dict[str, object]:
        return {**dataclasses.asdict(self), "offset": self.offset}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> MovedHunk:
        return cls(file=str(data["file"]), **{key: _int(data[key]) for key in ("hunk", "old_line", "new_line")})


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{value!r} is not a line number")
    return value


def summary(moved: tuple[MovedHunk, ...]) -> str:
    """One line: every moved hunk, by file (``path: hunk 1 at 592 (+19), hunk 2 ...; path2: ...``)."""
    by_file: dict[str, list[MovedHunk]] = {}
    for m in moved:
        by_file.setdefault(m.file, []).append(m)
    return "; ".join(
        f"{path}: " + ", ".join(f"hunk {m.hunk} at {m.new_line} ({m.offset:+d})" for m in hunks)
        for path, hunks in by_file.items()
    )


@dataclasses.dataclass(frozen=True, slots=True)
class AppliedPatch:
    """A whole patch applied like ``git apply``: the new text of each path (None: deleted)."""

    texts: dict[str, str | None]
    moved: tuple[MovedHunk, ...]  # the hunks that applied away from their header's line
    modes: dict[str, str] = dataclasses.field(default_factory=dict)  # the mode of each path with a text


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """Why a patch does not apply, in ``git apply``'s words where git refuses it too."""

    path: str
    message: str


def apply_patch(ws: merge.Workspace, diff: Diff, *, reverse: bool = False) -> AppliedPatch | None:
    """``diff`` applied to the workspace's texts (in reverse: taken out of them), or None where
    ``git apply`` would refuse it, or it touches anything but regular text files."""
    applied = apply_or_refuse(ws, diff, reverse=reverse)
    return applied if isinstance(applied, AppliedPatch) else None


_TO_BE_DELETED, _WAS_DELETED = "to be deleted", "was deleted"  # git's fn_table marks (apply.c)
_REGULAR = ("100644", "100755")


@dataclasses.dataclass(frozen=True, slots=True)
class _Result:
    text: str
    mode: str


def apply_or_refuse(ws: merge.Workspace, diff: Diff, *, reverse: bool = False) -> AppliedPatch | Refusal:
    """``diff`` applied to the workspace as ``git apply --cached`` applies it to an index, or why not.

    As git does: a copy or a rename reads its source as the tree has it, never another file's
    output (so ``a -> b`` beside ``b -> a`` swaps them); a later change to a path reads the
    earlier one's result; a path renamed or deleted earlier may not be changed again; a file is
    created only where none is, unless the patch deletes or renames that one away; nothing is
    written beyond a symbolic link or where a file and a directory would meet. In reverse the
    files are taken last first, as ``git apply -R`` lists them (t4127: a file changed in two
    sections comes out the way it went in)."""
    files = [_Change.of(fd, reverse) for fd in (reversed(diff.files) if reverse else diff.files)]
    table: dict[str, object] = {c.src: _TO_BE_DELETED for c in files if c.src is not None and c.leaves_src}
    written: list[tuple[str, _Result]] = []
    moved: list[MovedHunk] = []
    for c in files:
        if c.refused is not None:
            return c.refused
        if isinstance(preimage := _preimage(ws, c, table), Refusal):
            return preimage
        if c.dst is not None and (c.src is None or c.src != c.dst or c.fd.source is not None):
            why = _creatable(ws, c.dst, ok_if_exists=table.get(c.dst) in (_TO_BE_DELETED, _WAS_DELETED))
            if why is not None:
                return Refusal(c.dst, why)
        if (applied := textpatch.apply(lines_of(preimage.text), c.fd.hunks, reverse=reverse)) is None:
            return Refusal(c.path, f"{c.path}: patch does not apply")
        if c.dst is None:
            if applied.lines:
                return Refusal(c.path, f"{c.path}: removal patch leaves file contents")
        else:
            mode = c.new_mode or (preimage.mode if c.src is not None else "100644")
            if mode not in _REGULAR:
                return Refusal(c.dst, f"{c.dst}: new mode {mode} is not a regular file's")
            result = _Result("".join(applied.lines), mode)
            table[c.dst] = result
            written.append((c.dst, result))
            if not reverse:
                moved += [
                    MovedHunk(file=c.dst, hunk=n, old_line=at + 1 - off, new_line=at + 1)
                    for n, (at, off) in enumerate(zip(applied.starts, applied.offsets, strict=True), 1)
                    if off
                ]
        if c.src is not None and c.leaves_src:
            table[c.src] = _WAS_DELETED
    # as git writes the index: every path deleted or renamed away first, then every result
    texts: dict[str, str | None] = {c.src: None for c in files if c.src is not None and c.leaves_src}
    texts |= {path: result.text for path, result in written}
    modes = {path: result.mode for path, result in written}
    if (clash := _file_directory_clash(ws, texts)) is not None:
        return clash
    return AppliedPatch(texts, tuple(moved), modes)


@dataclasses.dataclass(frozen=True, slots=True)
class _Change:
    """One file of the patch, turned the way it is applied (``git apply -R`` swaps its sides)."""

    fd: FileDiff
    src: str | None
    dst: str | None
    old_mode: str | None
    new_mode: str | None
    refused: Refusal | None

    @property
    def path(self) -> str:
        return self.src or self.dst or self.fd.path

    @property
    def leaves_src(self) -> bool:
        """Whether the source is gone afterwards: a deletion or a rename (not a copy)."""
        return self.dst is None or (self.fd.status == "renamed" and self.src != self.dst)

    @classmethod
    def of(cls, fd: FileDiff, reverse: bool) -> _Change:
        src, dst = (fd.new_path, fd.old_path) if reverse else (fd.old_path, fd.new_path)
        old_mode, new_mode = (fd.new_mode, fd.old_mode) if reverse else (fd.old_mode, fd.new_mode)
        refused = None
        if fd.binary:
            refused = Refusal(fd.path, f"{fd.path}: a binary change is not applied as text")
        elif src is None and dst is None:
            refused = Refusal(fd.path, f"{fd.path}: the patch neither reads nor writes a file")
        elif src is not None and dst is not None and src != dst and fd.source is None:
            refused = Refusal(fd.path, f"{fd.path}: two names without a rename or copy header")
        return cls(fd, src, dst, old_mode, new_mode, refused)


def _preimage(ws: merge.Workspace, c: _Change, table: dict[str, object]) -> _Result | Refusal:
    """The text ``c`` applies to: empty for a creation, an earlier change's result where the patch
    already changed the path (not for a copy or rename: those read the tree), else the tree's."""
    if c.src is None:
        return _Result("", "100644")
    earlier = None if c.fd.source is not None else table.get(c.src)
    if earlier == _WAS_DELETED:
        return Refusal(c.src, f"path {c.src} has been renamed/deleted")
    if isinstance(earlier, _Result):
        mode, text = earlier.mode, earlier.text
    elif (file := ws.get(c.src)) is None:
        return Refusal(c.src, f"{c.src}: does not exist in index")
    else:
        mode, text = file.mode, ws.data(file).decode("utf-8", "surrogateescape")
    if c.old_mode is not None and _kind(c.old_mode) != _kind(mode):
        return Refusal(c.src, f"{c.src}: wrong type")
    if mode not in _REGULAR:
        return Refusal(c.src, f"{c.src}: mode {mode} is not a regular file's; a patch may only change regular files")
    return _Result(text, mode)


def _kind(mode: str) -> str:
    return mode[:-4] if len(mode) >= 4 else mode  # the file type, as git's S_IFMT bits


def _creatable(ws: merge.Workspace, path: str, *, ok_if_exists: bool) -> str | None:
    """Why ``path`` may not be created (git's check_to_create and path_is_beyond_symlink), or None."""
    if not ok_if_exists and ws.get(path) is not None:
        return f"{path}: already exists in index"
    parts = path.split("/")
    for n in range(len(parts) - 1, 0, -1):
        if (above := ws.get("/".join(parts[:n]))) is not None and above.mode == "120000":
            return f"affected file '{path}' is beyond a symbolic link"
    return None


def _file_directory_clash(ws: merge.Workspace, texts: dict[str, str | None]) -> Refusal | None:
    """Where a file the patch leaves would sit inside another file, or over a directory of the
    tree being built (the earlier patches' changes included) that it does not empty: git refuses
    to add such an index entry."""
    for path, text in texts.items():
        if text is None:
            continue
        parts = path.split("/")
        above = ("/".join(parts[:n]) for n in range(1, len(parts)))
        if any(texts.get(a) is not None or (a not in texts and ws.get(a) is not None) for a in above) or any(
            texts.get(below, "") is not None for below in ws.files_under(path)
        ):
            return Refusal(path, f"'{path}' appears as both a file and as a directory")
    return None

"""A whole patch applied to the tree a replay builds, as text, the way ``git apply`` would.

The replay uses it only to classify: a patch whose every hunk lands where it said is "applied
unchanged"; one whose hunks moved is "applied with shifted context", and says which hunk of
which file moved where (``MovedHunk``). Placement itself is decided by the 3-way merge.
"""

from __future__ import annotations

import dataclasses

from patchtool.diff import textpatch
from patchtool.diff.model import Diff, lines_of
from patchtool.rebase import merge


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
        return {"file": self.file, "hunk": self.hunk, "old_line": self.old_line, "new_line": self.new_line,
                "offset": self.offset}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> MovedHunk:
        return cls(file=str(data["file"]), hunk=_int(data["hunk"]), old_line=_int(data["old_line"]),
                   new_line=_int(data["new_line"]))


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{value!r} is not a line number")
    return value


def summary(moved: tuple[MovedHunk, ...]) -> str:
    """One line: every moved hunk, by file (``path: hunk 1 at 592 (+19), hunk 2 ...; path2: ...``)."""
    by_file: dict[str, list[MovedHunk]] = {}
    for m in moved:
        by_file.setdefault(m.file, []).append(m)
    return "; ".join(f"{path}: " + ", ".join(f"hunk {m.hunk} at {m.new_line} ({m.offset:+d})" for m in hunks)
                     for path, hunks in by_file.items())


@dataclasses.dataclass(frozen=True, slots=True)
class AppliedPatch:
    """A whole patch applied like ``git apply``: the new text of each path (None: deleted)."""

    texts: dict[str, str | None]
    moved: tuple[MovedHunk, ...]  # the hunks that applied away from their header's line


def apply_patch(ws: merge.Workspace, diff: Diff, *, reverse: bool = False) -> AppliedPatch | None:
    """``diff`` applied to the workspace's texts (in reverse: taken out of them), or None where a
    hunk does not apply, a file is binary, or a file it creates exists."""
    texts: dict[str, str | None] = {}
    moved: list[MovedHunk] = []
    for fd in diff.files:
        if fd.binary:
            return None
        src, dst = (fd.new_path, fd.old_path) if reverse else (fd.old_path, fd.new_path)
        if src is None:
            if dst is None or ws.get(dst) is not None:
                return None
            lines: list[str] = []
        else:
            text = texts[src] if src in texts else ws.text(src)
            if text is None:
                return None
            lines = lines_of(text)
        applied = textpatch.apply(lines, fd.hunks, reverse=reverse)
        if applied is None:
            return None
        if dst is None:
            if applied.lines:
                return None
            texts[src or ""] = None
            continue
        if src is not None and src != dst:
            texts[src] = None
        texts[dst] = "".join(applied.lines)
        if not reverse:
            moved += [MovedHunk(file=dst, hunk=n, old_line=at + 1 - off, new_line=at + 1)
                      for n, (at, off) in enumerate(zip(applied.starts, applied.offsets, strict=True), 1) if off]
    return AppliedPatch(texts, tuple(moved))

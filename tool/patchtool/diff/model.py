"""The one diff model: a git diff parsed once, on unidiff, into frozen data.

``parse(diff)`` reads a diff (the part of a patch file from its first 'diff --git' line) into
files, hunks and lines, each line with its kind and its line in the diff. Every name comes from
``gitpaths``, which reads them by git's own rules and refuses any path or mode that may not be
applied; unidiff reads the hunks. Everything else that needs the diff (applying it in memory,
placing its hunks, the registry's guard, diagnosing a hunk that does not apply) reads this
model, never the text.

Lines are git's lines: a diff and a file are cut at "\\n" only (``lines_of``), never where
``str.splitlines`` would also cut (form feeds, \\x1c-\\x1e, \\x85, U+2028).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import unidiff.patch
from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchSet

from patchtool.diff import gitpaths

CONTEXT, REMOVED, ADDED = " ", "-", "+"
NO_NEWLINE = "\\ No newline at end of file"


def lines_of(text: str, *, keepends: bool = True) -> list[str]:
    """``text`` cut into lines at "\\n" only: what git calls a line. With ``keepends`` each
    keeps its newline (the last one may have none); without, none does and a final newline
    makes no empty last line."""
    parts = text.split("\n")
    if not keepends:
        return parts[:-1] if parts and not parts[-1] else parts
    out = [part + "\n" for part in parts[:-1]]
    return [*out, parts[-1]] if parts[-1] else out


class Line(NamedTuple):
    kind: str  # CONTEXT, REMOVED or ADDED
    text: str  # with its "\n", unless a "\ No newline at end of file" follows it
    at: int  # its line in the diff, 1-based

    @property
    def content(self) -> str:
        """The text without its newline."""
        return self.text.removesuffix("\n")


@dataclasses.dataclass(frozen=True, slots=True)
class Hunk:
    old_start: int  # as in the header: 1-based, 0 for an empty old side
    old_count: int
    new_start: int
    new_count: int
    header: str  # the '@@ -a,b +c,d @@ ...' line as the diff has it
    lines: tuple[Line, ...]
    at: int  # the header's line in the diff, 1-based
    end: int  # the hunk's last line in the diff ("\ No newline" markers included)

    def image(self, reverse: bool = False) -> tuple[list[str], list[str]]:
        """(preimage, postimage): the lines it expects and the lines it leaves."""
        drop, add = (ADDED, REMOVED) if reverse else (REMOVED, ADDED)
        return ([ln.text for ln in self.lines if ln.kind != add], [ln.text for ln in self.lines if ln.kind != drop])

    def leading(self) -> int:
        """How many context lines start it."""
        return next((n for n, ln in enumerate(self.lines) if ln.kind != CONTEXT), len(self.lines))

    def trailing(self) -> int:
        """How many context lines end it."""
        return next((n for n, ln in enumerate(reversed(self.lines)) if ln.kind != CONTEXT), len(self.lines))

    def first_change(self) -> tuple[int, int]:
        """(old line, new line), 1-based, of its first removed or added line: where it changes
        the file. A pure insertion's old line is the line after the insertion point."""
        first = next((n for n, ln in enumerate(self.lines) if ln.kind != CONTEXT), 0)
        # "-N,0" names the line before an insertion
        return self.old_start + (self.old_count == 0) + first, self.new_start + (self.new_count == 0) + first

    def contents(self, *kinds: str) -> tuple[str, ...]:
        """The text (no newlines) of its lines of ``kinds``, in order."""
        return tuple(ln.content for ln in self.lines if ln.kind in kinds)


@dataclasses.dataclass(frozen=True, slots=True)
class FileDiff:
    path: str  # the file's path after the patch (before it, for a deletion)
    status: str  # "modified", "added", "deleted", "renamed" or "copied" (as git reads its header)
    old_path: str | None  # None where the patch creates the file
    new_path: str | None  # None where it deletes the file
    hunks: tuple[Hunk, ...]
    added: int
    removed: int
    at: int  # its 'diff --git' line in the diff, 1-based
    binary: bool = False
    old_mode: str | None = None  # the mode the header gives the old file; None: the file's own
    new_mode: str | None = None  # the mode it gives the new file; None: the old file's stays

    @property
    def source(self) -> str | None:
        """The old path of a rename or a copy."""
        return self.old_path if self.status in ("renamed", "copied") else None


@dataclasses.dataclass(frozen=True, slots=True)
class Diff:
    text: str
    files: tuple[FileDiff, ...]

    def added_lines(self) -> Iterator[tuple[str, Line]]:
        """Every line the diff adds, with the path it adds it to."""
        for f in self.files:
            if f.new_path is not None:
                yield from ((f.new_path, ln) for h in f.hunks for ln in h.lines if ln.kind == ADDED)

    def file_header(self, f: FileDiff) -> str:
        """The text of ``f``'s header: its 'diff --git' line up to its first hunk."""
        lines = self.text.split("\n")
        later = [g.at for g in self.files if g.at > f.at]
        end = f.hunks[0].at - 1 if f.hunks else min(later, default=len(lines) + 1) - 1
        return "".join(line + "\n" for line in lines[f.at - 1 : end])

    def hunk_text(self, h: Hunk) -> str:
        """The text of ``h``: its header line and body, as the diff has them."""
        return "".join(line + "\n" for line in self.text.split("\n")[h.at - 1 : h.end])


class DiffError(ValueError):
    """A diff that cannot be read, or that names a path or mode that may not be applied."""

    def __init__(self, message: str, *, line: int | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message, self.line, self.hint = message, line, hint


def parse(diff: str) -> Diff:
    """``diff`` (git diff output, from its first 'diff --git' line) as the model."""
    try:
        sections = gitpaths.read_sections(diff)
    except gitpaths.Refused as exc:
        raise DiffError(exc.message, line=exc.line, hint=exc.hint) from None
    return build(diff, sections)


def build(diff: str, sections: Sequence[gitpaths.Section]) -> Diff:
    """The model of ``diff``, its names from ``sections`` (``gitpaths.read_sections``, which may
    have read a whole patch file around it)."""
    raw = lines_of(diff)  # unidiff copies a str into a StringIO, four bytes a character: it reads these
    try:
        patchset = PatchSet(raw)
    except (UnidiffParseError, ValueError) as exc:  # ValueError: a number int() refuses (4300 digits)
        raise DiffError(f"the diff does not parse: {exc}", hint="re-export the commit with git format-patch") from None
    if not len(patchset):
        raise DiffError("the diff touches no file")
    if len(sections) != len(patchset):
        stray = next((pf for pf in patchset if not raw[(pf.diff_line_no or 1) - 1].startswith("diff --git ")), None)
        at = stray.diff_line_no if stray is not None else None
        line = raw[at - 1].removesuffix("\n") if at else ""
        raise DiffError(
            f"line {at}: {line[:80]!r} is outside every 'diff --git' section"
            + (
                ": a binary change a diff only mentions cannot be applied"
                if stray is not None and stray.is_binary_file
                else ""
            ),
            line=at,
            hint="export the commit with `git format-patch --binary`",
        )
    files = []
    for pf, section in zip(patchset, sections, strict=True):
        old = None if section.status == "added" else section.old
        new = None if section.status == "deleted" else section.new
        files.append(
            FileDiff(
                path=(new or old or ""),
                status=section.status,
                old_path=old,
                new_path=new,
                hunks=tuple(_hunk(h, raw) for h in pf),
                added=sum(h.added for h in pf),
                removed=sum(h.removed for h in pf),
                at=pf.diff_line_no or 1,
                binary=pf.is_binary_file,
                old_mode=section.old_mode,
                new_mode=section.new_mode,
            )
        )
    return Diff(text=diff, files=tuple(files))


def _hunk(h: unidiff.patch.Hunk, raw: list[str]) -> Hunk:
    """One unidiff hunk as the model's: its lines with their kinds and places, a "\\ No newline
    at end of file" taken off the line before it."""
    lines: list[Line] = []
    at = end = 0
    for ln in h:
        kind = ln.line_type
        if kind == "\\":
            if lines:
                lines[-1] = lines[-1]._replace(text=lines[-1].text.removesuffix("\n"))
            end = ln.diff_line_no or end + 1  # the marker after a hunk's last line has no number
            continue
        if kind not in (CONTEXT, REMOVED, ADDED):
            continue  # an empty line unidiff keeps after the hunk: not part of it
        number = ln.diff_line_no or end + 1  # unidiff numbers every line inside a hunk
        if not at:
            at = number - 1
        lines.append(Line(kind, ln.value, number))
        end = number
    return Hunk(
        old_start=h.source_start,
        old_count=h.source_length,
        new_start=h.target_start,
        new_count=h.target_length,
        header=raw[at - 1].removesuffix("\n") if at else "",
        lines=tuple(lines),
        at=at,
        end=end,
    )

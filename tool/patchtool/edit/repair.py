"""A patch that does not apply at its own pin, applied as far as it goes for a person to finish:
quilt's ``push -f``, then fix, then ``refresh``.

Each hunk goes in as ``git apply`` would put it; one that does not goes in as GNU ``patch
--fuzz=2`` would (said so); one that does not either is written where its header says, as
conflict markers: the file's lines there (``<<<<<<< upstream``) against the patch's
(``>>>>>>> patch ID hunk N``). Only text files the patch modifies, adds or deletes are handled
this way; a patch whose failure lies elsewhere (a rename, a binary file, a file missing or in
the way) is refused as before.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

from patchtool import fsroot, git, paths
from patchtool.diff import fuzz, textpatch
from patchtool.diff.model import FileDiff, Hunk, lines_of
from patchtool.errors import InvalidInput
from patchtool.project.repository import LoadedPatch

FUZZ = 2
OURS = "<<<<<<< upstream"  # the labels of the conflict markers a repair writes: the file's lines ...


def theirs(ident: str, hunk: int) -> str:
    """... against patch ``ident``'s ``hunk`` (1-based, within the file)."""
    return f">>>>>>> patch {ident} hunk {hunk}"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Note:
    """A hunk that did not go in as ``git apply`` would: with fuzz, or as conflict markers."""

    file: str
    hunk: int  # 1-based, within the file
    line: int  # 1-based, in the worktree's file
    fuzz: int | None = None  # None: conflict markers

    def describe(self) -> str:
        how = "conflict markers" if self.fuzz is None else f"applied with fuzz {self.fuzz}: check it"
        return f"{self.file}:{self.line}: hunk {self.hunk}, {how}"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Repair:
    files: dict[str, bytes | None]  # what the worktree's files become (None: deleted)
    notes: tuple[Note, ...]


def repair(repo: git.Repo, commit: str, lp: LoadedPatch) -> Repair | None:
    """Patch ``lp`` applied as far as it goes on ``commit``'s tree; None where it cannot be."""
    found = repo.cat_files(repo.tree_of(commit), [f.path for f in lp.patch.files])
    files: dict[str, bytes | None] = {}
    notes: list[Note] = []
    for f in lp.patch.files:
        have = found[f.path]
        if f.binary or f.status not in ("modified", "added", "deleted") or (have is None) != (f.status == "added"):
            return None
        text = (have or b"").decode("utf-8", "surrogateescape")
        if f.status != "modified":
            if (applied := textpatch.apply(lines_of(text), f.hunks)) is None:
                return None
            files[f.path] = "".join(applied.lines).encode("utf-8", "surrogateescape") if f.new_path else None
            continue
        lines, marked = _marked(lp.id, f, lines_of(text))
        files[f.path] = "".join(lines).encode("utf-8", "surrogateescape")
        notes += marked
    return Repair(files=files, notes=tuple(notes))


def _marked(ident: str, f: FileDiff, lines: list[str]) -> tuple[list[str], list[Note]]:
    image = list(lines)
    notes: list[Note] = []
    drift = 0  # lines the markers added beyond what the hunks would have
    for n, hunk in enumerate(f.hunks, 1):
        if (exact := textpatch.apply(image, [hunk])) is not None:
            image = exact.lines
            continue
        if (fuzzed := _fuzzed(image, hunk)) is not None:
            image = fuzzed.lines
            placed = fuzzed.placed[0]
            notes.append(Note(file=f.path, hunk=n, line=hunk.old_start + placed.offset, fuzz=placed.fuzz))
            continue
        pre, post = hunk.image(False)
        at = min(max(hunk.new_start - 1 + drift, 0), len(image))
        block = [
            f"{OURS}\n",
            *_ended(image[at : at + len(pre)]),
            "=======\n",
            *_ended(post),
            f"{theirs(ident, n)}\n",
        ]
        image[at : at + len(pre)] = block
        drift += len(block) - len(post)
        notes.append(Note(file=f.path, hunk=n, line=at + 1))
    return image, notes


def _fuzzed(image: list[str], hunk: Hunk) -> fuzz.Fuzzed | None:
    try:
        return fuzz.apply(image, [hunk], fuzz=FUZZ)
    except fuzz.TooCostly:
        return None


def _ended(lines: Sequence[str]) -> list[str]:
    return [ln if ln.endswith("\n") else ln + "\n" for ln in lines]


def write(worktree: Path, found: Repair) -> None:
    """The repaired files into the worktree."""
    disk = fsroot.Root(worktree)
    for rel, data in found.files.items():
        if data is None:
            disk.unlink(rel)
        else:
            disk.write(rel, data)


def markers_left(worktree: Path, ident: str, rels: Sequence[str]) -> list[str]:
    """Those of ``rels`` whose file in ``worktree`` still holds a conflict marker the repair of
    patch ``ident`` wrote (its own labels: a ``<<<<<<< `` line of the file's own content is no
    marker), read through the bounded reader: a link, a directory or a file too big to read is
    none of its files."""
    marker = re.compile(rf"^(?:{re.escape(OURS)}|{re.escape(theirs(ident, 0)[:-1])}[0-9]+)$", re.MULTILINE)
    return [
        rel
        for rel in sorted(rels)
        if (data := read_file(worktree, rel)) is not None and marker.search(data.decode("utf-8", "surrogateescape"))
    ]


def read_file(worktree: Path, rel: str) -> bytes | None:
    """A regular file of the worktree through the bounded reader; None for one that is missing, a
    link, a directory or too big to read: none of them a file a repair wrote."""
    try:
        return paths.read_inside(worktree, rel)
    except (FileNotFoundError, InvalidInput):
        return None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Stopped:
    """Where a checkout stopped: the patch that does not apply, left in its worktree."""

    id: str
    file: str
    notes: tuple[Note, ...]
    remaining: tuple[str, ...]  # the patches after it, not on the branch yet
    whole: bool = True  # False: it could not be applied in part at all (nothing was written)


def stop(
    worktree: Path, found: Repair | None, lp: LoadedPatch, remaining: Sequence[str], *, written: bool = False
) -> Stopped:
    """``lp`` applied as far as it goes (``found``: what ``repair`` made of it) into ``worktree``
    (``written``: it is there already)."""
    if found is not None and not written:
        write(worktree, found)
    return Stopped(
        id=lp.id,
        file=lp.entry.file,
        notes=found.notes if found else (),
        remaining=tuple(remaining),
        whole=found is not None,
    )


def next_steps(stopped: Stopped, worktree: str, branch: str) -> list[str]:
    """What the person does next, in the words a command's text shows."""
    again = "" if branch == "series" else f" --branch {branch}"
    lines = [f"stopped at patch {stopped.id} ({stopped.file}): it does not apply at the pin"]
    lines += [f"  {n.describe()}" for n in stopped.notes]
    if not stopped.whole:
        lines.append(
            f"  it could not be applied in part (a rename, a binary file, a file missing or in the way): "
            f"apply it by hand in {worktree} (`git apply --reject` of its patch file shows what does not fit)"
        )
    if stopped.remaining:
        lines.append(f"not applied yet: {', '.join(stopped.remaining)}")
    lines.append(
        f"next: fix the files in {worktree} (no <<<<<<< left), then `patchtool refresh{again} {stopped.id}`: "
        "it writes the patch back with its metadata and applies the patches after it"
    )
    return lines

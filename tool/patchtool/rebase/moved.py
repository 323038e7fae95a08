"""Files upstream moved where git's rename detection does not follow them, followed by content.

A module split into a package (``x.py`` -> ``x/__init__.py``, ``x/core.py``, ...) leaves no file
similar enough to ``x.py`` for git to call it a rename, so the patch's changes to ``x.py`` would
find their target gone. Each hunk is followed instead by its own lines: the file upstream added
or changed between the pins that holds the hunk's preimage (its context and removed lines, in
order) is where it goes, and the hunk is applied there. Only where the preimage is found once
in all those files: two places (in one file or two) are named, never chosen between, and a hunk
found nowhere leaves the file gone.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Sequence

from patchtool.diff.model import Diff, FileDiff, Hunk, lines_of
from patchtool.git import treemerge as merge

MIN_LINES = 2  # a preimage of fewer lines that are not blank says nothing of where a hunk went


def follow_gone(ws: merge.Workspace, diff: Diff, merged: merge.PatchMerge) -> merge.PatchMerge:
    """``merged`` with every file it found gone (modified by the patch, deleted upstream) followed
    by its hunks' content where each is found once: that file's conflict leaves, its hunks are
    applied to the files that hold them and named in ``renamed``. A file one hunk of which is
    found in several places keeps its conflict, whose message names the places."""
    if not merged.gone:
        return merged
    by_path = {f.old_path: f for f in diff.files if f.old_path and f.old_path == f.new_path}
    files = dict(merged.files)
    followed: dict[str, tuple[str, ...]] = {}
    ambiguous: list[str] = []
    texts: dict[str, list[str]] = {}  # each candidate's lines, read once for every gone file
    for path in merged.gone:
        if (fd := by_path.get(path)) is None or not fd.hunks:
            continue
        if isinstance(found := _places(ws, fd, texts), str):
            ambiguous.append(found)
            continue
        if found is None or any(dest in files for dest, _ in found):
            continue  # a file the patch also writes is not guessed at either
        if (applied := _apply(texts, fd.hunks, found)) is None:
            continue
        for dest, lines in applied.items():
            old = ws.get(dest)
            assert old is not None  # a candidate is a file of the tree being built
            files[dest] = merge.File(old.mode, None, "".join(lines).encode("utf-8", "surrogateescape"))
            texts[dest] = lines
        followed[path] = tuple(
            f"{path} -> {dest} (moved upstream, followed by its lines: hunk {_header(h)})"
            for h, (dest, _) in zip(fd.hunks, found, strict=True)
        )
    if not followed and not ambiguous:
        return merged
    conflicts = []
    for c in merged.conflicts:
        if c.path in followed and c.kind is merge.ConflictKind.MODIFY_DELETE:
            continue
        why = next((a for a in ambiguous if a.startswith(f"{c.path}: ")), None)
        conflicts.append(dataclasses.replace(c, message=f"{c.message}; {why}") if why else c)
    return merge.PatchMerge(
        files=files,
        conflicts=tuple(conflicts),
        renamed=(*merged.renamed, *(r for rs in followed.values() for r in rs)),
        gone=tuple(p for p in merged.gone if p not in followed),
    )


def _header(h: Hunk) -> str:
    return h.header.split(" @@", 1)[0] + " @@"


def _places(ws: merge.Workspace, fd: FileDiff, texts: dict[str, list[str]]) -> list[tuple[str, int]] | str | None:
    """Where each hunk's preimage is in the files upstream added or changed with the gone file's
    suffix: one ``(path, line)`` a hunk; a message naming the places where one is in several;
    None where one is found nowhere (or says too little to be looked for)."""
    suffix = posixpath.splitext(fd.old_path or "")[1]
    candidates = [p for p in ws.changed_upstream() if posixpath.splitext(p)[1] == suffix]
    out = []
    for h in fd.hunks:
        pre = h.image()[0]
        if sum(1 for line in pre if line.strip()) < MIN_LINES:
            return None
        hits = []
        for path in candidates:
            if path not in texts:
                text = ws.text(path)
                texts[path] = lines_of(text) if text is not None else []
            lines = texts[path]
            hits += [(path, i) for i in range(len(lines) - len(pre) + 1) if lines[i : i + len(pre)] == pre]
        if not hits:
            return None
        if len(hits) > 1:
            places = ", ".join(f"{p} line {i + 1}" for p, i in hits)
            return (
                f"{fd.old_path}: deleted upstream; the lines of its hunk {_header(h)} are in several places "
                f"({places}): not guessed"
            )
        out.append(hits[0])
    return out


def _apply(
    texts: dict[str, list[str]], hunks: Sequence[Hunk], found: Sequence[tuple[str, int]]
) -> dict[str, list[str]] | None:
    """Each hunk's postimage in place of its preimage where it was found, from the bottom of each
    file up; None where two of them overlap there."""
    out: dict[str, list[str]] = {}
    placed = sorted(zip(found, hunks, strict=True), key=lambda x: x[0], reverse=True)
    below: dict[str, int] = {}
    for (path, at), h in placed:
        pre, post = h.image()
        if at + len(pre) > below.get(path, len(texts[path])):
            return None
        lines = out.setdefault(path, list(texts[path]))
        lines[at : at + len(pre)] = post
        below[path] = at
    return out

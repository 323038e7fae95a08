"""Which of a patch's hunks the target already has, read from the content alone.

A hunk is upstream when, at its place in the target, every line it adds is there (in its order,
whatever upstream added beside it) and every line it removes is gone: a conflict there would
bring nothing from the patch's side. Its place is what lies between the context lines nearest
its change that upstream left alone, found in the target by a line diff of the two versions of
the file; a line found only elsewhere in the file, even a line away past an untouched context
line, is no evidence.

The hunks are the patch's commit's own (its file before and after, grouped as ``git diff -U3``
groups them), so a patch that changes one file in two sections is judged by what it does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from patchtool import git
from patchtool.diff import textpatch
from patchtool.diff.model import lines_of
from patchtool.diff.scopes import scope_at
from patchtool.git import treemerge as merge

CONTEXT = 3  # lines on each side of a change, as git diff -U3


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class HunkCheck:
    """One hunk of a patch's commit, and whether the target has it at its place."""

    path: str
    header: str  # "@@ -12,6 +12,8 @@", as git diff names the hunk
    upstream: bool
    base: tuple[int, int]  # the hunk's lines (context included) in the file before the patch, 0-based [start, end)
    target: tuple[int, int]  # where they are in the target, 0-based [start, end)

    def describe(self) -> str:
        where = f"lines {self.target[0] + 1}-{self.target[1]}" if self.target[1] > self.target[0] else "nowhere"
        return f"{self.path} {self.header} (the target's {where})"


@dataclasses.dataclass(frozen=True, slots=True)
class _Group:
    a: tuple[int, int]  # base lines of the hunk, context included
    b: tuple[int, int]  # the same in the patched file
    blocks: tuple[textpatch.Block, ...]


def _groups(base: Sequence[str], after: Sequence[str]) -> list[_Group]:
    """The hunks of ``base`` -> ``after`` as ``git diff -U3`` makes them."""
    grouped: list[list[textpatch.Block]] = []
    for block in textpatch.diff(base, after):
        if grouped and block.a_start - grouped[-1][-1].a_end <= 2 * CONTEXT:
            grouped[-1].append(block)
        else:
            grouped.append([block])
    out = []
    for blocks in grouped:
        first, last = blocks[0], blocks[-1]
        lead = min(CONTEXT, first.a_start)
        trail = min(CONTEXT, len(base) - last.a_end)
        out.append(
            _Group(
                (first.a_start - lead, last.a_end + trail), (first.b_start - lead, last.b_end + trail), tuple(blocks)
            )
        )
    return out


def _range(start: int, count: int) -> str:
    return f"{start + 1 if count else start}" + ("" if count == 1 else f",{count}")


def _header(g: _Group) -> str:
    return f"@@ -{_range(g.a[0], g.a[1] - g.a[0])} +{_range(g.b[0], g.b[1] - g.b[0])} @@"


def follow(blocks: Sequence[textpatch.Block], start: int, end: int) -> tuple[int, int]:
    """Lines ``[start, end)`` of one text in the other, by their diff (``blocks``): a changed block
    that overlaps them comes whole, lines inserted just outside them do not."""
    lo: int | None = None
    shift = 0
    for b in blocks:
        if b.a_end <= start:
            shift = b.b_end - b.a_end
        else:
            lo = b.b_start if b.a_start <= start else start + shift
            break
    lo = start + shift if lo is None else lo
    hi: int | None = None
    shift = 0
    for b in blocks:
        if b.a_start >= end:
            break
        if b.a_end > end:
            hi = b.b_end
            break
        shift = b.b_end - b.a_end
    hi = end + shift if hi is None else hi
    return lo, max(lo, hi)


def _kept_at(blocks: Sequence[textpatch.Block], line: int) -> int | None:
    """Where ``line`` of one text is in the other, when their diff (``blocks``) leaves it alone."""
    shift = 0
    for b in blocks:
        if line < b.a_start:
            break
        if line < b.a_end:
            return None
        shift = b.b_end - b.a_end
    return line + shift


def _between_anchors(blocks: Sequence[textpatch.Block], g: _Group) -> tuple[int, int]:
    """The target's lines at a hunk's place: between the context lines nearest its changes that
    upstream left alone (what upstream put right beside the change counts; what it put beyond
    an untouched context line does not); the hunk's whole span where no context line is left."""
    outer = follow(blocks, *g.a)
    below = next(
        (at + 1 for i in range(g.blocks[0].a_start - 1, g.a[0] - 1, -1) if (at := _kept_at(blocks, i)) is not None),
        outer[0],
    )
    above = next(
        (at for i in range(g.blocks[-1].a_end, g.a[1]) if (at := _kept_at(blocks, i)) is not None),
        outer[1],
    )
    return below, max(below, above)


def scope_near(path: str, lines: Sequence[str], line: int) -> str:
    """The name of the scope around ``line`` (0-based) of ``lines``, read at the nearest line above
    it that is not blank: a blank line between two functions belongs to neither."""
    while line >= 0 and not lines[line].strip():
        line -= 1
    return scope_at(path, "".join(lines), line + 1).name


def _in_order(wanted: Sequence[str], region: Sequence[str]) -> bool:
    it = iter(region)
    return all(any(line == have for have in it) for line in wanted)


def _has(g: _Group, base: Sequence[str], after: Sequence[str], region: Sequence[str]) -> bool:
    added = [line for b in g.blocks for line in after[b.b_start : b.b_end]]
    removed = [line for b in g.blocks for line in base[b.a_start : b.a_end]]
    if not any(line.strip() for line in (*added, *removed)):
        return False  # blank lines alone say nothing of where upstream is
    kept = set(after[g.b[0] : g.b[1]])
    return _in_order(added, region) and not any(line in region for line in removed if line not in kept)


def hunks_in_target(ws: merge.Workspace, changes: Sequence[git.RawChange]) -> tuple[HunkCheck, ...]:
    """Every hunk of the patch's commit (``changes``: its files at the old pin) checked against the
    tree ``ws`` builds. A file the patch renames, or deletes, is not judged here: its hunks count
    as not upstream."""
    out: list[HunkCheck] = []
    for c in changes:
        path = c.new_path
        if path is None or c.new_blob is None or (c.old_path is not None and c.old_path != path):
            continue
        before = ws.reader.blob(c.old_blob) if c.old_path and c.old_blob else b""
        after_data = ws.reader.blob(c.new_blob)
        target = ws.text(path)
        if before is None or after_data is None:
            continue
        base = lines_of(before.decode("utf-8", "surrogateescape"))
        after = lines_of(after_data.decode("utf-8", "surrogateescape"))
        have = lines_of(target) if target is not None else []
        blocks = textpatch.diff(base, have) if target is not None else []
        for g in _groups(base, after):
            if target is None:
                out.append(HunkCheck(path=path, header=_header(g), upstream=False, base=g.a, target=(0, 0)))
                continue
            # a file the patch creates has no place but the whole file upstream has there
            at = (0, len(have)) if c.old_path is None else _between_anchors(blocks, g)
            # in the same function: a line diff may pair a function with a look-alike upstream added
            same = c.old_path is None or scope_near(path, base, g.blocks[0].a_start - 1) == scope_near(
                path, have, at[0] - 1
            )
            upstream = same and _has(g, base, after, have[at[0] : at[1]])
            out.append(HunkCheck(path=path, header=_header(g), upstream=upstream, base=g.a, target=at))
    return tuple(out)


def without_upstream_hunks(
    ws: merge.Workspace,
    changes: Sequence[git.RawChange],
    merged: merge.PatchMerge,
    checks: Sequence[HunkCheck],
    labels: tuple[str, str, str],
    style: str = "merge",
) -> merge.PatchMerge | None:
    """The merge of a patch whose content conflicts, with the hunks the target already has
    (``checks``) left out of the patch's side: upstream's lines stand there, and they hold every
    line those hunks add. None where a conflict is not about content, or one remains."""
    upstream = {(h.path, h.header) for h in checks if h.upstream}
    if not upstream or any(c.kind is not merge.ConflictKind.CONTENT for c in merged.conflicts):
        return None
    by_path = {c.new_path: c for c in changes if c.new_path and c.old_path == c.new_path}
    files = dict(merged.files)
    for conflict in merged.conflicts:
        c = by_path.get(conflict.path)
        ours = ws.get(conflict.path)
        if c is None or c.old_blob is None or c.new_blob is None or ours is None:
            return None
        before, after = ws.reader.blob(c.old_blob), ws.reader.blob(c.new_blob)
        if before is None or after is None:
            return None
        base = lines_of(before.decode("utf-8", "surrogateescape"))
        theirs = lines_of(after.decode("utf-8", "surrogateescape"))
        kept: list[str] = []
        at = 0
        for g in _groups(base, theirs):
            take = (c.new_path, _header(g)) not in upstream
            for b in g.blocks:
                kept += base[at : b.a_start]
                kept += theirs[b.b_start : b.b_end] if take else base[b.a_start : b.a_end]
                at = b.a_end
        kept += base[at:]
        data, count = ws.merge_file(
            ws.data(ours), before, "".join(kept).encode("utf-8", "surrogateescape"), labels, style=style
        )
        if count:
            return None
        files[conflict.path] = merge.File(ours.mode, None, data)  # a plain patch changes no mode
    return merge.PatchMerge(files=files, conflicts=(), renamed=merged.renamed, gone=merged.gone)

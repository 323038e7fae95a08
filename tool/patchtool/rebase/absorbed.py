"""Which of a patch's hunks the target already has, read from the content alone.

A hunk is upstream when, at its place in the target, every line it adds is there (in its order,
whatever upstream added beside it) and every line it removes is gone: a conflict there would
bring nothing from the patch's side. Its place is what lies between the context lines nearest
its change that upstream left alone, found in the target by a line diff of the two versions of
the file; a line found only elsewhere in the file, even a line away past an untouched context
line, is no evidence.

The hunks are the patch's commit's own (its file before and after, grouped as ``git diff -U3``
groups them), so a patch that changes one file in two sections is judged by what it does. Lines
are compared whatever their ending (CRLF or LF).

A hunk the target lacks may be there in another form: upstream rewrote the lines at its place
into lines that hold at least three quarters of the words the hunk adds (``SHARE``; a Python
file's comment lines left out), none of the lines it removes left there; or upstream moved the
code within the file, and one block of lines it wrote elsewhere holds those words and at least
half of the hunk's lines as they are, up to indentation, none of its removed lines left in the
file. That is evidence for a stop (``stop_evidence``), never for a drop or a merge.
"""

from __future__ import annotations

import dataclasses
import keyword
import re
from collections import Counter
from collections.abc import Iterable, Sequence

from patchtool import git
from patchtool.diff import textpatch
from patchtool.diff.model import lines_of
from patchtool.diff.scopes import scope_at
from patchtool.git import treemerge as merge

CONTEXT = 3  # lines on each side of a change, as git diff -U3
SHARE = (3, 4)  # of the words a hunk adds, in the lines upstream wrote: the same change in another form
_WORD = re.compile(r"\w+")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class HunkCheck:
    """One hunk of a patch's commit, and whether the target has it at its place."""

    path: str
    header: str  # "@@ -12,6 +12,8 @@", as git diff names the hunk
    upstream: bool
    base: tuple[int, int]  # the hunk's lines (context included) in the file before the patch, 0-based [start, end)
    target: tuple[int, int]  # where they are in the target, 0-based [start, end)
    other_form: str = ""  # where upstream wrote its words instead, when not ``upstream`` (``_other_form``)

    def describe(self) -> str:
        where = f"lines {self.target[0] + 1}-{self.target[1]}" if self.target[1] > self.target[0] else "nowhere"
        return f"{self.path} {self.header} (the target's {where})"


@dataclasses.dataclass(frozen=True, slots=True)
class _Group:
    a: tuple[int, int]  # base lines of the hunk, context included
    b: tuple[int, int]  # the same in the patched file
    blocks: tuple[textpatch.Block, ...]


def hunk_groups(base: Sequence[str], after: Sequence[str]) -> list[_Group]:
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
        lead, trail = min(CONTEXT, first.a_start), min(CONTEXT, len(base) - last.a_end)
        a, b = (first.a_start - lead, last.a_end + trail), (first.b_start - lead, last.b_end + trail)
        out.append(_Group(a, b, tuple(blocks)))
    return out


def _range(start: int, count: int) -> str:
    return f"{start + 1 if count else start}" + ("" if count == 1 else f",{count}")


def _header(g: _Group) -> str:
    return f"@@ -{_range(g.a[0], g.a[1] - g.a[0])} +{_range(g.b[0], g.b[1] - g.b[0])} @@"


def follow(blocks: Sequence[textpatch.Block], start: int, end: int) -> tuple[int, int]:
    """Lines ``[start, end)`` of one text in the other, by their diff (``blocks``): a changed block
    that overlaps them comes whole, lines inserted just outside them do not."""
    shift = 0
    for b in blocks:
        if b.a_end > start:
            lo = b.b_start if b.a_start <= start else start + shift
            break
        shift = b.b_end - b.a_end
    else:
        lo = start + shift
    shift = 0
    for b in blocks:
        if b.a_start >= end or b.a_end > end:
            hi = b.b_end if b.a_start < end else end + shift
            break
        shift = b.b_end - b.a_end
    else:
        hi = end + shift
    return lo, max(lo, hi)


def kept_at(blocks: Sequence[textpatch.Block], line: int) -> int | None:
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
        (at + 1 for i in range(g.blocks[0].a_start - 1, g.a[0] - 1, -1) if (at := kept_at(blocks, i)) is not None),
        outer[0],
    )
    above = next(
        (at for i in range(g.blocks[-1].a_end, g.a[1]) if (at := kept_at(blocks, i)) is not None),
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


def _runs_in_order(runs: Sequence[Sequence[str]], region: Sequence[str]) -> bool:
    """Whether each run of lines is in ``region`` as one block, in order: lines upstream put
    between a run's lines (a check that only warns, then raises in strict mode) are another change."""
    at = 0
    for run in runs:
        n = len(run)
        at = next((i + n for i in range(at, len(region) - n + 1) if region[i : i + n] == run), -1)
        if at < 0:
            return False
    return True


def _has(g: _Group, base: Sequence[str], after: Sequence[str], region: Sequence[str], target: _Target) -> bool:
    """Whether ``region`` (the target at the hunk's place) has the hunk: each run of lines it adds as
    one block, in order; none of the lines it removes; a hunk that moves a line, in its new order;
    and none of the lines it removes kept elsewhere in the target (``_Target.kept``)."""
    runs = [after[b.b_start : b.b_end] for b in g.blocks if b.b_end > b.b_start]
    removed = [line for b in g.blocks for line in base[b.a_start : b.a_end]]
    if not any(line.strip() for line in (*(line for run in runs for line in run), *removed)):
        return False  # blank lines alone say nothing of where upstream is
    post = after[g.b[0] : g.b[1]]
    kept = set(post)
    gone = [line for line in removed if line not in kept]
    if len(gone) < len(removed) and not _in_order(post, region):
        return False
    if any(line in region or (line.strip() and target.kept(line)) for line in gone):
        return False
    return _runs_in_order(runs, region)


@dataclasses.dataclass(frozen=True, slots=True)
class _Target:
    """A file as the patch leaves it (``after``, its lines counted) and in the target (``have``),
    and the words of each line upstream wrote there (``written``: the target's lines the line diff
    from the old pin does not pair, and the patched file does not have)."""

    after: Counter[str]
    have: Counter[str]
    written: tuple[frozenset[str], ...]

    @classmethod
    def of(cls, path: str, after: Sequence[str], have: Sequence[str], blocks: Sequence[textpatch.Block]) -> _Target:
        counted = Counter(line.strip() for line in after)
        # a line the patched file has too is the patch's own, not upstream's other form of a line it
        # removes; nor is a Python comment (``# until 1.1 the timeout was 10``)
        lines = {have[i].strip() for b in blocks for i in range(b.b_start, b.b_end)}
        python = path.endswith(".py")
        written = {frozenset(_WORD.findall(s)) for s in lines if not counted[s] and not (python and s.startswith("#"))}
        return cls(counted, Counter(line.strip() for line in have), tuple(w for w in written if w))

    def kept(self, line: str) -> bool:
        """Whether upstream kept ``line``, a line the patch removes: the target has it (indented
        anyhow) more often than the patched file does (upstream moved it, not removed it), or a
        line upstream wrote holds every word of it, two at least (it wrote the same setting again
        in another form)."""
        words = frozenset(_WORD.findall(line))
        # punctuation and keywords alone (``)``, ``else:``, ``return None``) stand everywhere
        if any(not keyword.iskeyword(w) for w in words) and self.have[line.strip()] > self.after[line.strip()]:
            return True
        return len(words) >= 2 and any(words <= w for w in self.written)


def _lines(text: str) -> list[str]:
    """The lines of ``text``, each ending as a line ends on POSIX: an upstream that changed a file's
    line endings (pip's sdists went from CRLF to LF) did not change its lines."""
    return lines_of(text.replace("\r\n", "\n"))


def _words(path: str, lines: Iterable[str]) -> Counter[str]:
    """The words of ``lines``, each as often as it occurs; a Python file's comment lines left out."""
    python = path.endswith(".py")
    return Counter(w for line in lines if not (python and line.lstrip().startswith("#")) for w in _WORD.findall(line))


def _other_form(
    path: str,
    g: _Group,
    base: Sequence[str],
    after: Sequence[str],
    have: Sequence[str],
    blocks: Sequence[textpatch.Block],
    at: tuple[int, int],
    same: bool,
) -> str:
    """Where upstream wrote a hunk's change in another form, in words; "" where it did not. The
    words the hunk adds (those of its removed lines aside) must be, at ``SHARE``, in the lines
    upstream wrote at its place (``at``, in the same function), none of its removed lines left
    there; or in one block upstream wrote elsewhere in the file, no longer than four times the
    hunk, holding half of its lines as they are (up to indentation), none of its removed lines
    left in the file."""
    added = [line for b in g.blocks for line in after[b.b_start : b.b_end]]
    removed = [line for b in g.blocks for line in base[b.a_start : b.a_end]]
    want = _words(path, added) - _words(path, removed)
    if not (total := sum(want.values())):
        return ""
    kept = set(after[g.b[0] : g.b[1]])
    left = [line for line in removed if line not in kept and line.strip()]

    def found(lines: Iterable[str]) -> int:
        return sum((want & _words(path, lines)).values())

    def enough(n: int) -> bool:
        return n * SHARE[1] >= total * SHARE[0]

    written = (have[j] for b in blocks for j in range(max(b.b_start, at[0]), min(b.b_end, at[1])))
    if same and not any(line in have[at[0] : at[1]] for line in left) and enough(n := found(written)):
        return (
            f"{n} of the {total} words it adds are in the lines upstream wrote at its place "
            f"(the target's lines {at[0] + 1}-{at[1]})"
        )
    if any(line in have for line in left):
        return ""
    own = [line.strip() for line in added if line.strip()]
    for b in blocks:
        if b.b_end - b.b_start > 4 * len(added) + 2 * CONTEXT:
            continue
        window = have[b.b_start : b.b_end]
        stripped = {line.strip() for line in window}
        same_lines = sum(line in stripped for line in own)
        if 2 * same_lines >= len(own) and enough(n := found(window)):
            return (
                f"{n} of the {total} words it adds, and {same_lines} of its {len(own)} lines as they are, "
                f"are in the lines upstream wrote elsewhere in the file (the target's lines {b.b_start + 1}-{b.b_end})"
            )
    return ""


def stop_evidence(checks: Sequence[HunkCheck], changes: Sequence[git.RawChange]) -> tuple[str, ...]:
    """What a conflict's stop shows of the target's content (``checks``, made with
    ``other_forms``): each hunk the target has at its place; and, where every other hunk of the
    patch (``changes``: a file it deletes or renames is not judged, so never counts) is there in
    another form, where each of those is. () when neither: a conflict alone says nothing of
    upstream."""
    exact = [h for h in checks if h.upstream]
    other = [h for h in checks if not h.upstream and h.other_form]
    out = [f"upstream has {h.describe()}: every line it adds, none it removes" for h in exact]
    judged = all(c.new_path is not None and c.old_path in (None, c.new_path) for c in changes)
    if other and judged and len(exact) + len(other) == len(checks):
        out += [f"upstream has {h.path} {h.header} in another form: {h.other_form}" for h in other]
    return tuple(out)


def content_evidence(ws: merge.Workspace, changes: Sequence[git.RawChange]) -> tuple[str, ...]:
    """``stop_evidence`` of the patch's hunks (``changes``) checked against the target with ``other_forms``."""
    return stop_evidence(hunks_in_target(ws, changes, other_forms=True), changes)


def with_later(
    ws: merge.Workspace, own: Sequence[git.RawChange], later: Sequence[tuple[str, Sequence[git.RawChange]]]
) -> tuple[str, ...]:
    """A stopped patch (its commit's files ``own``) that upstream has as the series' later patches
    (``later``: each id and its commit's files, in order) rewrote it: the first of them after
    which the patch's files, changed by it and those up to it together, have every hunk in the
    target at its place. Evidence for a stop (one kind), () where there is none; a file a later
    patch renames or deletes ends the search."""
    paths = {c.new_path for c in own}
    if None in paths or any(c.old_path not in (None, c.new_path) for c in own):
        return ()
    newest = {c.new_path: c for c in own}
    ids: list[str] = []
    for pid, files in later:
        if not (touched := [c for c in files if c.old_path in paths or c.new_path in paths]):
            continue
        if any(c.new_path is None or c.old_path != c.new_path for c in touched):
            return ()
        ids.append(pid)
        newest.update({c.new_path: c for c in touched})
        together = [
            dataclasses.replace(c, new_blob=newest[c.new_path].new_blob, new_mode=newest[c.new_path].new_mode)
            for c in own
            if c.old_blob != newest[c.new_path].new_blob
        ]
        checks = hunks_in_target(ws, together)
        if checks and all(h.upstream for h in checks):
            return (
                f"with the series' later patch(es) {', '.join(ids)}, which rewrote it, every hunk of its files "
                f"is in the target at its place: upstream has it as they left it",
            )
    return ()


def _read(ws: merge.Workspace, c: git.RawChange) -> tuple[list[str], list[str], str | None] | None:
    """A change's file at the old pin (no lines for a file it adds) and as the patch leaves it, each
    as lines, and the target's text (None where the target lacks the file); None where the patch
    deletes the file or a blob cannot be read."""
    before = ws.reader.blob(c.old_blob) if c.old_path and c.old_blob else b""
    after = ws.reader.blob(c.new_blob) if c.new_path and c.new_blob else None
    if before is None or after is None:
        return None
    base, patched = (_lines(data.decode("utf-8", "surrogateescape")) for data in (before, after))
    return base, patched, ws.text(c.new_path) if c.new_path else None


def removed_kept(ws: merge.Workspace, changes: Sequence[git.RawChange]) -> tuple[str, ...]:
    """The lines the patch removes that the target kept (``_Target.kept``: upstream moved them, or
    wrote them again in another form), each as ``PATH: LINE``. A patch whose 3-way merge changes
    nothing may still not be upstream: its deletion lands where upstream no longer has the line."""
    out: list[str] = []
    for c in changes:
        path = c.new_path
        if path is None or c.old_path != path or (read := _read(ws, c)) is None:
            continue
        base, after, target = read
        if target is None:
            continue
        have = _lines(target)
        lookup = _Target.of(path, after, have, textpatch.diff(base, have))
        removed = {line for b in textpatch.diff(base, after) for line in base[b.a_start : b.a_end]}
        out += [f"{path}: {line.rstrip()}" for line in sorted(removed) if line.strip() and lookup.kept(line)]
    return tuple(out)


def hunks_in_target(
    ws: merge.Workspace, changes: Sequence[git.RawChange], *, other_forms: bool = False
) -> tuple[HunkCheck, ...]:
    """Every hunk of the patch's commit (``changes``: its files at the old pin) checked against the
    tree ``ws`` builds; with ``other_forms``, where each hunk it lacks is in another form (for a
    stop's evidence). A file the patch renames, or deletes, is not judged here: its hunks count
    as not upstream."""
    out: list[HunkCheck] = []
    for c in changes:
        path = c.new_path
        if path is None or (c.old_path is not None and c.old_path != path) or (read := _read(ws, c)) is None:
            continue
        base, after, target = read
        have = _lines(target) if target is not None else []
        blocks = textpatch.diff(base, have) if target is not None else []
        lookup = _Target.of(path, after, have, blocks)
        groups = hunk_groups(base, after)
        if not groups and c.old_path is None:  # a file the patch adds empty: the target must have it, empty
            whole = target is not None and not have and not after
            out.append(HunkCheck(path=path, header="(the whole file)", upstream=whole, base=(0, 0), target=(0, 0)))
        for g in groups:
            if target is None:
                out.append(HunkCheck(path=path, header=_header(g), upstream=False, base=g.a, target=(0, 0)))
                continue
            # a file the patch creates has no place but the whole file upstream has there
            at = (0, len(have)) if c.old_path is None else _between_anchors(blocks, g)
            # in the same function: a line diff may pair a function with a look-alike upstream added
            same = c.old_path is None or scope_near(path, base, g.blocks[0].a_start - 1) == scope_near(
                path, have, at[0] - 1
            )
            upstream = same and _has(g, base, after, have[at[0] : at[1]], lookup)
            other = "" if upstream or not other_forms else _other_form(path, g, base, after, have, blocks, at, same)
            out.append(
                HunkCheck(path=path, header=_header(g), upstream=upstream, base=g.a, target=at, other_form=other)
            )
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
        base, theirs = (lines_of(data.decode("utf-8", "surrogateescape")) for data in (before, after))
        kept: list[str] = []
        at = 0
        for g in hunk_groups(base, theirs):
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

"""Is this patch already upstream? ``already_upstream`` answers it for a patch replayed onto a
new upstream (``rebase`` and ``scan``), with its evidence.

The evidence, strongest first:
- applying it changes nothing (the 3-way merge leaves the target as it is);
- it applies in reverse on the target, exactly, every hunk at its own place (as ``git apply -R``
  would) and the target has every line it adds and none it removes at each hunk's place
  (``absorbed``): two independent kinds, so it is dropped without a stop;
- upstream made a commit with its patch-id between the two pins (``git cherry``; only where both
  pins are git commits: a release artifact has no history to compare with) and the target has
  every line it adds and none it removes at each hunk's place: history and content agree;
- one of those kinds alone (a patch-id match where upstream changed the lines since, say), or a
  reverse application with the fuzz GNU ``patch -R`` would use (quilt's check), is evidence for a
  stop, never a drop: a Debian-only fix must not vanish.

``in_other_form`` finds a conflicting patch whose result upstream has up to formatting (``if(``
for ``if (``): the rebase still stops there, and offers ``--skip`` with that reason.

``hunks_upstream`` counts the hunks of a patch that are upstream while the rest still applies
("partly upstream"). At the pin, ``patchtool apply`` asks git the first question when a patch
does not apply (``series.apply.diagnose``: "already applied").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from patchtool import git
from patchtool.diff import fuzz as textfuzz
from patchtool.diff import textpatch
from patchtool.diff.model import Diff, FileDiff, Hunk, lines_of
from patchtool.git import treemerge as merge
from patchtool.rebase import absorbed
from patchtool.rebase.absorbed import scope_near
from patchtool.rebase.formatting import may_merge_to, normal_forms, normal_lines
from patchtool.rebase.textapply import apply_patch
from patchtool.upstream.cache import Base

IN_REVERSE = "it applies in reverse on the target"
IN_OTHER_FORM = "upstream has it (differs in whitespace/formatting)"
CHANGES_NOTHING = "applying it changes nothing"
MAY_BE_UPSTREAM = "upstream may have it"
HAS_ITS_LINES = "the target has every line it adds and none it removes, at each hunk's place"
FUZZ = 2  # GNU patch's default, what quilt's `patch -R --dry-run` allows


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """What the target says of a patch upstream may have taken. ``drop``: two independent kinds
    of evidence agree (or applying it changes nothing), and it leaves without a stop; otherwise it
    stops once, showing ``evidence``."""

    drop: bool
    detail: str
    evidence: tuple[str, ...]


def already_upstream(
    ws: merge.Workspace,
    diff: Diff,
    merged: merge.PatchMerge,
    *,
    try_reverse: bool,
    patch_ids: PatchIds | None,
    commit: str,
    changes: Sequence[git.RawChange] = (),
    hunks: Sequence[absorbed.HunkCheck] = (),
) -> Verdict | None:
    """Whether the patch (``diff``, its commit on the old pin ``commit``) is already in the tree
    ``ws`` builds, and on what evidence; None when nothing says so. ``merged``: the patch merged
    onto that tree; ``try_reverse``: whether to try it in reverse (a plain patch, no renames or
    mode changes, that does not apply forward); ``changes``: the patch's files at the old pin,
    where each hunk's place is read; ``hunks``: each hunk checked against the target's content
    (``absorbed.hunks_in_target``).

    Dropped: applying it changes nothing; or it applies in reverse, exactly, at its own place and
    the target has every line it adds and none it removes at each hunk's place (two kinds of
    evidence: a reverse application by context, and the content the 3-way merge's sides align);
    or upstream made a commit with its patch-id and the target has those lines. Anything less
    (one kind alone, or a reverse application with fuzz) is evidence for a stop."""
    if merged.clean and ws.same(merged.files):
        evidence = [f"{CHANGES_NOTHING}: the 3-way merge leaves the target as it is"]
        # a patch that deletes a line upstream only moved, or wrote again in another form, merges
        # to nothing too: the target must not have kept a line it removes
        if kept := absorbed.removed_kept(ws, changes):
            evidence.append(f"but the target still has what it removes (moved or written again): {'; '.join(kept)}")
            return Verdict(drop=False, detail=f"{MAY_BE_UPSTREAM}: {evidence[0]}", evidence=tuple(evidence))
        if try_reverse and applies_in_reverse(ws, diff, changes):
            return Verdict(drop=True, detail=IN_REVERSE, evidence=(_REVERSED, *evidence))
        return Verdict(drop=True, detail=CHANGES_NOTHING, evidence=tuple(evidence))
    # a file the patch deletes that upstream only renamed applies in reverse, but is not upstream
    alive = any(c.kind is merge.ConflictKind.RENAME_DELETE for c in merged.conflicts)
    exact = try_reverse and not alive and applies_in_reverse(ws, diff, changes)
    content = bool(hunks) and all(h.upstream for h in hunks)
    found = []
    if exact:
        found.append(_REVERSED)
    if content:
        found.append(f"{HAS_ITS_LINES}: " + ", ".join(h.describe() for h in hunks))
    if exact and content:
        return Verdict(drop=True, detail=IN_REVERSE, evidence=tuple(found))
    if not merged.clean and patch_ids is not None and (why := patch_ids.detail(commit)) is not None:
        # history's evidence; dropped only where the target's content agrees (a second kind)
        if content:
            return Verdict(drop=True, detail=why, evidence=(why, *found))
        found.insert(0, f"{why}, but the target's content does not show it")
    if try_reverse and not exact and not alive and (level := fuzzed_in_reverse(ws, diff, changes)) is not None:
        found.append(f"it applies in reverse with fuzz {level} at its own place (as `patch -R --fuzz={FUZZ}` would)")
    if not found:
        return None
    return Verdict(drop=False, detail=f"{MAY_BE_UPSTREAM}: {'; '.join(found)}", evidence=tuple(found))


def by_content(evidence: Sequence[str]) -> bool:
    """Whether a stop's ``evidence`` says the target has the patch's lines at each hunk's place
    (what ``rebase --skip --merged --all-evidenced`` accepts)."""
    return any(e.startswith(f"{HAS_ITS_LINES}: ") for e in evidence)


_REVERSED = f"{IN_REVERSE} (as `git apply -R`), every hunk at its own place"


def applies_in_reverse(ws: merge.Workspace, diff: Diff, changes: Sequence[git.RawChange] = ()) -> bool:
    """Whether the patch comes out of the workspace in reverse, every hunk where the patch would
    put it: at the place its lines had at the old pin, as upstream's own change moved them (a
    reverse application that finds the patch's result elsewhere, say in another function, does
    not make it upstream). A file the patch changes in several sections (git's t4127) is placed
    by its first; the others must follow it in order."""
    if (applied := apply_patch(ws, diff, reverse=True)) is None:
        return False
    bases = {c.old_path: c.old_blob for c in changes if c.old_path and c.old_blob}
    sections: dict[str, list[FileDiff]] = {}
    for f in diff.files:
        if f.old_path is not None and f.new_path == f.old_path and f.old_path in bases:
            sections.setdefault(f.old_path, []).append(f)
    for path, (f, *later) in sections.items():
        before, after = ws.reader.blob(bases[path]), applied.texts.get(path)
        if before is None or after is None:
            return False
        placed = textpatch.apply(lines_of(after), f.hunks)  # the patch again, onto what reversing left
        base, left = lines_of(before.decode("utf-8", "surrogateescape")), lines_of(after)
        blocks = textpatch.diff(base, left)
        if placed is None or not all(
            _maps(
                blocks,
                h.old_start - 1 if h.old_start else 0,
                at - sum(len(g.image(False)[1]) - len(g.image(False)[0]) for g in f.hunks[:n]),
            )
            for n, (h, at) in enumerate(zip(f.hunks, placed.starts, strict=True))
        ):
            return False
        text: list[str] | None = placed.lines
        for section in later:
            done = textpatch.apply(text, section.hunks) if text is not None else None
            text = done.lines if done is not None else None
        if text is None:
            return False
    return True


def fuzzed_in_reverse(ws: merge.Workspace, diff: Diff, changes: Sequence[git.RawChange]) -> int | None:
    """The least fuzz (up to ``FUZZ``) at which GNU ``patch -R`` takes the patch out of the
    workspace with every hunk at its own place (where its result stood at the old pin, followed
    through upstream's change to the file); None where it does not. A file changed in several
    sections is not judged: None."""
    afters = {c.new_path: c.new_blob for c in changes if c.new_path and c.new_blob}
    paths = [f.new_path for f in diff.files]
    if len(set(paths)) != len(paths):
        return None
    worst = 0
    for f in diff.files:
        path = f.new_path
        if path is None or f.old_path != path or path not in afters or not f.hunks:
            return None  # a binary file, a mode alone: nothing that fuzz could compare
        target, before = ws.text(path), ws.reader.blob(afters[path])
        if target is None or before is None:
            return None
        have = lines_of(target)
        try:
            got = textfuzz.apply(have, f.hunks, fuzz=FUZZ, reverse=True)
        except textfuzz.TooCostly:
            return None
        if got is None:
            return None
        was = before.decode("utf-8", "surrogateescape")
        blocks = textpatch.diff(lines_of(was), have)
        for p, h in zip(got.placed, f.hunks, strict=True):
            # the first line compared, not the first ignored, must be where the patch left it,
            # in the same function (a line diff may pair a function with a look-alike upstream added)
            first = (h.new_start - 1 if h.new_start else 0) + _ignored_above(h, p.fuzz)
            at = first + p.offset
            if not _maps(blocks, first, at) or scope_near(path, lines_of(was), first) != scope_near(path, have, at):
                return None
        worst = max([worst, *(p.fuzz for p in got.placed)])
    return worst


def _ignored_above(h: Hunk, level: int) -> int:
    """The context lines above a hunk that GNU patch ignores at fuzz ``level`` (fewer where the
    hunk has less context above than below)."""
    prefix, suffix = h.leading(), h.trailing()
    return max(level + prefix - max(prefix, suffix), 0)


def _maps(blocks: Sequence[textpatch.Block], line: int, at: int) -> bool:
    """Whether ``line`` of one text is at ``at`` in the other, by their diff (``blocks``): exactly
    where upstream left the line alone, anywhere in the block where it changed it."""
    if changed := next((b for b in blocks if b.a_start <= line < b.a_end), None):
        return changed.b_start <= at <= changed.b_end
    return at == absorbed.kept_at(blocks, line)


class PatchIds:
    """Whether upstream has a commit with a patch's own patch-id (``git cherry``), asked only of
    patches that do not apply, and only where both pins are git commits."""

    def __init__(self, repo: git.Repo, old_base: Base, new_base: Base, chain: Sequence[str]) -> None:
        self.repo, self.old_base, self.new_base, self.chain = repo, old_base, new_base, chain
        self._found: set[str] | None = None

    def detail(self, commit: str) -> str | None:
        if self.old_base.source != "git" or self.new_base.source != "git" or len(self.chain) < 2:
            return None
        if self._found is None:
            self._found = self.repo.cherry(self.new_base.commit, self.chain[-1], self.chain[0])
        if commit not in self._found:
            return None
        return (
            f"its patch-id matches a commit upstream made between {self.old_base.pin.version} and "
            f"{self.new_base.pin.version}"
        )


def hunks_upstream(ws: merge.Workspace, diff: Diff) -> int:
    """How many of the patch's hunks are already in the workspace (each applies in reverse and not
    forward), when some but not all are; 0 otherwise."""
    total = sum(len(f.hunks) for f in diff.files)
    if total < 2:
        return 0
    present = 0
    for f in diff.files:
        path = f.new_path or f.old_path
        if (text := ws.text(path) if path else None) is None:
            continue
        lines = lines_of(text)
        present += sum(
            textpatch.apply(lines, [h], reverse=True) is not None and textpatch.apply(lines, [h]) is None
            for h in f.hunks
        )
    return present if present < total else 0


def in_other_form(ws: merge.Workspace, merged: merge.PatchMerge, labels: tuple[str, str, str]) -> tuple[str, ...]:
    """Where upstream has the result of a patch whose merge conflicts, up to formatting: every
    conflict a content conflict whose merge in normal form (``formatting``) is clean and leaves
    upstream's file as it is, every other file as upstream has it in normal form, and the patch
    more than a reformatting. The evidence, a line per change of the patch; () when it is not so."""
    if not merged.conflicts:
        return ()
    for c in merged.conflicts:  # first what costs no tokenizer: most stops end here
        sides = (c.base, c.theirs, c.ours)
        if c.kind is not merge.ConflictKind.CONTENT or None in sides:
            return ()
        if not may_merge_to(*(ws.data(side) for side in sides if side is not None)):
            return ()
    for path, f in merged.files.items():
        have = ws.get(path)
        if (have is None) != (f is None):
            return ()
        if (
            have is not None
            and f is not None
            and have != f
            and len(set(normal_forms(path, ws.data(have), ws.data(f)))) > 1
        ):
            return ()
    evidence: list[str] = []
    for c in merged.conflicts:
        if c.kind is not merge.ConflictKind.CONTENT or c.base is None or c.ours is None or c.theirs is None:
            return ()
        base, ours, theirs = normal_forms(c.path, *(ws.data(side) for side in (c.base, c.ours, c.theirs)))
        if theirs == base:
            return ()
        result, count = ws.merge_file(ours, base, theirs, labels)
        if count or result != ours:
            return ()
        evidence += _where(c.path, ws.data(c.base), ws.data(c.theirs), ws.data(c.ours))
    return tuple(evidence)


def _where(path: str, base: bytes, theirs: bytes, ours: bytes) -> list[str]:
    """Each change of the patch (``base`` -> ``theirs``) and the lines of ``ours`` that hold it in
    normal form."""
    raw = [lines_of(d.decode("utf-8", "surrogateescape")) for d in (base, theirs)]
    norm_theirs, norm_ours = normal_lines(path, theirs, ours)
    out = []
    for block in textpatch.diff(*raw):
        if block.b_start == block.b_end:
            out.append(f"{path}: the lines the patch removes ({block.a_start + 1}-{block.a_end}) are not upstream")
            continue
        want = norm_theirs[block.b_start : block.b_end]
        at = next((i for i in range(len(norm_ours) - len(want) + 1) if norm_ours[i : i + len(want)] == want), None)
        span = f"{block.b_start + 1}-{block.b_end}"
        out.append(
            f"{path}: the patch's lines {span} are upstream's {at + 1}-{at + len(want)}"
            if at is not None
            else f"{path}: the patch's lines {span} are upstream's"
        )
    return out

"""Is this patch already upstream? ``already_upstream`` answers it for a patch replayed onto a
new upstream (``rebase`` and ``scan``), with the reason.

The signs, cheapest first:
- it applies in reverse on the target (the whole patch, as ``git apply -R`` would);
- upstream made a commit with its patch-id between the two pins (``git cherry``; only where both
  pins are git commits: a release artifact has no history to compare with);
- merging it onto the target changes nothing.

``in_other_form`` finds a conflicting patch whose result upstream has up to formatting (``if(``
for ``if (``): the rebase still stops there, and offers ``--skip`` with that reason.

``hunks_upstream`` counts the hunks of a patch that are upstream while the rest still applies
("partly upstream"). At the pin, ``patchtool apply`` asks git the first question when a patch
does not apply (``series.apply.diagnose``: "already applied").
"""

from __future__ import annotations

from collections.abc import Sequence

from patchtool import git
from patchtool.diff import textpatch
from patchtool.diff.model import Diff, lines_of
from patchtool.rebase import merge
from patchtool.rebase.formatting import may_merge_to, normal_forms, normal_lines
from patchtool.rebase.textapply import apply_patch
from patchtool.upstream.cache import Base

IN_REVERSE = "it applies in reverse on the target"
IN_OTHER_FORM = "upstream has it (differs in whitespace/formatting)"


def already_upstream(
    ws: merge.Workspace,
    diff: Diff,
    merged: merge.PatchMerge,
    *,
    try_reverse: bool,
    patch_ids: PatchIds | None,
    commit: str,
    changes: Sequence[git.RawChange] = (),
) -> str | None:
    """Why the patch (``diff``, its commit on the old pin ``commit``) is already in the tree ``ws``
    builds, or None. ``merged``: the patch merged onto that tree; ``try_reverse``: whether to try
    it in reverse (a plain patch, no renames or mode changes, that does not apply forward);
    ``changes``: the patch's files at the old pin, where each hunk's place is read."""
    if merged.clean:
        if not ws.same(merged.files):
            return None
        return IN_REVERSE if try_reverse and applies_in_reverse(ws, diff, changes) else "applying it changes nothing"
    # a file the patch deletes that upstream only renamed applies in reverse, but is not upstream
    alive = any(c.kind is merge.ConflictKind.RENAME_DELETE for c in merged.conflicts)
    if try_reverse and not alive and applies_in_reverse(ws, diff, changes):
        return IN_REVERSE
    return patch_ids.detail(commit) if patch_ids is not None else None


def applies_in_reverse(ws: merge.Workspace, diff: Diff, changes: Sequence[git.RawChange] = ()) -> bool:
    """Whether the patch comes out of the workspace in reverse, every hunk where the patch would
    put it: at the place its lines had at the old pin, as upstream's own change moved them (a
    reverse application that finds the patch's result elsewhere, say in another function, does
    not make it upstream)."""
    applied = apply_patch(ws, diff, reverse=True)
    if applied is None:
        return False
    bases = {c.old_path: c.old_blob for c in changes if c.old_path and c.old_blob}
    for f in diff.files:
        path = f.old_path
        if path is None or f.new_path != path or path not in bases:
            continue
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
    return True


def _maps(blocks: Sequence[textpatch.Block], line: int, at: int) -> bool:
    """Whether ``line`` of one text is at ``at`` in the other, by their diff (``blocks``): exactly
    where upstream left the line alone, anywhere in the block where it changed it."""
    shift = 0
    for b in blocks:
        if line < b.a_start:
            break
        if line < b.a_end:
            return b.b_start <= at <= b.b_end
        shift = b.b_end - b.a_end
    return at == line + shift


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
        text = ws.text(path) if path else None
        if text is None:
            continue
        lines = lines_of(text)
        present += sum(
            1
            for h in f.hunks
            if textpatch.apply(lines, [h], reverse=True) is not None and textpatch.apply(lines, [h]) is None
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

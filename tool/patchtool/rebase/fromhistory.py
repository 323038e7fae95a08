"""What upstream's history says of each patch (issue 31, section 2): is a commit it refers to, or
one with its patch-id, between the pin's tag and the target's, and not reverted since? And which
upstream commits changed the lines under each of its hunks?

A named reference (``references``) to a commit in the range that carries every hunk of the patch
(each file's ``git patch-id --stable`` equal, or every line each hunk adds and removes among the
commit's own), or a commit in the range with the patch's patch-id file for file, is history's
evidence that upstream has the patch (a named commit outside the range, on another branch, stands
for a commit in the range with its own patch-id, a cherry-pick of it): ``Upstream``, "already
upstream (commit X, in version Y)".
The rebase drops the patch on it only when the target's content agrees (section 0); otherwise it
stops once, naming the commit. A candidate (a format-patch ``From <sha>``, a commit carrying the
subject's advisory id) found in the range is a hint shown at a stop, never proof.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from patchtool.diff.model import ADDED, REMOVED, Diff
from patchtool.project.pins import Pin
from patchtool.project.repository import LoadedPatch
from patchtool.rebase.references import Reference, advisories, carries, references, reverts
from patchtool.upstream.cache import Cache
from patchtool.upstream.history import Change, History, between


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Upstream:
    """History's verdict on one patch: ``commit`` (short), its ``subject`` and the ``release``
    that first has it; ``proof``: the commit carries every hunk (else a hint); ``evidence``:
    what says so, a line each."""

    commit: str
    subject: str
    release: str
    proof: bool
    evidence: tuple[str, ...]

    @property
    def detail(self) -> str:
        return f"already upstream (commit {self.commit}, in version {self.release})"


class Verdicts:
    """History's answers for a series, computed once for all its patches: one ``git log`` over
    every file the series touches, one ``git patch-id`` over every section."""

    def __init__(self, history: History, loaded: Sequence[LoadedPatch]) -> None:
        self.history = history
        paths = sorted({p for lp in loaded for f in lp.patch.model.files for p in (f.old_path, f.new_path) if p})
        self._sections = history.sections(paths)
        ours = [(lp.id, path, text) for lp in loaded for path, text in _file_texts(lp.patch.diff)]
        ids = history.patch_ids([s.text for s in self._sections] + [t for _, _, t in ours])
        theirs, mine = ids[: len(self._sections)], ids[len(self._sections) :]
        self._ids: dict[str, dict[str, str]] = {}  # commit -> path -> patch-id
        for s, pid in zip(self._sections, theirs, strict=True):
            self._ids.setdefault(s.commit, {})[s.path] = pid
        self._own: dict[str, dict[str, str]] = {}
        for (pid_of, path, _), pid in zip(ours, mine, strict=True):
            self._own.setdefault(pid_of, {})[path] = pid
        self.changes: dict[str, list[Change]] = history.changes(paths)
        self._verdicts: dict[str, Upstream | None] = {}

    def of(self, lp: LoadedPatch) -> Upstream | None:
        """What history says of ``lp``: the commit that carries it, a hint, or None. Asked once a
        patch: the answer is kept, so replays in threads (``scan``) read it without asking git."""
        if lp.id not in self._verdicts:
            self._verdicts[lp.id] = self._of(lp)
        return self._verdicts[lp.id]

    def _of(self, lp: LoadedPatch) -> Upstream | None:
        messages = self.history.messages()
        reverted = {c for m in messages.values() for c in reverts(m)}
        own = self._own.get(lp.id, {})
        hints: list[str] = []
        for ref in sorted(_references(lp), key=lambda r: not r.named):
            for sha, outside in self._in_range(ref, reverted):
                # a commit outside the pins stands for the one between them with its patch-id
                twin = f"{outside[:12]}, outside the pins; {sha[:12]} between them has its patch-id" if outside else ""
                if sha in reverted:
                    hints.append(f"{_said(ref)} names {twin or sha[:12]}, which upstream reverted later")
                    continue
                how = self._carries(lp, sha, own)
                if ref.named and how:
                    return self._found(sha, True, [f"{_said(ref)} names upstream's commit {twin or sha[:12]}, {how}"])
                subject = _quoted(self.history.subject(sha))
                hints.append(
                    (
                        f"{_said(ref)} names {outside[:12]}, outside the pins; {sha[:12]} {subject} between them "
                        "has its patch-id"
                        if outside
                        else f"{_said(ref)} names {sha[:12]} {subject}, between the pins"
                    )
                    + (f", {how}" if how else ", which does not carry every hunk of the patch")
                )
        if own:
            for sha, theirs in self._ids.items():
                if sha not in reverted and all(theirs.get(p) == pid for p, pid in own.items()):
                    return self._found(sha, True, [f"its patch-id matches upstream's commit {sha[:12]}, file for file"])
        for advisory in advisories(lp.patch.subject):
            hits = [sha for sha, m in messages.items() if carries(m, advisory) and sha not in reverted]
            hints += [
                f"upstream's commit {sha[:12]} {_quoted(self.history.subject(sha))} names {advisory}" for sha in hits
            ]
        if hints:
            return Upstream(commit="", subject="", release="", proof=False, evidence=tuple(dict.fromkeys(hints)))
        return None

    def _in_range(self, ref: Reference, reverted: set[str]) -> list[tuple[str, str]]:
        """The commits between the pins ``ref`` stands for, each with the commit outside them it
        names ("" for none): the commit it names; or, for a named commit outside the range (made on
        another branch, released later), each commit in the range with its patch-id (a
        cherry-pick of it), those upstream did not revert first."""
        if (sha := self.history.full(ref.commit)) is not None:
            return [(sha, "")]
        if (outside := self.history.outside(ref.commit) if ref.named else None) is None:
            return []
        return [(t, outside) for t in sorted(self.history.same_change(outside), key=lambda t: t in reverted)]

    def _found(self, sha: str, proof: bool, evidence: list[str]) -> Upstream:
        release = self.history.release_of(sha)
        subject = self.history.subject(sha)
        return Upstream(
            commit=sha[:12],
            subject=subject,
            release=release,
            proof=proof,
            evidence=tuple(f"{e} {_quoted(subject)}, in {release} (upstream's history)" for e in evidence),
        )

    def _carries(self, lp: LoadedPatch, sha: str, own: dict[str, str]) -> str:
        """How commit ``sha`` carries every hunk of ``lp`` ("" where it does not)."""
        theirs = self._ids.get(sha, {})
        if own and all(theirs.get(p) == pid for p, pid in own.items()):
            return "with the patch's patch-id"
        for f in lp.patch.model.files:
            path = f.new_path or f.old_path
            made = [c for c in self.changes.get(path or "", []) if c.commit == sha]
            added = {line for c in made for line in c.added}
            removed = {line for c in made for line in c.removed}
            for h in f.hunks:
                if not all(
                    (ln.content in added) if ln.kind == ADDED else (ln.content in removed)
                    for ln in h.lines
                    if ln.kind in (ADDED, REMOVED)
                ):
                    return ""
        return "which carries every line each hunk adds and removes"


def ask(
    cache: Cache, old_pin: Pin, new_pin: Pin, loaded: Sequence[LoadedPatch], *, asked: bool
) -> tuple[Verdicts | None, tuple[str, ...]]:
    """Upstream's history between the pins, where the user asked for it (``--history``), and what
    a report says of it: what was asked, or what could not be checked without it."""
    if not asked:
        named = [lp.id for lp in loaded if _references(lp)]
        return None, (
            (
                f"upstream's history was not asked (--history): {len(named)} patch(es) name upstream commits "
                f"it could check ({', '.join(named[:5])}{', ...' if len(named) > 5 else ''})",
            )
            if named
            else ()
        )
    found = between(cache, old_pin, new_pin)
    if isinstance(found, str):
        return None, (f"upstream's history could not be asked: {found}",)
    if isinstance(missing := found.commits(), str):
        return None, (f"upstream's history could not be asked: {missing}",)
    return Verdicts(found, loaded), (f"upstream's history: {found.url} {found.old_tag}..{found.new_tag}",)


def told(said: tuple[str, ...], verdicts: Verdicts | None) -> tuple[str, ...]:
    """``said`` (from ``ask``) and what was fetched for it, or could not be: a report's lines."""
    fetched = verdicts.history.fetched if verdicts is not None else []
    missed = verdicts.history.missed if verdicts is not None else []
    return (*said, *(f"fetched {f}" for f in fetched), *(f"could not fetch {m}" for m in missed))


def _references(lp: LoadedPatch) -> tuple[Reference, ...]:
    """The upstream commits ``lp`` refers to: in its message, its entry, where it was imported from."""
    imported = lp.entry.imported
    return references(
        lp.patch.message,
        upstream_ref=lp.entry.upstream.ref,
        picked=imported.cherry_picked_from if imported else (),
        exported_from=imported.commit if imported else None,
    )


def _said(ref: Reference) -> str:
    return f"its {ref.said} line" if ref.said.value[0].isupper() else f"its `{ref.said}`"


def _quoted(subject: str) -> str:
    return f'"{subject}"' if subject else ""


def _file_texts(diff: str) -> list[tuple[str, str]]:
    """Each file's diff of a patch (``diff --git`` on), with its path."""
    out: list[tuple[str, str]] = []
    for chunk in diff.split("\ndiff --git "):
        text = chunk if chunk.startswith("diff --git ") else f"diff --git {chunk}"
        path = ""
        for line in text.splitlines():
            if line.startswith("+++ ") or (line.startswith("--- ") and not path):
                name = line[4:]
                if name != "/dev/null":
                    path = name[2:] if name[:2] in ("a/", "b/") else name
        if path:
            out.append((path, text if text.endswith("\n") else text + "\n"))
    return out


def under_hunks(diff: Diff, changes: dict[str, list[Change]]) -> tuple[str, ...]:
    """The upstream commits (between the pins, oldest first) that changed the lines under each
    hunk of ``diff`` (its lines at the old pin, followed through each commit's changes):
    ``abc1234 "Refactor X (#123)" changed lines 40-52 under hunk 2 of demo/x.py``."""
    out: list[str] = []
    for f in diff.files:
        if (path := f.old_path) is None:
            continue
        commits: dict[str, list[Change]] = {}
        for c in changes.get(path, []):
            commits.setdefault(c.commit, []).append(c)
        for n, h in enumerate(f.hunks, 1):
            start, end = h.old_start, h.old_start + max(h.old_count, 1)  # [start, end), 1-based
            for made in commits.values():  # oldest first; one commit's hunks share its parent's lines
                shift, grow = 0, 0
                low, high = start, end
                for c in made:
                    a, b = c.old
                    first = a if b else a + 1  # the first line replaced, or the line an insertion precedes
                    delta = c.new[1] - b
                    if first + b <= start and not (b == 0 and first == start):
                        shift += delta
                    elif first < end or (b == 0 and first == end):
                        ns, nc = c.new
                        lines = f"lines {ns}-{ns + nc - 1}" if nc > 1 else f"line {ns}" if nc else f"lines at {ns}"
                        out.append(f"{c.commit[:7]} {_quoted(c.subject)} changed {lines} under hunk {n} of {path}")
                        grow += delta
                        low, high = min(low, ns - shift), max(high, ns + nc - shift)
                start, end = low + shift, high + shift + grow
    return tuple(dict.fromkeys(out))

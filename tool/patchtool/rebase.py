"""Moving the series to a new upstream: one outcome per patch, verified placement, drift, a report.

Each patch is replayed with a true 3-way merge against its real base (merge-ort through
``git merge-tree`` on a probe commit whose parent is the patch's old parent, so the merge base is
exactly the old base), in memory. Plain ``git apply`` only classifies the outcome (unchanged or
shifted); it never decides placement. After merging, every hunk must sit in the same enclosing
function or class it had at the old pin, otherwise the patch is a conflict.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from . import git
from .patchfile import split_files, split_hunks
from .project import LoadedPatch
from .scopes import Hunk, parse_hunks, scope_at, scope_text
from .series import apply_series
from .upstream import Base


class PatchOutcome(enum.StrEnum):
    UNCHANGED = "applied unchanged"
    SHIFTED = "applied with shifted context"
    MERGED = "merged by 3-way merge"
    CONFLICT = "conflict"
    UPSTREAM = "already upstream"
    PARTLY_UPSTREAM = "partly upstream"
    TARGET_GONE = "target gone"
    DROPPED = "dropped"
    NOT_REACHED = "not reached"

    @property
    def applied(self) -> bool:
        return self in (PatchOutcome.UNCHANGED, PatchOutcome.SHIFTED, PatchOutcome.MERGED,
                        PatchOutcome.PARTLY_UPSTREAM)

    @property
    def stops(self) -> bool:
        return self in (PatchOutcome.CONFLICT, PatchOutcome.TARGET_GONE)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    id: str
    file: str
    outcome: PatchOutcome
    commit: str | None = None  # the rebased commit, when the patch applied
    detail: str = ""
    conflicted: tuple[str, ...] = ()
    misplaced: tuple[str, ...] = ()  # "path: hunk at Old.scope landed in New.scope"
    renamed: tuple[str, ...] = ()
    merge_tree: str | None = None  # the merge result (with conflict markers on a conflict)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"id": self.id, "file": self.file, "outcome": str(self.outcome)}
        for key in ("commit", "detail"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        for key in ("conflicted", "misplaced", "renamed"):
            if getattr(self, key):
                out[key] = list(getattr(self, key))
        return out


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Drift:
    """A region a patch touches that upstream changed between the pins, though the patch applied."""

    patch: str
    path: str
    scope: str
    change: str  # "changed" or "gone"
    detail: str

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Replay:
    old_chain: tuple[str, ...]  # commits of the series on the old base
    steps: tuple[Step, ...]
    tip: str  # the last commit on the new base
    drift: tuple[Drift, ...]

    @property
    def stopped(self) -> Step | None:
        return next((s for s in self.steps if s.outcome.stops), None)


def old_chain(repo: git.Repo, base: Base, loaded: Sequence[LoadedPatch]) -> tuple[str, ...]:
    from .errors import PatchtoolError
    result = apply_series(repo, base.commit, loaded, commit=True)
    if not result.ok:
        failed = result.failed
        raise PatchtoolError(f"the series does not apply at its current pin ({failed.id if failed else '?'}); "
                             "fix that first", hint="run `patchtool check`")
    return (base.commit, *(r.commit for r in result.results if r.commit))


def replay(repo: git.Repo, old_base: Base, new_base: Base, loaded: Sequence[LoadedPatch], *,
           start: int = 0, new_parent: str | None = None, done: Sequence[Step] = (),
           keep_going: bool = False, chain: tuple[str, ...] | None = None,
           drift: bool = True) -> Replay:
    """Replay ``loaded[start:]`` onto ``new_parent`` (default: the new base).

    Stops at the first conflict unless ``keep_going`` (a dry run or a scan), in which case the
    conflicting patch is left out and the rest goes on.
    """
    chain = chain or old_chain(repo, old_base, loaded)
    parent = new_parent or new_base.commit
    steps = list(done)
    for i in range(start, len(loaded)):
        step = replay_one(repo, chain[i], chain[i + 1], parent, loaded[i])
        if step.commit:
            parent = step.commit
        steps.append(step)
        if step.outcome.stops and not keep_going:
            steps += [Step(id=p.id, file=p.entry.file, outcome=PatchOutcome.NOT_REACHED) for p in loaded[i + 1:]]
            break
    drifted = tuple(d for i, lp in enumerate(loaded) if drift and i < len(steps) and steps[i].outcome.applied
                    for d in drift_of(repo, old_base, new_base, chain[i], chain[i + 1], lp))
    return Replay(old_chain=chain, steps=tuple(steps), tip=parent, drift=drifted)


def commit_for(repo: git.Repo, tree: str, parent: str, lp: LoadedPatch) -> str:
    author = git.Ident(lp.patch.author_name, lp.patch.author_email, 0)
    return repo.commit_tree(tree, [parent], lp.patch.message, author=author,
                            committer=git.Ident(*git.FIXED_IDENT, 0))


def replay_one(repo: git.Repo, old_parent: str, old_commit: str, new_parent: str,
               lp: LoadedPatch) -> Step:
    def step(outcome: PatchOutcome, **kw: object) -> Step:
        return Step(id=lp.id, file=lp.entry.file, outcome=outcome, **kw)  # type: ignore[arg-type]

    parent_tree = repo.tree_of(new_parent)
    with repo.temporary_index(new_parent) as index:
        applied = index.apply([lp.path], verbose=True)
        apply_tree = index.write_tree() if applied.ok else None
        reverse = not applied.ok and index.apply([lp.path], reverse=True, check=True).ok
    if apply_tree is not None and "offset" not in applied.stderr and "fuzz" not in applied.stderr:
        # every hunk matched its exact old position with its exact context: nothing moved, so
        # nothing can land in another scope, and a 3-way merge would give the same tree
        return step(PatchOutcome.UNCHANGED, commit=commit_for(repo, apply_tree, new_parent, lp))
    probe = repo.commit_tree(parent_tree, [old_parent], "patchtool rebase probe\n",
                             author=git.Ident(*git.FIXED_IDENT), committer=git.Ident(*git.FIXED_IDENT))
    merge = repo.merge_tree(probe, old_commit)
    renamed = tuple(m for m in merge.messages if "rename" in m.lower() and "->" in m)
    if not merge.clean:
        if reverse:
            return step(PatchOutcome.UPSTREAM, detail="it applies in reverse on the target")
        gone = [m for m in merge.messages if "modify/delete" in m or "deleted in" in m]
        if gone:
            return step(PatchOutcome.TARGET_GONE, conflicted=merge.conflicted,
                        detail="; ".join(gone), merge_tree=merge.tree)
        return step(PatchOutcome.CONFLICT, conflicted=merge.conflicted,
                    detail="; ".join(m for m in merge.messages if m.startswith("CONFLICT")) or
                    "content conflict", merge_tree=merge.tree)
    if merge.tree == parent_tree:
        detail = "it applies in reverse on the target" if reverse else "applying it changes nothing"
        return step(PatchOutcome.UPSTREAM, detail=detail)
    misplaced = check_placement(repo, old_parent, old_commit, new_parent, merge.tree, lp)
    if misplaced:
        return step(PatchOutcome.CONFLICT, misplaced=misplaced, merge_tree=merge.tree,
                    detail="a hunk would land in another function or class than at the old pin")
    commit = commit_for(repo, merge.tree, new_parent, lp)
    present = upstream_hunks(repo, new_parent, lp)
    if present:
        return step(PatchOutcome.PARTLY_UPSTREAM, commit=commit, renamed=renamed,
                    detail=f"{present} hunk(s) already upstream, the rest applied")
    if apply_tree == merge.tree:
        if "offset" in applied.stderr or "fuzz" in applied.stderr:
            return step(PatchOutcome.SHIFTED, commit=commit,
                        detail=_offsets(applied.stderr))
        return step(PatchOutcome.UNCHANGED, commit=commit)
    detail = ("plain context matching would have put it elsewhere; the 3-way merge placed it"
              if apply_tree is not None else "the context changed; the 3-way merge resolved it")
    return step(PatchOutcome.MERGED, commit=commit, renamed=renamed, detail=detail)


def _offsets(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if "offset" in ln or "fuzz" in ln]
    return "; ".join(lines)


def upstream_hunks(repo: git.Repo, new_parent: str, lp: LoadedPatch) -> int:
    """How many of the patch's hunks are already present on the target (apply in reverse)."""
    hunks = [(header, h) for section in split_files(lp.patch.diff)
             for header, hs in [split_hunks(section)] for h in hs]
    if len(hunks) < 2:
        return 0
    present = 0
    with repo.temporary_index(new_parent) as index:
        for header, hunk in hunks:
            if index.apply_text(header + hunk, reverse=True).ok and not index.apply_text(header + hunk).ok:
                present += 1
    return present if present < len(hunks) else 0


def _pair(old: Hunk, candidates: Sequence[Hunk]) -> Hunk | None:
    for key in ("added", "removed"):
        want = getattr(old, key)
        if want:
            for h in candidates:
                if getattr(h, key) == want:
                    return h
    return None


def check_placement(repo: git.Repo, old_parent: str, old_commit: str, new_parent: str, new_tree: str,
                    lp: LoadedPatch) -> tuple[str, ...]:
    """Every hunk must land in the scope it was written for; the mismatches, described."""
    old_hunks = parse_hunks(repo.diff(old_parent, old_commit))
    new_hunks = parse_hunks(repo.diff(new_parent, new_tree))
    paths = sorted({h.path for h in old_hunks} | {h.path for h in new_hunks})
    old_files = repo.cat_files(repo.tree_of(old_commit), paths)
    new_files = repo.cat_files(new_tree, paths)
    mismatches = []
    for h in old_hunks:
        before = old_files.get(h.path)
        if before is None:
            continue
        candidates = [n for n in new_hunks if n.path == h.path] or new_hunks
        match = _pair(h, candidates)
        after = new_files.get(match.path) if match else None
        if match is None or after is None:
            continue
        was = scope_at(h.path, before.decode("utf-8", "replace"), h.new_line).name
        now = scope_at(match.path, after.decode("utf-8", "replace"), match.new_line).name
        if was != now:
            mismatches.append(f"{h.path}: hunk {h.header} was in {was}, would land in {now} "
                              f"(line {match.new_line})")
    return tuple(mismatches)


def drift_of(repo: git.Repo, old_base: Base, new_base: Base, old_parent: str, old_commit: str,
             lp: LoadedPatch) -> list[Drift]:
    """Regions around the patch's hunks that upstream changed between the two pins."""
    hunks = [h for h in parse_hunks(repo.diff(old_parent, old_commit)) if h.preimage]
    paths = sorted({h.path for h in hunks})
    chain = repo.cat_files(repo.tree_of(old_parent), paths)
    old_pin = repo.cat_files(old_base.tree, paths)
    new_pin = repo.cat_files(new_base.tree, paths)
    out: list[Drift] = []
    seen: set[tuple[str, str]] = set()
    for h in hunks:
        where, old, new = chain.get(h.path), old_pin.get(h.path), new_pin.get(h.path)
        if where is None or old is None:
            continue
        if new is None:
            out.append(Drift(patch=lp.id, path=h.path, scope="<file>", change="gone",
                             detail="the file no longer exists upstream"))
            continue
        old_text, new_text = old.decode("utf-8", "replace"), new.decode("utf-8", "replace")
        name = scope_at(h.path, where.decode("utf-8", "replace"), h.old_line).name
        if (h.path, name) in seen:
            continue
        seen.add((h.path, name))
        before, after = scope_text(h.path, old_text, name), scope_text(h.path, new_text, name)
        if before is not None:
            if after is None:
                out.append(Drift(patch=lp.id, path=h.path, scope=name, change="gone",
                                 detail=f"{name} no longer exists upstream"))
            elif before != after:
                delta = len(after.splitlines()) - len(before.splitlines())
                out.append(Drift(patch=lp.id, path=h.path, scope=name, change="changed",
                                 detail=f"{name} changed upstream ({delta:+d} lines)"))
            continue
        block = "\n".join(h.preimage)
        if block in old_text and block not in new_text:
            out.append(Drift(patch=lp.id, path=h.path, scope=name, change="changed",
                             detail=f"the lines around hunk {h.header} changed upstream"))
    return out

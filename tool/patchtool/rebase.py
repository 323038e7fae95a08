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
import hashlib
from collections.abc import Sequence

from . import git
from .errors import PatchtoolError
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
    tree: str | None = None  # the tree of ``commit``

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
    """The series as commits on its own base. The commits are deterministic, so a ref keyed by the
    base and the patch files' bytes remembers them for the next rebase or scan."""
    key = hashlib.sha256(base.commit.encode())
    for lp in loaded:
        key.update(b"\0" + lp.path.read_bytes())
    ref = f"refs/patchtool/chain/{key.hexdigest()}"
    tip = repo.resolve(ref)
    if tip is not None:
        commits = repo.out("rev-list", "--reverse", f"{base.commit}..{tip}").split()
        if len(commits) == len(loaded):
            return (base.commit, *commits)
    result = apply_series(repo, base.commit, loaded, commit=True)
    if not result.ok:
        failed = result.failed
        raise PatchtoolError(f"the series does not apply at its current pin ({failed.id if failed else '?'}); "
                             "fix that first", hint="run `patchtool check`")
    chain = (base.commit, *(r.commit for r in result.results if r.commit))
    if len(chain) > 1:
        repo.update_ref(ref, chain[-1])
    return chain


def replay(repo: git.Repo, old_base: Base, new_base: Base, loaded: Sequence[LoadedPatch], *,
           start: int = 0, new_parent: str | None = None, done: Sequence[Step] = (),
           keep_going: bool = False, chain: tuple[str, ...] | None = None,
           drift: bool = True, commits: bool = True) -> Replay:
    """Replay ``loaded[start:]`` onto ``new_parent`` (default: the new base).

    Stops at the first conflict unless ``keep_going`` (a dry run or a scan), in which case the
    conflicting patch is left out and the rest goes on. One temporary index follows the replay,
    so each patch costs a handful of git processes, not a read of the whole tree.
    """
    chain = chain or old_chain(repo, old_base, loaded)
    parent = new_parent or new_base.commit
    parent_tree = new_base.tree if parent == new_base.commit else repo.tree_of(parent)
    steps = list(done)
    with repo.temporary_index(parent_tree) as index:
        for i in range(start, len(loaded)):
            step = replay_one(repo, index, chain[i], chain[i + 1], parent, parent_tree, loaded[i],
                              commit=commits)
            if step.tree:
                parent, parent_tree = step.commit or parent, step.tree
            steps.append(step)
            if step.outcome.stops and not keep_going:
                steps += [Step(id=p.id, file=p.entry.file, outcome=PatchOutcome.NOT_REACHED)
                          for p in loaded[i + 1:]]
                break
    drifted = drift_all(repo, old_base, new_base, chain, loaded, steps) if drift else ()
    return Replay(old_chain=chain, steps=tuple(steps), tip=parent, drift=drifted)


def drift_all(repo: git.Repo, old_base: Base, new_base: Base, chain: Sequence[str],
              loaded: Sequence[LoadedPatch], steps: Sequence[Step]) -> tuple[Drift, ...]:
    """Drift of every patch that applied."""
    return tuple(d for i, lp in enumerate(loaded) if i < len(steps) and steps[i].outcome.applied
                 for d in drift_of(repo, old_base, new_base, chain[i], lp))


def commit_for(repo: git.Repo, tree: str, parent: str, lp: LoadedPatch) -> str:
    author = git.Ident(lp.patch.author_name, lp.patch.author_email, 0)
    return repo.commit_tree(tree, [parent], lp.patch.message, author=author,
                            committer=git.Ident(*git.FIXED_IDENT, 0))


def replay_one(repo: git.Repo, index: git.Index, old_parent: str, old_commit: str, new_parent: str,
               parent_tree: str, lp: LoadedPatch, *, commit: bool = True) -> Step:
    """One patch onto ``new_parent``; ``index`` holds ``parent_tree`` on entry, and on return the
    tree of the step's result (or still ``parent_tree`` when the patch did not apply). Without
    ``commit`` (a scan) the result is a tree only."""
    def step(outcome: PatchOutcome, **kw: object) -> Step:
        return Step(id=lp.id, file=lp.entry.file, outcome=outcome, **kw)  # type: ignore[arg-type]

    def landed(tree: str, outcome: PatchOutcome, **kw: object) -> Step:
        made = commit_for(repo, tree, new_parent, lp) if commit else None
        return step(outcome, commit=made, tree=tree, **kw)

    applied = index.apply([lp.path], verbose=True)
    apply_tree = index.write_tree() if applied.ok else None
    shifted = applied.ok and ("offset" in applied.stderr or "fuzz" in applied.stderr)
    if apply_tree is not None and not shifted:
        # every hunk matched its exact old position with its exact context: nothing moved, so
        # nothing can land in another scope, and a 3-way merge would give the same tree
        return landed(apply_tree, PatchOutcome.UNCHANGED)
    reverse = not applied.ok and index.apply([lp.path], reverse=True, check=True).ok
    probe = repo.commit_tree(parent_tree, [old_parent], "patchtool rebase probe\n",
                             author=git.Ident(*git.FIXED_IDENT), committer=git.Ident(*git.FIXED_IDENT))
    merge = repo.merge_tree(probe, old_commit)
    renamed = tuple(m for m in merge.messages if "rename" in m.lower() and "->" in m)
    if not merge.clean:
        if apply_tree is not None:
            index.read_tree(parent_tree)
        if reverse:
            return step(PatchOutcome.UPSTREAM, detail="it applies in reverse on the target")
        gone = [m for m in merge.messages if "modify/delete" in m or "deleted in" in m]
        if gone:
            return step(PatchOutcome.TARGET_GONE, conflicted=merge.conflicted, detail="; ".join(gone),
                        merge_tree=merge.tree)
        return step(PatchOutcome.CONFLICT, conflicted=merge.conflicted, merge_tree=merge.tree,
                    detail="; ".join(m for m in merge.messages if m.startswith("CONFLICT")) or "content conflict")
    if merge.tree == parent_tree:
        if apply_tree is not None:
            index.read_tree(parent_tree)
        detail = "it applies in reverse on the target" if reverse else "applying it changes nothing"
        return step(PatchOutcome.UPSTREAM, detail=detail)
    misplaced = check_placement(repo, old_commit, parent_tree, merge.tree, lp)
    if misplaced:
        if apply_tree is not None:
            index.read_tree(parent_tree)
        return step(PatchOutcome.CONFLICT, misplaced=misplaced, merge_tree=merge.tree,
                    detail="a hunk would land in another function or class than at the old pin")
    if apply_tree == merge.tree:
        return landed(merge.tree, PatchOutcome.SHIFTED, detail=_offsets(applied.stderr))
    present = 0 if apply_tree is not None else upstream_hunks(index, lp)
    index.read_tree(merge.tree)
    if present:
        return landed(merge.tree, PatchOutcome.PARTLY_UPSTREAM, renamed=renamed,
                      detail=f"{present} hunk(s) already upstream, the rest applied")
    detail = ("plain context matching would have put it elsewhere; the 3-way merge placed it"
              if apply_tree is not None else "the context changed; the 3-way merge resolved it")
    return landed(merge.tree, PatchOutcome.MERGED, renamed=renamed, detail=detail)


def _offsets(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if "offset" in ln or "fuzz" in ln]
    return "; ".join(lines)


def upstream_hunks(index: git.Index, lp: LoadedPatch) -> int:
    """How many of the patch's hunks are already present on the index's tree (apply in reverse)."""
    hunks = [(header, h) for section in split_files(lp.patch.diff)
             for header, hs in [split_hunks(section)] for h in hs]
    if len(hunks) < 2:
        return 0
    present = sum(1 for header, hunk in hunks
                  if index.apply_text(header + hunk, reverse=True).ok and not index.apply_text(header + hunk).ok)
    return present if present < len(hunks) else 0


def _pair(old: Hunk, candidates: Sequence[Hunk]) -> Hunk | None:
    for key in ("added", "removed"):
        want = getattr(old, key)
        if want:
            for h in candidates:
                if getattr(h, key) == want:
                    return h
    return None


def _same_place(was: str, now: str, renamed_away: bool) -> bool:
    """The same scope, or the same method of a class upstream renamed (``A.f`` became ``B.f``)."""
    if was == now:
        return True
    return renamed_away and was.rsplit(".", 1)[-1] == now.rsplit(".", 1)[-1] and "." in was and "." in now


def check_placement(repo: git.Repo, old_commit: str, parent_tree: str, new_tree: str,
                    lp: LoadedPatch) -> tuple[str, ...]:
    """Every hunk must land in the scope it was written for; the mismatches, described."""
    old_hunks = [h for h in parse_hunks(lp.patch.diff) if h.path != "/dev/null"]
    new_hunks = parse_hunks(repo.diff(parent_tree, new_tree))
    paths = sorted({h.path for h in old_hunks} | {h.path for h in new_hunks})
    blobs = repo.cat_blobs([f"{old_commit}:{p}" for p in paths] + [f"{new_tree}:{p}" for p in paths])
    mismatches = []
    for h in old_hunks:
        before = blobs.get(f"{old_commit}:{h.path}")
        if before is None:
            continue
        candidates = [n for n in new_hunks if n.path == h.path] or new_hunks
        match = _pair(h, candidates)
        after = blobs.get(f"{new_tree}:{match.path}") if match else None
        if match is None or after is None:
            continue
        after_text = after.decode("utf-8", "replace")
        was = scope_at(h.path, before.decode("utf-8", "replace"), h.new_line).name
        now = scope_at(match.path, after_text, match.new_line).name
        if not _same_place(was, now, renamed_away=scope_text(match.path, after_text, was) is None):
            mismatches.append(f"{h.path}: hunk {h.header} was in {was}, would land in {now} "
                              f"(line {match.new_line})")
    return tuple(mismatches)


def drift_of(repo: git.Repo, old_base: Base, new_base: Base, old_parent: str,
             lp: LoadedPatch) -> list[Drift]:
    """Regions around the patch's hunks that upstream changed between the two pins."""
    hunks = [h for h in parse_hunks(lp.patch.diff) if h.preimage and h.path != "/dev/null"]
    paths = sorted({h.path for h in hunks})
    specs = [f"{rev}:{p}" for rev in (old_parent, old_base.tree, new_base.tree) for p in paths]
    blobs = repo.cat_blobs(specs)
    out: list[Drift] = []
    seen: set[tuple[str, str]] = set()
    for h in hunks:
        where = blobs.get(f"{old_parent}:{h.path}")
        old, new = blobs.get(f"{old_base.tree}:{h.path}"), blobs.get(f"{new_base.tree}:{h.path}")
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

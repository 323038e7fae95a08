"""Moving the series to a new upstream: one outcome per patch, verified placement, drift, a report.

Each patch is replayed with a true 3-way merge against its real base: for every file, the file
before the patch at the old pin, after it, and in the tree being built on the new pin
(``merge``), in memory. Applying the patch text the way ``git apply`` does (``textapply``) only
classifies the outcome (unchanged or shifted); it never decides placement. Whether a patch is
already upstream is ``upstreamed.already_upstream``. After merging, every
hunk must sit in the same enclosing function or class it had at the old pin, otherwise the patch
is a conflict.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet

from patchtool import git, progress
from patchtool.diff.model import ADDED, Diff
from patchtool.diff.scopes import PlacedHunk, placed_hunks, scope_at, scope_text
from patchtool.errors import PatchtoolError
from patchtool.git import memo
from patchtool.git import treemerge as merge
from patchtool.project.repository import LoadedPatch
from patchtool.rebase import absorbed, fromhistory, moved, twice
from patchtool.rebase.textapply import AppliedPatch, MovedHunk, apply_patch, summary
from patchtool.rebase.upstreamed import (
    CHANGES_NOTHING,
    HAS_ITS_LINES,
    IN_OTHER_FORM,
    MAY_BE_UPSTREAM,
    PatchIds,
    Verdict,
    already_upstream,
    hunks_upstream,
    in_other_form,
)
from patchtool.upstream.cache import Base


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
        return self in (PatchOutcome.UNCHANGED, PatchOutcome.SHIFTED, PatchOutcome.MERGED, PatchOutcome.PARTLY_UPSTREAM)

    @property
    def stops(self) -> bool:
        return self in (PatchOutcome.CONFLICT, PatchOutcome.TARGET_GONE)


# a Step's fields that hold a tuple of strings, each written only when it holds some
STEP_LISTS = ("conflicted", "misplaced", "renamed", "upstream_has", "evidence", "assumes", "upstream_commits")


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
    shifted: tuple[MovedHunk, ...] = ()  # applied with shifted context: each hunk that moved
    files: tuple[str, ...] = ()  # the paths the patch's result touches
    upstream_has: tuple[str, ...] = ()  # a conflict whose result upstream has up to formatting: where
    evidence: tuple[str, ...] = ()  # already upstream, partly or maybe: what says so
    assumes: tuple[str, ...] = ()  # a dry run or scan: the earlier stops, left out, under the same files
    upstream_commits: tuple[str, ...] = ()  # a stop: upstream's commits that changed the lines under its hunks

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"id": self.id, "file": self.file, "outcome": str(self.outcome)}
        out |= {key: value for key in ("commit", "detail") if (value := getattr(self, key))}
        out |= {key: list(value) for key in STEP_LISTS if (value := getattr(self, key))}
        return out | ({"shifted": [m.to_dict() for m in self.shifted]} if self.shifted else {})


class DriftChange(enum.StrEnum):
    CHANGED = "changed"  # the region is there, upstream edited it
    GONE = "gone"  # the region (or its whole file) is no longer upstream
    MOVED = "moved"  # upstream renamed the file: the detail says to what, its regions are followed there


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Drift:
    """A region a patch touches that upstream changed between the pins, though the patch applied."""

    patch: str
    path: str
    scope: str
    change: DriftChange
    detail: str
    commits: tuple[str, ...] = ()  # upstream's commits that changed the lines under the patch's hunks there

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {**dataclasses.asdict(self), "change": str(self.change), "commits": list(self.commits)}
        if not self.commits:
            del out["commits"]
        return out


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Replay:
    old_chain: tuple[str, ...]  # commits of the series on the old base
    steps: tuple[Step, ...]
    tip: str  # the last commit on the new base
    drift: tuple[Drift, ...]
    left: dict[str, bytes | None] = dataclasses.field(default_factory=dict)  # at a stop: the merge's files
    unmerged: tuple[merge.Conflict, ...] = ()  # at a stop: its conflicts, each with its sides

    @property
    def stopped(self) -> Step | None:
        return next((s for s in self.steps if s.outcome.stops), None)


def old_chain(repo: git.Repo, base: Base, loaded: Sequence[LoadedPatch]) -> tuple[str, ...]:
    """The series as commits on its own base. The commits are deterministic, so a ref keyed by the
    base and the patch files' bytes keeps them for the next rebase or scan, and the list of them
    is remembered beside it (``memo``): a ``--continue`` finds the chain with one read of the ref,
    which also keeps every object the chain and its changes name (``chain_changes``) from gc."""
    key = hashlib.sha256(base.commit.encode())
    for lp in loaded:
        key.update(b"\0" + lp.path.read_bytes())
    ref = f"refs/patchtool/chain/{key.hexdigest()}"
    known = memo.recall(repo.git_dir, "chains", key.hexdigest())
    tip = repo.resolve(ref)
    if (
        isinstance(known, list)
        and len(known) == len(loaded) + 1
        and all(isinstance(c, str) and len(c) == 40 for c in known)
        and known[0] == base.commit
        and known[-1] == tip
    ):
        return tuple(known)
    if tip is not None:
        commits = repo.rev_list(base.commit, tip)
        if len(commits) == len(loaded):
            memo.remember(repo.git_dir, "chains", key.hexdigest(), [base.commit, *commits])
            return (base.commit, *commits)
    from patchtool.series.apply import apply_series  # only when neither the memo nor the ref has the chain

    result = apply_series(repo, base.commit, loaded, commit=True)
    if not result.ok:
        failed = result.failed
        raise PatchtoolError(
            f"the series does not apply at its current pin ({failed.id if failed else '?'}); fix that first",
            hint="run `patchtool check`",
        )
    chain = (base.commit, *(r.commit for r in result.results if r.commit))
    if len(chain) > 1:
        repo.update_ref(ref, chain[-1])
        if len(chain) == len(loaded) + 1:
            memo.remember(repo.git_dir, "chains", key.hexdigest(), list(chain))
    return chain


def chain_changes(repo: git.Repo, chain: Sequence[str]) -> dict[str, tuple[git.RawChange, ...]]:
    """The files each commit of the chain changes (``git log --raw -M``), remembered per chain: a
    chain from ``old_chain``, whose ref keeps the objects the answer names."""
    if len(chain) < 2:
        return {}
    key = f"{chain[0]}-{chain[-1]}"
    known = memo.recall(repo.git_dir, "changes", key)
    try:
        if isinstance(known, dict):
            return {c: tuple(git.RawChange(**f) for f in files) for c, files in known.items()}
    except (AttributeError, TypeError):
        pass  # not the shape that was written: computed again
    found = dict(repo.changes(chain[0], chain[-1]))
    memo.remember(
        repo.git_dir, "changes", key, {c: [dataclasses.asdict(f) for f in files] for c, files in found.items()}
    )
    return found


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ReplayOptions:
    """How a replay runs: a rebase stops at the first conflict and writes its commits; a
    ``--continue`` goes on after the patches ``done``; a dry run keeps going and reports drift;
    a scan does too and writes nothing."""

    done: tuple[Step, ...] = ()  # the patches a --continue has been through, in order
    parent: str | None = None  # where to go on from (default: the new base)
    keep_going: bool = False  # a conflicting patch is left out and the rest goes on
    drift: bool = False  # the drift under the patches that applied
    ref: str | None = None  # where the commits are written, the tip left there (None: none written)
    chain: tuple[str, ...] | None = None  # the series on the old base, where the caller has it
    style: str = "merge"  # the conflict markers' (a ``merge.conflictStyle``)
    history: fromhistory.Verdicts | None = None  # upstream's history between the pins, where it is asked


def replay(
    repo: git.Repo, old_base: Base, new_base: Base, loaded: Sequence[LoadedPatch], options: ReplayOptions
) -> Replay:
    """Replay the patches of ``loaded`` after ``options.done`` onto ``options.parent``.

    Stops at the first conflict unless ``keep_going``, in which case the conflicting patch is
    left out and the rest goes on, as a rebase does where every stop is skipped (a later patch
    on the same files names the stops it assumes skipped). The tree being built lives in memory
    (``merge.Workspace``): a patch costs no git process unless all three sides of a file differ
    (one ``git merge-file``), and every commit is written at the end by one ``git fast-import``.
    """
    chain = options.chain or old_chain(repo, old_base, loaded)
    parent = options.parent or new_base.commit
    changes = chain_changes(repo, chain)
    steps = list(options.done)
    start, keep_going, style = len(steps), options.keep_going, options.style
    writes: list[tuple[int, git.NewCommit]] = []  # (index in steps, the commit to write)
    left: dict[str, bytes | None] = {}
    unmerged: tuple[merge.Conflict, ...] = ()
    labels = (
        f"{new_base.pin.upstream} {new_base.pin.version} + series",
        f"{old_base.pin.upstream} {old_base.pin.version} + series",
    )
    patch_ids = PatchIds(repo, old_base, new_base, chain)
    # keep_going: each stop left out, as if skipped, and its paths; a later patch on them says so
    left_out: list[tuple[str, frozenset[str]]] = []
    # no path is looked up before a patch asks for it: a --continue that stops at the next
    # conflict reads the trees along the files of the patches it reached, not of the whole rest
    with (
        repo.reader() as reader,
        merge.Workspace(repo, reader, parent, (), merge.Renames(repo, old_base.tree, new_base.tree)) as ws,
    ):
        for i in progress.track(
            range(start, len(loaded)),
            f"replay onto {new_base.pin.name}",
            unit="patches",
            completed=start,
            note=lambda i: loaded[i].id,
        ):
            lp = loaded[i]
            said = options.history.of(lp) if options.history is not None else None
            own = changes.get(chain[i + 1], ())
            step, files, conflicts = replay_one(
                ws, chain[i + 1], own, lp, (*labels, f"patch {lp.id}"), patch_ids, style=style, upstream=said
            )
            if step.outcome.stops and options.history is not None:
                hints = () if said is None else tuple(e for e in said.evidence if e not in step.evidence)
                step = dataclasses.replace(
                    step,
                    evidence=(*step.evidence, *hints),
                    upstream_commits=fromhistory.under_hunks(lp.patch.model, options.history.changes),
                )
            if step.outcome.stops and not step.evidence and not step.upstream_has:
                later = [(loaded[k].id, changes.get(chain[k + 1], ())) for k in range(i + 1, len(loaded))]
                if found := absorbed.with_later(ws, own, later):
                    step = dataclasses.replace(step, evidence=found)
            if keep_going and (after := tuple(pid for pid, paths in left_out if _overlap(paths, _paths(lp)))):
                step = dataclasses.replace(step, assumes=after)
            if step.outcome.stops and keep_going:
                left_out.append((lp.id, _paths(lp)))
            if step.outcome.applied and files is not None:
                ws.update(files)
                writes.append((len(steps), _commit_of(lp, files)))
            elif step.outcome.stops and files is not None and not keep_going:
                left = {p: None if f is None else ws.data(f) for p, f in files.items()}
                unmerged = conflicts
            steps.append(step)
            if step.outcome.stops and not keep_going:
                steps += [Step(id=p.id, file=p.entry.file, outcome=PatchOutcome.NOT_REACHED) for p in loaded[i + 1 :]]
                break
        drifted = drift_all(reader, old_base, new_base, chain, loaded, steps) if options.drift else ()
        drifted = with_commits(drifted, loaded, options.history)
    tip = parent
    if options.ref is not None and writes:
        shas = repo.write_commits(parent, [c for _, c in writes], ref=options.ref)
        for (at, _), sha in zip(writes, shas, strict=True):
            steps[at] = dataclasses.replace(steps[at], commit=sha)
            tip = sha
    return Replay(old_chain=chain, steps=tuple(steps), tip=tip, drift=drifted, left=left, unmerged=unmerged)


def with_commits(
    drift: Sequence[Drift], loaded: Sequence[LoadedPatch], history: fromhistory.Verdicts | None
) -> tuple[Drift, ...]:
    """Each drift with upstream's commits that changed the lines under its patch's hunks in its file."""
    if history is None:
        return tuple(drift)
    by_id = {lp.id: lp for lp in loaded}
    out = []
    for d in drift:
        lp = by_id.get(d.patch)
        found = fromhistory.under_hunks(lp.patch.model, history.changes) if lp else ()
        out.append(dataclasses.replace(d, commits=tuple(c for c in found if c.endswith(f" of {d.path}"))))
    return tuple(out)


def _paths(lp: LoadedPatch) -> frozenset[str]:
    return frozenset(p for f in lp.patch.model.files for p in (f.old_path, f.new_path) if p)


def _overlap(a: AbstractSet[str], b: AbstractSet[str]) -> bool:
    """Whether two sets of paths share one, or one holds a directory of the other's."""
    return bool(a & b) or any(x.startswith(f"{y}/") or y.startswith(f"{x}/") for x in a for y in b)


def _idents(lp: LoadedPatch) -> tuple[git.Ident, git.Ident]:
    """(author, committer) of a rebased patch: its own author, patchtool, both at time 0."""
    return git.Ident(lp.patch.author_name, lp.patch.author_email, 0), git.Ident(*git.FIXED_IDENT, 0)


def commit_for(repo: git.Repo, tree: str, parent: str, lp: LoadedPatch) -> str:
    """The commit of a patch a person resolved by hand (``rebase --continue``)."""
    author, committer = _idents(lp)
    return repo.commit_tree(tree, [parent], lp.patch.message, author=author, committer=committer)


def _commit_of(lp: LoadedPatch, files: dict[str, merge.File | None]) -> git.NewCommit:
    writes = tuple(
        git.FileWrite(path, f.mode if f else None, f.blob if f else None, f.data if f else None)
        for path, f in sorted(files.items())
    )
    author, committer = _idents(lp)
    return git.NewCommit(message=lp.patch.message, author=author, committer=committer, files=writes)


def drift_all(
    reader: git.ObjectReader,
    old_base: Base,
    new_base: Base,
    chain: Sequence[str],
    loaded: Sequence[LoadedPatch],
    steps: Sequence[Step],
) -> tuple[Drift, ...]:
    """Drift of every patch that applied. A file upstream left byte-identical cannot have
    drifted: two ``ls-tree`` calls find those, and only the others are read and scanned."""
    applied = [i for i, lp in enumerate(loaded) if i < len(steps) and steps[i].outcome.applied]
    paths = sorted({p for i in applied for p in loaded[i].patch.paths})
    old, new = reader.repo.entries(old_base.tree, paths), reader.repo.entries(new_base.tree, paths)
    same = {p for p in paths if p in old and old.get(p) == new.get(p)}
    renames = merge.Renames(reader.repo, old_base.tree, new_base.tree)
    return tuple(
        d
        for i in applied
        for d in drift_of(reader, old_base, new_base, chain[i], loaded[i], same=same, renames=renames)
    )


def _plain(changes: Sequence[git.RawChange]) -> bool:
    """No renames, copies or mode changes: what a text application can reproduce exactly."""
    return all(c.status in "AMD" and (c.status != "M" or c.old_mode == c.new_mode) for c in changes)


Replayed = tuple[Step, dict[str, merge.File | None] | None, tuple[merge.Conflict, ...]]


def replay_one(
    ws: merge.Workspace,
    old_commit: str,
    changes: Sequence[git.RawChange],
    lp: LoadedPatch,
    labels: tuple[str, str, str],
    patch_ids: PatchIds | None = None,
    *,
    style: str = "merge",
    upstream: fromhistory.Upstream | None = None,
) -> Replayed:
    """One patch onto the workspace: its outcome, the files it leaves (None when it did not
    apply; on a stop, the files for the conflict worktree, markers in ``style`` and all), and
    its merge's conflicts."""

    def step(outcome: PatchOutcome, **kw: object) -> Step:
        return Step(id=lp.id, file=lp.entry.file, outcome=outcome, **kw)  # type: ignore[arg-type]

    def leaving(outcome: PatchOutcome, files: dict[str, merge.File | None], **kw: object) -> Replayed:
        """The step with the files the merge leaves, for its commit or its stop's worktree."""
        return step(outcome, files=tuple(sorted(files)), **kw), files, ()

    diff = lp.patch.model
    plain = _plain(changes) and bool(changes)
    # the tree always comes from the 3-way merge; the text application only labels its result
    forward = apply_patch(ws, diff) if plain else None
    merged = merge.merge_patch(ws, changes, labels, style=style, commit=old_commit)
    if merged.gone:  # a file upstream moved where git's rename detection misses it: its hunks' lines
        merged = moved.follow_gone(ws, diff, merged)
    try_reverse = forward is None and plain
    hunks = absorbed.hunks_in_target(ws, changes) if try_reverse else ()
    verdict = already_upstream(
        ws, diff, merged, try_reverse=try_reverse, patch_ids=patch_ids, commit=old_commit, changes=changes, hunks=hunks
    )
    if upstream is not None and upstream.proof:  # history: the target has this commit; never applied again
        if not hunks and plain:
            hunks = absorbed.hunks_in_target(ws, changes)
        # a merge that changes nothing: already_upstream dropped it on that unless the target kept a
        # line it removes (its veto, asked once)
        unchanged = merged.clean and ws.same(merged.files) and verdict is not None and verdict.drop
        content = unchanged or (bool(hunks) and all(h.upstream for h in hunks))
        if content:  # two kinds of evidence: upstream's history and the target's content
            seen = verdict.evidence if verdict is not None else ()
            lines = seen or (
                (f"{CHANGES_NOTHING}: the 3-way merge leaves the target as it is",)
                if unchanged
                else (f"{HAS_ITS_LINES}: " + ", ".join(h.describe() for h in hunks),)
            )
            return step(PatchOutcome.UPSTREAM, detail=upstream.detail, evidence=(*upstream.evidence, *lines)), None, ()
        # what the target's content does show, hunk by hunk (at its place, or in another form)
        partial = absorbed.content_evidence(ws, changes) if plain else ()
        seen = verdict.evidence if verdict is not None else ()
        verdict = Verdict(
            drop=False,
            detail=f"{upstream.detail}; the target's content does not show it",
            evidence=tuple(dict.fromkeys((*upstream.evidence, *seen, *partial))),
        )
    elif upstream is not None and verdict is not None and not verdict.drop:
        verdict = dataclasses.replace(verdict, evidence=(*verdict.evidence, *upstream.evidence))
    if verdict is not None and verdict.drop:
        evidence = (*verdict.evidence, *(upstream.evidence if upstream is not None else ()))
        return step(PatchOutcome.UPSTREAM, detail=verdict.detail, evidence=evidence), None, ()
    if verdict is not None:  # evidence too weak to drop it: it stops once, showing it
        if merged.clean:
            return leaving(PatchOutcome.CONFLICT, merged.files, detail=verdict.detail, evidence=verdict.evidence)
        stop, left = _stopped(ws, changes, merged, step)
        return dataclasses.replace(stop, detail=verdict.detail, evidence=verdict.evidence), left, merged.conflicts
    partly: tuple[str, ...] = ()
    if not merged.clean and (resolved := absorbed.without_upstream_hunks(ws, changes, merged, hunks, labels, style)):
        merged, partly = resolved, tuple(h.describe() for h in hunks if h.upstream)
    if not merged.clean:
        stop, left = _stopped(ws, changes, merged, step)
        if evidence := in_other_form(ws, merged, labels):
            stop = dataclasses.replace(stop, upstream_has=evidence, detail=f"{IN_OTHER_FORM}: {'; '.join(evidence)}")
        elif plain and (seen := absorbed.content_evidence(ws, changes)):
            stop = dataclasses.replace(stop, evidence=seen)  # one kind, in some hunks or in another form: shown
        return stop, left, merged.conflicts
    files = merged.files
    if partly and ws.same(files):
        # the hunks the target has at their place left out, the rest merges to the target as it
        # is: upstream may have all of it, but only some hunks say so where the patch put them
        # (one kind of evidence): it stops once, never leaving an empty patch behind
        rest = f"{CHANGES_NOTHING}: with those hunks left out, the 3-way merge leaves the target as it is"
        evidence = (*(f"upstream has {h}: every line it adds, none it removes" for h in partly), rest)
        detail = f"{MAY_BE_UPSTREAM}: {len(partly)} hunk(s) at their place, and the rest changes nothing"
        return leaving(PatchOutcome.CONFLICT, files, detail=detail, evidence=evidence)
    own = {merge.File(c.new_mode, c.new_blob) for c in changes if c.new_mode and c.new_blob}
    # a file the merge took as the patch left it (upstream did not touch it) cannot have moved
    misplaced = () if all(f is None or f in own for f in files.values()) else _placement(ws, lp, changes, files)
    if misplaced:
        detail = "a hunk would land in another function or class than at the old pin"
        return leaving(PatchOutcome.CONFLICT, files, misplaced=misplaced, detail=detail)
    if doubled := _defined_twice(ws, diff, changes, files):
        detail = "applying it would define a name twice: upstream may have it"
        return leaving(PatchOutcome.CONFLICT, files, detail=detail, evidence=doubled)
    if forward is not None and _as_applied(ws, forward, files):
        if not forward.moved:
            return leaving(PatchOutcome.UNCHANGED, files)
        return leaving(PatchOutcome.SHIFTED, files, detail=summary(forward.moved), shifted=forward.moved)
    if present := len(partly) or (hunks_upstream(ws, diff) if try_reverse else 0):
        return leaving(
            PatchOutcome.PARTLY_UPSTREAM,
            files,
            renamed=merged.renamed,
            detail=f"{present} hunk(s) already upstream, the rest applied",
            evidence=tuple(f"upstream has {h}: every line it adds, none it removes" for h in partly),
        )
    detail = (
        "plain context matching would have put it elsewhere; the 3-way merge placed it"
        if forward is not None
        else "the context changed; the 3-way merge resolved it"
    )
    return leaving(PatchOutcome.MERGED, files, renamed=merged.renamed, detail=detail)


def _defined_twice(
    ws: merge.Workspace, diff: Diff, changes: Sequence[git.RawChange], files: dict[str, merge.File | None]
) -> tuple[str, ...]:
    """``twice.defined_twice`` for every Python file of the result where the patch adds a def or class."""
    theirs = {c.new_path: c.new_blob for c in changes if c.new_path and c.new_blob}
    out: list[str] = []
    for fd in diff.files:
        path = fd.new_path
        f = files.get(path) if path else None
        names = twice.added_names(ln.text for h in fd.hunks for ln in h.lines if ln.kind == ADDED)
        if path is None or f is None or not names:
            continue
        result = ws.data(f).decode("utf-8", "surrogateescape")
        own = ws.reader.blob(theirs[path]) if path in theirs else None
        before = None if own is None else own.decode("utf-8", "surrogateescape")
        out += twice.defined_twice(path, result, names, ws.text(path), before)
    return tuple(dict.fromkeys(out))


def _stopped(
    ws: merge.Workspace, changes: Sequence[git.RawChange], merged: merge.PatchMerge, step: Callable[..., Step]
) -> tuple[Step, dict[str, merge.File | None]]:
    """A conflict (or a target gone), with the files for its worktree: the merge's, markers and
    all, and the patch's own version of a file upstream deleted."""
    left = {
        **merged.files,
        **{c.path: merge.File(_mode_of(ws, c.path), None, c.data) for c in merged.conflicts if c.data is not None},
        **{
            c.old_path: merge.File(c.new_mode, c.new_blob)
            for c in changes
            if c.old_path in merged.gone and c.new_mode and c.new_blob
        },
    }
    conflicted = tuple(dict.fromkeys(c.path for c in merged.conflicts))
    outcome = PatchOutcome.TARGET_GONE if merged.gone else PatchOutcome.CONFLICT
    shown = {*left, *(c.in_the_way for c in merged.conflicts if c.in_the_way)}  # what the worktree checks out
    detail = "; ".join(c.message for c in merged.conflicts)
    return step(outcome, conflicted=conflicted, detail=detail, files=tuple(sorted(shown))), left


def _as_applied(ws: merge.Workspace, applied: AppliedPatch, files: dict[str, merge.File | None]) -> bool:
    """Whether the merge left every file as the plain text application did."""
    for path, f in files.items():
        text = applied.texts.get(path)
        if (f is None) != (text is None):
            return False
        if f is not None and text is not None and ws.data(f) != text.encode("utf-8", "surrogateescape"):
            return False
    return True


def _mode_of(ws: merge.Workspace, path: str) -> str:
    return have.mode if (have := ws.get(path)) is not None else "100644"


def _lines(h: PlacedHunk) -> tuple[str, ...]:
    """What pairs a hunk of the patch with one of the merge: the lines it adds, or else removes."""
    return h.added or h.removed


def _pair(
    old: PlacedHunk,
    twins: Sequence[PlacedHunk],
    candidates: Sequence[PlacedHunk],
    in_place: Callable[[PlacedHunk], bool],
) -> PlacedHunk | None:
    """The hunk of the merge that carries ``old``: among those with its lines, the one at its
    position where the patch has as many hunks with those lines (``twins``: ``old`` among them, in
    file order) as the merge has, else the first in its own scope, else the first."""
    same = [h for h in candidates if _lines(h) == _lines(old)]
    if len(same) == len(twins):
        return same[twins.index(old)]
    return next((h for h in same if in_place(h)), same[0] if same else None)


def _same_place(path: str, was: str, now: str, renamed_away: bool) -> bool:
    """The same scope; in Python, wherever upstream's code now is when no scope of the old name is
    left (upstream renamed the class around a method, or deleted the ``def`` line around the hunk:
    a clean merge keeps the hunk on upstream's own lines, and no name is left to tell another place
    by); elsewhere, the same method of a class upstream renamed (``A.f`` became ``B.f``)."""
    if was == now:
        return True
    if path.endswith(".py"):
        return renamed_away
    return renamed_away and was.rsplit(".", 1)[-1] == now.rsplit(".", 1)[-1] and "." in was and "." in now


def changed_hunks(path: str, before: str, after: str) -> list[PlacedHunk]:
    """The hunks of ``before`` -> ``after`` as ``git diff -U3`` groups them (changes at most six
    lines apart share a hunk), each with the position of its first change."""
    a, b = before.split("\n"), after.split("\n")
    return [
        PlacedHunk(
            path,
            g.blocks[0].a_start + 1,
            g.blocks[0].b_start + 1,
            tuple(line for blk in g.blocks for line in b[blk.b_start : blk.b_end]),
            tuple(line for blk in g.blocks for line in a[blk.a_start : blk.a_end]),
            (),
            "",
        )
        for g in absorbed.hunk_groups(a, b)
    ]


def misplacements(
    old_hunks: Sequence[PlacedHunk], before: dict[str, str], new_hunks: Sequence[PlacedHunk], after: dict[str, str]
) -> tuple[str, ...]:
    """Every hunk of the patch (``old_hunks``, at the old pin, ``before`` the texts after the patch
    there) must sit in the same scope among ``new_hunks`` (``after``: the merged texts)."""

    def now_at(n: PlacedHunk) -> str:
        text = after.get(n.path)
        return "" if text is None else scope_at(n.path, text, n.new_line).name

    def was_at(h: PlacedHunk, before_text: str, n: PlacedHunk) -> str:
        # read by the rules of the path it lands in: a script upstream renamed to .py is Python there
        return scope_at(n.path, before_text, h.new_line).name

    mismatches = []
    for h in old_hunks:
        before_text = before.get(h.path)
        if before_text is None or not _lines(h):
            continue
        candidates = sorted((n for n in new_hunks if n.path == h.path), key=lambda n: n.new_line) or list(new_hunks)
        twins = sorted((o for o in old_hunks if o.path == h.path and _lines(o) == _lines(h)), key=lambda o: o.new_line)
        match = _pair(h, twins, candidates, lambda n: now_at(n) == was_at(h, before_text, n))  # noqa: B023 (called here)
        after_text = after.get(match.path) if match else None
        if match is None or after_text is None:
            continue
        was, now = was_at(h, before_text, match), now_at(match)
        if not _same_place(match.path, was, now, renamed_away=scope_text(match.path, after_text, was) is None):
            mismatches.append(f"{h.path}: hunk {h.header} was in {was}, would land in {now} (line {match.new_line})")
    return tuple(mismatches)


def _placement(
    ws: merge.Workspace, lp: LoadedPatch, changes: Sequence[git.RawChange], files: dict[str, merge.File | None]
) -> tuple[str, ...]:
    old_hunks = placed_hunks(lp.patch.model)
    before = {
        c.new_path: (ws.reader.blob(c.new_blob) or b"").decode("utf-8", "replace")
        for c in changes
        if c.new_path and c.new_blob
    }
    after = {path: ws.data(f).decode("utf-8", "replace") for path, f in files.items() if f is not None}
    new_hunks = [h for path, text in after.items() for h in changed_hunks(path, ws.text(path) or "", text)]
    return misplacements(old_hunks, before, new_hunks, after)


def check_placement(
    repo: git.Repo, old_commit: str, parent_tree: str, new_tree: str, lp: LoadedPatch
) -> tuple[str, ...]:
    """``misplacements`` for trees in the repository: the patch at ``old_commit``, merged into
    ``new_tree`` on top of ``parent_tree``."""
    old_hunks = placed_hunks(lp.patch.model)
    paths = sorted({h.path for h in old_hunks})
    blobs = repo.cat_blobs([f"{rev}:{p}" for rev in (old_commit, parent_tree, new_tree) for p in paths])

    def text(rev: str, path: str) -> str | None:
        return None if (data := blobs.get(f"{rev}:{path}")) is None else data.decode("utf-8", "replace")

    before = {p: t for p in paths if (t := text(old_commit, p)) is not None}
    after = {p: t for p in paths if (t := text(new_tree, p)) is not None}
    new_hunks = [h for p in after for h in changed_hunks(p, text(parent_tree, p) or "", after[p])]
    return misplacements(old_hunks, before, new_hunks, after)


def drift_of(
    reader: git.ObjectReader,
    old_base: Base,
    new_base: Base,
    old_parent: str,
    lp: LoadedPatch,
    *,
    same: AbstractSet[str] = frozenset(),
    renames: Callable[[str], str | None] | None = None,
) -> list[Drift]:
    """Regions around the patch's hunks that upstream changed between the two pins (``same``:
    paths known to be identical in both), followed through a file ``renames`` says upstream moved."""
    hunks = [h for h in placed_hunks(lp.patch.model) if h.preimage and h.path not in same]
    paths = sorted({h.path for h in hunks})
    blobs = {
        f"{rev}:{p}": reader.blob(f"{rev}:{p}") for rev in (old_parent, old_base.tree, new_base.tree) for p in paths
    }
    gone = [p for p in paths if blobs[f"{new_base.tree}:{p}"] is None and blobs[f"{old_base.tree}:{p}"] is not None]
    moved = {p: to for p in gone if renames is not None and (to := renames(p)) is not None}
    # the regions are compared where upstream moved the file
    blobs.update({f"{new_base.tree}:{p}": reader.blob(f"{new_base.tree}:{to}") for p, to in moved.items()})

    def drift(path: str, scope: str, change: DriftChange, detail: str) -> Drift:
        return Drift(patch=lp.id, path=path, scope=scope, change=change, detail=detail)

    out = [
        drift(p, "<file>", DriftChange.MOVED, f"the file moved upstream to {to}")
        for p, to in moved.items()
        if blobs[f"{new_base.tree}:{p}"] is not None
    ]
    seen: set[tuple[str, str]] = set()
    for h in hunks:
        where = blobs.get(f"{old_parent}:{h.path}")
        old, new = blobs.get(f"{old_base.tree}:{h.path}"), blobs.get(f"{new_base.tree}:{h.path}")
        if where is None or old is None:
            continue
        if new is None:
            out.append(drift(h.path, "<file>", DriftChange.GONE, "the file no longer exists upstream"))
            continue
        old_text, new_text = old.decode("utf-8", "replace"), new.decode("utf-8", "replace")
        name = scope_at(h.path, where.decode("utf-8", "replace"), h.old_line).name
        if (h.path, name) in seen:
            continue
        seen.add((h.path, name))
        before, after = scope_text(h.path, old_text, name), scope_text(h.path, new_text, name)
        if before is not None:
            if after is None:
                change, detail = DriftChange.GONE, f"{name} no longer exists upstream"
            elif before != after:
                delta = after.count("\n") - before.count("\n")
                change, detail = DriftChange.CHANGED, f"{name} changed upstream ({delta:+d} lines)"
            else:
                continue
            out.append(drift(h.path, name, change, detail))
            continue
        block = "\n".join(h.preimage)
        if block in old_text and block not in new_text:
            out.append(drift(h.path, name, DriftChange.CHANGED, f"the lines around hunk {h.header} changed upstream"))
    return out

"""``patchtool rebase``: the series moved to a new upstream as a transaction.

All work happens in the cache's object store; the repository's ``patches/``,
``patchset.toml`` and ``upstream-pins/`` change only once every patch is through. The state
(``state.RebaseState``) lives in ``.patchtool/rebase/state.json``, written atomically at every
stop, so a killed process leaves the repository either as it was or resumable with ``--continue``. The final
write (the series, the manifest, the pin, and the removal of the state) is one ``journal``
transaction: an interrupted one is finished by the next command that loads the repository.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.specifiers import SpecifierSet

from patchtool import fsroot, git, paths
from patchtool.errors import ApplyConflict, InternalError, InvalidInput, UsageError
from patchtool.git import treemerge as merge
from patchtool.project import journal, statedir
from patchtool.project.conditions import ARG_FIELDS_DIR
from patchtool.project.manifest import MANIFEST_NAME, PatchEntry
from patchtool.project.pins import PINS_DIR, Pin, pin_to_toml
from patchtool.project.repository import LoadedPatch, Project, manifest_document, manifest_text, record_dropped
from patchtool.project.stopped import STATE_DIR, STATE_FILE, WORKTREE, InProgress, in_progress
from patchtool.rebase import fromhistory
from patchtool.rebase.replay import (
    Drift,
    PatchOutcome,
    Replay,
    ReplayOptions,
    Step,
    commit_for,
    drift_all,
    old_chain,
    replay,
    with_commits,
)
from patchtool.rebase.state import RebaseState
from patchtool.rebase.state import digest as state_digest
from patchtool.rebase.state import forget as forget_state
from patchtool.rebase.state import load as load_state
from patchtool.rebase.state import save as save_state
from patchtool.rebase.upstreamed import IN_OTHER_FORM, by_content
from patchtool.upstream.cache import Base, Cache
from patchtool.upstream.namespaces import replay_ref
from patchtool.upstream.releasefiles import FileChoice
from patchtool.upstream.releases import SAME, release_pin, resolve_target, target_version

if TYPE_CHECKING:
    from patchtool.registry import entries as reg
    from patchtool.series.checks import AssumptionResult

# The registry, the assumption checks and tomlkit are imported where the finished rebase needs
# them: a `--continue` that stops at the next conflict should not pay for them.


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DropDue:
    patch: str
    why: str
    evidence: tuple[str, ...] = ()  # already upstream: what says so

    def to_dict(self) -> dict[str, object]:
        return {"patch": self.patch, "why": self.why, **({"evidence": list(self.evidence)} if self.evidence else {})}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Widening:
    """A patch verified at the target whose ``applies_to`` does not admit it: ``new`` is the
    minimal widening (None when none reads plainly, and a person must write it)."""

    patch: str
    old: str
    new: str | None

    def to_dict(self) -> dict[str, str | None]:
        return dataclasses.asdict(self)


class RebaseStatus(enum.StrEnum):
    DONE = "done"  # every patch is through and the series is written
    CONFLICT = "conflict"  # stopped at a patch: the report is the outcomes so far
    DRY_RUN = "dry-run"  # nothing written: what the rebase would do
    ABORTED = "aborted"  # the repository is back as it was before the rebase


@dataclasses.dataclass(frozen=True, slots=True)
class Aborted:
    """``rebase --abort``'s result."""

    status: RebaseStatus = RebaseStatus.ABORTED

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status.value}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RebaseReport:
    old_pin: str
    new_pin: str
    old_version: str
    new_version: str
    status: RebaseStatus
    steps: tuple[Step, ...]
    drift: tuple[Drift, ...] = ()
    assumptions: tuple[AssumptionResult, ...] = ()
    revisit: tuple[reg.RevisitResult, ...] = ()
    drop: tuple[DropDue, ...] = ()
    range_diff: str = ""
    worktree: str | None = None
    written: tuple[str, ...] = ()
    follow_up: tuple[str, ...] = ()
    widen: bool = False  # `--widen`: the widenings are written (or, in a dry run, would be)
    widenings: tuple[Widening, ...] = ()
    old_pin_admitted_by: tuple[str, ...] = ()  # the patches whose applies_to still admits the old pin
    # in a dry run, the patches that would stop the rebase and admit the old pin: kept or dropped, a person decides
    old_pin_undecided: tuple[str, ...] = ()
    history: tuple[str, ...] = ()  # what upstream's history was asked, fetched, or why it could not be

    @property
    def old_pin_advice(self) -> str:
        """What to do with the old pin once the series has moved."""
        if self.old_pin == self.new_pin or self.status is RebaseStatus.CONFLICT:
            return ""
        undecided = (
            f"{', '.join(self.old_pin_undecided)} (which would stop the rebase) " if self.old_pin_undecided else ""
        )
        if self.old_pin_admitted_by:
            return (
                f"keep pin {self.old_pin}: {', '.join(self.old_pin_admitted_by)} "
                + (f"and {undecided}" if undecided else "")
                + f"still admit {self.old_version}; "
                + f"narrow their applies_to before `patchtool pin remove {self.old_pin}`"
            )
        if undecided:
            return (
                f"keep pin {self.old_pin} for now: {undecided}still admit {self.old_version}; once the "
                f"rebase is through, `patchtool pin remove {self.old_pin}` if no patch kept admits it"
            )
        return f"`patchtool pin remove {self.old_pin}`: no patch's applies_to admits {self.old_version} any more"

    @property
    def predicted_conflicts(self) -> tuple[str, ...]:
        """In a dry run: the patches that would stop the rebase (a conflict, or their target gone)."""
        if self.status is not RebaseStatus.DRY_RUN:
            return ()
        return tuple(s.id for s in self.steps if s.outcome in (PatchOutcome.CONFLICT, PatchOutcome.TARGET_GONE))

    def to_dict(self) -> dict[str, Any]:
        return {
            "old_pin": self.old_pin,
            "new_pin": self.new_pin,
            "old_version": self.old_version,
            "new_version": self.new_version,
            "status": str(self.status),
            "patches": [s.to_dict() for s in self.steps],
            "drift": [d.to_dict() for d in self.drift],
            "failed_assumptions": [a.to_dict() for a in self.assumptions if not a.ok],
            "revisit": [r.to_dict() for r in self.revisit if r.holds],
            "drop": [d.to_dict() for d in self.drop],
            "range_diff": self.range_diff,
            "worktree": self.worktree,
            "written": list(self.written),
            # at a conflict stop drift, assumptions, revisits, drop and range_diff are not computed yet
            "partial": self.status is RebaseStatus.CONFLICT,
            "follow_up": list(self.follow_up),
            "widened": [w.to_dict() for w in self.widenings if self.widen and w.new],
            "history": list(self.history),
            "old_pin_advice": {
                "admitted_by": list(self.old_pin_admitted_by),
                "undecided": list(self.old_pin_undecided),
                "text": self.old_pin_advice,
            },
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Move:
    """What a rebase moves: ``project``'s series (``loaded``) from the old pin to the new one,
    each with its base in ``cache``."""

    project: Project
    cache: Cache
    old_pin: Pin
    new_pin: Pin
    old_base: Base
    new_base: Base
    loaded: tuple[LoadedPatch, ...]

    @classmethod
    def of(cls, project: Project, cache: Cache, old_pin: Pin, new_pin: Pin, loaded: Sequence[LoadedPatch]) -> Move:
        return cls(
            project=project,
            cache=cache,
            old_pin=old_pin,
            new_pin=new_pin,
            old_base=cache.ensure(old_pin),
            new_base=cache.ensure(new_pin),
            loaded=tuple(loaded),
        )


def _digest(root: Path) -> str:
    """What the rebase started from: a change to these files meanwhile makes --continue refuse."""
    h = hashlib.sha256()
    for rel in [MANIFEST_NAME, *sorted(str(p.relative_to(root)) for p in (root / "patches").glob("*.patch"))]:
        h.update(rel.encode() + b"\0" + paths.read_inside(root, rel) + b"\0")
    return h.hexdigest()


# -- the workflow ------------------------------------------------------------------------------


def start(
    project: Project,
    cache: Cache,
    target: str,
    *,
    dry_run: bool,
    widen: bool = False,
    choice: FileChoice = SAME,
    history: bool = False,
) -> RebaseReport:
    root = project.root
    if load_state(root) is not None:
        raise UsageError(
            "a rebase is already in progress",
            hint="finish it with `patchtool rebase --continue`, or `--skip`/`--abort`",
        )
    old_pin = project.pin()
    loaded = project.series()
    if target == "latest":
        from patchtool.rebase.scan import newest

        target = str(newest(old_pin, cache, 1)[0])
    version = target_version(target)
    if version is None and choice.given:
        raise UsageError("--sdist, --wheel and --filename choose a release file: give --to a version")
    new_pin = (
        resolve_target(old_pin, target, cache=cache)
        if version is None
        else release_pin(root, old_pin, version, cache=cache, choice=choice)
    )
    move = Move.of(project, cache, old_pin, new_pin, loaded)
    if new_pin.artifact is not None:
        new_pin = dataclasses.replace(new_pin, artifact=dataclasses.replace(new_pin.artifact, tree=move.new_base.tree))
        move = dataclasses.replace(move, new_pin=new_pin)
    # drift is reported once every patch is through (or in a dry run), not at each conflict stop
    style = "merge" if dry_run else git.conflict_style(root)
    verdicts, said = fromhistory.ask(move.cache, move.old_pin, move.new_pin, move.loaded, asked=history)
    options = ReplayOptions(keep_going=dry_run, drift=dry_run, ref=replay_ref(root), style=style, history=verdicts)
    result = replay(cache.repo, move.old_base, move.new_base, loaded, options)
    if dry_run:
        diff = _range_diff(cache.repo, result, move.new_base)
        told = fromhistory.told(said, verdicts)
        return _report(move, result, status=RebaseStatus.DRY_RUN, range_diff=diff, widen=widen, history=told)
    state = RebaseState(
        old_pin=old_pin.name,
        new_pin=new_pin.name,
        new_pin_toml=pin_to_toml(
            new_pin, comment=f"{new_pin.upstream} {new_pin.version}: written by `patchtool rebase` from {old_pin.name}."
        ),
        digest=_digest(root),
        steps=_through(result),
        tip=result.tip,
        widen=widen,
        history=history,
    )
    return _advance(move, state, result, history=(verdicts, said))


def _through(result: Replay) -> tuple[Step, ...]:
    return tuple(s for s in result.steps if s.outcome is not PatchOutcome.NOT_REACHED)


def _advance(
    move: Move,
    state: RebaseState,
    result: Replay,
    *,
    resumed: bool = False,
    history: tuple[fromhistory.Verdicts | None, tuple[str, ...]] = (None, ()),
) -> RebaseReport:
    root, cache = move.project.root, move.cache
    verdicts, said = history
    told = fromhistory.told(said, verdicts)
    if (stopped := result.stopped) is not None:
        worktree = _conflict_worktree(root, cache.repo, result.tip, stopped, result, reuse=resumed)
        save_state(root, dataclasses.replace(state, worktree=str(worktree), tip=result.tip), cache=cache.repo.git_dir)
        report = _report(move, result, status=RebaseStatus.CONFLICT, worktree=str(worktree), history=told)
        files = ", ".join(stopped.conflicted) or "see the report"
        message = f"patch {stopped.id} stopped the rebase ({stopped.outcome}): {files}"
        resolve = (
            f"resolve it in {worktree} (edit, or `git mergetool` there; `git add` and commit are not "
            "needed; it holds just the patch's files, `git sparse-checkout disable` there for the whole "
            "tree), then `patchtool rebase --continue`"
        )
        if stopped.upstream_has:
            message += f"; {stopped.detail}"
            hint = f"to drop it, `patchtool rebase --skip --reason '{IN_OTHER_FORM}'`; or {resolve}; or `--abort`"
        elif stopped.evidence:  # upstream may have it: the command that records so comes first
            every = (
                "; `patchtool rebase --skip --merged --all-evidenced` records it and every later stop "
                "where the target has the patch's lines the same way"
                if by_content(stopped.evidence)
                else ""
            )
            message += "; upstream may have it"
            hint = (
                f"if upstream merged it, `patchtool rebase --skip --merged` records that with this evidence"
                f"{every}; or {resolve}; or `--skip --reason '...'` to drop it, or `--abort`"
            )
        else:
            hint = f"{resolve}; or `patchtool rebase --skip --reason '...'` to drop it, or `--abort`"
        raise ApplyConflict(message, result=report, data=report, hint=hint)
    if resumed:  # the last stop's worktree, kept for the next stop
        cache.repo.worktree_remove(root / WORKTREE)
    # the two slow git commands of the end run while drift, checks and the report are computed
    committed = [s for s in result.steps if s.commit]
    exported = cache.repo.format_patches(move.new_base.commit, result.tip) if committed else None
    range_diff = _range_diff(cache.repo, result, move.new_base)
    with cache.repo.reader() as reader:
        drift = drift_all(reader, move.old_base, move.new_base, result.old_chain, move.loaded, result.steps)
    result = dataclasses.replace(result, drift=with_commits(drift, move.loaded, verdicts))
    report = _report(move, result, status=RebaseStatus.DONE, range_diff=range_diff, widen=state.widen, history=told)
    digest = state_digest(move.project.root)
    written = _commit(move.project, cache.repo, state, result, report, exported)
    forget_state(digest, cache=cache.repo.git_dir)  # the state is gone: so is what would resume it
    return dataclasses.replace(report, written=tuple(written))


def _range_diff(repo: git.Repo, result: Replay, new_base: Base) -> git.Pending[str] | None:
    if not any(s.commit for s in result.steps) or len(result.old_chain) < 2:
        return None
    return repo.range_diff(f"{result.old_chain[0]}..{result.old_chain[-1]}", f"{new_base.commit}..{result.tip}")


def _new_pin(state: RebaseState) -> Pin:
    return Pin.from_dict(tomllib.loads(state.new_pin_toml), name=state.new_pin, file=f"{PINS_DIR}/{state.new_pin}.toml")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Skip:
    """``rebase --skip``: the stopped patch leaves the series. ``merged``: upstream merged it in
    the target version (recorded as already upstream, with the stop's evidence); with
    ``all_evidenced``, so does every later stop where the target has every line the patch adds
    and none it removes at each hunk's place."""

    reason: str | None = None
    merged: bool = False
    all_evidenced: bool = False


def resume(project: Project, cache: Cache, *, skip: Skip | None = None, widen: bool = False) -> RebaseReport:
    root = project.root
    if (state := load_state(root, cache=cache.repo.git_dir)) is None:
        raise UsageError("no rebase in progress")
    if _digest(root) != state.digest:
        raise UsageError(
            "patchset.toml or patches/ changed since the rebase started",
            hint="restore them, or `patchtool rebase --abort` and start again",
        )
    state = dataclasses.replace(state, widen=state.widen or widen)
    if not state.steps:
        raise InvalidInput(
            "the rebase state names no patch it went through",
            file=STATE_FILE,
            hint=f"`patchtool rebase --abort`, or delete {STATE_DIR}/ and start again",
        )
    loaded = project.series(parsed=False)  # the digest holds them to the files that parsed at the start
    repo = cache.repo
    move = Move.of(project, cache, project.pin(state.old_pin), _new_pin(state), loaded)
    if state.worktree is not None:
        if skip is not None and skip.all_evidenced and not by_content(state.steps[-1].evidence):
            raise UsageError(
                f"patch {state.steps[-1].id} stopped without evidence that the target has its lines: "
                "--all-evidenced skips only such stops",
                hint="`patchtool rebase --skip --merged` skips this one as merged upstream, "
                "`--skip --reason '...'` as dropped; or resolve it and `--continue`",
            )
        state = _record_resolution(project, repo, state, loaded, skip)
    elif skip is not None:
        raise UsageError(
            "no patch is stopped: the last --continue recorded its resolution before it was interrupted",
            hint="`patchtool rebase --continue` goes on from there",
        )
    verdicts, said = fromhistory.ask(move.cache, move.old_pin, move.new_pin, move.loaded, asked=state.history)
    while True:
        options = ReplayOptions(
            done=state.steps, parent=state.tip, ref=replay_ref(root), style=git.conflict_style(root), history=verdicts
        )
        result = replay(repo, move.old_base, move.new_base, loaded, options)
        state = dataclasses.replace(state, steps=_through(result), tip=result.tip, worktree=None)
        stop = result.stopped
        if skip is None or not skip.all_evidenced or stop is None or not by_content(stop.evidence):
            return _advance(move, state, result, resumed=True, history=(verdicts, said))
        # each such stop recorded as its own skip, as if `--skip --merged` had been run at it
        state = _record_resolution(project, repo, state, loaded, skip)


def _record_resolution(
    project: Project, repo: git.Repo, state: RebaseState, loaded: list[LoadedPatch], skip: Skip | None
) -> RebaseState:
    """The stopped patch's outcome, resolved or skipped, made a commit the replay ref holds and
    written into the state before anything else happens: a process killed after this point
    leaves a state that --continue goes on from, whatever became of the worktree."""
    root = project.root
    steps = list(state.steps)
    current = steps[-1]
    worktree = root / WORKTREE
    parent = state.tip
    if skip is not None and skip.merged:  # already upstream, on the user's word and the stop's evidence
        how = "`rebase --skip --merged --all-evidenced`" if skip.all_evidenced else "`rebase --skip --merged`"
        steps[-1] = dataclasses.replace(
            current,
            outcome=PatchOutcome.UPSTREAM,
            commit=None,
            detail=f"recorded by {how} at the stop" + (f": {skip.reason}" if skip.reason else ""),
        )
    elif skip is not None:
        reason = skip.reason or ""
        steps[-1] = dataclasses.replace(current, outcome=PatchOutcome.DROPPED, commit=None, detail=f"skipped: {reason}")
        state = dataclasses.replace(state, skipped={**state.skipped, current.id: reason})
    else:
        repo.worktree_repair(worktree)  # the repository may have moved since the stop
        repo.ignore_byte_code()  # a stop made before its worktree ignored it
        tree = _resolved_tree(worktree, current.conflicted)
        if tree == repo.tree_of(parent):  # a resolution that keeps none of the patch
            raise UsageError(
                f"the resolution in {worktree} leaves nothing of patch {current.id}: it would be "
                "written as an empty patch file",
                hint="to drop it, `patchtool rebase --skip --reason '...'` records why; otherwise "
                "put its change back in the worktree and `--continue`",
            )
        commit = commit_for(repo, tree, parent, loaded[len(steps) - 1])
        steps[-1] = dataclasses.replace(
            current, outcome=PatchOutcome.MERGED, commit=commit, detail=f"resolved by hand after: {current.detail}"
        )
        repo.update_ref(replay_ref(root), commit)  # reachable: no gc takes it before the series is written
        parent = commit
    state = dataclasses.replace(state, steps=tuple(steps), tip=parent, worktree=None)
    save_state(root, state, cache=repo.git_dir)
    return state


def abort(project: Project, cache: Cache) -> None:
    """Put the repository back as it was before the rebase, whatever its state says: one that does
    not read, a worktree gone, a repository moved. The series was never touched (it changes only
    in the final journal), so getting out is removing patchtool's own two places: the worktree
    and the state directory; nothing is followed through a symbolic link."""
    root = project.root
    rebase_dir = root / STATE_DIR
    if (root / statedir.STATE_DIR).is_symlink() or not (rebase_dir.is_dir() or rebase_dir.is_symlink()):
        raise UsageError("no rebase in progress")
    worktree = root / WORKTREE
    if not rebase_dir.is_symlink() and worktree.is_dir() and not worktree.is_symlink():
        cache.repo.worktree_remove(worktree)
    digest = state_digest(root)
    fsroot.Root(root).rmtree(STATE_DIR)
    forget_state(digest, cache=cache.repo.git_dir)  # a link there goes itself, never what it points at
    cache.repo.forget_missing_worktrees()  # its record in the cache, wherever the repository was then
    statedir.tidy(root)


# -- conflicts -------------------------------------------------------------------------------


def _conflict_worktree(root: Path, repo: git.Repo, parent: str, step: Step, result: Replay, *, reuse: bool) -> Path:
    """A sparse worktree at the last good commit holding just the files the patch changes, as the
    merge left them in memory (``result.left``: conflict markers and all), each conflict recorded
    in its index as git records one; a checkout of the whole tree would cost seconds per stop.
    With ``reuse`` (a later stop) the previous stop's worktree is emptied and reset rather than
    removed and added again."""
    left = result.left
    path = fsroot.Root(root).place(WORKTREE)
    files = sorted(set(step.conflicted) | set(step.files) | set(left))
    if not (reuse and path.exists() and git.Worktree(path).reuse_sparse(parent, files)):
        _fresh_worktree(repo, path, parent, files)
    disk = fsroot.Root(path)
    for rel, data in left.items():
        if data is None:
            disk.unlink(rel)
        else:
            disk.write(rel, data)
    tree = git.Worktree(path)
    tree.record_unmerged({c.path: stages for c in result.unmerged if (stages := _stages(tree, c))})
    return path


def _fresh_worktree(repo: git.Repo, path: Path, parent: str, files: list[str]) -> None:
    if path.exists():
        repo.worktree_remove(path)
        fsroot.Root(path.parent).rmtree(path.name)
    if not repo.worktree_add(path, parent, checkout=False, check=False):
        repo.forget_missing_worktrees()  # a worktree of an earlier run, deleted by hand
        repo.worktree_add(path, parent, checkout=False)
    git.Worktree(path).sparse_checkout(files)


def _stages(tree: git.Worktree, conflict: merge.Conflict) -> list[tuple[int, str, str]]:
    """The index entries of a conflict: (stage, mode, blob) for each side that has the file."""
    return [
        (stage, side.mode, side.blob if side.blob is not None else tree.write_blob(side.data or b""))
        for stage, side in enumerate((conflict.base, conflict.ours, conflict.theirs), start=1)
        if side is not None
    ]


_MARKER = re.compile(r"^(<{7}|>{7}) ", re.MULTILINE)


def _resolved_tree(worktree: Path, conflicted: Sequence[str]) -> str:
    """The tree of the resolution: every file as the user left it, `git add`ed or only edited,
    but for the backups `git mergetool` leaves of the conflicted files (``X.orig``, untracked).
    Markers are looked for before anything is staged, so a refusal leaves the conflicts in the
    index for `git status` and `git mergetool`."""
    tree = git.Worktree(worktree)
    changed = tree.changed()
    backups = sorted(f"{p}.orig" for p in conflicted if changed.get(f"{p}.orig") == "??")
    binary = [n for n in sorted(changed) if changed[n] == "??" and n not in backups and _is_binary(worktree / n)]
    if binary:
        raise UsageError(
            f"{', '.join(binary)} in the stopped patch's worktree {'is' if len(binary) == 1 else 'are'} binary: "
            "a patch file carries text only",
            hint=f"remove {'it' if len(binary) == 1 else 'them'} from {worktree}, then run --continue again",
        )
    marked = [
        n
        for n in sorted(changed)
        if n not in backups
        and (worktree / n).is_file()
        and _MARKER.search((worktree / n).read_text(encoding="utf-8", errors="replace"))
    ]
    if marked:
        raise UsageError(
            f"conflict markers remain in {', '.join(marked)}",
            hint=f"resolve them in {worktree}, then run --continue again",
        )
    tree.stage_all(leave_out=backups)
    return tree.write_tree()


def _is_binary(path: Path) -> bool:
    """git's test: a NUL byte in the first 8000 bytes (a link or a directory is no file to test)."""
    if path.is_symlink() or not path.is_file():
        return False
    with path.open("rb") as f:
        return b"\0" in f.read(8000)


# -- the report ------------------------------------------------------------------------------


def _report(
    move: Move,
    result: Replay,
    *,
    status: RebaseStatus,
    worktree: str | None = None,
    range_diff: git.Pending[str] | None = None,
    widen: bool = False,
    history: tuple[str, ...] = (),
) -> RebaseReport:
    """The report. At a conflict stop it is the outcomes so far and the conflict: assumptions,
    revisits, drop conditions and the range-diff are about the finished series, and come with it."""
    project, repo, old_pin, new_pin, new_base = move.project, move.cache.repo, move.old_pin, move.new_pin, move.new_base
    report = RebaseReport(
        old_pin=old_pin.name,
        new_pin=new_pin.name,
        old_version=str(old_pin.version),
        new_version=str(new_pin.version),
        status=status,
        steps=result.steps,
        worktree=worktree,
        history=history,
    )
    if status is RebaseStatus.CONFLICT:
        return report
    from patchtool.registry import entries as reg
    from patchtool.series.checks import check_assumptions

    # the patches the series carries on: one skipped, dropped or already upstream makes no claim
    gone = {s.id for s in result.steps if s.outcome in (PatchOutcome.DROPPED, PatchOutcome.UPSTREAM)}
    carried = [e for e in project.manifest.patches if e.id not in gone]
    assumptions = check_assumptions(repo, new_base.tree, carried)
    revisit: list[reg.RevisitResult] = []
    if project.manifest.registry:
        from patchtool.registry.workflows import revisit_at

        revisit = revisit_at(reg.load(project.root, project.manifest.registry), repo, new_base.tree, new_pin.version)
    drop = _drop_due(repo, new_pin, new_base, project.manifest.patches, result.steps)
    widenings = _widenings(project, new_pin, result.steps)
    follow_up = [
        f"widen applies_to of {w.patch} ('{w.old}') once verified on {new_pin.version}"
        + (f": '{w.new}' admits it (`rebase --widen` writes that)" if w.new and not widen else "")
        for w in widenings
        if not (widen and w.new)
    ]
    widened = {w.patch: w.new for w in widenings if widen and w.new}
    admits = {
        e.id
        for e in project.manifest.patches
        if old_pin.version in (SpecifierSet(widened[e.id]) if e.id in widened else e.applies_to)
    }
    return dataclasses.replace(
        report,
        drift=result.drift,
        assumptions=tuple(assumptions),
        revisit=tuple(revisit),
        drop=tuple(drop),
        range_diff=range_diff.result() if range_diff else "",
        follow_up=tuple(follow_up),
        widen=widen,
        widenings=tuple(widenings),
        old_pin_admitted_by=tuple(s.id for s in result.steps if s.outcome.applied and s.id in admits),
        old_pin_undecided=tuple(s.id for s in result.steps if s.outcome.stops and s.id in admits),
    )


def _widenings(project: Project, new_pin: Pin, steps: tuple[Step, ...]) -> list[Widening]:
    """Each patch verified at the target (it applied) whose applies_to, as written, leaves it out."""
    from patchtool.project.widening import widen

    applied = {s.id for s in steps if s.outcome.applied}
    written = {
        str(t["id"]): str(t["applies_to"])
        for t in manifest_document(project.root).get("patch", [])
        if "id" in t and "applies_to" in t
    }
    return [
        Widening(patch=e.id, old=(old := written.get(e.id, str(e.applies_to))), new=widen(old, new_pin.version))
        for e in project.manifest.patches
        if e.id in applied and new_pin.version not in e.applies_to
    ]


def _drop_due(
    repo: git.Repo, pin: Pin, base: Base, entries: tuple[PatchEntry, ...], steps: tuple[Step, ...]
) -> list[DropDue]:
    out = [
        DropDue(patch=s.id, why=f"already upstream in {pin.version}: {s.detail}", evidence=s.evidence)
        for s in steps
        if s.outcome is PatchOutcome.UPSTREAM
    ]
    files = repo.cat_files(base.tree, sorted({c.file for e in entries for c in e.drop_if if c.file}))
    fields = (
        repo.cat_files(base.tree, repo.ls_files(base.tree, ARG_FIELDS_DIR))
        if any(c.flag for e in entries for c in e.drop_if)
        else {}
    )
    for e in entries:
        for c in e.drop_if:
            holds, detail = c.evaluate(version=pin.version, files=files, field_files=fields)
            if holds:
                out.append(DropDue(patch=e.id, why=f"{c.describe()} ({detail}): {c.why}"))
    return out


# -- the final write -----------------------------------------------------------------------------


def _commit(
    project: Project,
    repo: git.Repo,
    state: RebaseState,
    result: Replay,
    report: RebaseReport,
    exported_chain: git.Pending[list[str]] | None,
) -> list[str]:
    """The new series, manifest and pin, and the end of the rebase's state, as one transaction."""
    root = project.root
    files: dict[str, str] = {}
    dropped: dict[str, str] = {}
    committed = [s for s in result.steps if s.commit]
    texts = exported_chain.result() if exported_chain is not None else []
    if len(texts) != len(committed):  # not one chain on the new base: export one by one
        texts = [repo.format_patch(s.commit or "") for s in committed]
    exported = {s.id: t for s, t in zip(committed, texts, strict=True)}
    if empty := [s.id for s in committed if "\ndiff --git " not in exported[s.id]]:
        # a commit that changes nothing has no patch text: the replay stops such a patch, so
        # this is a bug, and no patch file is ever replaced by an empty one
        raise InternalError(
            f"the rebased commit of {', '.join(empty)} changes nothing: no patch file was written",
            hint="run `patchtool rebase --abort`, and report this with the series",
        )
    for s in result.steps:
        if s.commit:
            files[s.file] = exported[s.id]
        elif s.outcome is PatchOutcome.UPSTREAM:
            dropped[s.id] = f"already upstream in {report.new_version}: {s.detail}"
        elif s.outcome is PatchOutcome.DROPPED:
            dropped[s.id] = state.skipped.get(s.id, s.detail)
    files[MANIFEST_NAME], moved = _rewrite_manifest(
        root,
        state.new_pin,
        report.new_version,
        dropped,
        {s.id: s.evidence for s in result.steps if s.outcome is PatchOutcome.UPSTREAM},
        {w.patch: w.new for w in report.widenings if report.widen and w.new},
    )
    gone = [s for s in result.steps if s.id in dropped]
    files |= {moved[s.id]: paths.read_inside(root, s.file).decode("utf-8") for s in gone}
    pin_rel = f"{PINS_DIR}/{state.new_pin}.toml"
    existing = paths.read_text_if_present(root, pin_rel)
    files[pin_rel] = existing if existing is not None else state.new_pin_toml
    return journal.commit(root, files, remove=[s.file for s in gone], remove_trees=[STATE_DIR])


def _rewrite_manifest(
    root: Path,
    new_pin: str,
    version: str,
    dropped: dict[str, str],
    merged: dict[str, tuple[str, ...]],
    widened: dict[str, str],
) -> tuple[str, dict[str, str]]:
    """The manifest with the fields the rebase owns changed (and, with --widen, ``applies_to``),
    comments and everything else kept; and where each dropped patch's file goes. ``merged``: the
    patches upstream has, each with its evidence."""
    from patchtool.project import tomlio  # tomlkit: only the finishing command edits the manifest

    doc = manifest_document(root)
    old_pin, trivia = str(doc["pin"]), doc["pin"].trivia  # `init` writes `# upstream-pins/<pin>.toml` beside it
    doc["pin"] = new_pin
    doc["pin"].trivia.comment_ws = trivia.comment_ws
    doc["pin"].trivia.comment = trivia.comment.replace(f"{PINS_DIR}/{old_pin}.toml", f"{PINS_DIR}/{new_pin}.toml")
    for table in doc.get("patch", []):
        if str(table.get("id")) in widened:
            table["applies_to"] = widened[str(table["id"])]
    gone: list[Any] = []
    for i in range(len(doc.get("patch", [])) - 1, -1, -1):
        if str(doc["patch"][i]["id"]) in dropped:
            gone.insert(0, tomlio.take_table(doc, "patch", i))
    moved = {}
    for table in gone:
        pid = str(table["id"])
        if pid in merged:
            table["upstream"] = tomlio.inline_table({"status": "merged", "version": version})
        if merged.get(pid):
            table["merged_evidence"] = tomlio.lines_array(merged[pid])
        moved[pid] = record_dropped(root, doc, table, reason=dropped[pid], dropped_at=version)
    return manifest_text(doc), moved


__all__ = [
    "STATE_DIR",
    "InProgress",
    "RebaseReport",
    "RebaseStatus",
    "Widening",
    "abort",
    "in_progress",
    "old_chain",
    "resume",
    "start",
]

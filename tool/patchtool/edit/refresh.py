"""``patchtool refresh ID``: the checkout's uncommitted changes folded into one patch, written back.

StGit's ``refresh -p`` and quilt's ``refresh`` in one step. The worktree's changes (every file as
it is now, or with ``staged_only`` the index) become part of patch ID's commit, and the patches
after it are replayed on that commit in memory with the rebase's 3-way merge. The result must be
the worktree's own tree: a change that a later patch's lines stand in the way of is refused.
The branch moves (the worktree's files stay as they are, its index follows) only when every
commit is written; then only the patch files whose text changed are written (ID's, and a later
patch's whose line numbers the change moved), the manifest as it was. The branch must hold the
series as it was last exported, so nothing else of the branch is written by the way; the one
exception is a patch ``patchtool new`` started on the branch's tip, which refresh amends and
exports, its entry made from the metadata ``new`` was given (``stg new`` then ``stg refresh``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from patchtool import git, paths
from patchtool.edit import repair
from patchtool.edit.branch import (
    BranchCommit,
    branch_commits,
    commit_message,
    export_commit,
    move_branch,
    series_record,
    sha256,
    worktree_of,
)
from patchtool.edit.checkout_refresh import RefreshConflict, new_commit
from patchtool.edit.export import exportable, planned, write_planned
from patchtool.errors import UsageError
from patchtool.git import treemerge as merge
from patchtool.project.manifest import MANIFEST_NAME
from patchtool.project.repository import LoadedPatch, Project
from patchtool.series.apply import apply_series
from patchtool.series.writes import check_patches, write_series
from patchtool.upstream.cache import Cache
from patchtool.upstream.namespaces import CheckoutBranch, CheckoutRecord, RecordedPatch, Repairing

LABELS = ("the patch", "the branch", "your change")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Folded:
    branch: str
    id: str
    file: str
    worktree: str
    changed: tuple[str, ...]  # the paths the change touched
    written: tuple[dict[str, str], ...]  # id, file, why (a later patch's: what changed) of each patch file written
    applied: tuple[str, ...] = ()  # a stopped checkout: the patches applied after ID
    stopped: repair.Stopped | None = None  # ... and the next that does not apply, if one does not

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Branch(NamedTuple):
    """The checkout branch a refresh works on: its project, its tip, base and record, its commits
    and its worktree."""

    project: Project
    repo: git.Repo
    names: CheckoutBranch
    tip: str
    base: str
    record: CheckoutRecord
    commits: Sequence[BranchCommit]
    worktree: Path

    def folded(self, ident: str, file: str, changed: tuple[str, ...], written: Sequence[dict[str, str]]) -> Folded:
        """What a refresh of patch ``ident`` (its ``file``) on this branch did."""
        worktree = str(self.worktree)
        return Folded(
            branch=self.names.branch, id=ident, file=file, worktree=worktree, changed=changed, written=tuple(written)
        )


def fold(project: Project, cache: Cache, *, ident: str, branch: str, staged_only: bool) -> Folded:
    repo = cache.repo
    names = CheckoutBranch.of(project.root, branch)
    tip, base, record = exportable(project, cache, names, stopped_ok=True)
    worktree = _worktree(repo, names)
    commits = branch_commits(repo, names, base, tip)
    at_branch = _Branch(project, repo, names, tip, base, record, commits, worktree)
    if (stopped := record.stopped) is not None:
        return _repaired(at_branch, ident, stopped, staged_only)
    if commits and commits[-1].ident == ident and ident not in {e.id for e in project.manifest.patches}:
        return _new_patch(at_branch, staged_only)
    _require_exported(repo, commits, record.patches, branch)
    ids = [c.ident or "" for c in commits]  # each a patch's id: _require_exported checked them
    if ident not in ids:
        raise UsageError(f"no patch {ident!r} on branch {branch!r}", hint=f"its patches: {', '.join(ids)}")
    at = ids.index(ident)
    wanted = _worktree_tree(worktree, tip, branch, staged_only=staged_only)
    if not (change := repo.diff_raw(tip, wanted)):
        raise _nothing_to_refresh(ident, worktree, staged_only)
    changed = tuple(sorted({c.new_path or c.old_path or "" for c in change}))
    built = _build(repo, commits, at, base, change, names)
    if repo.tree_of(built[-1]) != wanted:
        raise RefreshConflict(
            f"the patches after {ident} replayed on it with your change do not give the files of the worktree; "
            "nothing was changed",
            hint="make the change with git instead (`git commit --fixup`, `git rebase -i --autosquash`), then export",
        )
    # everything that can refuse comes before the branch moves: each patch file read (as the
    # journal will), each new text one the series loads
    files = {e.id: e.file for e in project.manifest.patches}
    final = dict(zip(ids, [*(c.commit for c in commits[:at]), *built], strict=True))
    have = {i: paths.read_inside(project.root, files[i]) for i in ids}
    texts: dict[str, str] = {}
    written: list[dict[str, str]] = []
    for i in ids[at:]:
        if (text := export_commit(repo, final[i])).encode() != have[i]:
            texts[files[i]] = text
            why = "" if i == ident else _what_moved(have[i].decode("utf-8", "replace"), text)
            written.append({"id": i, "file": files[i], "why": why})
    check_patches(
        project.root, [(w["id"], w["file"], texts[w["file"]]) for w in written], hint=_cannot_carry(worktree, changed)
    )
    manifest = paths.read_inside(project.root, MANIFEST_NAME).decode("utf-8")
    move_branch(repo, names, worktree, tip, built[-1], f"patchtool refresh {ident}", files_stay=True)
    write_series(project.root, texts, manifest, remove=[], moves={})
    exported = [(i, files[i], texts[files[i]].encode() if files[i] in texts else have[i]) for i in ids]
    names.save_record(repo, series_record(project.manifest.pin, base, exported, final))
    return at_branch.folded(ident, files[ident], changed, written)


def _worktree(repo: git.Repo, names: CheckoutBranch) -> Path:
    """The worktree of the checkout branch, refused (naming the way on) where there is none, or
    where a git command stopped part way there."""
    if (worktree := worktree_of(repo, names)) is None:
        detached = [Path(w.path) for w in repo.worktrees() if w.branch is None]
        rebasing = (p for p in detached if p.is_dir() and git.Worktree(p).in_progress() == ("rebase", names.ref))
        worktree = next(rebasing, None)
    if worktree is None:
        again = "" if names.branch == "series" else f" --branch {names.branch}"
        raise UsageError(
            f"branch {names.branch!r} is checked out in no worktree, so there is no change to take",
            hint=f"refresh takes the changes of the worktree `patchtool checkout` made; if it was removed, "
            f"`patchtool checkout{again}` makes it again at the branch's tip",
        )
    if (busy := git.Worktree(worktree).in_progress()) is not None:
        raise UsageError(
            f"a git {busy[0]} is in progress in the worktree {worktree}; refresh takes the changes of a worktree "
            "at the branch's tip",
            hint=f"finish it (`git {busy[0]} --continue`) or abort it (`git {busy[0]} --abort`), then run it again",
        )
    return worktree


def _cannot_carry(worktree: Path, changed: Sequence[str]) -> str:
    """What to do when the patch a change would give is one the series cannot load."""
    return (
        f"a patch carries regular text files (no symbolic link, no nested repository, UTF-8 names, at most "
        f"{paths.MAX_INPUT_BYTES} bytes of patch): take what it cannot carry out of {worktree} "
        f"(your change: {', '.join(changed)}), then run it again"
    )


def _what_moved(old: str, new: str) -> str:
    """Why a later patch's file changed when refresh replayed it: what differs in its text."""
    moved, modes, lines = "its line numbers moved", "a file's mode changed", "its lines changed"

    def kinds(text: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {moved: [], modes: [], lines: []}
        for line in text.splitlines():
            if line.startswith("@@"):
                out[moved].append(line.split("@@")[1])
            elif line.startswith(("old mode ", "new mode ", "new file mode ", "deleted file mode ")):
                out[modes].append(line)
            elif line.startswith("index "):  # its blobs are the last resort below: only its mode is compared
                out[modes].append(line[6:].partition(" ")[2])
            elif line.startswith((" ", "-", "+")) and not line.startswith(("--- ", "+++ ")):
                out[lines].append(line)
        return out

    before, after = kinds(old), kinds(new)
    said = [k for k in (moved, modes, lines) if before[k] != after[k]]
    return " and ".join(said) or "the files it changes changed elsewhere (its index lines name their blobs)"


def _new_patch(at_branch: _Branch, staged_only: bool) -> Folded:
    """The branch's tip is a patch not in the series yet (``patchtool new`` made it): the worktree's
    changes are amended onto it and the branch exported, which writes its patch file and entry and
    leaves every other patch file as it is (the commits before it must be the series as exported)."""
    project, repo, names, tip, base, record, commits, worktree = at_branch
    ident = commits[-1].ident or ""
    _require_exported(repo, commits[:-1], record.patches, names.branch)
    wanted = _worktree_tree(worktree, tip, names.branch, staged_only=staged_only)
    if not (change := repo.diff_raw(tip, wanted)):
        raise _nothing_to_refresh(ident, worktree, staged_only, new=True)
    if staged_only and wanted != _worktree_tree(worktree, tip, names.branch, staged_only=False):
        raise UsageError(
            f"{ident} is new: refresh exports it, and the changes of {worktree} that are not staged would be left "
            "out of the series",
            hint="stage them too (or drop --index), or take them out of the worktree, then run it again",
        )
    author, committer = repo.idents(tip)
    parent = commits[-2].commit if len(commits) > 1 else base
    amended = repo.commit_tree(wanted, [parent], commits[-1].message, author=author, committer=committer)
    changed = tuple(sorted({c.new_path or c.old_path or "" for c in change}))
    # export's refusals, before the branch moves
    on_branch = [*commits[:-1], dataclasses.replace(commits[-1], commit=amended)]
    plan = planned(project, repo, names, base, on_branch, allow_drop=False, hint=_cannot_carry(worktree, changed))
    target = plan.chain[-1] if plan.chain else amended
    move_branch(repo, names, worktree, tip, target, f"patchtool refresh {ident}", files_stay=True)
    result = write_planned(project, repo, names, plan)
    row = next(p for p in result.patches if p["id"] == ident)
    written = [{"id": p["id"], "file": p["file"], "why": ""} for p in result.patches if p["change"] != "unchanged"]
    return at_branch.folded(ident, row["file"], changed, written)


def _nothing_to_refresh(ident: str, worktree: Path, staged_only: bool, *, new: bool = False) -> UsageError:
    what = "has nothing staged" if staged_only else "holds the branch as it is committed"
    hint = f"edit the files in {worktree} (with --index: `git add` them), then run it again"
    if new:  # a refresh of it killed after its commit was amended left it to write
        hint += f"; if a refresh of {ident} was interrupted, `patchtool export` writes it"
    return UsageError(f"nothing to refresh {ident} with: the worktree {worktree} {what}", hint=hint)


def _worktree_tree(worktree: Path, tip: str, branch: str, *, staged_only: bool) -> str:
    """The tree of the worktree's files as they are (``staged_only``: its index), refused while
    it is elsewhere than the branch's tip or has unmerged paths."""
    if (tree := git.Worktree(worktree)).head() != tip:
        raise UsageError(
            f"the worktree {worktree} is not at the tip of branch {branch!r}", hint="git switch back to it"
        )
    changed = tree.changed()
    if unmerged := sorted(p for p, code in changed.items() if "U" in code or code in ("AA", "DD")):
        raise UsageError(
            f"the worktree {worktree} has unmerged paths: {', '.join(unmerged)}",
            hint="resolve them and `git add` them first",
        )
    for rel, code in sorted(changed.items()):
        if staged_only and code[0] in " ?":
            continue  # not part of the change
        name = rel.rstrip("/")  # a directory git does not look into: a nested repository
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            why: str | None = "its name is not UTF-8"
        else:
            why = paths.tree_path_problem(name)
        if why is not None:
            shown = ascii(name.encode("utf-8", "surrogateescape"))[1:]
            raise UsageError(
                f"the worktree {worktree} holds {shown}, which no patch can carry: {why}",
                hint=f"rename it or take it out of {worktree}, then run it again",
            )
    return tree.tree_now(staged_only=staged_only)


def _repaired(at_branch: _Branch, ident: str, stopped: str, staged_only: bool) -> Folded:
    """A checkout stopped at ``stopped``: the worktree's files become that patch's commit, written
    back with its metadata; the patches after it are applied on it, up to the next that does not
    apply, which is left in the worktree in turn. A refresh of it that was interrupted once the
    branch moved (the record notes the commit it was putting there) is finished instead."""
    project, repo, names, tip, base, record, commits, worktree = at_branch
    again = "" if names.branch == "series" else f" --branch {names.branch}"
    hint = f"fix it in {worktree}, then `patchtool refresh{again} {stopped}`"
    if ident != stopped:
        raise UsageError(
            f"the checkout stopped at patch {stopped}, which does not apply at the pin; it comes first", hint=hint
        )
    if staged_only:
        raise UsageError("a stopped checkout's patch is taken from every file of its worktree", hint="drop --index")
    loaded = project.series()
    at = [lp.id for lp in loaded].index(stopped)
    note = record.repairing
    if note is not None and len(commits) > at and commits[at].commit == note.commit:
        _require_exported(repo, commits[:at], record.patches[:at], names.branch)
        return _put_back(at_branch, loaded, at, commits[:at], note.commit)
    # a fix committed with git on where it stopped (one commit, not a patch of the series) is taken too
    if len(commits) > at + 1 and all(c.ident in (None, stopped) for c in commits[at:]):
        stop_at = commits[at - 1].commit if at else base
        raise UsageError(
            f"the checkout stopped at patch {stopped}, and the branch holds {len(commits) - at} commits on where "
            f"it stopped; refresh takes one as the repaired {stopped}",
            hint=f"make them one (`git -C {worktree} reset --soft {stop_at[:12]}` keeps their changes, uncommitted), "
            f"then `patchtool refresh{again} {stopped}`",
        )
    before = commits[:at] if len(commits) == at + 1 and commits[at].ident in (None, stopped) else commits
    _require_exported(repo, before, record.patches[:at], names.branch)
    parent = before[-1].commit if before else base
    lp = loaded[at]
    rels = [*git.Worktree(worktree).changed(), *(c.new_path for c in repo.diff_raw(parent, tip) if c.new_path)]
    if left := repair.markers_left(worktree, stopped, sorted(set(rels))):
        raise UsageError(f"conflict markers remain in {', '.join(left)} (in {worktree})", hint=hint)
    if (wanted := _worktree_tree(worktree, tip, names.branch, staged_only=False)) == repo.tree_of(parent):
        raise UsageError(
            f"nothing to refresh {ident} with: the worktree {worktree} holds the patches before it and no change",
            hint=f"{hint}; or take it out of the series (`patchtool drop {ident} --reason ...`)",
        )
    author = git.Ident(lp.patch.author_name, lp.patch.author_email, 0)
    new = repo.commit_tree(
        wanted, [parent], commit_message(lp), author=author, committer=git.Ident(*git.FIXED_IDENT, 0)
    )
    return _put_back(at_branch, loaded, at, before, new, fresh=True)


def _put_back(
    at_branch: _Branch,
    loaded: Sequence[LoadedPatch],
    at: int,
    before: Sequence[BranchCommit],
    new: str,
    *,
    fresh: bool = False,
) -> Folded:
    """``new``, the repaired commit of the patch the checkout stopped at (``loaded[at]``), put on
    the branch after ``before`` and written back, the patches after it applied on it. The record
    first notes ``new`` and its text, so a run killed at any step after is finished by the next
    ``refresh`` of that patch: each step sees where the last one left the branch, the worktree and
    the file, and does only what is left (the commits are the same each time)."""
    project, repo, names, tip, base, record, _, worktree = at_branch
    lp = loaded[at]
    ident = lp.id
    parent = before[-1].commit if before else base
    rest = apply_series(repo, new, loaded[at + 1 :], commit=True, message=commit_message)
    failed = rest.failed
    later = next(k for k, p in enumerate(loaded) if p.id == failed.id) if failed else len(loaded)
    found = repair.repair(repo, rest.last_good or new, loaded[later]) if failed else None
    final = (rest.tip if failed is None else rest.last_good) or new
    if not fresh and tip not in (new, final):
        raise _not_exported(names.branch)
    written = not fresh and _left(worktree, names.branch, ident, found if tip == final else None)
    changed = tuple(sorted(c.new_path or c.old_path or "" for c in repo.diff_raw(parent, new)))
    # everything that can refuse comes before the branch moves
    text = export_commit(repo, new)
    texts = {lp.entry.file: text} if text != lp.text else {}
    check_patches(project.root, [(ident, f, t) for f, t in texts.items()], hint=_cannot_carry(worktree, changed))
    manifest = paths.read_inside(project.root, MANIFEST_NAME).decode("utf-8")
    on_branch = {c.ident or "": c.commit for c in before} | {ident: new}
    on_branch |= {r.id: r.commit for r in rest.results if r.commit}
    exported = [(p.id, p.entry.file, (text if p.id == ident else p.text).encode()) for p in loaded]
    new_record = series_record(project.manifest.pin, base, exported, on_branch)
    new_record = dataclasses.replace(new_record, stopped=failed.id if failed else None)
    action = f"patchtool refresh {ident}"
    if fresh:
        names.save_record(repo, dataclasses.replace(record, repairing=Repairing(commit=new, sha256=sha256(text))))
        move_branch(repo, names, worktree, tip, new, action, files_stay=True)
        tip = new
    if tip != final:
        move_branch(repo, names, worktree, new, final, f"{action}: the patches after it")
    stop = None
    if failed is not None:
        stop = repair.stop(worktree, found, loaded[later], [p.id for p in loaded[later + 1 :]], written=written)
    if texts:
        write_series(project.root, texts, manifest, remove=[], moves={})
    names.save_record(repo, new_record)
    folded = at_branch.folded(ident, lp.entry.file, changed, [{"id": ident, "file": f, "why": ""} for f in texts])
    return dataclasses.replace(folded, applied=tuple(r.id for r in rest.results if r.commit), stopped=stop)


def _left(worktree: Path, branch: str, ident: str, found: repair.Repair | None) -> bool:
    """Whether the worktree of a repair's refresh that was interrupted once the branch moved holds
    the next patch's repair (``found``, where the branch holds the patches before it) as that run
    wrote it; refused where it holds anything else than that or the branch's tip: a change made
    since, which finishing that run would leave out of the series (or take for the repair)."""
    if not (changed := sorted(git.Worktree(worktree).changed())):
        return False
    repaired = found.files if found is not None else {}
    other = [rel for rel in changed if rel not in repaired or repair.read_file(worktree, rel) != repaired[rel]]
    if not other and all(repair.read_file(worktree, rel) == data for rel, data in repaired.items()):
        return True
    again = "" if branch == "series" else f" --branch {branch}"
    raise UsageError(
        f"the worktree {worktree} holds changes the interrupted refresh of patch {ident} did not leave there: "
        f"{', '.join(other or changed)}; nothing was changed",
        hint=f"put them aside (`git stash -u` in {worktree}), run `patchtool refresh{again} {ident}` again to "
        "finish that refresh, then bring them back (`git stash pop`) and refresh the patch they belong to",
    )


def _require_exported(
    repo: git.Repo, commits: Sequence[BranchCommit], recorded: Sequence[RecordedPatch], branch: str
) -> None:
    """Refused unless every commit of the branch is its patch as the series has it (what the last
    checkout, export or refresh left): refresh writes one patch and must leave nothing behind."""
    if missing := [p.id for p in recorded if p.id not in {c.ident for c in commits}]:
        raise UsageError(
            f"branch {branch!r} has no commit of patch(es) {', '.join(missing)} any more; refresh writes one "
            "patch and would leave the series with them",
            hint="bring the commit back (`git reflog` in the worktree shows where the branch was), or take the "
            "patch out of the series (`patchtool drop ID --reason ...`, or `patchtool export --allow-drop`)",
        )
    if len(recorded) != len(commits) or not all(
        c.ident == p.id and (c.commit == p.commit or sha256(export_commit(repo, c.commit)) == p.sha256)
        for c, p in zip(commits, recorded, strict=False)
    ):
        raise _not_exported(branch)


def _not_exported(branch: str) -> UsageError:
    return UsageError(
        f"branch {branch!r} holds commits that are not exported yet; refresh writes one patch and "
        "would leave them behind",
        hint="`patchtool export` them first (`patchtool export` finishes a refresh that was interrupted too), "
        "or take them out with git, then refresh",
    )


def _build(
    repo: git.Repo,
    commits: Sequence[BranchCommit],
    at: int,
    base: str,
    change: tuple[git.RawChange, ...],
    names: CheckoutBranch,
) -> list[str]:
    """commits[at] with ``change`` merged into it, and each commit after it replayed on that, in
    memory and then by one fast-import; a conflict raises and writes nothing."""
    target = commits[at]
    writes: list[git.NewCommit] = []
    with repo.reader() as reader, merge.Workspace(repo, reader, target.commit, (), lambda _path: None) as ws:
        if not (folded := merge.merge_patch(ws, change, LABELS)).clean:
            paths_ = sorted({c.path for c in folded.conflicts})
            later = [c.ident or c.subject for c in commits[at + 1 :] if _touches(repo, c, paths_)]
            raise RefreshConflict(
                f"your change to {', '.join(paths_)} cannot go into {target.ident}: "
                + (f"{', '.join(later)}, after it, changes the same lines" if later else "it does not merge")
                + f" ({'; '.join(c.message for c in folded.conflicts)}); nothing was changed",
                hint=f"refresh the patch whose lines you changed (`patchtool refresh {later[-1]}`)"
                if later
                else "make the change with git (`git commit --fixup`, `git rebase -i --autosquash`), then export",
            )
        ws.update(folded.files)
        own: dict[str, merge.File | None] = {
            (c.new_path or c.old_path or ""): merge.File(c.new_mode, c.new_blob) if c.new_mode and c.new_blob else None
            for c in repo.diff_raw(f"{target.commit}^", target.commit)
        }
        writes.append(_commit(repo, target, own | folded.files))  # a commit is written as its parent's tree changed
        for c in commits[at + 1 :]:
            merged = merge.merge_patch(ws, repo.diff_raw(f"{c.commit}^", c.commit), LABELS, commit=c.commit)
            if not merged.clean:
                raise RefreshConflict(
                    f"{c.ident or c.subject}, after {target.ident}, does not apply on it with your change: "
                    f"{'; '.join(m.message for m in merged.conflicts)}; nothing was changed",
                    hint=f"refresh {c.ident or 'that patch'} with the part of the change that is its own",
                )
            ws.update(merged.files)
            writes.append(_commit(repo, c, merged.files))
    built = repo.write_commits(commits[at - 1].commit if at else base, writes, ref=names.refresh_ref)
    repo.delete_ref(names.refresh_ref)
    return built


def _commit(repo: git.Repo, source: BranchCommit, files: dict[str, merge.File | None]) -> git.NewCommit:
    return new_commit(source.message.rstrip("\n") + "\n", *repo.idents(source.commit), files)


def _touches(repo: git.Repo, commit: BranchCommit, wanted: Sequence[str]) -> bool:
    return any(
        (c.old_path in wanted or c.new_path in wanted) for c in repo.diff_raw(f"{commit.commit}^", commit.commit)
    )

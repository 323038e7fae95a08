"""``checkout --refresh``: a checkout branch moved onto the series as it is now.

The branch is rebuilt from the current series on the current pin, and the user's own work on
it is carried over: commits they added (with a trailer or without), and patches they edited,
whose edit (their commit against the patch's commit when the checkout was made) is merged onto
the patch's current version with the in-memory 3-way merge a rebase uses. A commit that still
holds a patch as it was at checkout gives way to the series' current version, so a patch edited,
dropped or added in the series meanwhile arrives as the series has it; an edited patch the
series dropped stays (``export`` then asks for ``--revive``), and so does a patch the series
lost with no drop recorded (its files taken back by hand): only the branch still holds it. Every
commit is written to the object store first; the branch, and the worktree that has it checked
out, move only when all of them are through, so a conflict changes nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from patchtool import git
from patchtool.edit.branch import (
    BranchCommit,
    branch_and_record,
    branch_commits,
    commit_message,
    export_commit,
    loaded_record,
    move_branch,
    require_clean,
    sha256,
    worktree_of,
)
from patchtool.errors import ExitCode, PatchtoolError, UsageError
from patchtool.git import treemerge as merge
from patchtool.project.repository import LoadedPatch, Project
from patchtool.series.apply import apply_series
from patchtool.upstream.cache import Cache
from patchtool.upstream.namespaces import CheckoutBranch, CheckoutRecord


class RefreshConflict(PatchtoolError):
    """The user's work does not merge onto the current series; nothing was changed."""

    exit_code = ExitCode.CONFLICT


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Item:
    """One commit of the rebuilt branch: a patch of the series (with the user's edit of it, when
    ``source`` is set), or a commit of the user's (``ident`` None or not the series')."""

    ident: str | None
    source: BranchCommit | None = None
    edit_from: str | None = None  # the patch's commit when the checkout was made

    @property
    def from_series(self) -> bool:
        return self.ident is not None and (self.source is None or self.edit_from is not None)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Refreshed:
    branch: str
    git_branch: str
    worktree: str | None
    base: str
    tip: str
    commits: tuple[dict[str, str], ...]  # id (or subject), how: "series", "edited", "yours"
    left_out: tuple[str, ...]  # patches the series dropped since, which the branch held unchanged
    kept: tuple[str, ...] = ()  # patches gone from the series with no drop recorded: their commits stay

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def refresh(project: Project, cache: Cache, names: CheckoutBranch) -> Refreshed:
    repo = cache.repo
    tip, old_base, record = branch_and_record(project, repo, names, "its own commits cannot be told from the series'")
    stopped = record.stopped
    if stopped is not None and stopped not in {e.id for e in project.manifest.patches}:
        # stopped at a patch dropped since: the patches from it on were never on the branch, so
        # they come as the series has them (a patch it gained)
        record = dataclasses.replace(record, patches=tuple(p for p in record.patches if p.commit))
    elif stopped is not None:
        again = "" if names.branch == "series" else f" --branch {names.branch}"
        raise UsageError(
            f"checkout branch {names.branch!r} stopped at patch {stopped}, which does not apply at the pin",
            hint=f"fix it in the checkout's worktree (if it was removed, `patchtool checkout{again}` makes it again) "
            f"and `patchtool refresh{again} {stopped}` first",
        )
    worktree = worktree_of(repo, names)
    if stopped is not None and worktree is not None and git.Worktree(worktree).status():
        raise UsageError(
            f"the worktree {worktree} still holds the repair of patch {stopped}, which the series dropped since",
            hint=f"put it aside (`git -C {worktree} stash -u`, or `git -C {worktree} checkout -- .` to discard it), "
            "then run this again",
        )
    require_clean(worktree)
    commits = branch_commits(repo, names, old_base, tip)
    pin = project.pin()
    loaded = project.series()
    base = cache.ensure(pin)
    if not (series := apply_series(repo, base.commit, loaded, commit=True, message=commit_message)).ok:
        failed = series.failed
        raise PatchtoolError(
            f"the series does not apply at {pin.name} ({failed.id if failed else '?'})", hint="run `patchtool check`"
        )
    chain = {r.id: r.commit or "" for r in series.results}
    plan, left_out, kept = _plan(repo, record, commits, loaded, {d.entry.id for d in project.manifest.dropped})
    start, built = _build(repo, base.commit, plan, loaded, chain, names)
    if (new_tip := built[-1] if built else start) != tip:
        move_branch(repo, names, worktree, tip, new_tip, "patchtool checkout --refresh")
    repo.update_ref(names.base_ref, base.commit)
    names.save_record(repo, loaded_record(pin.name, base.commit, loaded, chain))
    shown = tuple(
        {
            "id": item.ident or (item.source.subject if item.source else ""),
            "how": "series" if item.source is None else "edited" if item.edit_from else "yours",
        }
        for item in plan
    )
    return Refreshed(
        branch=names.branch,
        git_branch=names.short,
        worktree=str(worktree) if worktree else None,
        base=base.commit,
        tip=new_tip,
        commits=shown,
        left_out=tuple(left_out),
        kept=tuple(kept),
    )


def _plan(
    repo: git.Repo, record: CheckoutRecord, commits: list[BranchCommit], loaded: list[LoadedPatch], dropped: set[str]
) -> tuple[list[Item], list[str], list[str]]:
    """The rebuilt branch, in the branch's order, the ids left out (dropped from the series
    since, and unchanged on the branch) and the ids kept though the series lost them: gone with
    no drop recorded (its files taken back by hand), so only the branch still holds the patch."""
    recorded = {p.id: p for p in record.patches}
    current = {lp.id: lp for lp in loaded}
    plan: list[Item] = []
    left_out: list[str] = []
    kept: list[str] = []
    for c in commits:
        ident = c.ident
        if ident is None or ident not in recorded:
            if ident in current and sha256(export_commit(repo, c.commit)) == sha256(current[ident].text):
                plan.append(Item(ident=ident))  # the series' patch as it is (a kept patch whose entry came back)
                continue
            if ident in current:
                raise RefreshConflict(
                    f"commit {c.commit[:12]} ({c.subject}) carries Patchtool-Id: {ident}, and the series gained "
                    f"a patch {ident} of its own since the checkout; nothing was changed",
                    hint="give your commit another id (`git commit --amend`, edit the trailer), then refresh",
                )
            plan.append(Item(ident=ident, source=c))
            continue
        if sha256(export_commit(repo, c.commit)) == recorded[ident].sha256:  # unchanged
            if ident in current:
                plan.append(Item(ident=ident))
            elif ident in dropped:
                left_out.append(ident)
            else:
                kept.append(ident)
                plan.append(Item(ident=ident, source=c))
            continue
        if ident not in current:  # the series dropped it, the user edited it: theirs stays
            plan.append(Item(ident=ident, source=c))
            continue
        was = recorded[ident].commit
        if not was or not repo.has_object(was):
            raise RefreshConflict(
                f"the commit patch {ident} had when the checkout was made is gone from the "
                "cache, so your edit of it cannot be told apart; nothing was changed",
                hint="check out a fresh branch and redo the edit there",
            )
        plan.append(Item(ident=ident, source=c, edit_from=was))
    on_branch = {item.ident for item in plan} | set(left_out)
    for n, lp in enumerate(loaded):  # patches the series gained since: at their place in the series
        if lp.id in recorded or lp.id in on_branch:
            continue
        at = 0
        for earlier in reversed(loaded[:n]):
            if found := [k for k, item in enumerate(plan) if item.ident == earlier.id and item.from_series]:
                at = found[0] + 1
                break
        plan.insert(at, Item(ident=lp.id))
    return plan, left_out, kept


def _build(
    repo: git.Repo, base: str, plan: list[Item], loaded: list[LoadedPatch], chain: dict[str, str], names: CheckoutBranch
) -> tuple[str, list[str]]:
    """(start, commits): the rebuilt branch is the series' own chain as far as the plan follows
    it, then the plan's commits written on it, in memory first and by one fast-import."""
    by_id = {lp.id: lp for lp in loaded}
    # each patch's parent: the pin's base for the first, the one before it for the others
    parents = dict(zip([lp.id for lp in loaded], [base, *(chain[lp.id] for lp in loaded)], strict=False))
    k = 0
    while k < min(len(plan), len(loaded)) and plan[k].source is None and plan[k].ident == loaded[k].id:
        k += 1
    start = chain[loaded[k - 1].id] if k else base
    writes: list[git.NewCommit] = []
    with repo.reader() as reader, merge.Workspace(repo, reader, start, (), lambda _path: None) as ws:
        for item in plan[k:]:
            files: dict[str, merge.File | None] = {}
            if item.from_series:
                assert item.ident is not None
                lp = by_id[item.ident]
                what = f"patch {lp.id} (as the series has it) does not apply where the branch puts it"
                files.update(_merge(ws, repo.diff_raw(parents[lp.id], chain[lp.id]), what, chain[lp.id]))
                ws.update(files)
                message = commit_message(lp)
                author = git.Ident(lp.patch.author_name, lp.patch.author_email, 0)
                committer = git.Ident(*git.FIXED_IDENT, 0)
            if item.source is not None:
                c = item.source
                old = item.edit_from or f"{c.commit}^"
                what = (
                    f"your edit of patch {item.ident} (commit {c.commit[:12]}, {c.subject}) conflicts with the "
                    "series' current version of it"
                    if item.edit_from
                    else f"your commit {c.commit[:12]} ({c.subject}) does not apply on the current series"
                )
                edit = _merge(ws, repo.diff_raw(old, c.commit), what, c.commit)
                ws.update(edit)
                files.update(edit)
                message = c.message.rstrip("\n") + "\n"
                author, committer = repo.idents(c.commit)
            writes.append(new_commit(message, author, committer, files))
    built = repo.write_commits(start, writes, ref=names.refresh_ref)
    repo.delete_ref(names.refresh_ref)
    return start, built


def new_commit(
    message: str, author: git.Ident, committer: git.Ident, files: dict[str, merge.File | None]
) -> git.NewCommit:
    """A commit that writes ``files`` (None: deleted) over its parent's tree."""
    return git.NewCommit(
        message=message,
        author=author,
        committer=committer,
        files=tuple(
            git.FileWrite(path, f.mode if f else None, f.blob if f else None, f.data if f else None)
            for path, f in sorted(files.items())
        ),
    )


def _merge(
    ws: merge.Workspace, changes: tuple[git.RawChange, ...], what: str, commit: str
) -> dict[str, merge.File | None]:
    if not (merged := merge.merge_patch(ws, changes, ("current series", "checkout", "yours"), commit=commit)).clean:
        raise RefreshConflict(
            f"{what}: {'; '.join(c.message for c in merged.conflicts)}; nothing was changed",
            hint="resolve it by hand: take the commit out of the branch (`git rebase -i`) and "
            "refresh, then redo it on top; or check out a fresh branch "
            "(`patchtool checkout --branch NEW`) and redo it there",
        )
    return merged.files

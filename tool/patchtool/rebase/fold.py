"""``patchtool refresh ID``: the checkout's uncommitted changes folded into one patch, written back.

StGit's ``refresh -p`` and quilt's ``refresh`` in one step. The worktree's changes (every file as
it is now, or with ``staged_only`` the index) become part of patch ID's commit, and the patches
after it are replayed on that commit in memory with the rebase's 3-way merge. The result must be
the worktree's own tree: a change that a later patch's lines stand in the way of is refused.
The branch moves (the worktree's files stay as they are, its index follows) only when every
commit is written; then only the patch files whose text changed are written (ID's, and a later
patch's whose line numbers the change moved), the manifest as it was. The branch must hold the
series as it was last exported, so nothing else of the branch is written by the way.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

from patchtool import git, paths
from patchtool.errors import UsageError
from patchtool.project.manifest import MANIFEST_NAME
from patchtool.project.repository import Project
from patchtool.rebase import merge
from patchtool.rebase.refresh import RefreshConflict
from patchtool.series.checkouts import (
    BranchCommit,
    branch_commits,
    export_commit,
    move_branch,
    series_record,
    worktree_of,
)
from patchtool.series.export import exportable
from patchtool.series.writes import write_series
from patchtool.upstream.cache import Cache
from patchtool.upstream.cachespace import CheckoutBranch

LABELS = ("the patch", "the branch", "your change")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Folded:
    branch: str
    id: str
    file: str
    worktree: str
    changed: tuple[str, ...]  # the paths the change touched
    written: tuple[dict[str, str], ...]  # id, file of each patch file written (ID's first)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def fold(project: Project, cache: Cache, *, ident: str, branch: str, staged_only: bool) -> Folded:
    repo = cache.repo
    names = CheckoutBranch.of(project.root, branch)
    tip, base, record = exportable(project, cache, names)
    worktree = worktree_of(repo, names)
    if worktree is None:
        raise UsageError(
            f"branch {branch!r} is checked out in no worktree, so there is no change to take",
            hint="refresh takes the changes of the worktree `patchtool checkout` made; if it was "
            "removed, `patchtool export` the branch and check out afresh",
        )
    commits = branch_commits(repo, names, base, tip)
    _require_exported(repo, commits, record, branch)
    ids = [c.ident for c in commits]
    if ident not in ids:
        raise UsageError(f"no patch {ident!r} on branch {branch!r}", hint=f"its patches: {', '.join(map(str, ids))}")
    at = ids.index(ident)
    tree = git.Worktree(worktree)
    if tree.head() != tip:
        raise UsageError(
            f"the worktree {worktree} is not at the tip of branch {branch!r}", hint="git switch back to it"
        )
    unmerged = sorted(p for p, code in tree.changed().items() if "U" in code or code in ("AA", "DD"))
    if unmerged:
        raise UsageError(
            f"the worktree {worktree} has unmerged paths: {', '.join(unmerged)}",
            hint="resolve them and `git add` them first",
        )
    wanted = tree.tree_now(staged_only=staged_only)
    change = repo.diff_raw(tip, wanted)
    if not change:
        raise UsageError(
            f"nothing to refresh {ident} with: the worktree {worktree} "
            + ("has nothing staged" if staged_only else "holds the branch as it is committed"),
            hint=f"edit the files in {worktree} (with --index: `git add` them), then run it again",
        )
    built = _build(repo, commits, at, base, change, names)
    if repo.tree_of(built[-1]) != wanted:
        raise RefreshConflict(
            f"the patches after {ident} replayed on it with your change do not give the files of the worktree; "
            "nothing was changed",
            hint="make the change with git instead (`git commit --fixup`, `git rebase -i --autosquash`), then export",
        )
    move_branch(repo, names, worktree, tip, built[-1], f"patchtool refresh {ident}", files_stay=True)
    files = {e.id: e.file for e in project.manifest.patches}
    final = {c.ident or "": c.commit for c in commits[:at]} | {
        c.ident or "": new for c, new in zip(commits[at:], built, strict=True)
    }
    texts: dict[str, str] = {}
    written: list[dict[str, str]] = []
    for c in commits[at:]:
        i = c.ident or ""
        text = export_commit(repo, final[i])
        if text != paths.read_text_if_present(project.root, files[i]):
            texts[files[i]] = text
            written.append({"id": i, "file": files[i]})
    manifest = paths.read_inside(project.root, MANIFEST_NAME).decode("utf-8")
    write_series(project.root, texts, manifest, remove=[], moves={})
    exported = [
        (i, files[i], texts[files[i]].encode() if files[i] in texts else (project.root / files[i]).read_bytes())
        for i in (c.ident or "" for c in commits)
    ]
    names.save_record(repo, series_record(project.manifest.pin, base, exported, final))
    return Folded(
        branch=branch,
        id=ident,
        file=files[ident],
        worktree=str(worktree),
        changed=tuple(sorted({c.new_path or c.old_path or "" for c in change})),
        written=tuple(written),
    )


def _require_exported(repo: git.Repo, commits: Sequence[BranchCommit], record: dict[str, Any], branch: str) -> None:
    """Refused unless every commit of the branch is its patch as the series has it (what the last
    checkout, export or refresh left): refresh writes one patch and must leave nothing behind."""
    recorded = record["patches"]
    same = len(recorded) == len(commits) and all(
        c.ident == p["id"]
        and (
            c.commit == p["commit"] or hashlib.sha256(export_commit(repo, c.commit).encode()).hexdigest() == p["sha256"]
        )
        for c, p in zip(commits, recorded, strict=False)
    )
    if not same:
        raise UsageError(
            f"branch {branch!r} holds commits that are not exported yet; refresh writes one patch and "
            "would leave them behind",
            hint="`patchtool export` them first (or take them out with git), then refresh",
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
    with repo.reader() as reader, merge.Workspace(repo, reader, target.commit, (), lambda path: None) as ws:
        folded = merge.merge_patch(ws, change, LABELS)
        if not folded.clean:
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
    parent = commits[at - 1].commit if at else base
    built = repo.write_commits(parent, writes, ref=names.refresh_ref)
    repo.delete_ref(names.refresh_ref)
    return built


def _commit(repo: git.Repo, source: BranchCommit, files: dict[str, merge.File | None]) -> git.NewCommit:
    author, committer = repo.idents(source.commit)
    return git.NewCommit(
        message=source.message.rstrip("\n") + "\n",
        author=author,
        committer=committer,
        files=tuple(
            git.FileWrite(path, f.mode if f else None, f.blob if f else None, f.data if f else None)
            for path, f in sorted(files.items())
        ),
    )


def _touches(repo: git.Repo, commit: BranchCommit, wanted: Sequence[str]) -> bool:
    return any(
        (c.old_path in wanted or c.new_path in wanted) for c in repo.diff_raw(f"{commit.commit}^", commit.commit)
    )

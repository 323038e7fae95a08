"""``patchtool checkout``: the series on a branch of the cache repository, in a worktree.

One commit per patch, each carrying a ``Patchtool-Id`` trailer that maps it back to its manifest
entry; ``export`` writes the branch back. A patch that does not apply at the pin stops it there:
the patches before it are committed, it is left in the worktree as far as it goes
(``edit.repair``), and ``refresh ID`` writes it back once fixed. A branch whose worktree is
gone gets it again, at its tip (and the patch it stopped at left in it again).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from patchtool import fsroot, paths
from patchtool.edit.branch import (
    branch_and_record,
    branch_commits,
    changes_since,
    commit_message,
    create_branch,
    interrupted,
    loaded_record,
    worktree_of,
)
from patchtool.edit.repair import Stopped, repair, stop
from patchtool.errors import PatchtoolError, UsageError
from patchtool.git.command import discover
from patchtool.project.repository import Project
from patchtool.series.apply import apply_series
from patchtool.upstream.cache import Cache
from patchtool.upstream.namespaces import CheckoutBranch

WORK_DIR = "work"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Committed:
    id: str  # the patch's (or, without a trailer, the commit's subject)
    commit: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Checkout:
    branch: str
    git_branch: str = ""  # the branch as git names it in the worktree
    worktree: str
    base: str
    commits: tuple[Committed, ...]
    stopped: Stopped | None = None  # the patch that does not apply at the pin, left in the worktree
    finish: str | None = None  # the patch whose refresh was interrupted: `refresh ID` finishes it
    committed: str | None = None  # the patch it stopped at, whose fix the branch holds committed: `refresh ID`
    changed_since: tuple[str, ...] = ()  # an existing branch's: what changed in the series since it was made

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def checkout(project: Project, cache: Cache, *, pin_name: str | None, branch: str, path: Path | None) -> Checkout:
    repo = cache.repo
    names = CheckoutBranch.of(project.root, branch)
    if path is not None:
        outside_git_directories(path, project, cache)
    pin = project.pin(pin_name)
    loaded = project.series()
    base = cache.ensure(pin)
    if repo.resolve(names.ref) is not None:
        if worktree_of(repo, names) is None and pin_name is None:
            return _again(project, cache, names, path)
        again = "" if branch == "series" else f" --branch {branch}"
        raise UsageError(
            f"branch {branch!r} already exists in the cache for this repository",
            hint=f"export it (`patchtool export{again}`), bring it up to date with the series "
            f"(`patchtool checkout --refresh{again}`), or pick another --branch",
        )
    result = apply_series(repo, base.commit, loaded, commit=True, message=commit_message)
    failed = result.failed
    at = [lp.id for lp in loaded].index(failed.id) if failed else len(loaded)
    tip = result.tip if failed is None else result.last_good
    found = repair(repo, tip, loaded[at]) if failed is not None and tip is not None else None
    if tip is None or (failed is not None and found is None):
        raise PatchtoolError(
            f"the series does not apply at {pin.name} ({failed.id if failed else '?'})", hint="run `patchtool check`"
        )
    where = _place(project, cache, branch, path)
    record = loaded_record(pin.name, base.commit, loaded, {r.id: r.commit or "" for r in result.results})
    names.save_record(repo, dataclasses.replace(record, stopped=failed.id if failed else None))
    create_branch(repo, names, tip, "patchtool checkout")
    repo.update_ref(names.base_ref, base.commit)
    repo.forget_missing_worktrees()
    repo.worktree_add(where, names.short, detach=False)
    return Checkout(
        branch=branch,
        git_branch=names.short,
        worktree=str(where),
        base=base.commit,
        commits=tuple(Committed(id=r.id, commit=r.commit) for r in result.results if r.commit),
        stopped=stop(where, found, loaded[at], [lp.id for lp in loaded[at + 1 :]]) if failed is not None else None,
    )


def outside_git_directories(path: Path, project: Project, cache: Cache) -> None:
    """Refuse a worktree ``path`` inside a git directory: under a component named ``.git`` (in
    any case or spelling), or inside the repository's, the cache's or the enclosing repository's
    git directory, as named or through links; git would write its files among the repository's."""
    named = Path(os.path.abspath(path))
    real = named.resolve()
    if any(paths.is_dotgit(part) for form in (named, real) for part in form.parts):
        raise UsageError(
            f"{path} lies inside a .git directory; a checkout's worktree goes outside every git directory",
            hint="pass another --path, or none for work/BRANCH",
        )
    git_dirs = [cache.repo.git_dir, *(f[0] for f in (discover(project.root), discover(named)) if f is not None)]
    # any git directory, a bare one too (patchtool's history caches, a --separate-git-dir), by
    # git's own test of one: HEAD, objects/ and refs/ (a linked worktree's lies inside its common one)
    git_dirs += [d for form in (named, real) for d in form.parents if _is_git_dir(d)]
    for git_dir in git_dirs:
        inside = Path(git_dir).resolve()
        if real == inside or real.is_relative_to(inside):
            raise UsageError(
                f"{path} lies inside the git directory {inside}; a checkout's worktree goes outside every "
                "git directory",
                hint="pass another --path, or none for work/BRANCH",
            )


def _is_git_dir(path: Path) -> bool:
    """git's own test, leaning to yes: a HEAD (a file or a link, as git takes either) beside
    objects/ and refs/, or beside a ``commondir`` file that names where those are (a linked
    worktree's git directory)."""
    if not os.path.lexists(path / "HEAD"):
        return False
    return os.path.lexists(path / "commondir") or ((path / "objects").is_dir() and (path / "refs").is_dir())


def _place(project: Project, cache: Cache, branch: str, path: Path | None) -> Path:
    """Where the worktree goes: ``path``, or ``work/BRANCH``; refused unless empty or absent, or
    inside a git directory (checked again here, just before git writes there: one may have been
    made since the command started)."""
    if path is not None:
        outside_git_directories(path, project, cache)
    # the default lies in the repository, where `work` could be a committed link out of it
    where = (path or fsroot.Root(project.root).place(f"{WORK_DIR}/{branch}")).absolute()
    if where.is_symlink() or (where.exists() and (not where.is_dir() or any(where.iterdir()))):
        raise UsageError(f"{where} exists and is not an empty directory", hint="pass --path")
    return where


def _again(project: Project, cache: Cache, names: CheckoutBranch, path: Path | None) -> Checkout:
    """The worktree of a checkout branch whose worktree is gone, made again at the branch's tip;
    where the checkout stopped at a patch that does not apply, that patch is left in it again.
    A branch made from another series than the project's (changed since, or a repository made
    again at the same path finding the old one's branch) says what changed."""
    repo = cache.repo
    tip, base, record = branch_and_record(project, repo, names, "its worktree cannot be made again")
    where = _place(project, cache, names.branch, path)
    repo.forget_missing_worktrees()
    repo.worktree_add(where, names.short, detach=False)
    stopped, committed = None, None
    finish = interrupted(repo, record, tip)
    if record.stopped is not None and finish is None:  # else the branch holds that patch already
        loaded = project.series()
        ids = [lp.id for lp in loaded]
        if tip != next((p.commit for p in reversed(record.patches) if p.commit), base):
            committed = record.stopped  # the branch moved on from where it stopped: a fix committed with git
        elif record.stopped in ids:
            at = ids.index(record.stopped)
            stopped = stop(where, repair(repo, tip, loaded[at]), loaded[at], ids[at + 1 :])
    commits = tuple(Committed(id=c.ident or c.subject, commit=c.commit) for c in branch_commits(repo, names, base, tip))
    return Checkout(
        branch=names.branch,
        git_branch=names.short,
        worktree=str(where),
        base=base,
        commits=commits,
        stopped=stopped,
        finish=finish,
        committed=committed,
        changed_since=tuple(changes_since(record, project)),
    )

"""Putting a commit of the cache on disk as a worktree, as a transaction.

The new tree is built beside the target and moved into place only once complete,
so the target is either the fully patched tree or exactly what it was before.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

from patchtool import fsroot, git
from patchtool.errors import UsageError


def materialise(repo: git.Repo, commit: str, into: Path, *, replace: bool) -> Path:
    into = into.absolute()
    if into.is_symlink() or (into.exists() and not into.is_dir()):
        raise UsageError(f"{into} exists and is not a directory; refusing to replace it", hint="choose another --into")
    if into.exists() and any(into.iterdir()):
        if not replace:
            raise UsageError(
                f"{into} exists and is not empty; refusing to overwrite it",
                hint="choose another --into, or pass --force to replace a tree patchtool made there",
            )
        if not repo.is_worktree(into):
            raise UsageError(
                f"{into} is not a tree patchtool made; refusing to replace it",
                hint="choose another --into or remove it yourself",
            )
    into.parent.mkdir(parents=True, exist_ok=True)
    beside = fsroot.Root(into.parent)
    for stale in into.parent.glob(f".{into.name}.patchtool-*"):  # left by a killed earlier run
        beside.rmtree(stale.name)
    repo.prune_worktrees()  # forget trees whose directories are gone, a killed `worktree add`'s too
    staging = into.with_name(f".{into.name}.patchtool-{uuid.uuid4().hex[:8]}")
    try:
        repo.worktree_add(staging, commit)
    except BaseException:
        with contextlib.suppress(OSError):
            beside.rmtree(staging.name)
        repo.forget_missing_worktrees()
        raise
    if into.exists():
        if any(into.iterdir()):
            repo.worktree_remove(into)
        else:
            os.rmdir(into)
    repo.worktree_move(staging, into)
    return into


def keep_failed(repo: git.Repo, last_good: str | None, target: Path, patch_id: str, patch_path: Path) -> Path:
    """A debugging tree beside ``target``: the patches before the failing one, plus its .rej files."""
    assert last_good is not None
    if (debug := failed_tree_path(target, patch_id)).exists():
        repo.worktree_remove(debug)
        fsroot.Root(debug.parent).rmtree(debug.name)
    debug.parent.mkdir(parents=True, exist_ok=True)
    repo.prune_worktrees()  # one removed by hand (`rm -rf build`) is still registered: git refuses its path
    repo.worktree_add(debug, last_good)
    git.Worktree(debug).apply_rejecting(patch_path)
    return debug


def failed_tree_path(target: Path, patch_id: str) -> Path:
    return target.absolute().with_name(f"{target.name}.failed-{patch_id}")


def check_replaceable(repo: git.Repo, path: Path) -> None:
    """UsageError unless ``path`` is absent, an empty directory, or a tree patchtool made there:
    a directory someone else made is never deleted."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise UsageError(
            f"{path} exists and is not a directory; refusing to replace it",
            hint="move it away, or choose another --into",
        )
    if path.is_dir() and any(path.iterdir()) and not repo.is_worktree(path):
        raise UsageError(
            f"{path} exists and is not a tree patchtool made; refusing to replace it",
            hint="move it away, or choose another --into",
        )

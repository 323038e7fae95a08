"""``.patchtool/``: the patch repository's private state (lock, journal, staged files, rebase).

It is never part of the series. It ignores itself (a ``.gitignore`` of ``*`` inside it), so git
never tracks it; and whatever a clone brings along there is refused, never acted on: a stranger's
repository must not be able to hand patchtool a journal that names files to move or delete.
"""

from __future__ import annotations

import stat
from pathlib import Path

from patchtool import fsroot
from patchtool.errors import InvalidInput

STATE_DIR = ".patchtool"
REBASE_DIR = f"{STATE_DIR}/rebase"  # a stopped rebase's state (``rebase.state``)


def ensure(root: Path) -> Path:
    """The state directory, created (with its ``.gitignore``) when missing; refused when it is a
    symbolic link or not a directory."""
    if fsroot.Root(root).kind(STATE_DIR) not in (None, stat.S_IFDIR):
        raise InvalidInput(
            f"{STATE_DIR} is not a directory patchtool made (a symbolic link or a file); refusing to write through it",
            file=STATE_DIR,
            hint=f"remove {root / STATE_DIR} and run the command again",
        )
    path = fsroot.Root(root).directory(STATE_DIR)
    if fsroot.Root(root).kind(f"{STATE_DIR}/.gitignore") is None:
        fsroot.Root(root).write(f"{STATE_DIR}/.gitignore", "# patchtool's private state: never commit it\n*\n")
    return path


_UNTRACKED: set[Path] = set()  # the roots this command already found clean: one git process, not one a caller


def refuse_tracked(root: Path) -> None:
    """InvalidInput when git tracks anything under ``.patchtool/``: state that arrived with a clone
    (a journal naming files to move or delete, a rebase state) is never acted on."""
    if not (root / STATE_DIR).exists() or root in _UNTRACKED:
        return
    from patchtool import git

    if not (tracked := git.Worktree(root).tracked(STATE_DIR)):
        _UNTRACKED.add(root)
    if tracked:  # None: not a git work tree, where nothing can have been committed
        raise InvalidInput(
            f"{STATE_DIR}/ is patchtool's private state, but git tracks {', '.join(tracked[:3])}"
            f"{' ...' if len(tracked) > 3 else ''}; refusing to act on it",
            file=tracked[0],
            hint=f"remove it from git (`git rm -r --cached {STATE_DIR}`) and delete {STATE_DIR}/ if you did "
            "not create it: a committed journal could name any file",
        )


def tidy(root: Path) -> None:
    """Remove the state directory when nothing but its ``.gitignore`` is left in it."""
    path = root / STATE_DIR
    if path.is_dir() and not path.is_symlink() and {p.name for p in path.iterdir()} <= {".gitignore"}:
        fsroot.Root(root).unlink(f"{STATE_DIR}/.gitignore")
        fsroot.Root(root).rmdir(STATE_DIR)

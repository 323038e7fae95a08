"""The repositories patchtool makes and owns (the cache's ``upstream.git``, a scratch one): what
git reads there to find the repository is patchtool's data, held to exactly what patchtool and git
wrote, and put back before patchtool uses it.

The user's own git in a worktree of the cache (``git status``, ``git commit`` in ``work/series``,
whose ``.git`` points into the cache) reads that worktree's ``commondir`` and the common
directory it names, with no patchtool in between; and anything that could write the cache (code
that ran once, a cache shared with someone else) could have changed it since patchtool last did.
So each worktree's ``commondir`` must be exactly what ``git worktree add`` writes (``../..``) and
the common directory has none of its own: one that is not is put back (``restore``), and the
command stops there (exit 1) saying what it found, once, since something wrote the cache.
What cannot be put back (a link where git keeps a worktree's directory) is refused.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from patchtool import fsroot
from patchtool.errors import InvalidInput

WORKTREE_COMMONDIR = b"../..\n"  # what `git worktree add` writes into each worktree's commondir

_OWNED: set[str] = set()  # the common directories patchtool made, resolved
_CLEAN: dict[str, tuple[object, ...]] = {}  # common directory -> the state last found as patchtool left it


def own(git_dir: Path) -> None:
    """``git_dir`` is a repository patchtool made (``restore`` holds it to what patchtool wrote)."""
    _OWNED.add(os.path.realpath(git_dir))


def owner(git_dir: Path) -> Path | None:
    """The repository patchtool owns that ``git_dir`` is, or is a linked worktree of (by where git
    keeps it: ``<common>/worktrees/<name>``); None for any other."""
    here = Path(os.path.abspath(git_dir))
    for candidate in (here, *([here.parent.parent] if here.parent.name == "worktrees" else [])):
        if os.path.realpath(candidate) in _OWNED:
            return Path(os.path.realpath(candidate))
    return None


def _stamp(path: Path) -> object:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns)


def _state(common: Path) -> tuple[object, ...]:
    """What ``restore`` looks at, as the file system has it now: unchanged means still as it left it."""
    worktrees = common / "worktrees"
    try:
        names = sorted(os.listdir(worktrees))
    except OSError:
        names = []
    found: list[object] = [_stamp(common / "commondir"), _stamp(worktrees)]
    for name in names:
        found += [name, _stamp(worktrees / name), _stamp(worktrees / name / "commondir")]
    return tuple(found)


def _held(pointer: Path) -> bytes | None:
    """The first bytes of the regular file ``pointer`` (not through a link), None for anything else."""
    try:
        fd = os.open(pointer, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with open(fd, "rb") as f:
        return f.read(256) if stat.S_ISREG(os.fstat(fd).st_mode) else None


def restore(common: Path) -> None:
    """Put the owned repository at ``common`` back to what patchtool and git wrote: no
    ``commondir`` of its own, and each worktree's exactly ``../..``. InvalidInput (exit 1) when
    anything had to be put back, naming it, and when something cannot be (a link or a file where
    git keeps a worktree's directory)."""
    key = os.path.realpath(common)
    state = _state(common)
    if _CLEAN.get(key) == state:
        return
    root = fsroot.Root(common)
    found: list[str] = []
    if os.path.lexists(common / "commondir"):  # git would read the whole repository from elsewhere
        root.unlink("commondir")
        found.append(f"{common / 'commondir'} (removed)")
    worktrees = common / "worktrees"
    for name in sorted(os.listdir(worktrees)) if os.path.isdir(worktrees) else []:
        where = worktrees / name
        if not stat.S_ISDIR(os.lstat(where).st_mode):
            raise InvalidInput(
                f"{where} is not a directory, where git keeps a worktree of the cache: git would read "
                "another repository's configuration from there",
                file=str(where),
                hint=f"remove it (`rm {where}`); something with write access to the cache put it there",
            )
        pointer = where / "commondir"
        held = _held(pointer)
        if held is None and not os.path.lexists(pointer) and os.path.lexists(where / "locked"):
            continue  # `git worktree add` is making it: it writes commondir next
        if held != WORKTREE_COMMONDIR:
            root.write(f"worktrees/{name}/commondir", WORKTREE_COMMONDIR)  # refuses to replace a link
            found.append(f"{pointer} held {held!r}, not '../..'")
    if found:
        _CLEAN.pop(key, None)
        raise InvalidInput(
            f"the cache's git repository {common} was changed where git finds its configuration: "
            f"{'; '.join(found)}. patchtool put it back: plain git in a checkout (work/series) reads it",
            file=str(common),
            hint="something with write access to the cache wrote it (code that ran unconfined, or a cache shared "
            "with someone else); run the command again",
        )
    _CLEAN[key] = _state(common)

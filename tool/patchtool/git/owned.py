"""The repositories patchtool makes and owns (the cache's ``upstream.git``, a scratch one): what
git reads there, its configuration and where it finds it, is patchtool's data, held to exactly what
patchtool and git wrote, and put back before patchtool uses it.

The user's own git in a worktree of the cache (``git status``, ``git diff``, ``git commit`` in
``work/series``, whose ``.git`` points into the cache) reads that worktree's ``commondir``, the
common directory it names and its configuration, with no patchtool in between: a
``core.fsmonitor``, ``diff.external``, ``core.pager`` or ``alias.*`` there runs in the user's own
git, unconfined, whatever patchtool's own git neutralises. Anything that could write the cache
(code that ran once, a cache shared with someone else) could have changed it since patchtool last
did. So before git runs in such a repository or a worktree of it (``restore``):

- each worktree's ``commondir`` must be exactly what ``git worktree add`` writes (``../..``), and
  the common directory has none of its own;
- its configuration files (``config``, ``config.worktree``, each worktree's ``config.worktree``)
  hold only the keys of ``OWN_CONFIG`` (what ``git init``, ``git sparse-checkout`` and patchtool
  write, and the user's identity), and ``core.hooksPath`` is /dev/null.

Anything else is put back (a key removed, ``commondir`` written again), and the command stops there
(exit 1) saying what it found, once: something wrote the cache. What cannot be put back (a link
where git keeps a worktree's directory or a configuration file) is refused.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from patchtool import fsroot
from patchtool.errors import InvalidInput

WORKTREE_COMMONDIR = b"../..\n"  # what `git worktree add` writes into each worktree's commondir

# Every key a configuration file of an owned repository may hold, as ``git config --list`` names it
# (lower case): what `git init --bare` writes (and, on some file systems, symlinks, ignorecase and
# precomposeunicode), what patchtool writes (logallrefupdates, gc.auto, hookspath), what `git
# sparse-checkout` writes (worktreeconfig; bare, sparsecheckout and sparsecheckoutcone in a
# config.worktree), and the user's identity, which `git config user.email` in work/series writes
# here (git suggests it when a commit finds none). None of them names a program or another file.
OWN_CONFIG = frozenset(
    {
        "core.repositoryformatversion",
        "core.filemode",
        "core.bare",
        "core.symlinks",
        "core.ignorecase",
        "core.precomposeunicode",
        "core.logallrefupdates",
        "core.hookspath",
        "gc.auto",
        "extensions.worktreeconfig",
        "core.sparsecheckout",
        "core.sparsecheckoutcone",
        "user.name",
        "user.email",
    }
)

# what `git fetch --filter=... URL` writes for that url's remote (upstream's history cache): data,
# naming no program
_PARTIAL_FETCH = frozenset({"promisor", "partialclonefilter"})

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
    found: list[object] = [_stamp(common / f) for f in ("commondir", "config", "config.worktree", "worktrees")]
    for name in names:
        found += [name, *(_stamp(worktrees / name / f) for f in ("", "commondir", "config.worktree"))]
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
    ``commondir`` of its own, each worktree's exactly ``../..``, only ``OWN_CONFIG`` in its
    configuration files and ``core.hooksPath`` /dev/null (set without a word where it is missing:
    a cache an older patchtool made). InvalidInput (exit 1) when anything had to be put back,
    naming it, and when something cannot be (a link or a file where git keeps a worktree's
    directory or a configuration file, a key git cannot remove)."""
    key = os.path.realpath(common)
    if not os.path.isdir(common):
        return
    state = _state(common)
    if _CLEAN.get(key) == state:
        return
    root = fsroot.Root(common)
    found: list[str] = []
    if os.path.lexists(common / "commondir"):  # git would read the whole repository from elsewhere
        root.unlink("commondir")
        found.append(f"{common / 'commondir'} (removed)")
    files = [common / "config", common / "config.worktree"]
    worktrees = common / "worktrees"
    if os.path.islink(worktrees):
        # git resolves the link before a worktree's '../..': that worktree's common directory,
        # and the configuration it reads, would be wherever the link leads
        raise _refused(worktrees, "is a symbolic link, where git keeps the cache's worktrees")
    for name in sorted(os.listdir(worktrees)) if os.path.isdir(worktrees) else []:
        where = worktrees / name
        try:
            if not stat.S_ISDIR(os.lstat(where).st_mode):
                raise _refused(where, "is not a directory, where git keeps a worktree of the cache")
        except FileNotFoundError:
            continue  # `git worktree remove` took it meanwhile
        files.append(where / "config.worktree")
        pointer = where / "commondir"
        if (held := _held(pointer)) is None and not os.path.lexists(pointer):
            # without one git takes the worktree's directory for the whole repository, which it is
            # only with objects/ of its own; else it is one `git worktree add` or `remove` is at
            if os.path.lexists(where / "objects"):
                raise _refused(where, "has no commondir but objects/ of its own")
            continue
        if held != WORKTREE_COMMONDIR:
            root.write(f"worktrees/{name}/commondir", WORKTREE_COMMONDIR)  # refuses to replace a link
            found.append(f"{pointer} held {held!r}, not '../..'")
    for file in files:
        found += _only_own_keys(file, hooks=file == common / "config")
    if found:
        _CLEAN.pop(key, None)
        raise InvalidInput(
            f"the cache's git repository {common} was changed where git reads its configuration: "
            f"{'; '.join(found)}. patchtool put it back: plain git in a checkout (work/series) reads it, "
            "and would run what it names",
            file=str(common),
            hint="something with write access to the cache wrote it (code that ran unconfined, or a cache shared "
            "with someone else); if it was you (`git config` in work/series writes there), set it in your global "
            "configuration (`git config --global`) instead; run the command again",
        )
    _CLEAN[key] = _state(common)


def _only_own_keys(file: Path, *, hooks: bool) -> list[str]:
    """Remove from the configuration file ``file`` every key but ``OWN_CONFIG`` (``core.hooksPath``
    too, but in the common ``config``, where it must be /dev/null, and is put there when
    ``hooks``); what was found, for the message."""
    from patchtool.git.command import Runner  # command.check_config calls restore: imported when it runs

    try:
        mode = os.lstat(file).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise _refused(file, "is not a regular file, where git reads a configuration of the cache")
    found = []
    if mode is not None and (foreign := _foreign(file, hooks=hooks)) is not None:
        for name in foreign:
            Runner().run("config", f"--file={file}", "--unset-all", args=[name], check=False)
        if foreign:
            if left := _foreign(file, hooks=hooks):
                raise _refused(file, f"sets {', '.join(left)}, which git cannot remove")
            found.append(f"{file} set {', '.join(foreign)} (removed)")
    if hooks:
        got = Runner().run(
            "config", f"--file={file}", "--no-includes", "--get-all", args=["core.hooksPath"], check=False
        )
        values = got.stdout.decode("utf-8", "surrogateescape").splitlines()
        if values != [os.devnull]:  # none: a repository git just made, or an older patchtool's
            Runner().run("config", f"--file={file}", "--replace-all", args=["core.hooksPath", os.devnull])
            if values:
                found.append(f"{file} set core.hooksPath to {', '.join(values)} (now {os.devnull})")
    return found


def _foreign(file: Path, *, hooks: bool) -> list[str] | None:
    """The keys of ``file`` outside ``OWN_CONFIG`` (and ``core.hookspath`` where not ``hooks``),
    read as data (``--no-includes``: an include is a key like any other here); None when the
    file is gone (a worktree ``git worktree remove`` took meanwhile)."""
    from patchtool.git.command import Runner

    res = Runner().run("config", f"--file={file}", "--no-includes", "--null", "--name-only", "--list", check=False)
    if res.returncode != 0:
        if not os.path.lexists(file):
            return None
        raise _refused(file, f"cannot be read by git: {res.stderr.strip()}")
    allowed = OWN_CONFIG if hooks else OWN_CONFIG - {"core.hookspath"}
    names = res.stdout.decode("utf-8", "surrogateescape").split("\0")
    return list(dict.fromkeys(name for name in names if name and not _allowed(name.lower(), allowed)))


def _allowed(name: str, allowed: frozenset[str]) -> bool:
    """``name`` is a key patchtool or git writes here: one of ``allowed``, or what a partial fetch
    (``git fetch --filter URL``, upstream's history) records of the url it fetched from."""
    if name in allowed or name == "extensions.partialclone":
        return True
    return name.startswith("remote.") and name.rsplit(".", 1)[-1] in _PARTIAL_FETCH


def _refused(path: Path, why: str) -> InvalidInput:
    return InvalidInput(
        f"{path} {why}: git would read a configuration patchtool did not write from there",
        file=str(path),
        hint="something with write access to the cache put it there: remove it yourself (patchtool cannot put it "
        "back), or clear the cache (`patchtool cache clear`)",
    )

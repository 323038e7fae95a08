"""The one path validator: every path that names a file, and every id that names a file.

Everything patchtool reads is hostile input: a patch repository from a stranger's pull request,
an artifact from an index or a mirror. A path from any of them reaches the disk or the cache only
through here. Tree paths follow git's own rules (``verify_path`` in git's ``read-cache.c``, with
its NTFS and HFS protections on), so nothing git itself would refuse, and nothing that could
reach ``.git``, ever enters a stream, an index or a worktree. A file of the repository is read
beneath its root with no symbolic link followed (``read_inside``); every write goes through
``fsroot``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

from .errors import InvalidInput, PatchtoolError, Problem

Refusal = Callable[[str, str], PatchtoolError]  # (why, hint) -> the error a reader raises

ID_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")  # fullmatch: "$" would let a final newline in
NAME_MAX = 255  # bytes in one file name: NAME_MAX of ext4, xfs and btrfs
# a whole tree path: far above any package's (Windows' MAX_PATH is 260), far below PATH_MAX, and
# shallow enough that nothing walking a tree (git, a removal) meets its own limit
MAX_PATH_BYTES = 1024
MAX_PATH_DEPTH = 100
_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# git's is_ntfs_dotgit: ".git" with trailing dots or spaces, and the 8.3 short name "git~1"
_DOTGIT = re.compile(r"^(?:\.git[. ]*|git~1)$", re.IGNORECASE)
# characters HFS+ ignores in names (git's is_hfs_dotgit): ".g\u200cit" is ".git" there
_HFS_IGNORED = dict.fromkeys(
    map(ord, "\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u206a\u206b\u206c\u206d\u206e\u206f\ufeff")
)


def tree_path_problem(path: str) -> str | None:
    """Why ``path`` cannot name a file in a tree, or None when it can.

    Refused: the empty path, control characters (a newline would end a line of a git stream),
    absolute paths and drive letters, backslashes, empty, ``.`` and ``..`` components, a
    ``.git`` component in any case or spelling git treats as one, a name no filesystem holds
    (git takes it, but every checkout of it fails), and a path longer than ``MAX_PATH_BYTES`` or
    deeper than ``MAX_PATH_DEPTH``."""
    if not path:
        return "the path is empty"
    if _CONTROL.search(path):
        return f"path {path!r} contains a control character"
    if path.startswith("/") or _DRIVE.match(path):
        return f"absolute path {path!r}"
    if "\\" in path:
        return f"path {path!r} contains a backslash"
    if (size := len(path.encode("utf-8", "surrogateescape"))) > MAX_PATH_BYTES:
        return f"path {path[:60]!r}... is {size} bytes long, more than the {MAX_PATH_BYTES} a path may have"
    parts = path.split("/")
    if len(parts) > MAX_PATH_DEPTH:
        return f"path {path[:60]!r}... is {len(parts)} names deep, more than the {MAX_PATH_DEPTH} a path may be"
    for part in parts:
        if part in ("", ".", ".."):
            return (
                f"path {path!r} has an empty, '.' or '..' component"
                if part != ".."
                else f"path {path!r} escapes the tree"
            )
        if is_dotgit(part):
            return f"path {path!r} touches .git/"
        if len(part.encode("utf-8", "surrogateescape")) > NAME_MAX:
            return f"path {path!r} has a name longer than {NAME_MAX} bytes, which no checkout can create"
    return None


def is_dotgit(part: str) -> bool:
    """Whether one path component is ``.git`` in any case or spelling git treats as one."""
    return bool(_DOTGIT.match(part) or (not part.isascii() and _DOTGIT.match(part.translate(_HFS_IGNORED))))


def file_name_problem(name: str) -> str | None:
    """Why ``name`` is not one plain file name (a tree path of one component), or None when it is."""
    if "/" in name:
        return f"{name!r} is a path, not a file name"
    return tree_path_problem(name)


def id_problem(text: str, what: str = "id") -> str | None:
    if not ID_RE.fullmatch(text):
        return (
            f"{text!r} is not a valid {what} (lower-case letters, digits, '.', '_', '-'; "
            "starting with a letter or digit)"
        )
    return None


_READ_HINT = "patchtool reads only regular files inside the repository; put the file itself there"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def file_kind(mode: int) -> str | None:
    """What a file of ``mode`` is, when it is not a regular file: "a directory", "a device", ..."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


def not_regular(mode: int) -> str | None:
    """``file_kind`` said against reading it from a repository."""
    if (kind := file_kind(mode)) is None:
        return None
    if stat.S_ISLNK(mode):
        return f"{kind} (it could lead outside the repository; patchtool follows none)"
    return f"{kind}, not a regular file"


def _unsafe(rel: str, why: str, hint: str = _READ_HINT) -> InvalidInput:
    return InvalidInput(
        f"{rel}: {why}", file=rel, hint=hint, problems=[Problem(file=rel, message=why, hint=hint, code="unsafe-file")]
    )


MAX_INPUT_BYTES = 64 << 20  # a patch, a series file or a registry entry: far more than any real one


def check_opened(fd: int, before: os.stat_result, limit: int, refuse: Refusal) -> None:
    """Raise ``refuse(why, hint)`` unless ``fd`` is still the regular file ``before`` described and
    holds at most ``limit`` bytes. Both readers of named files (``read_inside`` here,
    ``inputs.open_named``) open through it; the caller closes ``fd``."""
    now = os.fstat(fd)
    if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
        raise refuse("was replaced while being read", "run the command again")
    if (why := size_problem(now.st_size, limit)) is not None:
        raise refuse(why, "is it the right file?")


def size_problem(size: int, limit: int = MAX_INPUT_BYTES) -> str | None:
    """Why a file of ``size`` bytes is more than patchtool reads, or None: the readers' bound, said
    too of a file about to be written that they would refuse."""
    return f"is {size} bytes, more than the {limit} patchtool reads" if size > limit else None


def read_bounded(fd: int, limit: int, refuse: Refusal) -> bytes:
    """Everything ``fd`` holds, read 1 MiB at a time and never more than ``limit`` bytes: a file
    that grew after it was opened is refused."""
    chunks, size = [], 0
    while size <= limit and (chunk := os.read(fd, 1 << 20)):
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise refuse(f"is more than the {limit} bytes patchtool reads", "is it the right file?")
    return b"".join(chunks)


def read_inside(root: Path, rel: str, *, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file ``root/rel``: the one way patchtool reads a file of the
    repository (manifest, registry, pins, patch files).

    ``rel`` must be a safe tree path. No component is followed through a symbolic link and the
    file is opened without blocking, so a FIFO, a device or a link to ``/etc/passwd`` is refused
    rather than read (or waited on forever). FileNotFoundError when there is no such file;
    InvalidInput, naming ``rel`` and what it is, for anything that is not a regular file or
    cannot be read, or is more than ``limit`` bytes."""
    if (why := tree_path_problem(rel)) is not None:
        raise _unsafe(rel, why, "name a file inside the repository")

    def refuse(why: str, hint: str) -> PatchtoolError:
        return _unsafe(rel, why, hint)

    *dirs, name = rel.split("/")
    try:
        fd = _open_dirs(root, dirs, rel)
        try:
            before = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if (what := not_regular(before.st_mode)) is not None:
                raise _unsafe(rel, f"is {what}")
            ffd = os.open(name, _FILE_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        try:
            check_opened(ffd, before, limit, refuse)
            return read_bounded(ffd, limit, refuse)
        finally:
            os.close(ffd)
    except FileNotFoundError:
        raise
    except PermissionError as exc:
        raise _unsafe(rel, f"cannot be read: {exc.strerror}", "check the file's permissions") from None
    except OSError as exc:  # a link or a FIFO swapped in since the stat, a root that is a file
        raise _unsafe(rel, f"cannot be read: {exc.strerror}") from None


def read_text_if_present(root: Path, rel: str) -> str | None:
    """``read_inside`` as UTF-8 text; None when there is no such file."""
    try:
        data = read_inside(root, rel)
    except FileNotFoundError:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _unsafe(rel, f"is not UTF-8 ({exc.reason} at byte {exc.start})", "save it as UTF-8") from None


def _open_dirs(root: Path, dirs: list[str], rel: str) -> int:
    """A descriptor of ``root/dirs...``, each component a real directory, none a link."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(dirs):
            mode = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
            if not stat.S_ISDIR(mode):
                raise _unsafe(
                    rel,
                    f"{'/'.join(dirs[: i + 1])} is {not_regular(mode) or 'a file'}; "
                    "expected a directory inside the repository",
                )
            sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd

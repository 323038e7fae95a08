"""The one filesystem boundary: every file patchtool writes, every directory it makes, every
rename and every delete happens beneath a root (the repository, the cache, the directory of an
output the user named), and never through a symbolic link.

A ``Root`` walks a path one component at a time through directory descriptors opened with
``O_NOFOLLOW | O_DIRECTORY`` and acts with the ``*at`` calls (``os.open(dir_fd=)``,
``os.rename(src_dir_fd=, dst_dir_fd=)``, ``os.unlink(dir_fd=)``, ``remove_tree``), so a
link a repository commits (``build -> /home/you``), or one swapped in while patchtool runs, is
refused with a message naming it, never followed. Only a regular file patchtool's user owns is
ever replaced: never a device, a FIFO, a directory or a link.

``Root.write`` is the atomic write: a temporary file beside the target, synced, renamed over it,
and the directory synced, so a reader, or a crash, finds the old content or the new, never a part.
Reading goes beneath the root by the same rule (``paths.read_inside``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from patchtool import paths
from patchtool.errors import AccessError, InvalidInput, Problem, UsageError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
SERIES_FILES = ("patchset.toml", "retread.toml")  # a report never replaces these,
SERIES_DIRS = ("patches", "upstream-pins", ".patchtool", ".git")  # nor anything in these


class Root:
    """A directory patchtool writes beneath. The root itself is the user's choice and is taken as
    given; everything beneath it is reached without following a link."""

    def __init__(self, path: Path) -> None:
        self.path = path

    # -- reading ---------------------------------------------------------------------------
    def read(self, rel: str) -> bytes:
        """The bytes of the regular file ``rel`` (``paths.read_inside``)."""
        return paths.read_inside(self.path, rel)

    def kind(self, rel: str) -> int | None:
        """``rel``'s file type (``stat.S_IFMT``) without following it; None when there is nothing."""
        with self._parent(rel, create=False) as found:
            if found is None:
                return None
            fd, name = found
            try:
                return stat.S_IFMT(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
            except FileNotFoundError:
                return None

    # -- directories -----------------------------------------------------------------------
    def directory(self, rel: str = "") -> Path:
        """``root/rel`` made (with every directory above it) where missing, each component a real
        directory beneath the root: the path to hand to git or a build backend."""
        self.path.mkdir(parents=True, exist_ok=True)
        if rel:
            fd = self._walk(rel.split("/"), create=True)
            os.close(fd)
        return self.path / rel if rel else self.path

    def place(self, rel: str, *, create: bool = True) -> Path:
        """``root/rel`` for a directory something else makes (git's ``worktree add``, a build):
        every directory above it a real one beneath the root (made where missing, when
        ``create``), and ``rel`` itself missing or a real directory, never a link."""
        parts = rel.split("/")
        if create:
            self.directory("/".join(parts[:-1]))
        for i in range(1, len(parts) + 1):
            if (kind := self.kind("/".join(parts[:i]))) is None:
                break
            if kind != stat.S_IFDIR:
                raise self._refused("/".join(parts[:i]), _not_a_directory(kind, self.path))
        return self.path / rel

    def rmtree(self, rel: str) -> None:
        """Remove ``rel`` and all beneath it; a link there is removed itself, never followed."""
        with self._parent(rel, create=False) as found:
            if found is None:
                return
            fd, name = found
            try:
                mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                return
            if stat.S_ISDIR(mode):
                remove_tree(fd, name)
            else:
                os.unlink(name, dir_fd=fd)

    def rmdir(self, rel: str) -> None:
        """Remove the empty directory ``rel``."""
        with self._parent(rel, create=False) as found:
            if found is not None:
                os.rmdir(found[1], dir_fd=found[0])

    # -- files -----------------------------------------------------------------------------
    def write(self, rel: str, data: bytes | str) -> None:
        """``data`` (text as UTF-8) at ``rel``, all at once, with the usual permissions (0666 less
        the umask); refused when ``rel`` is anything but a regular file of this user."""
        with self._parent(rel, create=True) as found:
            assert found is not None
            fd, name = found
            self._replaceable(fd, name, rel)
            tmp = f".{name}.{os.urandom(4).hex()}.tmp"
            try:
                _write_new(fd, tmp, data)
                os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=fd)
                raise
            _sync(fd)

    def create(self, rel: str, data: bytes | str) -> None:
        """``data`` in a new file ``rel`` (one that exists is refused: FileExistsError), synced."""
        with self._parent(rel, create=True) as found:
            assert found is not None
            _write_new(found[0], found[1], data)

    def append(self, rel: str, text: str) -> None:
        """``text`` added at the end of the regular file ``rel``, made when missing."""
        with self._parent(rel, create=True) as found:
            assert found is not None
            fd, name = found
            self._replaceable(fd, name, rel)
            out = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=fd)
            with os.fdopen(out, "a", encoding="utf-8") as fh:
                fh.write(text)

    def unlink(self, rel: str) -> None:
        """Remove the file (or link) ``rel``; nothing there is fine."""
        with self._parent(rel, create=False) as found:
            if found is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(found[1], dir_fd=found[0])

    def rename(self, src: str, dst: str, *, sync: bool = True) -> None:
        """Move ``src`` to ``dst`` (both beneath the root), replacing only a regular file; with
        ``sync`` false, ``dst``'s directory is left for the caller to ``sync`` (once for many)."""
        with self._parent(src, create=False) as source, self._parent(dst, create=True) as target:
            if source is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(self.path / src))
            assert target is not None
            self._replaceable(target[0], target[1], dst)
            os.rename(source[1], target[1], src_dir_fd=source[0], dst_dir_fd=target[0])
            if sync:
                _sync(target[0])

    def sync(self, rel: str = "") -> None:
        """Flush the entries of directory ``rel`` (a rename into it) to the disk."""
        fd = self._walk(rel.split("/") if rel else [], create=False)
        try:
            _sync(fd)
        finally:
            os.close(fd)

    # -- the walk --------------------------------------------------------------------------
    @contextlib.contextmanager
    def _parent(self, rel: str, *, create: bool) -> Iterator[tuple[int, str] | None]:
        """(descriptor of ``rel``'s directory, ``rel``'s last component); None when that directory
        is missing and ``create`` is false."""
        if (why := paths.tree_path_problem(rel)) is not None:
            raise self._refused(rel, why)
        *dirs, name = rel.split("/")
        if create:
            self.path.mkdir(parents=True, exist_ok=True)
        try:
            fd = self._walk(dirs, create=create)
        except FileNotFoundError:
            if create:
                raise
            yield None
            return
        try:
            yield fd, name
        finally:
            os.close(fd)

    def _walk(self, dirs: list[str], *, create: bool) -> int:
        """A descriptor of ``root/dirs...``, each a real directory (made when ``create``)."""
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for i, part in enumerate(dirs):
                try:
                    sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=fd)
                    sub = self._open_dir(fd, part, dirs[: i + 1])
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    raise self._not_a_directory(fd, part, dirs[: i + 1]) from None
                os.close(fd)
                fd = sub
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_dir(self, fd: int, part: str, where: list[str]) -> int:
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            raise self._not_a_directory(fd, part, where) from None

    def _not_a_directory(self, fd: int, part: str, where: list[str]) -> InvalidInput:
        mode = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
        return self._refused("/".join(where), _not_a_directory(stat.S_IFMT(mode), self.path))

    def _replaceable(self, fd: int, name: str, rel: str) -> None:
        """Refuse to replace ``name`` unless it is missing or a regular file this user owns."""
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if (what := paths.not_regular(st.st_mode)) is not None:
            raise self._refused(rel, f"is {what}; refusing to replace it")
        if st.st_uid != os.geteuid():
            raise AccessError(
                f"{self.path / rel} belongs to another user; refusing to replace it",
                file=rel,
                hint="remove it yourself if it is yours to replace",
            )

    def _refused(self, rel: str, why: str) -> InvalidInput:
        hint = f"move {self.path / rel} away (a link or a special file could lead outside {self.path})"
        return InvalidInput(
            f"{rel}: {why}",
            file=rel,
            hint=hint,
            problems=[Problem(file=rel, message=why, hint=hint, code="unsafe-file")],
        )


def remove_tree(parent: int, name: str) -> None:
    """Remove the directory ``name`` beneath the descriptor ``parent`` and everything in it, at any
    depth: one loop, two descriptors open at most, every directory opened with ``O_NOFOLLOW`` (a
    link is removed, never followed). ``shutil.rmtree`` recurses once per level: a tree 1,000
    directories deep was a RecursionError, and a staging tree no later command could remove. The
    way back up is ``..``, checked to be the directory that was come down from, so a tree moved
    meanwhile stops the removal instead of leading it elsewhere."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    down = [(name, _identity(fd))]  # the directories from ``name`` to the one open now
    try:
        while True:
            child = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        child = entry.name
                        break
                    os.unlink(entry.name, dir_fd=fd)
            if child is not None:
                below = os.open(child, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = below
                down.append((child, _identity(fd)))
                continue
            empty, _ = down.pop()
            if not down:
                break
            above = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = above
            if _identity(fd) != down[-1][1]:
                raise OSError(errno.ESTALE, "the tree moved while it was removed", "/".join(n for n, _ in down))
            os.rmdir(empty, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def write_output(path: Path, data: bytes | str, *, repository: Path | None) -> None:
    """A report at ``path``, a file the user named (``--html``, ``--report``): written whole
    through the boundary, beneath the directory the user named it in (``check_output``)."""
    parent, name = check_output(path, repository=repository)
    Root(parent).write(name, data)


def series_path(target: Path, repository: Path) -> str | None:
    """``target`` (resolved) as a path in ``repository`` where it is a series file or lies in a
    series directory (``SERIES_FILES``, ``SERIES_DIRS``: where no output goes), else None."""
    if not target.is_relative_to(base := repository.resolve()):
        return None
    rel = target.relative_to(base).as_posix()
    return rel if rel in SERIES_FILES or rel.split("/", 1)[0] in SERIES_DIRS else None


def check_output(path: Path, *, repository: Path | None) -> tuple[Path, str]:
    """(directory, name) of the report file ``path``; a usage error when it is a series file of
    ``repository`` or anything but a regular file or a new one: a reading command never replaces
    the series, a device node or a FIFO. Asked before the command's work, and again to write."""
    where = path.absolute()
    name = where.name
    if paths.file_name_problem(name) is not None:
        raise UsageError(f"{path} does not name a file", hint="name the report's file, e.g. report.html")
    parent = where.parent.resolve()  # the user's own directories, as the user named them
    target = parent / name
    if repository is not None and (rel := series_path(target, repository)) is not None:
        raise UsageError(
            f"{path} is {rel} of the patch repository; a report never replaces the series",
            file=rel,
            hint="write the report somewhere else, e.g. report.html",
        )
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        mode = stat.S_IFREG
    except NotADirectoryError:
        raise UsageError(f"{path}: {where.parent} is not a directory") from None
    if not stat.S_ISREG(mode):
        what = paths.not_regular(mode)
        raise UsageError(
            f"{path} is {what}; a report is written only to a regular file or a new one",
            hint="name a new file for the report",
        )
    return parent, name


def _not_a_directory(kind: int, root: Path) -> str:
    what = "a symbolic link" if kind == stat.S_IFLNK else "not a directory"
    return f"is {what}; patchtool writes only into real directories beneath {root}"


def _write_new(fd: int, name: str, data: bytes | str) -> None:
    out = os.open(name, _NEW_FILE, 0o666, dir_fd=fd)
    with os.fdopen(out, "wb") as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        fh.flush()
        os.fsync(fh.fileno())


def _sync(fd: int) -> None:
    with contextlib.suppress(OSError):  # some filesystems cannot sync a directory
        os.fsync(fd)

"""Landlock: the process takes away its own right to write anywhere but where the command may.

The filesystem boundary (one module that opens beneath its root) is the rule; this is the
backstop for the code that forgets it. After ``confine`` the kernel refuses this process, and
every child it starts (git, a build), any write, delete, rename, link or truncation outside the
given trees: ``open(..., "w")`` there fails with EACCES like a read-only directory. Reading and
executing are never restricted, so git and Python run as before.

Three system calls, through ctypes (the PyPI ``landlock`` package is a pre-release that does not
handle the newer access rights): ``landlock_create_ruleset`` makes a ruleset that handles the
write rights this kernel knows, ``landlock_add_rule`` allows them beneath each tree, and
``landlock_restrict_self`` enforces it on the process for good (it cannot be undone). ABI 1 is
treated as no Landlock: it refuses every rename across directories, which git does for every
object it writes.

Landlock holds the thread that calls ``landlock_restrict_self`` and what it starts from then on,
never a thread already running. ``Unconfined`` is such a thread, started before ``confine``: the
runner gives it the two things a command does outside its trees, writing a report file the command
line named and running the user's ``$EDITOR``, and nothing else.

No file beside ``/dev/null`` is writable, and no terminal is: a confined process cannot open
``/dev/tty`` to write, nor use a device ioctl on one it opens to read (ABI 5, ``IOCTL_DEV``), so it
cannot push keystrokes into the user's terminal (``TIOCSTI``).
"""

from __future__ import annotations

import ctypes
import dataclasses
import enum
import errno
import os
import queue
import stat
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from patchtool.errors import InternalError

T = TypeVar("T")

OPT_OUT = "PATCHTOOL_LANDLOCK"  # =0: do not confine (for debugging); read by the command line, not here

# The same numbers on every architecture Linux added them to after 5.13 (the unified table).
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_MIN_ABI = 2  # REFER: without it the kernel refuses reparenting, so git cannot store an object


class Access(enum.IntFlag):
    """The filesystem access rights (``LANDLOCK_ACCESS_FS_*``) this module restricts."""

    WRITE_FILE = 1 << 1
    REMOVE_DIR = 1 << 4
    REMOVE_FILE = 1 << 5
    MAKE_CHAR = 1 << 6
    MAKE_DIR = 1 << 7
    MAKE_REG = 1 << 8
    MAKE_SOCK = 1 << 9
    MAKE_FIFO = 1 << 10
    MAKE_BLOCK = 1 << 11
    MAKE_SYM = 1 << 12
    REFER = 1 << 13  # ABI 2
    TRUNCATE = 1 << 14  # ABI 3
    IOCTL_DEV = 1 << 15  # ABI 5


# What each ABI version can restrict of writing; reads (READ_FILE, READ_DIR) and EXECUTE stay open.
_WRITES_SINCE = {
    1: (
        Access.WRITE_FILE
        | Access.REMOVE_DIR
        | Access.REMOVE_FILE
        | Access.MAKE_CHAR
        | Access.MAKE_DIR
        | Access.MAKE_REG
        | Access.MAKE_SOCK
        | Access.MAKE_FIFO
        | Access.MAKE_BLOCK
        | Access.MAKE_SYM
    ),
    2: Access.REFER,
    3: Access.TRUNCATE,
    5: Access.IOCTL_DEV,
}
# Rights that apply to a file itself (a rule on a non-directory may hold only these).
_FILE_RIGHTS = Access.WRITE_FILE | Access.TRUNCATE | Access.IOCTL_DEV
# Nothing patchtool or git does makes device nodes; where writes are allowed, everything else is.
_TREE_RIGHTS = Access(sum(_WRITES_SINCE.values())) & ~(Access.MAKE_CHAR | Access.MAKE_BLOCK)
# Files every process may write whatever its command: the bit bucket. Not the terminal: nothing
# confined may write to it or use its ioctls (TIOCSTI); git never prompts (GIT_TERMINAL_PROMPT=0).
DEVICES = (Path(os.devnull),)


class _RulesetAttr(ctypes.Structure):
    # Only the first member of ``struct landlock_ruleset_attr``: the kernel takes a shorter struct
    # as one whose later members (network rights, scopes) are zero, on every ABI version.
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # ``__attribute__((packed))`` in linux/landlock.h
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Support:
    """What this kernel offers: the Landlock ABI version, or why there is none to use."""

    abi: int
    reason: str = ""

    @property
    def usable(self) -> bool:
        return self.abi >= _MIN_ABI

    def describe(self) -> str:
        if self.usable:
            return f"Landlock ABI {self.abi}"
        return f"unavailable ({self.reason})"


def _syscall(number: int, *args: object) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    result = int(libc.syscall(ctypes.c_long(number), *args))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def support() -> Support:
    """The Landlock this kernel offers (``landlock_create_ruleset`` asked for its version)."""
    if not sys.platform.startswith("linux"):
        return Support(abi=0, reason=f"Landlock is Linux's; this is {sys.platform}")
    try:
        abi = _syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except OSError as exc:
        why = {errno.ENOSYS: "the kernel has no Landlock", errno.EOPNOTSUPP: "Landlock is disabled at boot"}
        return Support(abi=0, reason=why.get(exc.errno or 0, f"landlock_create_ruleset: {exc.strerror}"))
    if abi < _MIN_ABI:
        return Support(abi=abi, reason=f"ABI {abi} refuses the renames git makes; {_MIN_ABI} or later is needed")
    return Support(abi=abi)


def handled(abi: int) -> Access:
    """The write rights a kernel of Landlock ABI ``abi`` restricts."""
    return Access(sum(rights for since, rights in _WRITES_SINCE.items() if since <= abi))


def confine(trees: Iterable[Path], *, files: Iterable[Path] = DEVICES) -> Support:
    """Allow this process and its children to write beneath ``trees`` (directories) and into
    ``files``, and nowhere else, for good. A path that does not exist is skipped (it grants
    nothing). Returns what was used; where the kernel has no usable Landlock, does nothing."""
    found = support()
    if not found.usable:
        return found
    rights = handled(found.abi)
    attr = _RulesetAttr(handled_access_fs=rights)
    ruleset = _syscall(
        _SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0)
    )
    try:
        for tree in trees:
            _allow(ruleset, tree, rights & _TREE_RIGHTS, directory=True)
        for file in files:
            _allow(ruleset, file, rights & _FILE_RIGHTS, directory=False)
        try:
            _no_new_privs()
            _syscall(_SYS_RESTRICT_SELF, ruleset, ctypes.c_uint32(0))
        except OSError as exc:
            raise _refused(f"landlock_restrict_self: {exc.strerror}") from None
    finally:
        os.close(ruleset)
    return found


def _refused(what: str) -> InternalError:
    """The kernel has Landlock but refused the ruleset: a bug, or a system that forbids it."""
    return InternalError(
        f"cannot confine the process with Landlock: {what}",
        hint=f"{OPT_OUT}=0 runs without the confinement (writes are then only checked by patchtool)",
    )


def _no_new_privs() -> None:
    """The kernel enforces a ruleset only on a process that can gain no privileges by exec."""
    libc = ctypes.CDLL(None, use_errno=True)
    if (
        libc.prctl(_PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
        != 0
    ):
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _allow(ruleset: int, path: Path, rights: Access, *, directory: bool) -> None:
    flags = os.O_PATH | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return  # nothing there to write into; a file a command names is made beneath its tree
    try:
        if not directory and stat.S_ISDIR(os.fstat(fd).st_mode):
            return  # a file's rights on a directory would reach everything beneath it
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        try:
            _syscall(
                _SYS_ADD_RULE,
                ctypes.c_int(ruleset),
                ctypes.c_int(_RULE_PATH_BENEATH),
                ctypes.byref(rule),
                ctypes.c_uint32(0),
            )
        except OSError as exc:
            raise _refused(f"landlock_add_rule {path}: {exc.strerror}") from None
    finally:
        os.close(fd)


class Unconfined:
    """A thread that keeps the rights the process had: started before ``confine``, which holds
    only the calling thread and what it starts later. ``call`` runs a function there and returns
    its result (or raises its exception) in the caller; one call at a time."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="patchtool-unconfined", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, future = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # handed to the caller, raised there
                    future.set_exception(exc)

    def call(self, fn: Callable[[], T]) -> T:
        future: Future[T] = Future()
        self._jobs.put((fn, future))
        return future.result()

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join()

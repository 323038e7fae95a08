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

Code patchtool did not write (a git pin's build backend) is held tighter, in a ``Sandbox``: a
process of its own (``sandboxed``: this Python forks a child that enters the sandbox, then
executes the program, and ends every process the program leaves behind) whose ruleset also
handles reading and executing, so it reads only the trees it is given, and,
where the ABI has them, opens a TCP connection only to the ports it is given (none for a build
backend; ABI 4) and signals no process outside it (ABI 6).
Landlock's rulesets stack: the sandbox only narrows what the command itself may do.

Landlock holds the thread that calls ``landlock_restrict_self`` and what it starts from then on,
never a thread already running. ``Unconfined`` is such a thread, started before ``confine``: the
runner gives it the two things a command does outside its trees, writing a report file the command
line named and running the user's ``$EDITOR``, and nothing else.

No file beside ``/dev/null`` is writable, and no terminal is: a confined process cannot open
``/dev/tty`` to write, nor use a device ioctl on one it opens to read (ABI 5, ``IOCTL_DEV``), so it
cannot push keystrokes into the user's terminal (``TIOCSTI``).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import enum
import errno
import json
import os
import pwd
import queue
import signal
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from patchtool.errors import InternalError

T = TypeVar("T")

OPT_OUT = "PATCHTOOL_LANDLOCK"  # =0: do not confine (for debugging); read by the command line, not here

# The same numbers on every architecture Linux added them to after 5.13 (the unified table).
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_MIN_ABI = 2  # REFER: without it the kernel refuses reparenting, so git cannot store an object


class Access(enum.IntFlag):
    """The filesystem access rights (``LANDLOCK_ACCESS_FS_*``) this module restricts."""

    EXECUTE = 1 << 0  # only a sandbox's (``Sandbox``) ruleset handles these three
    WRITE_FILE = 1 << 1
    READ_FILE = 1 << 2
    READ_DIR = 1 << 3
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
    nothing). Returns what was used; where the kernel has no usable Landlock, does nothing.
    From then on each child the git layer starts enters a domain of its own (``child_preexec``)."""
    found = support()
    if not found.usable:
        return found
    rights = handled(found.abi)
    attr = _RulesetAttr(handled_access_fs=rights)
    ruleset = _syscall(
        _SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0)
    )
    _enforce(
        ruleset,
        [
            *((tree, rights & _TREE_RIGHTS, True) for tree in trees),
            *((file, rights & _FILE_RIGHTS, False) for file in files),
        ],
    )
    _prepare_nesting()
    return found


# -- each child in a domain of its own --------------------------------------------------------------
#
# Landlock lets a process ptrace (and so ``process_vm_writev``, or open ``/proc/PID/mem`` to write)
# only a process in its own domain or one nested in it. A child started in the command's domain
# could therefore write into this process's memory and steer the thread that ``confine`` does not
# hold (``Unconfined``: a report's write, the user's $EDITOR), or read its memory. So each child
# enters a domain nested in the command's between fork and exec: the same rights, since the nested
# ruleset handles only making block devices, which the command's domain already refuses
# everywhere, but a domain no thread of this process is in. From there neither this process nor a
# sibling child can be traced, read or written; the child's own children, in its domain or below,
# can be, as before.

_NEST_RIGHTS = Access.MAKE_BLOCK  # refused everywhere by the command's domain already: nests, restricts nothing more
_nest: tuple[Callable[..., int], tuple[object, ...], Callable[..., int], tuple[object, ...]] | None = None


def _prepare_nesting() -> None:
    """Make, once, the ruleset each child enters (its descriptor closes on exec) and the calls it
    makes, bound ahead, so the child does no more between fork and exec than two system calls."""
    global _nest  # noqa: PLW0603 -- made once, on first use
    if _nest is not None:
        return
    attr = _RulesetAttr(handled_access_fs=_NEST_RIGHTS)
    fd = _syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    libc = ctypes.CDLL(None, use_errno=True)
    zero = ctypes.c_ulong(0)
    _nest = (
        libc.prctl,
        (ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), zero, zero, zero),
        libc.syscall,
        (ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(fd), ctypes.c_uint32(0)),
    )


def child_preexec(then: Callable[[], None] | None = None) -> Callable[[], None] | None:
    """What a child of the confined process runs between fork and exec: enter a Landlock domain of
    its own (above), then ``then``. ``then`` alone (None: nothing) where the process is not confined.
    It fails closed: a child that cannot enter it does not run."""
    if _nest is None:
        return then
    prctl, no_new_privs, syscall, restrict = _nest

    def enter_own_domain() -> None:
        # no_new_privs again: a thread started before ``confine`` (``Unconfined``) lacks it
        if prctl(*no_new_privs) != 0 or syscall(*restrict) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self in a child")
        if then is not None:
            then()

    return enter_own_domain


def _enforce(ruleset: int, rules: Iterable[tuple[Path, Access, bool]], *, ports: Iterable[int] = ()) -> None:
    """Add ``rules`` (a path, its rights, whether it is a directory) and the TCP ``ports`` it may
    connect to to ``ruleset``, then hold this process to it for good; the ruleset's descriptor is
    closed either way."""
    try:
        for path, rights, directory in rules:
            _allow(ruleset, path, rights, directory=directory)
        for port in ports:
            _add_rule(ruleset, _RULE_NET_PORT, _NetPortAttr(allowed_access=_CONNECT_TCP, port=port), f"TCP port {port}")
        try:
            _no_new_privs()
            _syscall(_SYS_RESTRICT_SELF, ruleset, ctypes.c_uint32(0))
        except OSError as exc:
            raise _refused(f"landlock_restrict_self: {exc.strerror}") from None
    finally:
        os.close(ruleset)


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
        _add_rule(ruleset, _RULE_PATH_BENEATH, _PathBeneathAttr(allowed_access=rights, parent_fd=fd), str(path))
    finally:
        os.close(fd)


def _add_rule(ruleset: int, kind: int, rule: ctypes.Structure, what: str) -> None:
    try:
        _syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(kind), ctypes.byref(rule), ctypes.c_uint32(0))
    except OSError as exc:
        raise _refused(f"landlock_add_rule {what}: {exc.strerror}") from None


# -- a sandbox for code patchtool did not write -----------------------------------------------------

_READS = Access.EXECUTE | Access.READ_FILE | Access.READ_DIR  # ABI 1, like the write rights
_NET_TCP = 1 << 0 | 1 << 1  # LANDLOCK_ACCESS_NET_BIND_TCP, LANDLOCK_ACCESS_NET_CONNECT_TCP
_CONNECT_TCP = 1 << 1
_RULE_NET_PORT = 2
_SCOPES = 1 << 0 | 1 << 1  # LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET, LANDLOCK_SCOPE_SIGNAL
_NET_SINCE, _SCOPES_SINCE = 4, 6
# Where the system keeps its programs, libraries and settings: a sandbox reads them, never writes.
# Of /proc only what describes the machine, and the sandboxed process's own directory (``self``,
# resolved when it enters): another process's environ and cmdline stay closed, which Landlock's
# ptrace rule alone does not close. Of /dev only the devices a build reads (and /dev/null, in ``files``):
# not /dev/shm or /dev/mqueue (other processes' shared memory), disks, the terminals or the listing.
SYSTEM = tuple(
    Path(p)
    for p in (
        "/usr",
        "/bin",
        "/sbin",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/etc",
        "/sys",
        "/dev/zero",
        "/dev/urandom",
        "/dev/random",
        "/dev/full",
        "/nix/store",
        "/proc/self",
        "/proc/sys",
        "/proc/cpuinfo",
        "/proc/meminfo",
        "/proc/stat",
        "/proc/loadavg",
        "/proc/uptime",
        "/proc/version",
        "/proc/filesystems",
    )
)
# Started as ``python -I -S -c WRAPPER PACKAGE_PARENT SANDBOX ARGV...``: no site, no environment, so
# only this patchtool's own modules are imported before the sandbox holds.
_WRAPPER = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from patchtool.confine import run_sandboxed; run_sandboxed(sys.argv[2], sys.argv[3:])"
)


class _NetPortAttr(ctypes.Structure):
    _pack_ = 1  # ``struct landlock_net_port_attr``, packed
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class _SandboxAttr(ctypes.Structure):
    # ``struct landlock_ruleset_attr`` whole; the size passed says how much of it the ABI knows.
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Sandbox:
    """Where a program patchtool did not write may reach: read, execute and write beneath
    ``writes``; read and execute beneath ``reads``; write ``files`` (devices); nothing else. It
    opens a TCP connection only to the ports in ``connects`` (any host: Landlock knows ports, not
    addresses) and accepts none (ABI 4), and reaches no process outside it by a signal or an
    abstract Unix socket (ABI 6)."""

    writes: tuple[Path, ...]
    reads: tuple[Path, ...]
    files: tuple[Path, ...] = DEVICES
    connects: tuple[int, ...] = ()

    def to_json(self) -> str:
        """As the wrapper takes it; each path absolute, since the wrapper runs where the program will."""
        paths = {key: [os.path.abspath(p) for p in getattr(self, key)] for key in ("writes", "reads", "files")}
        return json.dumps({**paths, "connects": list(self.connects)})

    @classmethod
    def from_json(cls, text: str) -> Sandbox:
        data = json.loads(text)
        paths = {key: tuple(map(Path, data[key])) for key in ("writes", "reads", "files")}
        return cls(**paths, connects=tuple(int(port) for port in data.get("connects", ())))


def python_reads() -> tuple[Path, ...]:
    """What this Python reads to run, and so what the same Python started again reads: its
    prefixes and the directories on its path. Never the current directory (``python -m`` puts it
    on the path), nor a directory that holds the home directory."""
    homes = {Path(os.path.expanduser("~")).absolute()}
    with contextlib.suppress(KeyError):  # a uid without a passwd entry (a container's) has no other home
        homes.add(Path(pwd.getpwuid(os.getuid()).pw_dir).absolute())
    here = Path.cwd()
    interpreter = Path(os.path.realpath(sys.executable)).parent.parent if sys.executable else None
    found = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, interpreter, *sys.path]
    paths = (Path(os.path.abspath(entry)) for entry in found if entry)
    kept = (path for path in paths if path != here and not any(home.is_relative_to(path) for home in homes))
    return tuple(dict.fromkeys(kept))


def sandboxed(argv: Sequence[str], sandbox: Sandbox) -> list[str]:
    """The command line that runs ``argv`` inside ``sandbox``: this Python forks a child that enters
    it and becomes ``argv``, and ends every process ``argv`` leaves behind (``run_sandboxed``)."""
    return [sys.executable, "-I", "-S", "-c", _WRAPPER, str(Path(__file__).parent.parent), sandbox.to_json(), *argv]


def reaped(argv: Sequence[str]) -> list[str]:
    """The command line that runs ``argv`` unconfined, but still ends every process it leaves
    behind; ``argv`` itself where that cannot be done (not Linux)."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    return [sys.executable, "-I", "-S", "-c", _WRAPPER, str(Path(__file__).parent.parent), "", *argv]


def run_sandboxed(spec: str, argv: list[str]) -> NoReturn:
    """The body of ``sandboxed``'s (and, with an empty ``spec``, ``reaped``'s) command line. This
    process, patchtool's own and outside the sandbox, becomes the subreaper of what it starts, forks
    a child that enters the sandbox and becomes ``argv``, waits for it, then kills every process
    that is left: a daemon ``argv`` forked, in the same session or one of its own (``setsid`` and
    a double fork leave it an orphan, which the kernel gives to its nearest subreaper: this process).
    It exits as ``argv`` did. It fails closed: where the sandbox cannot be entered, nothing runs."""
    try:
        _subreaper()
        child = os.fork()
    except OSError as exc:
        _cannot_run(argv, exc)
    if child == 0:
        try:
            if spec:
                found = enter(Sandbox.from_json(spec))
                if not found.usable:
                    raise OSError(errno.ENOSYS, f"no sandbox: Landlock {found.describe()}")
            os.execvp(argv[0], argv)
        except (OSError, InternalError) as exc:
            _cannot_run(argv, exc)
    _, status = os.waitpid(child, 0)
    end_descendants()
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def _cannot_run(argv: Sequence[str], exc: Exception) -> NoReturn:
    sys.stderr.write(f"patchtool: cannot run {argv[0] if argv else 'nothing'} in its sandbox: {exc}\n")
    sys.stderr.flush()
    os._exit(126)


def _subreaper() -> None:
    """Orphans among this process's descendants become its children, not init's (``PR_SET_CHILD_SUBREAPER``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)):
        code = ctypes.get_errno()
        raise OSError(code, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(code)}")


def end_descendants() -> None:
    """Kill every descendant of this process (a subreaper: each orphan below it is its child), and
    reap them: kill the children, wait for one to end, and again, until there is none. A process
    that forks meanwhile leaves its child an orphan, so a child of this one, killed next time."""
    while True:
        for pid in _children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _children() -> list[int]:
    """This process's children, as /proc says (each process's parent in its ``stat``; the
    kernel's own ``children`` file is not built into every kernel)."""
    me, found = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat_line = f.read()
        except OSError:  # gone already
            continue
        fields = stat_line[stat_line.rfind(b")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
        if len(fields) > 1 and int(fields[1]) == me:
            found.append(int(name))
    return found


def enter(sandbox: Sandbox) -> Support:
    """Hold this process, and everything it starts, to ``sandbox`` for good. Returns what was used;
    where the kernel has no usable Landlock, does nothing (the caller decides whether to go on)."""
    found = support()
    if not found.usable:
        return found
    writes = handled(found.abi)
    attr = _SandboxAttr(
        handled_access_fs=writes | _READS,
        handled_access_net=_NET_TCP if found.abi >= _NET_SINCE else 0,
        scoped=_SCOPES if found.abi >= _SCOPES_SINCE else 0,
    )
    size = 8 * (1 + (found.abi >= _NET_SINCE) + (found.abi >= _SCOPES_SINCE))
    ruleset = _syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    directories = {tree: os.path.isdir(tree) for tree in sandbox.reads}  # a file takes a file's rights alone
    _enforce(
        ruleset,
        [
            *((tree, (writes & _TREE_RIGHTS) | _READS, True) for tree in sandbox.writes),
            *((tree, _READS if d else _READS & ~Access.READ_DIR, d) for tree, d in directories.items()),
            *((file, (writes & _FILE_RIGHTS) | Access.READ_FILE, False) for file in sandbox.files),
        ],
        ports=sandbox.connects if found.abi >= _NET_SINCE else (),
    )
    return found


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
                except BaseException as exc:  # noqa: BLE001 -- handed to the caller, raised there
                    future.set_exception(exc)

    def call(self, fn: Callable[[], T]) -> T:
        future: Future[T] = Future()
        self._jobs.put((fn, future))
        return future.result()

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join()

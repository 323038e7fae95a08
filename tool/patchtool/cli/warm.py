"""A warm process for the commands that go on from a rebase stop (``rebase --continue``, ``--skip``,
``--abort``), so that each of them starts in milliseconds instead of re-importing everything.

Why: most of a ``--continue`` that goes to the next stop is starting Python and importing typer,
GitPython and patchtool (about 0.17 s of 0.3 s on a 2-core machine). A rebase that stops at a
conflict therefore leaves one process behind with those imports done; each later ``rebase
--continue/--skip/--abort`` is run by a fork of it, with the caller's command line, working
directory, umask, environment and standard streams (passed as file descriptors), and the
caller exits with its exit status. The command runs the same code it would run cold: only the
imports were done earlier.

What keeps it honest:

- **Nothing on disk.** The process listens on a Linux abstract socket: no file a repository could
  ship, replace or aim elsewhere.
- **Only its own world.** Both ends read the other's credentials (``SO_PEERCRED``) and, from
  /proc, its namespaces and root, groups and capabilities, no_new_privs and seccomp, resource
  limits, priority, cgroup and CPU affinity, and go on only when all of them are their own. A
  same-user process in a sandbox or container that shares the network namespace (and so could
  reach the name), or one under ``nice``, ``ulimit``, ``sg`` or ``taskset``, is neither served nor
  sent to: its command runs cold, in its world. The process runs nothing but ``rebase
  --continue/--skip/--abort``.
- **Only for what it was made for.** The socket's name is a digest of what decides what a
  command would run: the interpreter and its flags, every file of patchtool (name, size, mtime),
  every import path (and its mtime, which an install changes), the user, and the whole
  environment but ``_``, ``PWD``, ``OLDPWD`` and ``SHLVL``. A change to any of them finds no process,
  and the command runs cold, as before.
- **Run once.** The request is sent only after the process said it is ready; until the fork
  reports its pid the caller may still run the command itself (nothing ran); after that it is the
  fork's alone.
- **Signals as a terminal sends them.** The fork and the git it runs are a process group of their
  own, and Ctrl-C, SIGTERM, a hang-up, Ctrl-\\, Ctrl-Z (and the ``fg`` after it) and a resized
  window reach all of it. A caller killed outright takes the fork with it (SIGKILL, as a ``kill -9``
  of a cold command would: the journal and the rebase state are made for that).
- **What still differs from a cold run:** the fork has no controlling terminal (it writes to
  yours through the descriptors, and patchtool never reads from it), its parent is the warm
  process, and it ends with ``os._exit`` after flushing its output and running its ``atexit``
  functions, so a finaliser that only the interpreter's own shutdown would run does not run.
- **Cheap to ask.** The caller imports only C modules (``_socket``, ``_signal``, ``_sha256``): the
  Python ``socket``, ``signal`` and ``json`` modules cost 20 ms of enum and regex set-up, a tenth
  of the command. Messages are length-prefixed byte fields, read without ``eval`` or pickle.
- **Short-lived.** The process exits once the rebase that started it is over (no state file), or
  after ten idle minutes with no command. ``PATCHTOOL_WARM=0`` turns all of it off; off Linux it
  is off.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import _socket
import os
import struct
import sys

TYPE_CHECKING = False  # typing itself costs the caller 9 ms

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

SWITCH = "PATCHTOOL_WARM"
IDLE_SECONDS = 600.0
READY_SECONDS = 3.0  # how long a caller waits for a process that is still importing
REQUEST_SECONDS = 2.0  # how long the process waits for a whole request once it said ready
_VOLATILE = frozenset({b"_", b"PWD", b"OLDPWD", b"SHLVL"})
_GOES_ON = frozenset({"--continue", "--skip", "--abort"})
_WITH_VALUE = frozenset({"--root", "--cache-dir"})
_LENGTH = struct.Struct("!I")
_MAX_FRAME = 1 << 24
# what a rebase command imports (tests/test_warm.py checks that a fork that finishes one imports nothing more)
MODULES = ("patchtool.cli.app", "patchtool.cli.core", "patchtool.cli.render", "patchtool.rebase.transaction",
           "patchtool.series.checks", "patchtool.registry.workflows", "patchtool.project.widening",
           "patchtool.project.tomlio", "patchtool.project.lock", "tomlkit")

_serving = False  # True in a fork that runs a command: it never starts another process


def enabled(environ: Mapping[str, str]) -> bool:
    return sys.platform.startswith("linux") and environ.get(SWITCH, "") != "0"


def goes_on(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is ``rebase`` with ``--continue``, ``--skip`` or ``--abort`` (global options
    anywhere). Only a gate: the fork parses the command line as a cold command would."""
    words = iter(argv)
    for word in words:
        if word in _WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word == "rebase" and any(w in _GOES_ON for w in argv)
    return False


def key(environ: Mapping[bytes, bytes], path: Sequence[str]) -> str:
    """The digest that names the process: what a command started with ``environ`` and import
    path ``path`` would run."""
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]
    except ImportError:  # an interpreter without it: hashlib's (2.5 ms more)
        from hashlib import sha256

    h = sha256()

    def add(*parts: object) -> None:
        for part in parts:
            h.update(part if isinstance(part, bytes) else os.fsencode(str(part)))
            h.update(b"\0")

    add("warm 1", sys.executable, sys.version, sys.flags, sorted(sys._xoptions.items()), os.getuid())
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for folder, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            st = os.stat(os.path.join(folder, name))
            add(os.path.relpath(os.path.join(folder, name), package), st.st_size, st.st_mtime_ns)
    for entry in path:
        try:
            add(entry, os.stat(entry or ".").st_mtime_ns)
        except OSError:
            add(entry, "-")
    for variable in sorted(environ):
        if variable not in _VOLATILE:
            add(variable, environ[variable])
    return str(h.hexdigest()[:48])


def _address(digest: str) -> str:
    return f"\0patchtool-warm-{digest}"


# -- the caller ----------------------------------------------------------------------------------

def run(argv: Sequence[str]) -> int | None:
    """Run ``argv`` in the warm process: its exit status, or None when there is none to run it (or
    it is not for this command line): then nothing ran, and the caller runs it itself."""
    if _serving or not enabled(os.environ) or not goes_on(argv) or not _streams_open():
        return None
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        conn.settimeout(READY_SECONDS)
        conn.connect(_address(key(os.environb, sys.path)))
        if not _same_process(conn) or _receive(conn) != [b"ready"]:
            conn.close()
            return None
    except (OSError, ValueError):
        conn.close()
        return None
    except KeyboardInterrupt:  # nothing sent: nothing ran
        conn.close()
        sys.stderr.write("interrupted\n")
        return 130
    return _hand_over(conn, argv)


class _Stopped(Exception):
    """A signal that ends the command came before the fork was told to go: nothing ran."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Signals:
    """The signals this process gets while a fork runs its command, passed on to the fork's
    process group (the fork and the git it runs), as a terminal would have sent them there:
    Ctrl-C, SIGTERM, a hang-up, Ctrl-\\, Ctrl-Z and the ``fg`` after it, a resized window. Before
    the fork is told to go, one that ends the command ends the wait instead (nothing ran). A
    signal this process ignores (``nohup``, a script's ``&``) is left alone, and the fork
    ignores it too."""

    PASSED = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT, _signal.SIGWINCH, _signal.SIGCONT,
              _signal.SIGTSTP)
    ENDING = frozenset({_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT})

    def __init__(self) -> None:
        self.fork: int | None = None
        self.ending: list[int] = []
        self.before = {signum: _signal.signal(signum, self.handle) for signum in self.PASSED
                       if _signal.getsignal(signum) != _signal.SIG_IGN}

    def restore(self) -> None:
        for signum, handler in self.before.items():
            _signal.signal(signum, handler)

    def handle(self, signum: int, frame: object) -> None:
        if signum in self.ENDING:
            self.ending.append(signum)
        if self.fork is None:
            if signum in self.ENDING:
                raise _Stopped(signum)
            if signum == _signal.SIGTSTP:
                self._stop_here()
        elif signum == _signal.SIGTSTP:  # stop the fork, then this process as Ctrl-Z would; go on together
            self.send(_signal.SIGSTOP)
            self._stop_here()
            self.send(_signal.SIGCONT)
        else:
            self.send(signum)

    def _stop_here(self) -> None:
        _signal.signal(_signal.SIGTSTP, _signal.SIG_DFL)
        os.kill(os.getpid(), _signal.SIGTSTP)
        _signal.signal(_signal.SIGTSTP, self.handle)

    def send(self, signum: int) -> None:
        try:
            os.killpg(self.fork, signum)  # type: ignore[arg-type]
        except OSError:
            pass

    def die_as_told(self) -> None:
        """End as the signal that ended the fork would have ended this process."""
        if self.ending:
            _signal.signal(self.ending[-1], _signal.SIG_DFL)
            os.kill(os.getpid(), self.ending[-1])


def _hand_over(conn: _socket.socket, argv: Sequence[str]) -> int | None:
    """Send the command; once a fork has it, its exit status (None: no fork took it)."""
    signals = _Signals()
    try:
        return _handed_over(conn, argv, signals)
    except _Stopped as stop:  # before the go: nothing ran, and nothing will
        conn.close()
        if stop.signum == _signal.SIGINT:
            sys.stderr.write("interrupted\n")
            return 130
        signals.die_as_told()
        return 128 + stop.signum
    finally:
        signals.restore()


def _handed_over(conn: _socket.socket, argv: Sequence[str], signals: _Signals) -> int | None:
    ignored = [n for n in range(1, _signal.NSIG) if _ignored(n)]
    blocked = sorted(int(n) for n in _signal.pthread_sigmask(_signal.SIG_BLOCK, []))
    try:
        conn.settimeout(None)  # from here on wait for the server, however long: a signal ends the wait
        env = [f for k, v in os.environb.items() for f in (k, v)]
        _send(conn, [b"run", b"%d" % _umask(), os.getcwdb(), _numbers(ignored), _numbers(blocked),
                     b"%d" % len(argv), *(os.fsencode(a) for a in argv), *env], fds=(0, 1, 2))
        started = _receive(conn)
    except (OSError, ValueError):
        started = None
    if not started or started[0] != b"pid" or len(started) != 2 or not started[1].isdigit():
        conn.close()  # no fork took it
        return None
    signals.fork = int(started[1])
    try:
        _send(conn, [b"go"])
        result = _receive(conn)
    except (OSError, ValueError):
        result = None
    finally:
        conn.close()
    if result and result[0] == b"exit" and len(result) == 2 and result[1].isdigit():
        return int(result[1])
    signals.die_as_told()  # it died of the signal it was passed: so does this process
    sys.stderr.write("patchtool: error: the warm process running this command ended without an exit status; "
                     f"check the repository with `patchtool status`, or run it again with {SWITCH}=0\n")
    return 70


def _ignored(signum: int) -> bool:
    try:
        return bool(_signal.getsignal(signum) == _signal.SIG_IGN)
    except (ValueError, OSError):
        return False


def _numbers(values: Iterable[int]) -> bytes:
    return b",".join(b"%d" % v for v in values)


def _parse_numbers(field: bytes) -> list[int]:
    return [int(v) for v in field.split(b",") if v]


def _streams_open() -> bool:
    """Whether descriptors 0, 1 and 2 are open: a closed one would be taken by the socket and handed
    to the fork as its stream (then the command runs here, as it would cold)."""
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
    except OSError:
        return False
    return True


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# -- starting the process ------------------------------------------------------------------------

_BOOT = "import sys; sys.path[:] = sys.argv[3:]; from patchtool.cli.warm import serve; serve(sys.argv[1], sys.argv[2])"


def start(root: os.PathLike[str] | str) -> None:
    """Leave a warm process behind for the rebase stopped in ``root`` (none when one is there
    already: a second one finds the name taken and exits before importing anything)."""
    if _serving or not enabled(os.environ):
        return
    import subprocess

    flags = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]
    try:
        subprocess.Popen([sys.executable, *flags, "-c", _BOOT, os.fspath(root), key(os.environb, sys.path),
                          *sys.path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True,
                         env=os.environb)  # what the name was made of, not what C code may have set since
    except OSError:
        pass  # no warm process: every command runs cold, as it would anyway


def serve(root: str, digest: str) -> None:
    """The warm process: claim the name, import, then fork a child for each command sent."""
    if key(os.environb, sys.path) != digest:
        return  # it would not run what its starter runs
    listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        listener.bind(_address(digest))
    except OSError:
        return  # one is there already
    listener.listen(16)
    _warm_up()
    from patchtool.rebase.state import STATE_FILE

    _loop(listener, os.path.join(root, STATE_FILE))


def _warm_up() -> None:
    import importlib

    for name in MODULES:
        importlib.import_module(name)
    from patchtool.cli.app import build
    from patchtool.git.command import _load

    build().lazy["rebase"]()  # the command as typer makes it, with whatever typer imports for that
    _load()


def _loop(listener: _socket.socket, state: str) -> None:
    import select
    import time

    children: set[int] = set()
    last = time.monotonic()
    while True:
        ready, _, _ = select.select([listener], [], [], 1.0)
        for pid in list(children):
            try:
                done = os.waitpid(pid, os.WNOHANG)[0]
            except ChildProcessError:
                done = pid
            if done:
                children.discard(pid)
                last = time.monotonic()
        if ready:
            try:
                conn, _ = listener._accept()  # type: ignore[attr-defined]
            except OSError:
                continue
            child = _accept(listener, _socket.socket(fileno=conn))
            if child:
                children.add(child)
                last = time.monotonic()
        elif not children and (not os.path.exists(state) or time.monotonic() - last > IDLE_SECONDS):
            return


def _accept(listener: _socket.socket, conn: _socket.socket) -> int | None:
    """Say ready, take one request, and fork its command: the fork's pid (None when no request came)."""
    fds: list[int] = []
    try:
        conn.settimeout(5.0)
        if not _same_process(conn):
            return None
        conn.setsockopt(_socket.SOL_SOCKET, _socket.SO_PASSCRED, 1)  # who sends the request, as the kernel says
        _send(conn, [b"ready"])
        request, fds, sender = _receive_with_fds(conn, seconds=REQUEST_SECONDS)  # one slow client blocks no one long
        if not request or request[0] != b"run" or len(fds) != 3:
            return None
        if sender is None or not _same_world(*sender):  # not who connected: a socket handed on to another world
            return None
        pid = os.fork()
        if pid == 0:  # the fork: never returns
            code = 70
            try:
                listener.close()
                code = _child(conn, request, fds)
            finally:
                os._exit(code)
        return pid
    except (OSError, ValueError):
        return None
    finally:
        _close(fds)
        conn.close()


def _child(conn: _socket.socket, request: list[bytes], fds: Sequence[int]) -> int:
    """Become the caller's command: its signals, umask, directory, environment and streams; run
    it once the caller says go (a caller stopped before that runs nothing, and neither does this)."""
    global _serving
    _serving = True
    os.setpgid(0, 0)  # a group of its own, the git it runs included: the caller's signals go to all of it
    umask, cwd, count = int(request[1]), request[2], int(request[5])
    ignored, blocked = set(_parse_numbers(request[3])), _parse_numbers(request[4])
    argv = [os.fsdecode(a) for a in request[6:6 + count]]
    env = request[6 + count:]
    if len(argv) != count or len(env) % 2 or not goes_on(argv):
        raise ValueError("not a command this process runs")
    _signals_as_the_callers(ignored, blocked)
    os.umask(umask)
    os.chdir(cwd)
    os.environb.clear()
    os.environb.update(zip(env[::2], env[1::2], strict=True))
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    _close(fds)
    _std_streams()
    conn.settimeout(None)
    _send(conn, [b"pid", b"%d" % os.getpid()])
    if _receive(conn) != [b"go"]:
        return 0  # the caller was stopped first: nothing ran, and it said so itself
    import threading

    threading.Thread(target=_die_with_caller, args=(conn,), daemon=True).start()
    sys.argv = ["patchtool", *argv]
    code = _main(argv)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    _send(conn, [b"exit", b"%d" % code])
    return code


def _signals_as_the_callers(ignored: set[int], blocked: Sequence[int]) -> None:
    """Every signal as a fresh interpreter started by the caller would have it: what the caller
    ignores ignored (``nohup``), Ctrl-C as KeyboardInterrupt, the rest the system's default; the
    caller's blocked signals blocked."""
    import signal

    for signum in range(1, signal.NSIG):
        if signum in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            if signum in ignored:
                signal.signal(signum, signal.SIG_IGN)
            elif signum == signal.SIGINT:
                signal.signal(signum, signal.default_int_handler)
            else:
                signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):
            continue  # a number the system has no signal for
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _main(argv: list[str]) -> int:
    """``sys.exit(main())`` as ``python -m patchtool`` does it, the exit status returned."""
    import atexit
    import signal

    from patchtool.cli.app import main

    try:
        code: object = main(argv)
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:  # as the interpreter ends on one: by the signal
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    except BaseException:  # what the interpreter does with an uncaught exception
        import traceback

        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1


def _std_streams() -> None:
    """sys.stdin/stdout/stderr over the caller's descriptors, buffered as the interpreter would
    have made them at start-up (stdout line-buffered on a terminal, stderr always)."""
    import io

    def text(fd: int, mode: str, model: object, line_buffering: bool) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        buffered = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
        return io.TextIOWrapper(buffered, encoding=getattr(model, "encoding", None) or "utf-8",
                                errors=getattr(model, "errors", None) or "strict", line_buffering=line_buffering,
                                write_through=bool(getattr(model, "write_through", False)))  # PYTHONUNBUFFERED

    sys.stdin = text(0, "r", sys.__stdin__, False)
    sys.stdout = text(1, "w", sys.__stdout__, os.isatty(1))
    sys.stderr = text(2, "w", sys.__stderr__, True)


def _die_with_caller(conn: _socket.socket) -> None:
    """The caller closes the connection only by ending: a caller killed outright takes the command with it."""
    while True:
        try:
            data = conn.recv(64)
        except OSError:
            data = b""
        if not data:
            os.kill(os.getpid(), _signal.SIGKILL)


# -- the wire: a frame is a length and byte fields, each a length and its bytes -------------------

def _same_process(conn: _socket.socket) -> bool:
    """Whether the other end is this user, in this process's world: the same namespaces (mount,
    pid, network, user, cgroup, ...) and root, credentials, groups and capabilities, no_new_privs
    and seccomp, resource limits, priority, cgroup and CPU affinity. A same-user process in a
    sandbox or a container (which may share the network namespace, and so the socket name), or one
    started under ``nice``, ``ulimit``, ``sg`` or ``taskset``, is neither served nor sent to: its
    command runs cold, in its own world, as it always could."""
    creds = conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return _same_world(pid, uid)


def _same_world(pid: int, uid: int) -> bool:
    if uid != os.getuid() or pid <= 0:  # 0: a process outside this pid namespace
        return False
    theirs = _facts(str(pid))
    return theirs is not None and theirs == _facts("self")


_STATUS_FACTS = (b"Uid:", b"Gid:", b"Groups:", b"Cap", b"NoNewPrivs:", b"Seccomp", b"Cpus_allowed_list:",
                 b"Mems_allowed_list:")


def _facts(pid: str) -> bytes | None:
    """What a command's run depends on beyond its environment and files, as /proc shows it for
    ``pid``; None when it cannot be read."""
    base = f"/proc/{pid}"
    try:
        parts = [os.fsencode(os.readlink(f"{base}/ns/{ns}")) for ns in sorted(os.listdir(f"{base}/ns"))]
        parts.append(os.fsencode(os.readlink(f"{base}/root")))
        with open(f"{base}/status", "rb") as fh:
            parts += [line for line in fh.read().splitlines() if line.startswith(_STATUS_FACTS)]
        for name in ("limits", "cgroup"):
            with open(f"{base}/{name}", "rb") as fh:
                parts.append(fh.read())
        with open(f"{base}/stat", "rb") as fh:
            parts += fh.read().rsplit(b")", 1)[1].split()[15:17]  # priority and nice
    except OSError:
        return None
    return b"\0".join(parts)


def _send(conn: _socket.socket, fields: Sequence[bytes], *, fds: Sequence[int] = ()) -> None:
    payload = b"".join(_LENGTH.pack(len(f)) + f for f in fields)
    frame = _LENGTH.pack(len(payload)) + payload
    ancillary = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))] if fds else []
    sent = conn.sendmsg([frame], ancillary)
    if sent < len(frame):
        conn.sendall(frame[sent:])


def _receive(conn: _socket.socket) -> list[bytes] | None:
    return _receive_with_fds(conn, fds=False)[0]


_UCRED = struct.Struct("3i")


def _receive_with_fds(conn: _socket.socket, *, fds: bool = True, seconds: float | None = None
                      ) -> tuple[list[bytes] | None, list[int], tuple[int, int] | None]:
    """One frame's fields (None when the other end closed first), the descriptors that came with
    its first bytes (close-on-exec), and who sent them (pid, uid; with ``SO_PASSCRED`` on). Reads
    exactly one frame, within ``seconds`` in all when given: the next frame stays for the next call."""
    import time

    deadline = None if seconds is None else time.monotonic() + seconds
    received: list[int] = []
    sender = None
    try:
        room = _socket.CMSG_SPACE(3 * struct.calcsize("i")) + _socket.CMSG_SPACE(_UCRED.size) if fds else 0
        _budget(conn, deadline)
        head, ancillary, _flags, _addr = conn.recvmsg(_LENGTH.size, room, _socket.MSG_CMSG_CLOEXEC)
        for level, kind, data in ancillary:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                whole = len(data) - len(data) % 4
                received += struct.unpack(f"{whole // 4}i", data[:whole])
            elif level == _socket.SOL_SOCKET and kind == _socket.SCM_CREDENTIALS and len(data) >= _UCRED.size:
                pid, uid, _gid = _UCRED.unpack_from(data)
                sender = (pid, uid)
        if not head:
            raise EOFError
        head += _exactly(conn, _LENGTH.size - len(head), deadline)
        (length,) = _LENGTH.unpack(head)
        if length > _MAX_FRAME:
            raise ValueError("a warm-process frame too long")
        return _fields(_exactly(conn, length, deadline)), received, sender
    except EOFError:
        _close(received)
        return None, [], None
    except (ValueError, struct.error):
        _close(received)
        raise ValueError("a malformed warm-process frame") from None
    except BaseException:  # a timeout, an interrupt: the descriptors received go with it
        _close(received)
        raise


def _budget(conn: _socket.socket, deadline: float | None) -> None:
    """Give the next read what is left of ``deadline`` (a timeout, an OSError, once it has passed)."""
    if deadline is not None:
        import time

        conn.settimeout(max(0.0001, deadline - time.monotonic()))


def _fields(payload: bytes) -> list[bytes]:
    fields, at = [], 0
    while at < len(payload):
        (n,) = _LENGTH.unpack_from(payload, at)
        at += _LENGTH.size
        if at + n > len(payload):
            raise ValueError("a field runs past its frame")
        fields.append(payload[at:at + n])
        at += n
    return fields


def _close(fds: Iterable[int]) -> None:
    for fd in fds:
        os.close(fd)


def _exactly(conn: _socket.socket, n: int, deadline: float | None = None) -> bytes:
    chunks = []
    while n > 0:
        _budget(conn, deadline)
        chunk = conn.recv(min(n, 65536))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)

"""The warm process: started by a rebase that stops, it claims its name, imports what a rebase
command imports, and forks a child for each command a caller in its world hands it."""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import _socket
import os
import sys

from patchtool.cli.warm import identity
from patchtool.cli.warm.identity import address, enabled, goes_on, key, same_process, same_world
from patchtool.cli.warm.wire import close_all, parse_numbers, receive, receive_with_fds, send

TYPE_CHECKING = False  # typing itself costs the caller 9 ms

if TYPE_CHECKING:
    from collections.abc import Sequence

IDLE_SECONDS = 600.0
REQUEST_SECONDS = 2.0  # how long the process waits for a whole request once it said ready
# what a rebase command imports (tests/test_warm.py checks that a fork that finishes one imports nothing more)
MODULES = ("patchtool.cli.app", "patchtool.cli.core", "patchtool.cli.render", "patchtool.rebase.transaction",
           "patchtool.series.checks", "patchtool.registry.workflows", "patchtool.project.widening",
           "patchtool.project.tomlio", "patchtool.project.lock", "tomlkit")


_BOOT = ("import sys; sys.path[:] = sys.argv[3:]; from patchtool.cli.warm.server import serve; "
         "serve(sys.argv[1], sys.argv[2])")


def start(root: os.PathLike[str] | str) -> None:
    """Leave a warm process behind for the rebase stopped in ``root`` (none when one is there
    already: a second one finds the name taken and exits before importing anything)."""
    if identity.serving or not enabled(os.environ):
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
        listener.bind(address(digest))
    except OSError:
        return  # one is there already
    listener.listen(16)
    warm_up()
    from patchtool.rebase.state import STATE_FILE

    _loop(listener, os.path.join(root, STATE_FILE))


def warm_up() -> None:
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
        if not same_process(conn):
            return None
        conn.setsockopt(_socket.SOL_SOCKET, _socket.SO_PASSCRED, 1)  # who sends the request, as the kernel says
        send(conn, [b"ready"])
        request, fds, sender = receive_with_fds(conn, seconds=REQUEST_SECONDS)  # one slow client blocks no one long
        if not request or request[0] != b"run" or len(fds) != 3:
            return None
        if sender is None or not same_world(*sender):  # not who connected: a socket handed on to another world
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
        close_all(fds)
        conn.close()


def _child(conn: _socket.socket, request: list[bytes], fds: Sequence[int]) -> int:
    """Become the caller's command: its signals, umask, directory, environment and streams; run
    it once the caller says go (a caller stopped before that runs nothing, and neither does this)."""
    identity.serving = True
    os.setpgid(0, 0)  # a group of its own, the git it runs included: the caller's signals go to all of it
    umask, cwd, count = int(request[1]), request[2], int(request[5])
    ignored, blocked = set(parse_numbers(request[3])), parse_numbers(request[4])
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
    close_all(fds)
    _std_streams()
    conn.settimeout(None)
    send(conn, [b"pid", b"%d" % os.getpid()])
    if receive(conn) != [b"go"]:
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
    send(conn, [b"exit", b"%d" % code])
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

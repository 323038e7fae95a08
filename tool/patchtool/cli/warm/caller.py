"""The caller's side: find the warm process, hand it the command, pass it the signals, and exit
with its exit status; or say there is none, and run the command here."""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import _socket
import os
import sys

from patchtool.cli.warm import identity
from patchtool.cli.warm.identity import SWITCH, address, enabled, goes_on, key, same_process
from patchtool.cli.warm.wire import numbers, receive, send

TYPE_CHECKING = False  # typing itself costs the caller 9 ms

if TYPE_CHECKING:
    from collections.abc import Sequence

READY_SECONDS = 3.0  # how long a caller waits for a process that is still importing


def run(argv: Sequence[str]) -> int | None:
    """Run ``argv`` in the warm process: its exit status, or None when there is none to run it (or
    it is not for this command line): then nothing ran, and the caller runs it itself. Descriptors
    0-2 must be open (``patchtool.cli.main`` opens a closed one on /dev/null first): a closed one
    would be taken by the socket and handed to the fork as that stream."""
    if identity.serving or not enabled(os.environ) or not goes_on(argv):
        return None
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        conn.settimeout(READY_SECONDS)
        conn.connect(address(key(os.environb, sys.path)))
        if not same_process(conn) or receive(conn) != [b"ready"]:
            conn.close()
            return None
    except (OSError, ValueError):
        conn.close()
        return None
    except KeyboardInterrupt:  # nothing sent: nothing ran
        conn.close()
        sys.stderr.write("interrupted\n")
        return 130
    return hand_over(conn, argv)


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


def hand_over(conn: _socket.socket, argv: Sequence[str]) -> int | None:
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
        send(conn, [b"run", b"%d" % _umask(), os.getcwdb(), numbers(ignored), numbers(blocked),
                     b"%d" % len(argv), *(os.fsencode(a) for a in argv), *env], fds=(0, 1, 2))
        started = receive(conn)
    except (OSError, ValueError):
        started = None
    if not started or started[0] != b"pid" or len(started) != 2 or not started[1].isdigit():
        conn.close()  # no fork took it
        return None
    signals.fork = int(started[1])
    try:
        send(conn, [b"go"])
        result = receive(conn)
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


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask

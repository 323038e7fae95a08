"""One download's overall deadline, over every phase of it: connecting, the status line and
headers, chunk framing and trailers, and the body, all its tries together.

http.client reads a status line, a header line, a chunk's size or a chunked trailer in loops of its
own, each read waiting at most the socket's timeout: a server that sends a byte within every
timeout (or an endless run of trailer lines, which http.client reads and drops in one call) holds
such a loop for good, and a check between body reads never runs. So a watchdog thread waits for
the deadline on the download's clock and then shuts down every socket the download opened
(``shutdown(SHUT_RDWR)``, on a duplicate descriptor the deadline owns, so the call can never reach
a descriptor the number was reused for): whatever read was waiting returns at once, and the
download raises ``TooSlow``. The system's name lookup before a connection is held to it too
(``Deadline.connect``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable
from typing import Any, Self

from patchtool.errors import UpstreamError
from patchtool.git import limits

DEADLINE_ENV = "PATCHTOOL_DOWNLOAD_DEADLINE"
DEFAULT_DEADLINE = 1800.0  # the most one download (all its tries) may take, in seconds: 30 minutes
MAX_DEADLINE = 7 * 86400
POLL = 1.0  # the longest the watchdog waits before it reads the clock again: a clock that jumps is seen within it


class TooSlow(UpstreamError):
    """A download that ran past its overall deadline."""


def deadline_from_environment() -> float:
    """The overall deadline of one download: ``$PATCHTOOL_DOWNLOAD_DEADLINE`` seconds, the user's
    alone (never a repository's), else 30 minutes."""
    if not (given := os.environ.get(DEADLINE_ENV, "").strip()):
        return DEFAULT_DEADLINE
    return limits.seconds(DEADLINE_ENV, given, default=DEFAULT_DEADLINE, most=MAX_DEADLINE, what="one download")


class Deadline:
    """``seconds`` on ``clock`` from now for the download of ``what``. Inside ``with``, a watchdog
    thread shuts down every socket ``hold`` was given once the deadline passes; ``check`` raises
    ``TooSlow`` from then on, and the download calls it after every read and every failure."""

    def __init__(self, what: str, seconds: float, clock: Callable[[], float]) -> None:
        self.what, self.seconds, self.clock = what, seconds, clock
        self.end = clock() + seconds
        self._lock = threading.Lock()
        self._held: list[socket.socket] = []  # duplicates of the download's sockets, closed by ``release``
        self._expired = False
        self._stop = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name=f"deadline of {what}", daemon=True)

    def __enter__(self) -> Self:
        self._watchdog.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._watchdog.join()
        self.release()

    def remaining(self) -> float:
        """Seconds left on the clock, at least a millisecond (a socket's timeout of 0 never waits)."""
        return max(self.end - self.clock(), 0.001)

    def check(self) -> None:
        """Raise ``TooSlow`` once the deadline has passed."""
        if self._expired or self.clock() > self.end:
            raise TooSlow(
                f"{self.what} took longer than the {self.seconds:g} s patchtool gives one download; refusing it",
                hint=f"check the network and run the command again, or give it longer with {DEADLINE_ENV}",
            )

    def connect(self, address: tuple[str, int], timeout: float, source: tuple[str, int] | None = None) -> socket.socket:
        """``socket.create_connection``, its name lookup bounded too: the system's resolver runs in
        a thread of its own, which the download stops waiting for at the deadline (a resolver that
        never answers keeps only that thread, a daemon, until the process ends); then each address
        in turn, as ``create_connection`` tries them, within the time left."""
        found: list[Any] = []
        done = threading.Event()

        def look_up() -> None:
            try:
                found.append(socket.getaddrinfo(*address, 0, socket.SOCK_STREAM))
            except OSError as exc:
                found.append(exc)
            done.set()

        threading.Thread(target=look_up, name=f"name lookup of {self.what}", daemon=True).start()
        while not done.wait(min(POLL, self.remaining())):
            self.check()
        if isinstance(found[0], OSError):
            raise found[0]
        error: OSError | None = None
        for *_, where in found[0]:  # numeric addresses now: create_connection looks none of them up
            try:
                return socket.create_connection(where[:2], min(timeout, self.remaining()), source)
            except OSError as exc:
                error = exc
        raise error or OSError(f"no address for {address[0]}")

    def hold(self, sock: socket.socket) -> None:
        """Watch ``sock``, a connection of this download: shut down at the deadline (at once, if it
        has passed). The deadline keeps a duplicate of its descriptor until ``release``."""
        with self._lock:
            held = sock.dup()
            self._held.append(held)
            if self._expired:
                self._shut(held)

    def release(self) -> None:
        """Close the duplicates ``hold`` took: the attempt that opened them is over."""
        with self._lock:
            for held in self._held:
                held.close()
            self._held.clear()

    def _watch(self) -> None:
        wait = min(POLL, self.seconds)
        while not self._stop.wait(wait):
            if (left := self.end - self.clock()) <= 0:
                with self._lock:
                    self._expired = True
                    for held in self._held:
                        self._shut(held)
                return
            wait = min(POLL, left)

    @staticmethod
    def _shut(held: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the peer or the kernel closed it already
            held.shutdown(socket.SHUT_RDWR)

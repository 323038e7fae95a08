"""A download's overall deadline covers every phase of it, not only the body (issue 29): a server
that trickled a header line, a chunk's size or an endless run of chunked trailers held a command
past ``PATCHTOOL_DOWNLOAD_DEADLINE`` for good, since http.client reads those in loops of its own.

The server is a raw socket in a thread: it answers the start of a response and then stalls (or
sends the same line for ever) until the client hangs up, or the test lets it go. The test's clock
stands still until the server has stalled, then jumps a day: no timing decides anything.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import HANG_GUARD_S, snapshot
from patchtool.errors import ExitCode, UpstreamError
from patchtool.upstream.index import Fetcher
from patchtool.urls import SourceUrl

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
CHUNKED = OK + b"Transfer-Encoding: chunked\r\n\r\n"

# each shape: what the server sends first, then what it sends again and again (nothing: it stalls)
SHAPES = {
    "no answer": (b"", b""),
    "a trickled status line": (b"HTTP/1.1 2", b""),
    "a trickled header line": (OK + b"X-Slow: a", b""),
    "endless 100 Continue answers": (b"", b"HTTP/1.1 100 Continue\r\n\r\n" * 64),
    "a trickled chunk size": (CHUNKED + b"1", b""),
    "endless chunked trailers": (CHUNKED + b"0\r\n", b"X-Trailer: y\r\n" * 1024),
}


class StallingServer:
    """Answers every request with ``start``, then sends ``again`` for ever or stalls, until the
    client hangs up or ``release`` lets it go. ``stalled`` is set once it has sent ``start`` (and
    ``again`` once)."""

    def __init__(self, start: bytes, again: bytes) -> None:
        self.start, self.again = start, again
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stalled = threading.Event()
        self.released = threading.Event()
        self.conns: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._server = threading.Thread(target=self._serve, daemon=True)
        self._server.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # released: the listener is shut down
                return
            answer = threading.Thread(target=self._answer, args=(conn,), daemon=True)
            with self._lock:
                self.conns.append(conn)
                self.threads.append(answer)
            answer.start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            request = b""
            while b"\r\n\r\n" not in request:
                got = conn.recv(4096)
                if not got:
                    return
                request += got
            conn.sendall(self.start + self.again)
            self.stalled.set()
            if self.again:
                while not self.released.is_set():
                    conn.sendall(self.again)  # fails once the client hangs up
            else:
                while conn.recv(4096):  # b"" once the client hangs up
                    pass

    def clock(self) -> float:
        """Still until the server has stalled, then a day later."""
        return 86400.0 if self.stalled.is_set() else 0.0

    def release(self) -> None:
        """Let every connection go (the end of the test, or the guard against a hang), and end every
        thread before the listener's descriptor is closed: a thread still in ``accept`` on a closed
        descriptor took the connections of the next server given that number (another test's index,
        which then answered with this server's bytes)."""
        self.released.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self._server.join(HANG_GUARD_S)
        with self._lock:
            for conn in self.conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            threads = list(self.threads)
        for thread in threads:
            thread.join(HANG_GUARD_S)
        self.listener.close()


@contextlib.contextmanager
def stalling(shape: str) -> Iterator[StallingServer]:
    server = StallingServer(*SHAPES[shape])
    guard = threading.Timer(HANG_GUARD_S, server.release)  # a guard against a hang, never what is asserted
    guard.start()
    try:
        yield server
    finally:
        guard.cancel()
        server.release()


@pytest.mark.parametrize("what", ["artifact", "page"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_download_that_stalls_before_its_body_ends_at_its_deadline(tmp_path: Path, shape: str, what: str) -> None:
    dest = tmp_path / "dl"
    dest.mkdir()
    before = snapshot(dest)
    with stalling(shape) as server:
        fetcher = Fetcher(attempts=3, backoff=0.01, timeout=600, deadline=600, clock=server.clock)
        url = SourceUrl.parse(f"http://127.0.0.1:{server.port}/" + ("simple/demo/" if what == "page" else "demo.whl"))
        with pytest.raises(UpstreamError) as caught:
            fetcher.json(url) if what == "page" else fetcher.download(url, dest / "demo.whl", size=None)
        assert not server.released.is_set()  # the client gave up by itself, before the guard let it go
    assert caught.value.message == f"{url} took longer than the 600 s patchtool gives one download; refusing it"
    assert caught.value.exit_code == ExitCode.UPSTREAM
    assert "PATCHTOOL_DOWNLOAD_DEADLINE" in (caught.value.hint or "")
    assert snapshot(dest) == before


@pytest.mark.parametrize("what", ["artifact", "page"])
def test_a_name_lookup_that_never_answers_ends_at_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    """The system's name lookup before a download's connection was the one phase its deadline did
    not bound (a resolver that never answers held the command for as long as it waited). It runs
    in a thread of its own now, which the download stops waiting for at the deadline. The resolver
    here is the test's own, which blocks until released; the clock moves a day once it is asked."""
    asked, released = threading.Event(), threading.Event()
    real = socket.getaddrinfo

    def stuck(host: str, *args: object, **kwargs: object) -> object:
        if host != "pypi.invalid":
            return real(host, *args, **kwargs)  # type: ignore[arg-type]
        asked.set()
        released.wait(HANG_GUARD_S)
        raise socket.gaierror("released")

    monkeypatch.setattr(socket, "getaddrinfo", stuck)
    dest = tmp_path / "dl"
    dest.mkdir()
    fetcher = Fetcher(
        attempts=3, backoff=0.01, timeout=600, deadline=600, clock=lambda: 86400.0 if asked.is_set() else 0.0
    )
    url = SourceUrl.parse("https://pypi.invalid/" + ("simple/demo/" if what == "page" else "demo.whl"))
    try:
        with pytest.raises(UpstreamError) as caught:
            fetcher.json(url) if what == "page" else fetcher.download(url, dest / "demo.whl", size=None)
        assert asked.is_set() and not released.is_set()  # given up while the lookup still waited
    finally:
        released.set()
    assert caught.value.message == f"{url} took longer than the 600 s patchtool gives one download; refusing it"
    assert caught.value.exit_code == ExitCode.UPSTREAM
    assert list(dest.iterdir()) == []

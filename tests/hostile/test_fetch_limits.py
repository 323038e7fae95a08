"""A git fetch is bounded in time and size, by the user alone (issue 29): a remote that never
answers held a command for good, and one that sends gigabytes filled the cache.

The remote that never answers is a real repository whose ``packed-refs`` is a FIFO: its
``upload-pack`` waits on it for good, so the fetch is stuck without any timing; the test's clock
moves past the deadline only once that is so. The large remote is a real repository holding an
incompressible blob of 2 MiB, fetched under a limit of 1 MiB.
"""

from __future__ import annotations

import contextlib
import errno
import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_run import in_process
from conftest import Demo
from helpers import HANG_GUARD_S, git, serving, snapshot
from patchtool.errors import ExitCode, PatchtoolError, UsageError
from patchtool.git import Repo
from patchtool.git.limits import FetchLimits, FetchTooLarge, FetchTooSlow
from patchtool.urls import SourceUrl


def upstream_with_tag(where: Path, files: dict[str, bytes]) -> str:
    """A repository at ``where`` with one commit of ``files``, tagged v1; its commit."""
    where.mkdir()
    git(where, "init", "-q", "-b", "main")
    for name, data in files.items():
        (where / name).write_bytes(data)
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", "one")
    git(where, "tag", "v1")
    return git(where, "rev-parse", "HEAD").strip()


class StuckRemote:
    """A bare repository whose refs git reads through a FIFO: its upload-pack blocks opening it, or
    reading it once the test holds the other end, and never answers. ``clock`` stands still until
    an upload-pack is stuck there, then moves a day a reading."""

    def __init__(self, tmp_path: Path) -> None:
        upstream_with_tag(tmp_path / "work", {"a.txt": b"a\n"})
        self.path = tmp_path / "stuck.git"
        git(tmp_path, "clone", "-q", "--bare", str(tmp_path / "work"), str(self.path))
        git(self.path, "pack-refs", "--all")
        (self.path / "packed-refs").unlink()
        os.mkfifo(self.path / "packed-refs")
        self.held: int | None = None  # the FIFO's write end once a reader came: it keeps the reader waiting
        self.now = 0.0

    def clock(self) -> float:
        if self.held is None:
            try:
                self.held = os.open(self.path / "packed-refs", os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                assert exc.errno == errno.ENXIO  # no reader yet
                return self.now
        self.now += 86400
        return self.now

    def release(self) -> None:
        """Let whatever reads the refs go on (to find none): the end of the test, or the hang guard.
        A regular file takes the FIFO's place before its reader is let go, so no later open blocks."""
        if self.held is None:
            with contextlib.suppress(OSError):
                self.held = os.open(self.path / "packed-refs", os.O_WRONLY | os.O_NONBLOCK)
        (self.path / "packed-refs.new").write_bytes(b"")
        os.replace(self.path / "packed-refs.new", self.path / "packed-refs")
        if self.held is not None and self.held >= 0:
            os.close(self.held)
        self.held = -1


def test_a_fetch_from_a_remote_that_never_answers_ends_at_its_deadline(tmp_path: Path) -> None:
    stuck = StuckRemote(tmp_path)
    into = Repo.init_bare(tmp_path / "into.git")
    guard = threading.Timer(HANG_GUARD_S, stuck.release)  # a guard against a hang, never what is asserted
    guard.start()
    url = SourceUrl.parse(str(stuck.path), git=True, user=True)
    try:
        with pytest.raises(FetchTooSlow) as caught:
            into.fetch(
                url, "+refs/tags/v1:refs/probe", allow_local=True, limits=FetchLimits(deadline=1, clock=stuck.clock)
            )
    finally:
        guard.cancel()
        stuck.release()
    assert caught.value.message == (
        f"the git fetch from {stuck.path} took longer than the 1 s patchtool gives one git fetch; refusing it"
    )
    assert caught.value.exit_code == ExitCode.UPSTREAM
    assert "PATCHTOOL_FETCH_DEADLINE" in (caught.value.hint or "")
    assert into.resolve("refs/probe") is None


def test_a_fetch_larger_than_its_size_is_refused_and_leaves_nothing(one_patch: Demo, tmp_path: Path) -> None:
    """``pin add --git`` of a repository whose pack outgrows the user's size: exit 4, the pin not
    written, and no partial pack left in the cache."""
    big = tmp_path / "big"
    upstream_with_tag(big, {"blob.bin": os.urandom(2 << 20)})
    assert one_patch.run("check").returncode == 0  # the cache exists, with its own packs
    before = snapshot(one_patch.root, one_patch.cache)
    res = one_patch.run(
        "pin", "add", "--git", str(big), "--tag", "v1", "--json", env={"PATCHTOOL_FETCH_MAX_SIZE": "1m"}
    )
    assert res.returncode == ExitCode.UPSTREAM, res.stdout + res.stderr
    error = json.loads(res.stdout)["errors"][0]
    assert error["message"] == (
        f"the git fetch from {big} received more than the 1048576 bytes patchtool lets one git fetch take; refusing it"
    )
    assert "PATCHTOOL_FETCH_MAX_SIZE" in error["hint"]
    assert snapshot(one_patch.root, one_patch.cache) == before
    # the same fetch under the default size goes through
    res = one_patch.run("pin", "add", "--git", str(big), "--tag", "v1")
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_fetch_limits_are_the_users_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PATCHTOOL_FETCH_DEADLINE", raising=False)
    monkeypatch.delenv("PATCHTOOL_FETCH_MAX_SIZE", raising=False)
    monkeypatch.delenv("PATCHTOOL_FETCH_MAX_REFS", raising=False)
    assert (FetchLimits.from_environment().deadline, FetchLimits.from_environment().max_bytes) == (1800, 4 << 30)
    assert FetchLimits.from_environment().max_refs == 10_000
    monkeypatch.setenv("PATCHTOOL_FETCH_DEADLINE", "90")
    monkeypatch.setenv("PATCHTOOL_FETCH_MAX_SIZE", "16g")
    assert (FetchLimits.from_environment().deadline, FetchLimits.from_environment().max_bytes) == (90, 16 << 30)
    monkeypatch.setenv("PATCHTOOL_FETCH_MAX_SIZE", "1000")
    assert FetchLimits.from_environment().max_bytes == 1000
    for bad in ("soon", "0", "-5", "nan", "1e9"):
        monkeypatch.setenv("PATCHTOOL_FETCH_DEADLINE", bad)
        with pytest.raises(UsageError) as exc:
            FetchLimits.from_environment()
        assert exc.value.message == f"PATCHTOOL_FETCH_DEADLINE={bad!r} is not a number of seconds from 1 to 604800"
    monkeypatch.delenv("PATCHTOOL_FETCH_DEADLINE")
    for bad in ("big", "0", "-1", "2t", "1025g", "1.5g"):
        monkeypatch.setenv("PATCHTOOL_FETCH_MAX_SIZE", bad)
        with pytest.raises(UsageError) as exc:
            FetchLimits.from_environment()
        assert exc.value.message.startswith(
            f"PATCHTOOL_FETCH_MAX_SIZE={bad!r} is not a number of bytes from 1 to 1 TiB"
        )
    monkeypatch.delenv("PATCHTOOL_FETCH_MAX_SIZE")
    monkeypatch.setenv("PATCHTOOL_FETCH_MAX_REFS", "50000")
    assert FetchLimits.from_environment().max_refs == 50_000
    for bad in ("many", "0", "-1", "1000001", "1e3", "10k"):
        monkeypatch.setenv("PATCHTOOL_FETCH_MAX_REFS", bad)
        with pytest.raises(UsageError) as exc:
            FetchLimits.from_environment()
        assert exc.value.message == f"PATCHTOOL_FETCH_MAX_REFS={bad!r} is not a number of refs from 1 to 1000000"


def test_a_fetch_stopped_after_its_pack_was_written_leaves_no_pack(tmp_path: Path) -> None:
    """Found by a second attack: a partial fetch of many tags finished its pack, then outgrew the
    size writing the ``.promisor`` list of refs, and was stopped; the pack, its index, ``.keep``
    and a truncated ``.promisor`` stayed in the cache (only ``tmp_*`` files were removed), one
    more each time. A failed fetch leaves nothing in the pack directory."""
    work = tmp_path / "work"
    upstream_with_tag(work, {"a.txt": b"a\n"})
    for n in range(300):
        git(work, "tag", f"release-with-a-long-name-{n:04d}")
    git(work, "config", "uploadpack.allowFilter", "true")
    into = Repo.init_bare(tmp_path / "into.git")
    before = sorted(os.listdir(tmp_path / "into.git" / "objects" / "pack"))
    url = SourceUrl.parse(str(work), git=True, user=True)
    with pytest.raises(PatchtoolError) as caught:
        into.fetch(
            url,
            [f"+refs/tags/{t}:refs/tags/{t}" for t in into.remote_refs(url, "refs/tags/", allow_local=True)],
            allow_local=True,
            filter="tree:0",
            limits=FetchLimits(max_bytes=4096),
        )
    assert caught.value.exit_code == ExitCode.UPSTREAM, caught.value
    assert sorted(os.listdir(tmp_path / "into.git" / "objects" / "pack")) == before


def tag_many(repo: Path, names: list[str]) -> None:
    """Tags ``names`` on ``repo``'s HEAD, written as one packed-refs file (as a large remote keeps them)."""
    head = git(repo, "rev-parse", "HEAD").strip()
    lines = [f"{head} refs/tags/{name}" for name in sorted(names)]
    with (repo / ".git" / "packed-refs").open("a") as fh:
        fh.write("".join(f"{line}\n" for line in lines))


def test_upstreams_history_fetches_the_release_tags_alone_not_every_tag(tmp_path: Path) -> None:
    """Found by a review of the fetch's size: the history's first fetch took ``refs/tags/*``, so a
    remote with 20,000 tags (CI tags, nightlies) made 20,000 ref files in the cache, which no size
    bounds. It now lists the tags and fetches, by name, only the two it needs and the releases of
    the pin's tag template."""
    from test_history import FIX, FIX_SUBJECT, FIXED, make_upstream

    u = make_upstream(
        tmp_path, [(FIX_SUBJECT, FIX)], [("cve-name", "Reject long header names\n", {"demo/headers.py": FIXED})]
    )
    tag_many(u.repo, [f"ciflow/trunk/{n}" for n in range(20_000)])
    git(u.repo, "tag", "v1.0.post1", "v1.0")
    data = u.dry_run("--history")
    assert "fetched the commits of 3 tag(s) of " + str(u.repo) + " (--filter=tree:0)" in data["history"]
    (history,) = (u.cache / "history").glob("*.git")
    assert sorted(Repo(history).tags()) == ["v1.0", "v1.0.post1", "v1.1"]


def test_a_history_fetch_that_would_write_more_refs_than_allowed_is_refused(tmp_path: Path) -> None:
    """A remote whose release tags outnumber ``PATCHTOOL_FETCH_MAX_REFS``: exit 4 naming the count
    and the limit, before the fetch starts; the project unchanged and no ref written in the cache."""
    from test_history import FIX, FIX_SUBJECT, FIXED, make_upstream

    u = make_upstream(
        tmp_path, [(FIX_SUBJECT, FIX)], [("cve-name", "Reject long header names\n", {"demo/headers.py": FIXED})]
    )
    tag_many(u.repo, [f"v1.0.{n}" for n in range(1, 31)])
    u.dry_run()  # the cache warm, the history not asked
    before = snapshot(u.root, u.cache)
    env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(u.cache), "PATCHTOOL_FETCH_MAX_REFS": "10"}
    res = in_process(["rebase", "--to", "1.1", "--dry-run", "--history", "--json", "--root", str(u.root)], env=env)
    assert res.returncode == ExitCode.UPSTREAM, res.stdout + res.stderr
    error = json.loads(res.stdout)["errors"][0]
    assert error["message"] == (
        f"the git fetch from {u.repo} would write 32 refs, more than the 10 patchtool lets one git fetch write; "
        "refusing it"
    )
    assert "PATCHTOOL_FETCH_MAX_REFS" in error["hint"]
    after = snapshot(u.root, u.cache)
    (history,) = (u.cache / "history").glob("*.git")
    assert {k: v for k, v in after.items() if not k.startswith(str(history))} == before
    assert Repo(history).tags() == {} and not list((history / "objects" / "pack").iterdir())
    # the same under the default limit goes through
    assert (
        "fetched the commits of 32 tag(s) of " + str(u.repo) + " (--filter=tree:0)" in u.dry_run("--history")["history"]
    )


def test_a_remote_listing_more_refs_than_patchtool_reads_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by an attack: a remote listing a million long tags (183 MB) made `rebase --history`
    hold 927 MB, since git ls-remote's whole output was read before a ref was counted. The listing
    is read up to its bound (lowered here, so that the case stays small), then git is killed:
    exit 4 naming it, nothing written in the project."""
    from patchtool.git import limits
    from test_history import FIX, FIX_SUBJECT, FIXED, make_upstream

    u = make_upstream(
        tmp_path, [(FIX_SUBJECT, FIX)], [("cve-name", "Reject long header names\n", {"demo/headers.py": FIXED})]
    )
    tag_many(u.repo, [f"ci-{n:07d}-{'x' * 60}" for n in range(5_000)])  # some 530 KB of listing
    u.dry_run()  # the cache warm, the history not asked
    before = snapshot(u.root)
    monkeypatch.setattr(limits, "MAX_LISTING_BYTES", 256 << 10)
    res = u.run("rebase", "--to", "1.1", "--dry-run", "--history", "--json")
    assert res.returncode == ExitCode.UPSTREAM, res.stdout + res.stderr
    assert json.loads(res.stdout)["errors"][0]["message"] == (
        f"the git ls-remote of {u.repo} listed more than the 262144 bytes patchtool reads of a remote's refs; "
        "refusing it"
    )
    assert snapshot(u.root) == before
    monkeypatch.setattr(limits, "MAX_LISTING_BYTES", 1 << 20)
    assert "fetched the commits of 2 tag(s)" in str(u.dry_run("--history")["history"])


def _pkt(data: bytes) -> bytes:
    return b"%04x" % (len(data) + 4) + data


class _Chatty(http.server.BaseHTTPRequestHandler):
    """A git remote over smart HTTP (protocol v2) that lists one tag and, asked for it, answers
    with "remote:" lines (side band 2) and never a pack: ``FLOOD`` bytes of them."""

    protocol_version = "HTTP/1.0"
    FLOOD = 64 << 20
    sent = 0

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        caps = (b"version 2\n", b"ls-refs\n", b"fetch\n", b"object-format=sha1\n")
        body = _pkt(b"# service=git-upload-pack\n") + b"0000" + b"".join(map(_pkt, caps)) + b"0000"
        self.send_response(200)
        self.send_header("Content-Type", "application/x-git-upload-pack-advertisement")
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        request = self.rfile.read(size) if size else self._chunked()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-git-upload-pack-result")
        self.end_headers()
        if b"command=ls-refs" in request:
            self.wfile.write(_pkt(b"1" * 40 + b" refs/tags/v1\n") + b"0000")
            return
        self.wfile.write(_pkt(b"packfile\n"))
        chunk = _pkt(b"\x02" + (b"x" * 999 + b"\n") * 60)
        with contextlib.suppress(OSError):
            while type(self).sent < self.FLOOD:
                self.wfile.write(chunk)
                type(self).sent += len(chunk)

    def _chunked(self) -> bytes:
        data = b""
        while size := int(self.rfile.readline().strip(), 16):
            data += self.rfile.read(size)
            self.rfile.readline()
        self.rfile.readline()
        return data


@contextlib.contextmanager
def git_remote(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[SourceUrl]:
    """A git remote on 127.0.0.1 answered by ``handler``, as the url a pin would name."""
    with serving(handler) as port:
        yield SourceUrl.parse(f"http://127.0.0.1:{port}/r.git", git=True)


def test_a_remote_that_floods_what_git_prints_is_refused(tmp_path: Path) -> None:
    """Found by the second attack: a remote answering a fetch with endless "remote:" lines (300
    MiB) made patchtool hold 4.7 GB and print a 320 MB message: git's output was read whole.
    What git prints of one fetch is read up to 1 MiB, then git is killed: FetchTooLarge, exit 4,
    nothing of the fetch kept; the remote sent a few MiB at most, not all it would."""
    into = Repo.init_bare(tmp_path / "into.git")
    with git_remote(_Chatty) as url, pytest.raises(FetchTooLarge) as caught:
        into.fetch(url, ["+refs/tags/v1:refs/tags/v1"], allow_local=True)
    assert caught.value.message == (
        f"the git fetch from {url} printed more than the 1048576 bytes patchtool reads of what git prints; refusing it"
    )
    assert caught.value.exit_code == ExitCode.UPSTREAM
    assert not list((tmp_path / "into.git" / "objects" / "pack").iterdir())
    assert _Chatty.sent < _Chatty.FLOOD


class _Listing(_Chatty):
    """A git remote over smart HTTP that answers ls-refs with ``FLOOD`` bytes of tag lines."""

    FLOOD = 160 << 20

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(size) if size else self._chunked()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-git-upload-pack-result")
        self.end_headers()
        with contextlib.suppress(OSError):
            n = 0
            while type(self).sent < self.FLOOD:
                lines = b"".join(_pkt(b"1" * 40 + b" refs/tags/v%09d%s\n" % (n + i, b"x" * 150)) for i in range(1000))
                self.wfile.write(lines)
                type(self).sent += len(lines)
                n += 1000
            self.wfile.write(b"0000")


def test_a_remote_whose_list_of_refs_git_cannot_hold_is_refused(tmp_path: Path) -> None:
    """Found by the third attack: git holds a remote's whole list of refs before it prints one, so
    no reading of its output bounds that: 1.5 GB of tag lines took 2.6 GB in git. git's heap is held
    to PATCHTOOL_FETCH_MAX_MEMORY (2 GiB; lowered here, so that the case stays small): past it git
    runs out, and patchtool says so (exit 4), never that the remote has no such tag."""
    into = Repo.init_bare(tmp_path / "into.git")
    with git_remote(_Listing) as url, pytest.raises(FetchTooLarge) as caught:
        into.remote_refs(url, "refs/tags/", allow_local=True, limits=FetchLimits(max_memory=64 << 20))
    assert caught.value.message == (
        f"the git ls-remote of {url} needed more than the 67108864 bytes of memory patchtool lets one git fetch "
        "use; refusing it"
    )
    assert "PATCHTOOL_FETCH_MAX_MEMORY" in (caught.value.hint or "")
    assert _Listing.sent < _Listing.FLOOD


def test_the_memory_a_fetch_may_use_is_the_users_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHTOOL_FETCH_MAX_MEMORY", "8g")
    assert FetchLimits.from_environment().max_memory == 8 << 30
    monkeypatch.setenv("PATCHTOOL_FETCH_MAX_MEMORY", "lots")
    with pytest.raises(UsageError) as caught:
        FetchLimits.from_environment()
    assert caught.value.message.startswith("PATCHTOOL_FETCH_MAX_MEMORY='lots' is not a number of bytes")

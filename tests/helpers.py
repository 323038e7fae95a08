"""Helpers for patchtool's tests (test code: it does not ship in the wheel): real git repositories, real wheels, a real HTTP index.

Nothing here mocks git or the network: the repositories are made with git, the
index is an HTTP server on localhost that speaks PEP 691 and HTTP ranges.
"""

from __future__ import annotations

import errno
import hashlib
import http.server
import importlib
import importlib.util
import json
import os
import re
import selectors
import shutil
import socket
import socketserver
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

# The limit every subprocess and thread wait in the tests takes: a guard against a hang (a command or a
# process that never returns), far above any load, and never what a test asserts on (issue 27).
HANG_GUARD_S = 1800

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.org",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.org",
    "GIT_AUTHOR_DATE": "@1700000000 +0000",
    "GIT_COMMITTER_DATE": "@1700000000 +0000",
}


def git(cwd: Path, *args: str, input: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_ENV, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C")
    res = subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, text=True, env=env, check=False)
    if res.returncode:
        raise RuntimeError(f"git {' '.join(args)} failed: {res.stderr}")
    return res.stdout


def load_module(path: Path, name: str) -> ModuleType:
    """A module of the patched tree loaded by its path (without importing its package, which
    needs a GPU stack): how the patch tests reach new upstream modules."""
    assert path.is_file(), f"module missing: {path}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"not a Python module: {path}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LazyModule(ModuleType):
    """A module imported at its first attribute use (``lazy``): what the patch tests hold instead
    of torch, numpy and triton, so that collecting them needs none. Every use reads the real
    module's attribute as it is then (Triton's interpreter patches its modules in place)."""

    def __getattr__(self, attr: str) -> Any:
        module = sys.modules.get(self.__name__) or importlib.import_module(self.__name__)
        return getattr(module, attr)


def lazy(name: str) -> Any:
    return LazyModule(name)


def lazy_modules(module: ModuleType) -> list[str]:
    """The modules ``module`` (a test module) holds lazily, and those of the helper modules it
    took names from, in order: what its tests need imported (tests/conftest.py)."""
    helpers = [
        sys.modules[n]
        for n in dict.fromkeys(getattr(v, "__module__", None) for v in vars(module).values())
        if isinstance(n, str) and n in sys.modules and n != module.__name__
    ]
    return list(
        dict.fromkeys(v.__name__ for m in (module, *helpers) for v in vars(m).values() if isinstance(v, LazyModule))
    )


def write_tree(root: Path, files: Mapping[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def make_wheel(
    path: Path, dist: str, version: str, files: Mapping[str, str | bytes], *, metadata_version: str | None = None
) -> Path:
    """A minimal but valid wheel: ``files`` are paths inside the wheel root."""
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel, content in sorted(files.items()):
            member = zipfile.ZipInfo(rel, date_time=(2020, 1, 1, 0, 0, 0))
            member.external_attr = (0o100755 if rel.endswith(".sh") else 0o100644) << 16
            zf.writestr(member, content, zipfile.ZIP_DEFLATED)
        zf.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {metadata_version or version}\n"
        )
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    return path


def make_sdist(
    path: Path, dist: str, version: str, files: Mapping[str, str | bytes], *, top: str | None = None
) -> Path:
    """A minimal sdist (``.tar.gz``): ``files`` are paths under its top directory (default
    ``<dist>-<version>/``), beside a ``PKG-INFO`` naming ``dist`` ``version``."""
    import io
    import tarfile

    top = top or f"{dist}-{version}"
    members = {**files, "PKG-INFO": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"}
    with tarfile.open(path, "w:gz") as tf:
        for rel, content in sorted(members.items()):
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size, info.mode = len(data), 0o644
            tf.addfile(info, io.BytesIO(data))
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def import_tag(artifact: Path, name: str = "demo", version: str = "1.0", prefix: str = "demo/ -> python/demo/") -> str:
    """The cache's tag of ``artifact``'s import with the prefix mapping ``prefix`` (as the import
    records it), as ``upstream/refnames.py`` names it."""
    from packaging.version import Version

    from patchtool.names import Distribution
    from patchtool.upstream.refnames import import_tag as tag

    return tag(Distribution(name), Version(version), sha256(artifact), prefix)


def format_patch(repo: Path, rev: str = "HEAD") -> str:
    """The canonical export of one commit: no date, no signature, no stat, full index."""
    text = git(
        repo, "format-patch", "-1", rev, "--stdout", "--zero-commit", "--full-index", "--no-signature", "--no-stat"
    )
    return re.sub(r"^Date: .*\n", "", text, count=1, flags=re.MULTILINE)


class Index:
    """A PEP 691 package index on localhost with files that can be made to break."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, Path] = {}
        self.break_next = 0  # how many of the next file downloads are cut half-way
        self.fail_with: list[int] = []  # HTTP statuses to answer the next file downloads with
        self.requests: list[str] = []
        self.html = False  # serve project pages as PEP 503 HTML only, as a plain "simple" index does
        self.page: bytes | None = None  # serve this as every project page, as page_type (a hostile page)
        self.page_type = "text/html"
        self.hashes: Any = True  # list each file's sha256; else each file's "hashes" is this value ({}, None)
        self.listed: dict[str, Any] = {}  # more fields of every file on the project page (a "size" ...)
        self.hrefs: dict[str, str] = {}  # file name -> the link the project page gives it (default /files/<name>)
        self.endless: set[str] = set()  # files sent as an endless body without a Content-Length
        self.endless_page = False  # the project page itself is an endless body without a Content-Length
        self.redirects: dict[str, str] = {}  # file name -> where its download redirects (302 Location)
        self.server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/simple"

    def add(self, path: Path) -> None:
        self.files[path.name] = path

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                index.requests.append(self.path)
                m = re.fullmatch(r"/simple/([^/]+)/", self.path)
                if m and index.endless_page:
                    self._endless("application/vnd.pypi.simple.v1+json")
                    return
                if m:
                    files = [
                        {
                            "filename": n,
                            "url": index.hrefs.get(n, f"/files/{n}"),
                            "hashes": {"sha256": sha256(p)} if index.hashes is True else index.hashes,
                            **index.listed,
                        }
                        for n, p in index.files.items()
                    ]
                    if index.page is not None:
                        kind, body = index.page_type, index.page
                    elif index.html:
                        kind = "text/html"
                        fragment = {
                            n: f"#sha256={sha256(p)}" if index.hashes is True else "" for n, p in index.files.items()
                        }
                        body = (
                            "<!DOCTYPE html>\n<html><body>\n"
                            + "".join(
                                f'<a href="{index.hrefs.get(n, f"../../files/{n}")}{fragment[n]}">{n}</a><br/>\n'
                                for n in index.files
                            )
                            + "</body></html>\n"
                        ).encode()
                    else:
                        kind = "application/vnd.pypi.simple.v1+json"
                        body = json.dumps({"meta": {"api-version": "1.0"}, "name": m.group(1), "files": files}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                m = re.fullmatch(r"/files/(.+)", self.path)
                if not m or m.group(1) not in index.files:
                    self.send_error(404)
                    return
                if index.fail_with:
                    self.send_error(index.fail_with.pop(0))
                    return
                if m.group(1) in index.redirects:
                    self.send_response(302)
                    self.send_header("Location", index.redirects[m.group(1)])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if m.group(1) in index.endless:
                    self._endless("application/octet-stream")
                    return
                data = index.files[m.group(1)].read_bytes()
                start = 0
                rng = self.headers.get("Range")
                if rng:
                    start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1))  # type: ignore[union-attr]
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                payload = data[start:]
                if index.break_next > 0:
                    index.break_next -= 1
                    self.wfile.write(payload[: max(1, len(payload) // 2)])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(payload)

            def _endless(self, kind: str) -> None:
                """A body that never ends and says no length: the client must stop reading it."""
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.end_headers()
                chunk = b"\0" * (1 << 16)
                try:
                    while True:
                        self.wfile.write(chunk)
                except OSError:  # the client hung up, as it should
                    self.close_connection = True

        return Handler

    @contextmanager
    def serve(self) -> Iterator[Index]:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        with answering(self.server):
            yield self


def snapshot(*roots: Path) -> dict[str, bytes]:
    """Every file under ``roots`` with its bytes: compare before and after to prove nothing changed."""
    out = {}
    for root in roots:
        if not root.exists():
            continue
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                out[str(path)] = path.read_bytes()
    return out


def leftover_state(root: Path) -> list[str]:
    """What a finished command left in the repository's private ``.patchtool/`` (its own
    ``.gitignore`` aside): a journal, staged files, a rebase state. Empty when none."""
    state = root / ".patchtool"
    if not state.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in state.rglob("*") if p.name != ".gitignore")


def require_tool(name: str, *, env: str | None = None, enables: str) -> str:
    """The path of an optional tool a test needs (``$env`` first, then PATH), or a skip whose
    reason ``pytest -ra`` shows: the README's commands need only Python and git; `.ci/run`
    installs the optional tools so CI runs these tests."""
    import shutil

    import pytest

    found = (os.environ.get(env) if env else None) or shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed (it enables {enables}); `.ci/run` installs it")
    return found


def quilt_push_all(
    quilt: str, upstream: Path, patches: Path, scratch: Path
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``quilt push -a`` of the series in ``patches`` (an exported ``DIR/patches``) onto a copy of the
    worktree ``upstream`` (its files, not its .git) in ``scratch/tree``, with nothing of the user's
    quilt setup: the tree and quilt's result."""
    tree = scratch / "tree"
    shutil.copytree(upstream, tree, ignore=shutil.ignore_patterns(".git"))
    shutil.copytree(patches, tree / "patches")
    push = subprocess.run(
        [quilt, "push", "-a"],
        cwd=tree,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "QUILT_PATCHES": "patches", "HOME": str(scratch)},
    )
    return tree, push


def read_terminal(master: int, *, prompt: bytes | None = None, answer: bytes = b"") -> bytes:
    """Everything written to the pseudo-terminal whose master end is ``master``, until the other
    end is closed; ``answer`` typed once, when what was shown so far ends with ``prompt``."""
    shown = b""
    answered = prompt is None
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError as exc:  # EIO: the other end is closed
            assert exc.errno == errno.EIO
            break
        if not chunk:
            break
        shown += chunk
        if not answered and prompt is not None and shown.rstrip().endswith(prompt):
            os.write(master, answer)
            answered = True
    return shown


@contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """An HTTP server on 127.0.0.1 answered by ``handler``, for the test's ``with``: its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    with answering(server):
        yield server.server_address[1]


@contextmanager
def answering(server: socketserver.BaseServer) -> Iterator[None]:
    """``server`` answers on a thread of its own for the block, then is closed. The thread waits on
    the listening socket and on a socket the block's end writes to, so it stops as soon as the
    block ends: ``serve_forever`` notices ``shutdown`` only at its next half-second poll, a wait
    every test of the demo paid at its end."""
    stop, stopping = socket.socketpair()

    def answer() -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(server, selectors.EVENT_READ)
            selector.register(stop, selectors.EVENT_READ)
            while all(key.fileobj is not stop for key, _ in selector.select()):
                server.handle_request()  # one is waiting: accepted, answered on a thread of its own

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stopping.send(b"stop")
        thread.join(HANG_GUARD_S)
        stop.close()
        stopping.close()
        server.server_close()

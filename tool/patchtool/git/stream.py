"""Commits as a ``git fast-import`` stream: the one place a path is written into a stream git
reads, so the one place it is quoted."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence

FIXED_IDENT = ("patchtool", "patchtool@localhost")


@dataclasses.dataclass(frozen=True, slots=True)
class Ident:
    name: str
    email: str
    timestamp: int = 0
    tz: str = "+0000"

    def line(self) -> str:
        return f"{self.name} <{self.email}> {self.timestamp} {self.tz}"

    def env(self, role: str) -> dict[str, str]:
        """The ``GIT_<ROLE>_NAME``/``_EMAIL``/``_DATE`` variables that make git record this identity."""
        return {
            f"GIT_{role}_NAME": self.name,
            f"GIT_{role}_EMAIL": self.email,
            f"GIT_{role}_DATE": f"@{self.timestamp} {self.tz}",
        }


@dataclasses.dataclass(frozen=True, slots=True)
class FileWrite:
    """A file of a commit to write: an existing blob, new content, or (mode None) a deletion."""

    path: str
    mode: str | None
    blob: str | None = None
    data: bytes | None = None
    read: Callable[[], bytes] | None = None  # new content read as the stream reaches it, held one at a time


@dataclasses.dataclass(frozen=True, slots=True)
class NewCommit:
    """A commit to write: its parent is the commit before it in the batch."""

    message: str
    author: Ident
    committer: Ident
    files: tuple[FileWrite, ...]


_FAST_IMPORT_ESCAPES = {ord("\\"): b"\\\\", ord('"'): b'\\"', ord("\n"): b"\\n", ord("\t"): b"\\t"}


def quote_path(path: str) -> bytes:
    """``path`` as git fast-import reads it ("Paths" in ``git help fast-import``): verbatim, or
    C-style quoted when it starts with a double quote or holds a control character (a newline
    would end the command; a quote at the start would make git unquote it)."""
    raw = path.encode("utf-8", "surrogateescape")
    if not raw.startswith(b'"') and not any(b < 0x20 or b == 0x7F for b in raw):
        return raw
    out = bytearray(b'"')
    for b in raw:
        if b in _FAST_IMPORT_ESCAPES:
            out += _FAST_IMPORT_ESCAPES[b]
        elif b < 0x20 or b == 0x7F:
            out += b"\\%03o" % b
        else:
            out.append(b)
    return bytes(out + b'"')


def commit_stream(
    parent: str | None, commits: Sequence[NewCommit], ref: str, *, each_file: Callable[[], None] | None = None
) -> Iterator[bytes]:
    """The fast-import stream for a chain of commits on ``parent``, ending in ``done``;
    ``each_file`` is called as each file's command has been taken."""
    for n, c in enumerate(commits, 1):
        yield from _commit_command(n, c, ref, parent if n == 1 else f":{n - 1}", each_file)
    yield b"done\n"


def _commit_command(
    mark: int, c: NewCommit, ref: str, parent: str | None, each_file: Callable[[], None] | None
) -> Iterator[bytes]:
    """One ``commit`` command, its new contents inline."""
    message = c.message.encode()
    yield (
        f"commit {ref}\nmark :{mark}\nauthor {c.author.line()}\ncommitter {c.committer.line()}\n".encode()
        + b"data %d\n" % len(message)
        + message
        + b"\n"
    )
    if parent is not None:
        yield f"from {parent}\n".encode()
    for f in c.files:
        path = quote_path(f.path)
        if f.mode is None:
            yield b"D " + path + b"\n"
        elif f.data is None and f.read is None:
            yield f"M {f.mode} {f.blob} ".encode() + path + b"\n"
        else:
            data = f.data if f.data is not None else f.read() if f.read is not None else b""
            yield f"M {f.mode} inline ".encode() + path + b"\n" + b"data %d\n" % len(data)
            yield data
            del data  # not held while the next file is read
            yield b"\n"
        if each_file is not None:
            each_file()
    yield b"\n"

"""A patch file: ``git format-patch`` headers (author, subject, message) plus the diff.

Parsing is pure: ``PatchFile.parse(text, name=...)``. Paths in the diff are
validated so that no patch can reach outside the tree or into ``.git``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import PurePosixPath

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchSet

from .errors import InvalidInput, Problem

_FROM_LINE = re.compile(r"^From [0-9a-f]{40} Mon Sep 17 00:00:00 2001$")
_DIFF_GIT = re.compile(r"^diff --git (\S+) (\S+)$", re.MULTILINE)
_PATH_HEADERS = re.compile(r"^(?:--- |\+\+\+ |rename from |rename to |copy from |copy to )(.+)$",
                           re.MULTILINE)
_SUBJECT_PREFIX = re.compile(r"^\[PATCH[^\]]*\]\s*")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FileStat:
    path: str
    added: int
    removed: int
    status: str  # "modified", "added", "deleted", "renamed"
    source: str | None = None  # the old path of a rename


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PatchFile:
    name: str
    author_name: str
    author_email: str
    subject: str
    body: str
    diff: str
    files: tuple[FileStat, ...]
    diff_offset: int = 0  # lines in the file before the diff starts

    @property
    def added(self) -> int:
        return sum(f.added for f in self.files)

    @property
    def removed(self) -> int:
        return sum(f.removed for f in self.files)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files)

    @property
    def message(self) -> str:
        return f"{self.subject}\n\n{self.body}".rstrip() + "\n" if self.body else self.subject + "\n"

    @classmethod
    def parse(cls, text: str, *, name: str) -> PatchFile:
        """Parse format-patch text; every problem names ``name`` and, where known, the line."""
        def fail(message: str, *, line: int | None = None, hint: str | None = None) -> InvalidInput:
            return InvalidInput(f"{name}: {message}", file=name, problems=[
                Problem(file=name, line=line, message=message, hint=hint, code="patch")])

        export_hint = "export the commit with `git format-patch` (or use `patchtool import`)"
        diff_at = _find_diff_start(text)
        if diff_at is None:
            raise fail("not a patch: no 'diff --git' section found", hint=export_hint)
        head, diff = text[:diff_at], text[diff_at:]
        if not _FROM_LINE.match(head.split("\n", 1)[0]):
            raise fail("not a git format-patch file: the first line must be 'From <sha> Mon Sep 17 "
                       "00:00:00 2001'", line=1, hint=export_hint)
        headers, payload = _headers(head.split("\n", 1)[1])
        author = headers.get("from")
        subject = headers.get("subject")
        if not author:
            raise fail("no 'From:' header (the patch author)", hint=export_hint)
        if not subject:
            raise fail("no 'Subject:' header", hint=export_hint)
        author_name, author_email = _address(_decode(author))
        if not author_email:
            raise fail(f"the 'From:' header {author!r} has no e-mail address", hint=export_hint)
        subject_text = _SUBJECT_PREFIX.sub("", " ".join(_decode(subject).split()))
        body = re.split(r"^---\s*$", payload, maxsplit=1, flags=re.MULTILINE)[0].strip("\n")
        offset = head.count("\n")
        files = _parse_diff(diff, name, offset, fail)
        return cls(name=name, author_name=author_name or author_email, author_email=author_email,
                   subject=subject_text, body=body, diff=diff, files=files, diff_offset=offset)


# The mail headers of a format-patch file are read here rather than with the email package, whose
# import costs more than parsing a whole series: RFC 5322 unfolding, RFC 2047 encoded words (with
# email.header, imported only when a header has one) and the "Name <address>" forms git writes.

def _headers(text: str) -> tuple[dict[str, str], str]:
    """The headers (lower-case names, first occurrence, unfolded) and the body after them."""
    block, _, body = text.partition("\n\n")
    headers: dict[str, str] = {}
    name = None
    for line in block.split("\n"):
        if line[:1] in (" ", "\t") and name is not None:
            headers[name] += line
            continue
        key, sep, value = line.partition(":")
        name = key.strip().lower() if sep and key.strip() and " " not in key.strip() else None
        if name is not None:
            if name in headers:
                name = None  # a repeated header: the first one counts, as email.Message.get has it
            else:
                headers[name] = value.strip()
    return headers, body


def _decode(header: str) -> str:
    if "=?" not in header:
        return header
    import email.header

    return str(email.header.make_header(email.header.decode_header(header)))


_NAME_ADDR = re.compile(r"^\s*(.*?)\s*<([^<>\s]+)>\s*$")
_BARE_ADDR = re.compile(r"^\s*([^\s<>\"]+@[^\s<>\"]+)\s*$")


def _address(value: str) -> tuple[str, str]:
    """(name, address) of a From header."""
    if m := _NAME_ADDR.match(value):
        name = m.group(1)
        if len(name) >= 2 and name[0] == name[-1] == '"':
            name = re.sub(r"\\(.)", r"\1", name[1:-1])
        return name, m.group(2)
    if m := _BARE_ADDR.match(value):
        return "", m.group(1)
    import email.utils  # an unusual form: the email package's reading of it

    return email.utils.parseaddr(value)


def _find_diff_start(text: str) -> int | None:
    m = re.search(r"^diff --git ", text, re.MULTILINE)
    return m.start() if m else None


def check_path(raw: str) -> str | None:
    """Why a diff path is unsafe, or None. ``raw`` is as written (``a/x``, ``/dev/null``)."""
    if raw == "/dev/null":
        return None
    path = raw.split("\t", 1)[0].strip('"')
    if path.startswith(("a/", "b/")):
        path = path[2:]
    if path.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", path):
        return f"absolute path {path!r}"
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if ".." in parts:
        return f"path {path!r} escapes the tree"
    if any(p.lower() == ".git" for p in parts):
        return f"path {path!r} touches .git/"
    return None


def _parse_diff(diff: str, name: str, offset: int, fail) -> tuple[FileStat, ...]:  # type: ignore[no-untyped-def]
    matches = sorted([*_DIFF_GIT.finditer(diff), *_PATH_HEADERS.finditer(diff)], key=lambda m: m.start())
    for m in matches:
        for raw in m.groups():
            why = check_path(raw)
            if why:
                line = offset + diff.count("\n", 0, m.start()) + 1
                raise fail(f"unsafe diff: {why}", line=line,
                           hint="a patch may only touch files inside the upstream tree")
    try:
        patchset = PatchSet(diff)
    except UnidiffParseError as exc:
        raise fail(f"the diff does not parse: {exc}", hint="re-export the commit with git format-patch") from None
    if not len(patchset):
        raise fail("the diff touches no file")
    stats = []
    for pf in patchset:
        if pf.is_added_file:
            status = "added"
        elif pf.is_removed_file:
            status = "deleted"
        elif pf.is_rename:
            status = "renamed"
        else:
            status = "modified"
        path = pf.path
        source = pf.source_file[2:] if pf.is_rename and pf.source_file.startswith("a/") else None
        stats.append(FileStat(path=path, added=pf.added, removed=pf.removed, status=status,
                              source=source))
    return tuple(stats)


def split_files(diff: str) -> list[str]:
    """The diff cut into one section per file, each starting with 'diff --git'."""
    starts = [m.start() for m in re.finditer(r"^diff --git ", diff, re.MULTILINE)]
    return [diff[a:b] for a, b in zip(starts, [*starts[1:], len(diff)], strict=True)]


def split_hunks(section: str) -> tuple[str, list[str]]:
    """A file section cut into its header and its hunks (each starting with '@@')."""
    starts = [m.start() for m in re.finditer(r"^@@ ", section, re.MULTILINE)]
    if not starts:
        return section, []
    header = section[:starts[0]]
    hunks = [section[a:b] for a, b in zip(starts, [*starts[1:], len(section)], strict=True)]
    # the last hunk of a format-patch file ends at the signature separator, if any
    hunks[-1] = re.split(r"^-- \n", hunks[-1], maxsplit=1, flags=re.MULTILINE)[0]
    return header, hunks


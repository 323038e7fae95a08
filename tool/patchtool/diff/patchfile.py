"""A patch file: ``git format-patch`` headers (author, subject, message) plus the diff.

Parsing is pure: ``PatchFile.parse(text, name=...)``. The diff is read once, into the diff
model (``model.Diff``, ``PatchFile.model``), its paths validated by git's rules (``gitpaths``)
so that no patch can reach outside the tree or into ``.git``.
"""

from __future__ import annotations

import dataclasses
import re

from patchtool.diff import gitpaths, model
from patchtool.diff.model import Diff, FileDiff
from patchtool.errors import InvalidInput, Problem

_FROM_LINE = re.compile(r"^From [0-9a-f]{40} Mon Sep 17 00:00:00 2001$")
# Lines in one patch file: reading one costs some 450 to 550 bytes a line (its line in unidiff's
# model and in ours) beside a few copies of its text, so a patch within this and the 64 MiB read
# bound is read in under 700 MB; real patches have hundreds of lines, a vendored library tens of
# thousands.
MAX_PATCH_LINES = 500_000
# Lines and bytes of every patch a command holds at once (the series, and what `import` brings):
# a patch costs some 200 bytes a line and 3 times its bytes to hold, so a series of many patches,
# each within MAX_PATCH_LINES and the 64 MiB read bound, is still read in about 1 GB.
MAX_SERIES_LINES = 2_000_000
MAX_SERIES_BYTES = 128 << 20


def line_count(text: str) -> int:
    """Lines as git counts them: a last line without its newline is one."""
    return text.count("\n") + (not text.endswith("\n"))


@dataclasses.dataclass(slots=True)
class SeriesBudget:
    """The lines and bytes of the patches one command has read, held to the series' bounds."""

    lines: int = 0
    size: int = 0

    def take(self, text: str) -> str | None:
        """What is wrong with holding ``text`` beside what was read before, or None."""
        self.lines += line_count(text)
        self.size += len(text) if text.isascii() else len(text.encode("utf-8", "surrogateescape"))
        if self.lines > MAX_SERIES_LINES:
            held, most = f"{self.lines} lines", f"{MAX_SERIES_LINES}"
        elif self.size > MAX_SERIES_BYTES:
            held, most = f"{self.size} bytes", f"{MAX_SERIES_BYTES} bytes"
        else:
            return None
        return f"brings the patches read at once to {held}, more than the {most} patchtool reads together"


SERIES_HINT = "keep generated and vendored files out of patches, or carry fewer, smaller patches"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PatchFile:
    name: str
    author_name: str
    author_email: str
    subject: str
    body: str
    diff: str
    model: Diff  # the diff, parsed
    diff_offset: int = 0  # lines in the file before the diff starts

    @property
    def files(self) -> tuple[FileDiff, ...]:
        return self.model.files

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
            return InvalidInput(
                f"{name}: {message}",
                file=name,
                problems=[Problem(file=name, line=line, message=message, hint=hint, code="patch")],
            )

        lines = line_count(text)
        if lines > MAX_PATCH_LINES:
            raise fail(
                f"is {lines} lines, more than the {MAX_PATCH_LINES} patchtool reads in one patch file",
                hint="keep generated and vendored files out of patches, or split the change into several patches",
            )
        export_hint = "export the commit with `git format-patch` (or use `patchtool import`)"
        if (diff_at := re.search(r"^diff --git ", text, re.MULTILINE)) is None:
            raise fail("not a patch: no 'diff --git' section found", hint=export_hint)
        head, diff = text[: diff_at.start()], text[diff_at.start() :]
        if not _FROM_LINE.match(head.split("\n", 1)[0]):
            raise fail(
                "not a git format-patch file: the first line must be 'From <sha> Mon Sep 17 00:00:00 2001'",
                line=1,
                hint=export_hint,
            )
        headers, payload = _headers(head.split("\n", 1)[1])
        if not (author := headers.get("from")):
            raise fail("no 'From:' header (the patch author)", hint=export_hint)
        if not (subject := headers.get("subject")):
            raise fail("no 'Subject:' header", hint=export_hint)
        author_name, author_email = _address(_decode(author))
        if not author_email:
            raise fail(f"the 'From:' header {author!r} has no e-mail address", hint=export_hint)
        if why := identity_problem(author_name, author_email):
            from_line = next(
                (i + 1 for i, line in enumerate(head.split("\n")) if line.lower().startswith("from:")), None
            )
            raise fail(
                f"the 'From:' header {author!r} is not an author git can record: {why}",
                line=from_line,
                hint="write it as 'Name <email>', with no '<', '>' or line break in the name or the e-mail",
            )
        subject_text = clean_subject(_decode(subject))
        body = re.split(r"^---\s*$", payload, maxsplit=1, flags=re.MULTILINE)[0].strip("\n")
        try:  # git apply reads the whole file, so its paths are checked in all of it
            parsed = model.build(diff, gitpaths.read_sections(text))
        except (gitpaths.Refused, model.DiffError) as exc:
            raise fail(exc.message, line=exc.line, hint=exc.hint) from None
        return cls(
            name=name,
            author_name=author_name or author_email,
            author_email=author_email,
            subject=subject_text,
            body=body,
            diff=diff,
            model=parsed,
            diff_offset=head.count("\n"),
        )


def clean_subject(text: str) -> str:
    """A mail's subject as ``git mailinfo -b`` leaves it: whitespace runs made one space, and
    leading ``Re:``, spaces, colons and bracketed tags naming ``PATCH`` (``[PATCH 10/10]``,
    ``[RFC PATCH v2]``) removed; any other tag (a branch's ``[4.2.x]``) stays, and so does
    everything after it."""
    text = " ".join(text.split())
    at = 0
    while at < len(text):
        if text[at : at + 3].lower() == "re:" and len(text) > at + 3:
            text = text[:at] + text[at + 3 :]
        elif text[at] in " \t:":
            text = text[:at] + text[at + 1 :]
        elif text[at] == "[" and (end := text.find("]", at)) != -1:
            if end + 1 - at >= 7 and "PATCH" in text[at : end + 1]:
                text = text[:at] + text[end + 1 :]
            else:
                at = end + 1 + (text[end + 1 : end + 2] == " ")
        else:
            break
    return text.strip()


def unreadable_message(message: str) -> str | None:
    """Why the commit message ``message`` would not read back from its patch file as it is (by
    ``PatchFile.parse`` or by ``git am``), or None: a subject they strip (``Re:``, a leading
    ``[PATCH ...]`` tag, colons), a body that starts with what ``git am`` takes for in-body mail
    headers, or a body line where a patch file's message ends (git mailinfo's ``patchbreak``: a
    ``---`` line, ``--- name``, ``diff -``, ``Index: ``) and the rest would be lost or read as the
    diff. ``git format-patch`` writes such a message as it is, and ``git am`` truncates it."""
    lines = message.strip("\n").split("\n")
    end = next((i for i, line in enumerate(lines) if not line.strip()), len(lines))
    subject = " ".join(lines[:end])  # a subject of several lines is written as one, as git writes it
    if (cleaned := clean_subject(subject)) != subject:
        return (
            f"its subject {subject!r} would read back as {cleaned!r}: a patch file's reader drops a leading "
            "'Re:', bracketed tags naming PATCH and colons, and makes each run of spaces one, as `git am` does"
        )
    body = [(n, line) for n, line in enumerate(lines[end:], end + 1)]
    first = next(((n, line) for n, line in body if line.strip()), None)
    if first is not None and starts_inbody(first[1]):
        return (
            f"line {first[0]} of its message, {first[1]!r}, starts the body as an in-body mail header does, "
            "which `git am` moves into the commit's header"
        )
    for n, line in body:
        if ends_message(line):
            return (
                f"line {n} of its message, {line!r}, is where a patch file's message ends (`git am` and "
                "patchtool read what follows as the diff), so the rest of the message would be lost"
            )
    return None


def starts_inbody(line: str) -> bool:
    """Whether ``line``, first in a message's body, is what ``git am`` takes for an in-body header."""
    return bool(_INBODY_FIELD.match(line)) or line.startswith("[PATCH] ")


def ends_message(line: str) -> bool:
    """Whether ``line`` of a message's body is where a patch file's message ends (git mailinfo's
    ``patchbreak``: a ``---`` line, ``--- name``, ``diff -``, ``Index: ``)."""
    rest = line[3:]
    return line.startswith(("diff -", "Index: ")) or (
        line.startswith("---") and (not rest.strip() or (rest[:1] == " " and not rest[1:2].isspace()))
    )


_INBODY_FIELD = re.compile(r"^(from|subject|date):[ \t]*", re.IGNORECASE)
_HEADER_LINE = re.compile(r"^(from|subject|date):.*(?:\n[ \t].*)*\n?", re.IGNORECASE | re.MULTILINE)


def hoist_inbody_headers(mail: str) -> str:
    """``mail`` (one format-patch message) with the headers its body starts with moved into its
    header, as ``git am`` reads them (``git mailinfo``'s in-body headers; ``git send-email``
    writes them for another's patch): after any blank lines, a block of ``From:``, ``Subject:``
    and ``Date:`` lines (any case, folded lines joined) or a ``[PATCH] ...`` line, up to the first
    other line (a blank one goes with it), replaces the mail's own fields of those names and
    leaves the body. ``mail`` unchanged where its body starts otherwise."""
    head, sep, body = mail.partition("\n\n")
    lines = body.split("\n")
    at = 0
    while at < len(lines) - 1 and not lines[at].strip():
        at += 1
    found: dict[str, str] = {}
    end = at
    while end < len(lines) and lines[end].strip():
        line = lines[end]
        if m := _INBODY_FIELD.match(line):
            name, value = m.group(1).lower(), line[m.end() :]
        elif line.startswith("[PATCH]") and line[7:8] in (" ", "\t"):
            name, value = "subject", line
        else:
            break
        end += 1
        while end < len(lines) and lines[end][:1] in (" ", "\t") and lines[end].strip():
            value += lines[end]
            end += 1
        found[name] = value.rstrip()
    if not sep or not found:
        return mail
    if end < len(lines) and not lines[end].strip():
        end += 1  # the blank line that ends the block; a line of text ends it too, and stays
    kept = _HEADER_LINE.sub(lambda m: "" if m.group(1).lower() in found else m.group(0), head + "\n")
    fields = "".join(f"{name.title()}: {value}\n" for name, value in found.items())
    return f"{kept}{fields}\n" + "\n".join(lines[end:])


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


def identity_problem(name: str, email: str) -> str | None:
    """Why git's fast-import would refuse ``name <email>`` as an author, or None: the rule of its
    ``parse_ident`` (no '<', '>' or newline in the name, the e-mail inside one pair of '<>')."""
    for part, text in (("name", name), ("e-mail", email)):
        if bad := sorted({c for c in text if c in "<>\n\0"}):
            return f"its {part} holds {', '.join(repr(c) for c in bad)}"
    return None


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

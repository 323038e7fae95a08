"""A patch file: ``git format-patch`` headers (author, subject, message) plus the diff.

Parsing is pure: ``PatchFile.parse(text, name=...)``. Paths in the diff are
validated so that no patch can reach outside the tree or into ``.git``.
"""

from __future__ import annotations

import dataclasses
import re

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchSet

from patchtool.errors import InvalidInput, Problem
from patchtool.paths import tree_path_problem

_FROM_LINE = re.compile(r"^From [0-9a-f]{40} Mon Sep 17 00:00:00 2001$")
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
        files = _parse_diff(text, diff, fail)
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


# -- what git reads from a diff: every path and every mode, checked before anything runs ------
#
# git apply reads a path from the 'diff --git' line, from '---'/'+++' and from the rename and
# copy headers, and a mode from the mode and index headers; all of them are read here by git's
# own rules (apply.c), hunks skipped by their line counts, so nothing git would act on escapes
# the one validator in paths.py.

SAFE_MODES = ("100644", "100755")  # a regular file; a link or a gitlink may point anywhere
_MODE_KINDS = {"120000": "a symbolic link", "160000": "a gitlink (a submodule commit)",
               "040000": "a directory", "40000": "a directory"}
_MODE_HEADERS = ("old mode ", "new mode ", "deleted file mode ", "new file mode ")
_NAME_HEADERS = ("rename from ", "rename to ", "copy from ", "copy to ", "rename old ", "rename new ")
_OTHER_HEADERS = ("similarity index ", "dissimilarity index ")
_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_C_ESCAPES = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, '"': 34, "\\": 92}
_PATH_HINT = "a patch may only touch files inside the upstream tree"
_MODE_HINT = ("a patch may only add or change regular files (mode 100644 or 100755): a symbolic "
              "link could point outside the tree, a gitlink at another repository")


class _Refused(Exception):
    def __init__(self, message: str, line: int, hint: str = _PATH_HINT) -> None:
        super().__init__(message)
        self.message, self.line, self.hint = message, line, hint


def _unquote(text: str) -> tuple[str, str]:
    """A C-quoted name at the start of ``text`` (git quotes names with special characters) and
    the text after it; ValueError when the quoting is broken."""
    out = bytearray()
    i = 1
    while i < len(text):
        c = text[i]
        if c == '"':
            try:
                return out.decode("utf-8"), text[i + 1:]
            except UnicodeDecodeError:
                raise ValueError(f"quoted path {text[:i + 1]} is not UTF-8") from None
        if c == "\\":
            nxt = text[i + 1:i + 2]
            if nxt in _C_ESCAPES:
                out.append(_C_ESCAPES[nxt])
                i += 2
                continue
            if re.fullmatch(r"[0-3][0-7][0-7]", text[i + 1:i + 4]):
                out.append(int(text[i + 1:i + 4], 8))
                i += 4
                continue
            raise ValueError(f"bad escape in quoted path {text!r}")
        out += c.encode("utf-8")
        i += 1
    raise ValueError(f"unterminated quoted path {text!r}")


def _skip_prefix(name: str) -> str | None:
    """``name`` past its first component, as git strips it (``-p1``); None when it has none."""
    cut = name.find("/")
    return name[cut + 1:] if cut > 0 else None


def _git_names(rest: str) -> tuple[str, str] | None:
    """The two names of a 'diff --git' line, prefixes kept, as git's ``git_header_name`` reads
    them; None when git cannot tell them apart (a rename with spaces: its names come from the
    rename headers)."""
    if rest.startswith('"'):
        first, tail = _unquote(rest)
        if not tail.startswith(" "):
            raise ValueError(f"no second path after {rest!r}")
        tail = tail[1:]
        if tail.startswith('"'):
            second, end = _unquote(tail)
            if end:
                raise ValueError(f"text after the second path in {rest!r}")
            return first, second
        return first, tail
    if (q := rest.find('"')) >= 0:
        if q == 0 or rest[q - 1] != " ":
            raise ValueError(f"a quote inside an unquoted path in {rest!r}")
        second, end = _unquote(rest[q:])
        if end:
            raise ValueError(f"text after the second path in {rest!r}")
        return rest[:q - 1], second
    for m in re.finditer("[ \t]", rest):
        first, second = rest[:m.start()], rest[m.end():]
        if _skip_prefix(first) is not None and _skip_prefix(first) == _skip_prefix(second):
            return first, second
    half = len(rest) // 2
    if rest[half:half + 1] == " " and rest[:half] == rest[half + 1:]:
        return rest[:half], rest[half + 1:]  # git cannot strip them, but they are the same name
    return None


def _header_name(text: str, *, tab_ends: bool) -> str:
    """The name on a '---', '+++', rename or copy line: quoted, or the rest of the line (up to
    a tab on '---'/'+++', where git writes one after a name with a space)."""
    if text.startswith('"'):
        name, _ = _unquote(text)
        return name
    return text.split("\t", 1)[0] if tab_ends else text


def _tree_path(raw: str, *, prefixed: bool) -> tuple[str | None, str | None]:
    """(the tree path ``raw`` names, why it is refused); a prefixed name is ``a/...``/``b/...``."""
    if prefixed:
        if raw.startswith("/"):
            return None, tree_path_problem(raw)
        if not raw.startswith(("a/", "b/")):
            return None, (f"path {raw!r} lacks the a/ or b/ prefix git format-patch writes "
                          "(git apply would strip its first directory instead)")
        raw = raw[2:]
    return raw, tree_path_problem(raw)


@dataclasses.dataclass(kw_only=True, slots=True)
class _Section:
    old: str | None = None
    new: str | None = None
    modes: list[tuple[str, str, int]] = dataclasses.field(default_factory=list)  # mode, header, line
    unread: int | None = None  # the line of a 'diff --git' whose names could not be told apart
    renamed: bool = False


def _read_sections(text: str) -> list[_Section]:
    """Every 'diff --git' section of a whole patch file with the paths git will use; raises
    _Refused at the first path or mode that may not be applied."""
    lines = text.split("\n")
    sections: list[_Section] = []
    in_header = False
    i = 0
    while i < len(lines):
        line, number = lines[i], i + 1
        i += 1
        if line.startswith("diff --git "):
            if sections:
                _finish(sections[-1])
            section = _Section()
            sections.append(section)
            try:
                names = _git_names(line[len("diff --git "):])
            except ValueError as exc:
                raise _Refused(f"unsafe diff: {exc}", number) from None
            if names is None:
                section.unread = number
            for raw, field in zip(names or (), ("old", "new"), strict=False):
                path, why = _tree_path(raw, prefixed=True)
                if why:
                    raise _Refused(f"unsafe diff: {why}", number)
                setattr(section, field, path)
            in_header = True
            continue
        if (not in_header and line.startswith("--- ") and lines[i:i + 1] and lines[i].startswith("+++ ")
                and lines[i + 1:i + 2] and lines[i + 1].startswith("@@ -")):
            raise _Refused("a diff section without a 'diff --git' line (git apply would apply it "
                           "too); patch files hold only git format-patch output", number,
                           "export the commit with `git format-patch`")
        if not in_header:
            continue
        if m := _HUNK.match(line):
            in_header = False
            old = int(m.group(1)) if m.group(1) is not None else 1
            new = int(m.group(2)) if m.group(2) is not None else 1
            while (old > 0 or new > 0) and i < len(lines):  # skip the hunk as git counts it
                body = lines[i][:1]
                if body in ("", " "):
                    old, new = old - 1, new - 1
                elif body == "-":
                    old -= 1
                elif body == "+":
                    new -= 1
                elif body != "\\":
                    break  # git calls the patch corrupt; nothing after it is read
                i += 1
            in_header = i < len(lines) and lines[i].startswith("@@ -")
            continue
        section = sections[-1]
        if line.startswith(("--- ", "+++ ")):
            try:
                raw = _header_name(line[4:], tab_ends=True)
            except ValueError as exc:
                raise _Refused(f"unsafe diff: {exc}", number) from None
            if raw == "/dev/null":
                continue
            path, why = _tree_path(raw, prefixed=True)
            if why:
                raise _Refused(f"unsafe diff: {why}", number)
            if line.startswith("---"):
                section.old = section.old or path  # git insists they agree with 'diff --git'
            else:
                section.new = section.new or path
            continue
        if header := next((h for h in _NAME_HEADERS if line.startswith(h)), None):
            try:
                path, why = _tree_path(_header_name(line[len(header):], tab_ends=False), prefixed=False)
            except ValueError as exc:
                raise _Refused(f"unsafe diff: {exc}", number) from None
            if why:
                raise _Refused(f"unsafe diff: {why}", number)
            section.renamed = True
            if header in ("rename from ", "copy from ", "rename old "):
                section.old = path
            else:
                section.new = path
            continue
        if header := next((h for h in _MODE_HEADERS if line.startswith(h)), None):
            section.modes.append((line[len(header):].strip(), line.strip(), number))
            continue
        if line.startswith("index "):
            fields = line.split()
            if len(fields) > 2:
                section.modes.append((fields[2], f"mode {fields[2]} on its index line", number))
            continue
        if not line.startswith(_OTHER_HEADERS):
            in_header = False  # git's header ends at the first line it does not know
    if sections:
        _finish(sections[-1])
    return sections


def _finish(section: _Section) -> None:
    """Refuse any mode but a regular file's, once the section's paths are all known, and names
    no header made clear."""
    if section.unread is not None and not section.renamed:
        raise _Refused("unsafe diff: the two paths of the 'diff --git' line cannot be told apart",
                       section.unread, "export the commit with `git format-patch`")
    for mode, header, number in section.modes:
        if mode not in SAFE_MODES:
            what = _MODE_KINDS.get(mode, "something other than a regular file")
            raise _Refused(f"unsafe diff: {header!r} makes {section.new or section.old!r} {what}",
                           number, _MODE_HINT)


def _parse_diff(text: str, diff: str, fail) -> tuple[FileStat, ...]:  # type: ignore[no-untyped-def]
    try:
        sections = _read_sections(text)
    except _Refused as exc:
        raise fail(exc.message, line=exc.line, hint=exc.hint) from None
    try:
        patchset = PatchSet(diff)
    except UnidiffParseError as exc:
        raise fail(f"the diff does not parse: {exc}", hint="re-export the commit with git format-patch") from None
    if not len(patchset):
        raise fail("the diff touches no file")
    named = len(sections) == len(patchset)
    stats = []
    for n, pf in enumerate(patchset):
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
        if named:  # the names as git reads them (unidiff keeps a quoted name's quotes)
            section = sections[n]
            path = (section.old if status == "deleted" else section.new) or section.old or path
            source = section.old if status == "renamed" else None
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


"""What git reads from a diff: every path and every mode, checked before anything runs.

git apply reads a path from the 'diff --git' line, from '---'/'+++' and from the rename and
copy headers, and a mode from the mode and index headers; all of them are read here by git's
own rules (apply.c), hunks skipped by their line counts, so nothing git would act on escapes
the one validator in paths.py. The names read here are the ones the diff model (``model``)
gives its files: unidiff keeps a quoted name's quotes, git does not.
"""

from __future__ import annotations

import dataclasses
import re

from patchtool.paths import tree_path_problem

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


class Refused(Exception):
    """A path or mode git would act on that may not be applied: what, the line, what to do."""

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
class Section:
    old: str | None = None
    new: str | None = None
    modes: list[tuple[str, str, int]] = dataclasses.field(default_factory=list)  # mode, header, line
    unread: int | None = None  # the line of a 'diff --git' whose names could not be told apart
    renamed: bool = False


def read_sections(text: str) -> list[Section]:
    """Every 'diff --git' section of a whole patch file with the paths git will use; raises
    Refused at the first path or mode that may not be applied."""
    lines = text.split("\n")
    sections: list[Section] = []
    in_header = False
    i = 0
    while i < len(lines):
        line, number = lines[i], i + 1
        i += 1
        if line.startswith("diff --git "):
            if sections:
                _finish(sections[-1])
            sections.append(_section(line, number))
            in_header = True
        elif not in_header:
            if (line.startswith("--- ") and lines[i:i + 1] and lines[i].startswith("+++ ")
                    and lines[i + 1:i + 2] and lines[i + 1].startswith("@@ -")):
                raise Refused("a diff section without a 'diff --git' line (git apply would apply it "
                              "too); patch files hold only git format-patch output", number,
                              "export the commit with `git format-patch`")
        elif m := _HUNK.match(line):
            i = _skip_hunk(lines, i, m)
            in_header = i < len(lines) and lines[i].startswith("@@ -")
        else:
            in_header = _header_line(sections[-1], line, number)
    if sections:
        _finish(sections[-1])
    return sections


def _section(line: str, number: int) -> Section:
    """A section from its 'diff --git' line: the two names, when git can tell them apart."""
    section = Section()
    try:
        names = _git_names(line[len("diff --git "):])
    except ValueError as exc:
        raise Refused(f"unsafe diff: {exc}", number) from None
    if names is None:
        section.unread = number
    for raw, field in zip(names or (), ("old", "new"), strict=False):
        path, why = _tree_path(raw, prefixed=True)
        if why:
            raise Refused(f"unsafe diff: {why}", number)
        setattr(section, field, path)
    return section


def _skip_hunk(lines: list[str], i: int, m: re.Match[str]) -> int:
    """The index of the first line after the hunk whose header ``m`` matched, as git counts it."""
    old = int(m.group(1)) if m.group(1) is not None else 1
    new = int(m.group(2)) if m.group(2) is not None else 1
    while (old > 0 or new > 0) and i < len(lines):
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
    return i


def _header_line(section: Section, line: str, number: int) -> bool:
    """Read one line of a section's extended header into ``section``; False where git's header
    ends (at the first line it does not know)."""
    if line.startswith(("--- ", "+++ ")):
        try:
            raw = _header_name(line[4:], tab_ends=True)
        except ValueError as exc:
            raise Refused(f"unsafe diff: {exc}", number) from None
        if raw == "/dev/null":
            return True
        path, why = _tree_path(raw, prefixed=True)
        if why:
            raise Refused(f"unsafe diff: {why}", number)
        if line.startswith("---"):
            section.old = section.old or path  # git insists they agree with 'diff --git'
        else:
            section.new = section.new or path
    elif header := next((h for h in _NAME_HEADERS if line.startswith(h)), None):
        try:
            path, why = _tree_path(_header_name(line[len(header):], tab_ends=False), prefixed=False)
        except ValueError as exc:
            raise Refused(f"unsafe diff: {exc}", number) from None
        if why:
            raise Refused(f"unsafe diff: {why}", number)
        section.renamed = True
        if header in ("rename from ", "copy from ", "rename old "):
            section.old = path
        else:
            section.new = path
    elif header := next((h for h in _MODE_HEADERS if line.startswith(h)), None):
        section.modes.append((line[len(header):].strip(), line.strip(), number))
    elif line.startswith("index "):
        fields = line.split()
        if len(fields) > 2:
            section.modes.append((fields[2], f"mode {fields[2]} on its index line", number))
    else:
        return line.startswith(_OTHER_HEADERS)
    return True


def _finish(section: Section) -> None:
    """Refuse any mode but a regular file's, once the section's paths are all known, and names
    no header made clear."""
    if section.unread is not None and not section.renamed:
        raise Refused("unsafe diff: the two paths of the 'diff --git' line cannot be told apart",
                       section.unread, "export the commit with `git format-patch`")
    for mode, header, number in section.modes:
        if mode not in SAFE_MODES:
            what = _MODE_KINDS.get(mode, "something other than a regular file")
            raise Refused(f"unsafe diff: {header!r} makes {section.new or section.old!r} {what}",
                           number, _MODE_HINT)

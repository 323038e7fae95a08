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

from patchtool.diff.binary import BinaryRefused, Declared, skip_binary
from patchtool.paths import tree_path_problem

SAFE_MODES = ("100644", "100755")  # a regular file; a link or a gitlink may point anywhere
_MODE_KINDS = {
    "120000": "a symbolic link",
    "160000": "a gitlink (a submodule commit)",
    "040000": "a directory",
    "40000": "a directory",
}
_MODE_HEADERS = ("old mode ", "new mode ", "deleted file mode ", "new file mode ")
_NAME_HEADERS = ("rename from ", "rename to ", "copy from ", "copy to ", "rename old ", "rename new ")
_OTHER_HEADERS = ("similarity index ", "dissimilarity index ")
HUNK = re.compile(r"^@@ -\d{1,10}(?:,(\d{1,10}))? \+\d{1,10}(?:,(\d{1,10}))? @@")  # git: an unsigned long
_C_ESCAPES = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, '"': 34, "\\": 92}
_PATH_HINT = "a patch may only touch files inside the upstream tree"
_MODE_HINT = (
    "a patch may only add or change regular files (mode 100644 or 100755): a symbolic "
    "link could point outside the tree, a gitlink at another repository"
)


class Refused(Exception):
    """A path or mode git would act on that may not be applied: what, the line, what to do."""

    def __init__(self, message: str, line: int, hint: str = _PATH_HINT) -> None:
        super().__init__(message)
        self.message, self.line, self.hint = message, line, hint


def unquote(text: str) -> tuple[str, str]:
    """A C-quoted name at the start of ``text`` (git quotes names with special characters) and
    the text after it; ValueError when the quoting is broken."""
    out = bytearray()
    i = 1
    while i < len(text):
        c = text[i]
        if c == '"':
            try:
                return out.decode("utf-8"), text[i + 1 :]
            except UnicodeDecodeError:
                raise ValueError(f"quoted path {text[: i + 1]} is not UTF-8") from None
        if c == "\\":
            nxt = text[i + 1 : i + 2]
            if nxt in _C_ESCAPES:
                out.append(_C_ESCAPES[nxt])
                i += 2
                continue
            if re.fullmatch(r"[0-3][0-7][0-7]", text[i + 1 : i + 4]):
                out.append(int(text[i + 1 : i + 4], 8))
                i += 4
                continue
            raise ValueError(f"bad escape in quoted path {text!r}")
        out += c.encode("utf-8")
        i += 1
    raise ValueError(f"unterminated quoted path {text!r}")


def _skip_prefix(name: str) -> str | None:
    """``name`` past its first component, as git strips it (``-p1``); None when it has none."""
    cut = name.find("/")
    return name[cut + 1 :] if cut > 0 else None


def _git_names(rest: str) -> tuple[str, str] | None:
    """The two names of a 'diff --git' line, prefixes kept, as git's ``git_header_name`` reads
    them; None when git cannot tell them apart (a rename with spaces: its names come from the
    rename headers)."""
    if rest.startswith('"'):
        first, tail = unquote(rest)
        if not tail.startswith(" "):
            raise ValueError(f"no second path after {rest!r}")
        tail = tail[1:]
        if tail.startswith('"'):
            second, end = unquote(tail)
            if end:
                raise ValueError(f"text after the second path in {rest!r}")
            return first, second
        return first, tail
    if (q := rest.find('"')) >= 0:
        if q == 0 or rest[q - 1] != " ":
            raise ValueError(f"a quote inside an unquoted path in {rest!r}")
        second, end = unquote(rest[q:])
        if end:
            raise ValueError(f"text after the second path in {rest!r}")
        return rest[: q - 1], second
    for m in re.finditer("[ \t]", rest):
        first, second = rest[: m.start()], rest[m.end() :]
        if _skip_prefix(first) is not None and _skip_prefix(first) == _skip_prefix(second):
            return first, second
    half = len(rest) // 2
    if rest[half : half + 1] == " " and rest[:half] == rest[half + 1 :]:
        return rest[:half], rest[half + 1 :]  # git cannot strip them, but they are the same name
    return None


def _header_name(text: str, *, tab_ends: bool) -> str:
    """The name on a '---', '+++', rename or copy line: quoted, or the rest of the line (up to
    a tab on '---'/'+++', where git writes one after a name with a space)."""
    if text.startswith('"'):
        name, _ = unquote(text)
        return name
    return text.split("\t", 1)[0] if tab_ends else text


def _tree_path(raw: str, *, prefixed: bool) -> tuple[str | None, str | None]:
    """(the tree path ``raw`` names, why it is refused); a prefixed name is ``a/...``/``b/...``."""
    if prefixed:
        if raw.startswith("/"):
            return None, tree_path_problem(raw)
        if not raw.startswith(("a/", "b/")):
            return None, (
                f"path {raw!r} lacks the a/ or b/ prefix git format-patch writes "
                "(git apply would strip its first directory instead)"
            )
        raw = raw[2:]
    return raw, tree_path_problem(raw)


def _safe_path(raw: str, number: int, *, prefixed: bool) -> str | None:
    """``_tree_path``'s path; Refused, naming line ``number``, where it is refused."""
    path, why = _tree_path(raw, prefixed=prefixed)
    if why:
        raise Refused(f"unsafe diff: {why}", number)
    return path


# What a header line makes of its section (git's is_new, is_delete, is_rename, is_copy): git
# refuses a section that is two of them at once (apply.c's check_header_line).
_KINDS = {
    "new file mode ": "added",
    "deleted file mode ": "deleted",
    "rename from ": "renamed",
    "rename to ": "renamed",
    "rename old ": "renamed",
    "rename new ": "renamed",
    "copy from ": "copied",
    "copy to ": "copied",
}
_EXPORT_HINT = "export the commit again with `git format-patch`"


@dataclasses.dataclass(kw_only=True, slots=True)
class Section:
    at: int  # its 'diff --git' line
    default: str | None = None  # the one name both sides of 'diff --git' give (git's def_name)
    old: str | None = None  # git's old name (None: the section creates the file)
    new: str | None = None  # git's new name (None: it deletes the file)
    modes: list[tuple[str, str, int]] = dataclasses.field(default_factory=list)  # mode, header, line
    kinds: dict[str, int] = dataclasses.field(default_factory=dict)  # "added", ... -> its first line
    status: str = "modified"  # "modified", "added", "deleted", "renamed" or "copied", once finished
    old_mode: str | None = None  # the mode the header gives the old file (None: the file's own stays)
    new_mode: str | None = None  # the mode it gives the new file
    unread: bool = False  # its 'diff --git' names could not be told apart


def read_sections(text: str) -> list[Section]:
    """Every 'diff --git' section of a whole patch file with the paths git will use; raises
    Refused at the first path or mode that may not be applied, and where git apply would call the
    header inconsistent or a hunk corrupt."""
    lines = text.split("\n")
    sections: list[Section] = []
    declared = Declared()  # what the binary hunks of the whole file ask git apply to hold
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
            if line.startswith("--- ") and [ln[:4] for ln in lines[i : i + 2]] == ["+++ ", "@@ -"]:
                raise Refused(
                    "a diff section without a 'diff --git' line (git apply would apply it "
                    "too); patch files hold only git format-patch output",
                    number,
                    "export the commit with `git format-patch`",
                )
        elif m := HUNK.match(line):
            i = skip_hunk(lines, i, m)
            in_header = i < len(lines) and lines[i].startswith("@@ -")
        elif line == "GIT binary patch":
            try:
                i = skip_binary(lines, i, declared)
            except BinaryRefused as exc:
                raise Refused(exc.message, exc.line, _EXPORT_HINT) from None
            in_header = False
        else:
            in_header = _header_line(sections[-1], line, number)
    if sections:
        _finish(sections[-1])
    return sections


def _section(line: str, number: int) -> Section:
    """A section from its 'diff --git' line: its default name, when both sides give the same."""
    section = Section(at=number)
    try:
        names = _git_names(line[len("diff --git ") :])
    except ValueError as exc:
        raise Refused(f"unsafe diff: {exc}", number) from None
    section.unread = names is None
    paths = [_safe_path(raw, number, prefixed=True) for raw in names or ()]
    if len(paths) == 2 and paths[0] == paths[1]:
        section.default = paths[0]
    return section


def skip_hunk(lines: list[str], i: int, m: re.Match[str]) -> int:
    """The index of the first line after the hunk whose header ``m`` matched (``lines[i - 1]``),
    read as git's parse_fragment reads it; Refused where git calls the patch corrupt."""
    old, new = (1 if count is None else int(count) for count in m.group(1, 2))
    header, changes = i, 0
    while old > 0 or new > 0:
        if i >= len(lines) - 1:  # the text after the last newline: no line, or one git refuses
            what = "has no newline" if lines[i:] != [""] else "is missing"
            raise Refused(
                f"corrupt patch at line {i + 1}: the hunk at line {header} is cut short (its line {i + 1} {what})",
                i + 1,
                _EXPORT_HINT,
            )
        line = lines[i]
        body = line[:1]
        if body in ("", " "):
            old, new = old - 1, new - 1
        elif body == "-":
            old, changes = old - 1, changes + 1
        elif body == "+":
            new, changes = new - 1, changes + 1
        elif body != "\\" or len(line) < 11 or not line.startswith("\\ "):
            raise Refused(
                f"corrupt patch at line {i + 1}: {line[:40]!r} inside a hunk, where git "
                "apply reads only ' ', '-', '+', an empty line or '\\ No newline at end of "
                "file'",
                i + 1,
                _EXPORT_HINT,
            )
        i += 1
    if not changes:
        raise Refused(f"corrupt patch at line {i}: the hunk changes no line", i, _EXPORT_HINT)
    if i < len(lines) - 1 and lines[i].startswith("\\ "):
        i += 1  # the marker after a hunk's last line
    return i


def _header_line(section: Section, line: str, number: int) -> bool:
    """Read one line of a section's extended header into ``section`` as git's
    parse_git_diff_header does; False where git's header ends (at the first line it does not
    know). Refused where git would refuse the header."""
    header = next((h for h in ("--- ", "+++ ", *_NAME_HEADERS, *_MODE_HEADERS) if line.startswith(h)), None)
    if header is not None and (kind := _KINDS.get(header)):
        first = min(section.kinds.values(), default=number)
        section.kinds.setdefault(kind, number)
        if len(section.kinds) > 1:
            raise Refused(
                f"inconsistent header lines {first} and {number}: {line!r} makes the section "
                f"{' and '.join(section.kinds)} at once (git apply refuses it)",
                number,
                _EXPORT_HINT,
            )
    if header in ("--- ", "+++ "):
        _name_line(section, line, number)
    elif header in _NAME_HEADERS:
        try:
            path = _safe_path(_header_name(line[len(header) :], tab_ends=False), number, prefixed=False)
        except ValueError as exc:
            raise Refused(f"unsafe diff: {exc}", number) from None
        setattr(section, "old" if header in ("rename from ", "copy from ", "rename old ") else "new", path)
    elif header in _MODE_HEADERS:
        mode = line[len(header) :].strip()
        section.modes.append((mode, line.strip(), number))
        setattr(section, "old_mode" if header in ("old mode ", "deleted file mode ") else "new_mode", mode)
        if header == "new file mode ":
            section.new = section.default
        elif header == "deleted file mode ":
            section.old = section.default
    elif line.startswith("index "):
        fields = line.split()
        if len(fields) > 2:
            section.modes.append((fields[2], f"mode {fields[2]} on its index line", number))
            section.old_mode = fields[2]  # git reads only the old mode there; the new one is the file's
    else:
        return line.startswith(_OTHER_HEADERS)
    return True


def _name_line(section: Section, line: str, number: int) -> None:
    """A '---' or '+++' line checked against what the header said so far, as git's
    gitdiff_verify_name does: a created file's old side and a deleted file's new side must be
    /dev/null, a name already known must be repeated."""
    side, field, null_kind = ("old", "old", "added") if line.startswith("---") else ("new", "new", "deleted")
    try:
        raw = _header_name(line[4:], tab_ends=True)
    except ValueError as exc:
        raise Refused(f"unsafe diff: {exc}", number) from None
    known, must_be_null = getattr(section, field), null_kind in section.kinds
    if raw == "/dev/null":
        if must_be_null and known is None:
            return
        header = "new file mode" if null_kind == "added" else "deleted file mode"
        raise Refused(
            f"{line.strip()!r} at line {number} in a section without '{header}': git "
            "apply would read it as a file called 'dev/null'",
            number,
            _EXPORT_HINT,
        )
    path = _safe_path(raw, number, prefixed=True)
    if must_be_null and known is None:
        raise Refused(
            f"{line.strip()!r} at line {number}: git apply expects /dev/null there, as the "
            f"section {'creates' if null_kind == 'added' else 'deletes'} the file",
            number,
            _EXPORT_HINT,
        )
    if known is not None and known != path:
        raise Refused(
            f"inconsistent {side} filename on line {number}: {path!r}, where the header "
            f"named {known!r} (git apply refuses it)",
            number,
            _EXPORT_HINT,
        )
    setattr(section, field, path)


def _finish(section: Section) -> None:
    """Settle the section's names and status as git does once its header is read, then refuse
    any mode but a regular file's, and names git could not find."""
    if section.unread and not {"renamed", "copied"} & section.kinds.keys():
        raise Refused(
            "unsafe diff: the two paths of the 'diff --git' line cannot be told apart",
            section.at,
            "export the commit with `git format-patch`",
        )
    if section.old is None and section.new is None:
        section.old = section.new = section.default
    kinds = section.kinds
    if (section.new is None and "deleted" not in kinds) or (section.old is None and "added" not in kinds):
        raise Refused(
            "unsafe diff: the 'diff --git' line's two paths cannot be told apart and no "
            "other header names the file (git apply: the header lacks filename information)",
            section.at,
            "export the commit with `git format-patch`",
        )
    section.status = next(iter(kinds), "modified")
    if section.status == "modified" and section.old != section.new:
        raise Refused(
            f"the section at line {section.at} names {section.old!r} and {section.new!r} "
            "without a rename or copy header",
            section.at,
            _EXPORT_HINT,
        )
    for mode, header, number in section.modes:
        if mode not in SAFE_MODES:
            what = _MODE_KINDS.get(mode, "something other than a regular file")
            raise Refused(f"unsafe diff: {header!r} makes {section.new or section.old!r} {what}", number, _MODE_HINT)

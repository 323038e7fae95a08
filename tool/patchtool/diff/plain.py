"""A plain unified diff (``diff -u``, quilt, a tarball's patch) read as ``git apply`` reads it,
and written back as the git diff that says the same.

git apply takes a '---' line followed by a '+++' line and a hunk header as a file's diff
(apply.c's find_header); everything else between files is ignored. Its names come from
``find_name_traditional``: a timestamp after a tab or spaces is cut off, the first directory
stripped (none when neither name has one), the shorter name kept when one is the other with
something tacked on (``x.orig`` / ``x``), and the '+++' name wins. '/dev/null' or an epoch
timestamp (GNU diff -N) creates or deletes; a file only added to, in one hunk, is created when
it does not exist. Hunks are read by their line counts and refused where git calls them corrupt.

``git_diff(text)`` is that reading as a git diff (every name validated, hunks verbatim), which
``model.parse`` reads like any other.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable

from patchtool.diff import gitpaths
from patchtool.diff.model import DiffError
from patchtool.paths import tree_path_problem

# a timestamp at the end of a name line, after a tab or spaces (apply.c's diff_timestamp_len)
_TIMESTAMP = re.compile(
    r"(?:\t| +)(?:\d\d)?\d\d-\d\d-\d\d(?: \d\d:\d\d:\d\d(?:\.\d+)?)?"
    r"(?: [+-]\d{4}| [+-]\d\d:\d\d)?$"
)
# GNU diff's epoch, in any zone, after the last tab: a created or deleted file (has_epoch_timestamp)
_EPOCH = re.compile(r"^(1969-12-31|1970-01-01) ([0-2]\d):([0-5]\d):00(?:\.0+)? ([-+])([0-2]\d):?([0-5]\d)$")
_NAME_ENDS = re.compile(r"[\t\r\v\f]")  # whitespace but a space ends a name with no timestamp
_BINARY = re.compile(r"^(?:Binary files |Files ).* differ$")
_HINT = "make the diff with `git diff` (or `diff -Nu old new`), or export the commit with `git format-patch`"


def _is_dev_null(name_line: str) -> bool:
    return name_line.startswith("/dev/null") and name_line[9:10] in ("", " ", "\t", "\r", "\v", "\f")


def _find_name(line: str, default: str | None, strip: int) -> str | None:
    """The name on a '---'/'+++' line (the text after the marker) with ``strip`` leading
    directories taken off, or ``default`` where it has none; the shorter of the two where one
    begins with the other."""
    if line.startswith('"'):
        with contextlib.suppress(ValueError):  # broken quoting: read as an unquoted name
            if len(parts := gitpaths.unquote(line)[0].split("/")) > strip:
                return re.sub("/+", "/", "/".join(parts[strip:]))
    text = line[: m.start()] if (m := _TIMESTAMP.search(line)) else _NAME_ENDS.split(line, 1)[0]
    start = None if strip else 0
    for i, c in enumerate(text):
        if c == "/":
            strip -= 1
            if strip == 0:
                start = i + 1
    if start is None or start == len(text):
        return default
    name = text[start:]
    if default is not None and len(default) < len(name) and name.startswith(default):
        name = default
    return re.sub("/+", "/", name)


def _guess_strip(line: str) -> int | None:
    """0 where the name has no directory at all (git's guess_p_value); None: no guess."""
    if _is_dev_null(line):
        return None
    name = _find_name(line, None, 0)
    return None if name is None or "/" in name else 0


def _is_epoch(line: str) -> bool:
    if "\t" not in line or not (m := _EPOCH.match(line.rsplit("\t", 1)[1])):
        return False
    day, hour, minute, sign, zh, zm = m.groups()
    zone = (int(zh) * 60 + int(zm)) * (-1 if sign == "-" else 1)
    return int(hour) * 60 + int(minute) - zone == (24 * 60 if day == "1969-12-31" else 0)


def _quoted(path: str) -> str:
    """``path`` as a name on a git header line: C-quoted when it holds a space, a quote or a
    byte beyond ASCII, so that the two names of 'diff --git' can be told apart."""
    if path.isascii() and " " not in path and '"' not in path:
        return path
    out = "".join('\\"' if c == '"' else c if c.isascii() else "".join(f"\\{b:03o}" for b in c.encode()) for c in path)
    return f'"{out}"'


def _quote_both(prefix: str, path: str) -> str:
    quoted = _quoted(path)
    return f'"{prefix}{quoted[1:]}' if quoted.startswith('"') else f"{prefix}{quoted}"


def git_diff(text: str, *, exists: Callable[[str], bool] | None = None, strip: int | None = None) -> str:
    """``text``, a plain unified diff, as the git diff git apply would make of it. ``exists``
    says whether the tree has a path; it settles a file that is only added to in one hunk,
    with no '/dev/null' or epoch to say it is new (git creates it when it does not exist).
    ``strip``: the leading directories to take off each name (``-pN``), where it is known;
    otherwise guessed as git guesses it. DiffError names the line where git would refuse the
    diff or a path may not be applied."""
    lines = text.split("\n")
    out: list[str] = []
    strip_known = strip is not None
    strip = 1 if strip is None else strip
    i = 0
    while i < len(lines):
        line, number = lines[i], i + 1
        if line.startswith("diff --git "):
            raise DiffError(
                f"line {number}: a 'diff --git' section inside a plain diff",
                line=number,
                hint="import a git diff and a plain diff as two patches",
            )
        if _BINARY.match(line):
            raise DiffError(
                f"line {number}: {line[:80]!r}: a binary change cannot be applied from a "
                "plain diff, which only says the file differs",
                line=number,
                hint="make the diff with `git diff --binary`, or leave the binary file out",
            )
        if line.startswith("@@ -") and gitpaths.HUNK.match(line):
            raise DiffError(f"line {number}: a hunk without a '---'/'+++' header before it", line=number, hint=_HINT)
        if not (line.startswith("--- ") and [ln[:4] for ln in lines[i + 1 : i + 3]] == ["+++ ", "@@ -"]):
            i += 1
            continue  # git apply skips what is not a file's diff
        first, second = line[4:], lines[i + 1][4:]
        if not strip_known:
            p, q = _guess_strip(first), _guess_strip(second)
            p = q if p is None else p
            if p is not None and p == q:
                strip, strip_known = p, True
        old, new, end = _file(lines, i, first, second, strip, exists)
        out += _git_header(old, new)
        out += [ln + "\n" for ln in lines[i + 2 : end]]
        i = end
    if not out:
        raise DiffError("no file's diff found (a '---' line, a '+++' line and a hunk)", hint=_HINT)
    return "".join(out)


def _file(
    lines: list[str], i: int, first: str, second: str, strip: int, exists: Callable[[str], bool] | None
) -> tuple[str | None, str | None, int]:
    """(old path, new path, the index after its hunks) of the file whose '---' line is ``lines[i]``."""
    number = i + 1
    created = deleted = None  # None: git has not decided (its is_new/is_delete of -1)
    if _is_dev_null(first):
        created, name = True, _find_name(second, None, strip)
    elif _is_dev_null(second):
        deleted, name = True, _find_name(first, None, strip)
    else:
        name = _find_name(second, _find_name(first, None, strip), strip)
        if _is_epoch(first):
            created = True
        elif _is_epoch(second):
            deleted = True
    if name is None:
        raise DiffError(
            f"line {number}: no file name on the '---'/'+++' lines (git apply: unable to find filename in patch)",
            line=number,
            hint=_HINT,
        )
    if why := tree_path_problem(name):
        raise DiffError(
            f"unsafe diff: {why} (line {number})",
            line=number,
            hint="a patch may only touch files inside the upstream tree",
        )
    end, old_lines, new_lines, hunks = i + 2, 0, 0, 0
    while end < len(lines) and lines[end].startswith("@@ -"):
        if not (m := gitpaths.HUNK.match(lines[end])):
            raise DiffError(
                f"corrupt patch at line {end + 1}: {lines[end][:60]!r} is no hunk header", line=end + 1, hint=_HINT
            )
        try:
            after = gitpaths.skip_hunk(lines, end + 1, m)
        except gitpaths.Refused as exc:
            raise DiffError(exc.message, line=exc.line, hint=_HINT) from None
        body = [ln[:1] for ln in lines[end + 1 : after]]
        old_lines += sum(b in ("", " ", "-") for b in body)
        new_lines += sum(b in ("", " ", "+") for b in body)
        hunks, end = hunks + 1, after
    if created and old_lines:
        raise DiffError(f"line {number}: new file {name} depends on old contents", line=number, hint=_HINT)
    if deleted and new_lines:
        raise DiffError(f"line {number}: deleted file {name} still has contents", line=number, hint=_HINT)
    if created is None and not old_lines and hunks == 1:
        if exists is None:
            raise DiffError(
                f"line {number}: {name!r} is only added to and not marked new ('--- /dev/null' "
                "or an epoch timestamp): git apply creates it only where it does not exist",
                line=number,
                hint="mark a new file with '--- /dev/null'",
            )
        created = not exists(name)
    return (None if created else name), (None if deleted else name), end


def _git_header(old: str | None, new: str | None) -> list[str]:
    name = new or old or ""
    return [
        f"diff --git {_quote_both('a/', name)} {_quote_both('b/', name)}\n",
        *(["new file mode 100644\n"] if old is None else []),
        *(["deleted file mode 100644\n"] if new is None else []),
        f"--- {_quote_both('a/', old) if old else '/dev/null'}\n",
        f"+++ {_quote_both('b/', new) if new else '/dev/null'}\n",
    ]

"""Typed access to parsed TOML tables that names the dotted key of every problem.

Modelled on packaging's ``_get``/``_get_required``: a reader walks a mapping,
collects every problem it meets (never stopping at the first) and reports keys
as ``patch[3].upstream.status``.
"""

from __future__ import annotations

import bisect
import re
import tomllib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from patchtool.errors import InvalidInput, Problem
from patchtool.project.patterns import PatternRefused
from patchtool.versions import parse_specifier, parse_version

T = TypeVar("T")

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0 and C1 control characters, newlines and ESC among them
MAX_SCALAR = 2**63 - 1  # TOML's integers are 64-bit; a bigger one is no value a file means
MAX_SCHEMA = 1000  # a schema number: far above any format here will reach
_TYPE_NAMES = {str: "string", int: "integer", bool: "boolean", list: "array", dict: "table", float: "number"}


def _type_name(value: object) -> str:
    if type(value) in _TYPE_NAMES:
        return _TYPE_NAMES[type(value)]
    if isinstance(value, Mapping):
        return "table"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


class Fields:
    """A view of one table; every accessor records problems instead of raising."""

    def __init__(
        self, data: Mapping[str, Any], path: str, problems: list[Problem], *, patch: str | None = None
    ) -> None:
        self.data, self.path, self.problems, self.patch = data, path, problems, patch
        self._seen: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def problem(self, name: str | None, message: str, hint: str | None = None) -> None:
        key = self.key(name) if name is not None else (self.path or None)
        self.problems.append(Problem(key=key, message=message, hint=hint, patch=self.patch))

    def _get(self, name: str, typ: type, expected: str, required: bool) -> Any:
        self._seen.add(name)
        if name not in self.data:
            if required:
                self.problem(name, "missing required key")
            return None
        value = self.data[name]
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            self.problem(name, f"unexpected type {_type_name(value)} (expected {expected})")
            return None
        return value

    def string(self, name: str, *, required: bool = True, nonempty: bool = True, one_line: bool = False) -> str | None:
        """``one_line``: a value shown on one line (an owner, a URL), so no newline or other control
        character, which could end the line or drive the terminal that shows it."""
        value: str | None = self._get(name, str, "string", required)
        if value is not None and nonempty and not value.strip():
            self.problem(name, "must not be empty")
            return None
        if value is not None and one_line and (bad := _CONTROL.search(value)):
            self.problem(
                name,
                f"{value!r} contains a control character ({bad.group()!r})",
                hint="write it on one line, without control characters",
            )
            return None
        return value

    def integer(
        self, name: str, *, maximum: int, required: bool = True, minimum: int | None = None, hint: str | None = None
    ) -> int | None:
        """An integer within bounds: every number a file gives has a documented ``maximum``."""
        value: int | None = self._get(name, int, "integer", required)
        if value is not None and minimum is not None and value < minimum:
            self.problem(name, f"must be at least {minimum}, got {value}")
            return None
        if value is not None and value > maximum:
            self.problem(name, f"must be at most {maximum}, got {value}", hint=hint)
            return None
        return value

    def boolean(self, name: str, *, required: bool = True) -> bool | None:
        value: bool | None = self._get(name, bool, "boolean", required)
        return value

    def scalar(self, name: str) -> str | int | float | None:
        """An optional number or string (a measured value may be either)."""
        self._seen.add(name)
        if (value := self.data.get(name)) is None:
            return None
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            self.problem(name, "expected a number or a string")
            return None
        if isinstance(value, int) and not -MAX_SCALAR <= value <= MAX_SCALAR:
            self.problem(name, f"must be between -{MAX_SCALAR} and {MAX_SCALAR} (what TOML holds), got {value}")
            return None
        return value

    def choice(self, name: str, choices: tuple[str, ...], *, required: bool = True) -> str | None:
        value = self.string(name, required=required)
        if value is not None and value not in choices:
            self.problem(name, f"unknown value {value!r}; expected one of {', '.join(choices)}")
            return None
        return value

    def str_list(self, name: str, *, required: bool = True) -> tuple[str, ...] | None:
        if (value := self._get(name, list, "array of strings", required)) is None:
            return None
        bad = [i for i, v in enumerate(value) if not isinstance(v, str) or not v.strip()]
        for i in bad:
            self.problem(f"{name}[{i}]", "expected a non-empty string")
        return None if bad else tuple(value)

    def str_map(self, name: str, *, required: bool = True) -> dict[str, str] | None:
        if (value := self._get(name, Mapping, "table of strings", required)) is None:
            return None
        bad = [k for k, v in value.items() if not isinstance(v, str)]
        for k in bad:
            self.problem(f"{name}.{k}", f"unexpected type {_type_name(value[k])} (expected string)")
        return None if bad else dict(value)

    def table(self, name: str, *, required: bool = True) -> Fields | None:
        if (value := self._get(name, Mapping, "table", required)) is None:
            return None
        return Fields(value, self.key(name), self.problems, patch=self.patch)

    def tables(self, name: str, *, required: bool = False) -> list[Fields]:
        if (value := self._get(name, list, "array of tables", required)) is None:
            return []
        out = []
        for i, item in enumerate(value):
            if isinstance(item, Mapping):
                out.append(Fields(item, f"{self.key(name)}[{i}]", self.problems, patch=self.patch))
            else:
                self.problem(f"{name}[{i}]", f"unexpected type {_type_name(item)} (expected table)")
        return out

    def parsed(
        self, name: str, parse: Callable[[str], T], *, required: bool = True, one_line: bool = False
    ) -> T | None:
        """A string parsed by ``parse``; a ``ValueError`` from it becomes a problem."""
        if (value := self.string(name, required=required, one_line=one_line)) is None:
            return None
        try:
            return parse(value)
        except ValueError as exc:
            self.problem(name, str(exc), hint=exc.hint if isinstance(exc, PatternRefused) else None)
            return None

    def done(self) -> None:
        """Report keys nobody asked for: a typo must not be silently ignored."""
        for name in self.data:
            if name not in self._seen:
                self.problem(name, "unknown key", hint="check the spelling against docs/manifest.md")


def complete(items: list[T | None]) -> tuple[T, ...] | None:
    """The items as a tuple, or None when a reader already recorded a problem for one of them."""
    if any(item is None for item in items):
        return None
    return tuple(item for item in items if item is not None)


# The most a manifest, a pin or the registry may be. The TOML parsers are linear but slow on
# many small values: a 4 MiB array of integers takes tomllib some 5 s and tomlkit (which reads the
# manifest to edit it) some 30 s on 2 cores; this repository's manifest of five richly documented
# patches is 84 KB, so the bound holds some 250 such patches, or 14,000 terse ones.
MAX_TOML_BYTES = 4 << 20


def toml_size_problem(text: str, *, file: str) -> InvalidInput | None:
    """The refusal of a TOML file too large to parse in bounded time, or None."""
    if len(text) <= MAX_TOML_BYTES // 4 or (size := len(text.encode("utf-8", "surrogatepass"))) <= MAX_TOML_BYTES:
        return None
    why = f"is {size} bytes, more than the {MAX_TOML_BYTES} patchtool reads in a TOML file"
    hint = "move long texts into files the entry names, or split the series"
    return InvalidInput(f"{file} {why}", file=file, problems=[Problem(file=file, code="toml", message=why, hint=hint)])


def load_toml(text: str, *, file: str) -> dict[str, Any]:
    """The table in ``text``, the TOML file ``file``; InvalidInput naming the line otherwise.

    A byte-order mark is refused, not skipped: tomllib and the other tools that read these
    files refuse it too, so a file patchtool accepted would still break them."""
    if too_large := toml_size_problem(text, file=file):
        raise too_large
    if text.startswith("\ufeff"):
        raise _not_toml(
            file,
            f"{file} starts with a UTF-8 byte-order mark",
            "starts with a UTF-8 byte-order mark; save it without one",
            hint="remove the bytes EF BB BF at its start (an editor's 'UTF-8', not 'UTF-8 with BOM')",
            line=1,
        )
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = int(m.group(1)) if (m := re.search(r"at line (\d+)", str(exc))) else None
        raise _not_toml(
            file, f"{file} is not valid TOML", f"not valid TOML: {exc}", hint="fix the syntax at that line", line=line
        ) from None
    except (ValueError, RecursionError) as exc:  # an integer past int()'s 4300 digits; arrays nested too deep
        why = "nested too deeply to read" if isinstance(exc, RecursionError) else str(exc)
        hint = "no real manifest, pin or registry holds such a value: remove it"
        raise _not_toml(file, f"{file} is not valid TOML", f"not valid TOML: {why}", hint=hint) from None


def _not_toml(file: str, summary: str, message: str, *, hint: str, line: int | None = None) -> InvalidInput:
    problem = Problem(file=file, line=line, code="toml", message=message, hint=hint)
    return InvalidInput(summary, file=file, problems=[problem])


def raise_if(problems: list[Problem], message: str, *, file: str) -> None:
    if problems:
        raise InvalidInput(message, file=file, problems=[p.located(file=file) for p in problems])


# -- parsers for Fields.parsed (beside names.PatchId, names.RepoPath): each raises ValueError
# with the message the user sees --


def pep440_version(text: str) -> Version:
    try:
        return parse_version(text)
    except InvalidVersion:
        raise ValueError(f"{text!r} is not a PEP 440 version") from None


def pep440_specifier(text: str) -> SpecifierSet:
    try:
        return parse_specifier(text)
    except InvalidSpecifier:
        raise ValueError(f"{text!r} is not a PEP 440 version specifier (e.g. '>=0.5.23,<0.5.24')") from None


_HEADER_RE = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\-\"]+)\s*\]\]?")
_ARRAY_HEADER_RE = re.compile(r"^\s*\[\[\s*([A-Za-z0-9_.\-]+)\s*\]\]")
_TABLE_HEADER_RE = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\-]+)\s*\]")
_ASSIGNMENT_RE = re.compile(r"^\s*([A-Za-z0-9_\-]+)\s*=")
_KEY_PART_RE = re.compile(r"([A-Za-z0-9_\-]+)(?:\[(\d+)\])?")


def _first(lines: list[int], start: int, end: int) -> int | None:
    """The first of the sorted ``lines`` in ``range(start, end)``."""
    i = bisect.bisect_left(lines, start)
    return lines[i] if i < len(lines) and lines[i] < end else None


class KeyLines:
    """Best-effort line numbers of dotted keys such as ``patch[2].upstream.status`` in one TOML
    text (lines as TOML counts them: a U+2028 inside a string ends none).

    The text's headers and assignments are indexed once, on the first lookup, so naming the line
    of every problem in a file costs time linear in the file, however many problems it has."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._count = 0
        self._arrays: dict[str, list[int]] = {}  # a table's '[[table]]' lines
        self._headers: dict[str, list[int]] = {}  # its '[table]' and '[[table]]' lines, quoted or not
        self._tables: dict[str, list[int]] = {}  # its '[table]' lines
        self._assignments: dict[str, list[int]] = {}  # a bare key's 'key = ' lines
        self._indexed = False

    def _index(self) -> None:
        lines = self._text.split("\n")
        self._count = len(lines)
        for i, text in enumerate(lines):
            if m := _ARRAY_HEADER_RE.match(text):
                self._arrays.setdefault(m.group(1), []).append(i)
            if m := _HEADER_RE.match(text):
                self._headers.setdefault(m.group(1).strip('"'), []).append(i)
            if m := _TABLE_HEADER_RE.match(text):
                self._tables.setdefault(m.group(1), []).append(i)
            if m := _ASSIGNMENT_RE.match(text):
                self._assignments.setdefault(m.group(1), []).append(i)
        self._indexed = True

    def line(self, key: str | None) -> int | None:
        """The 1-based line of ``key``, or of the deepest table of it found; None if none is."""
        if not key:
            return None
        if not self._indexed:
            self._index()
        start, end = 0, self._count
        prefix: list[str] = []
        line: int | None = None
        for name, index in _KEY_PART_RE.findall(key):
            prefix.append(name)
            table = ".".join(prefix)
            if index:
                hits = self._arrays.get(table, [])
                n = bisect.bisect_left(hits, start) + int(index)
                if n >= len(hits) or hits[n] >= end:
                    return line
                start = hits[n]
                nxt = _first(self._headers.get(table, []), start + 1, end)
                end = nxt if nxt is not None else end
                line = start + 1
                continue
            candidates = (self._assignments.get(name, []), self._tables.get(table, []))
            found = [i for lines in candidates if (i := _first(lines, start, end)) is not None]
            if not found:
                return line
            start = min(found)
            line = start + 1
        return line


def key_line(text: str, key: str | None) -> int | None:
    """The line of one dotted ``key`` in TOML ``text`` (``KeyLines``: for several keys of one
    text, index it once)."""
    return KeyLines(text).line(key)

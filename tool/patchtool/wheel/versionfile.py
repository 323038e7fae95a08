"""The version a package states in its own files, restated as the patched wheel's version.

A repacked wheel's METADATA says ``0.5.23+pt.<hash>``, but the package's ``version.py`` and
``_version.py`` (setuptools-scm writes the latter) still said ``0.5.23``: ``pkg.__version__``,
the string users paste into bug reports, hid the series. Only an assignment to a version name
whose value is exactly the upstream version (or setuptools-scm's tuple of it) is rewritten,
found by Python's own parser; every other byte of the file stays as it was.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import itertools
import zipfile
from collections.abc import Mapping, MutableMapping, Sequence

from packaging.version import InvalidVersion, Version

from patchtool.wheel.provenance import FileRecord

VERSION_FILES = ("version.py", "_version.py")  # directly in a top-level package
_STRING_NAMES = frozenset({"__version__", "version", "VERSION"})
_TUPLE_NAMES = frozenset({"__version_tuple__", "version_tuple", "VERSION_TUPLE"})

Planned = zipfile.ZipInfo | tuple[bytes, int]  # a member copied from the source, or new bytes and a mode


def is_version_file(member: str) -> bool:
    top, sep, rest = member.partition("/")
    return bool(sep) and rest in VERSION_FILES and not top.endswith((".dist-info", ".data"))


def version_tuple(version: Version) -> tuple[int | str, ...]:
    """``version`` as setuptools-scm writes ``__version_tuple__``: ``(0, 5, 23, 'pt.abc')``."""
    fields: tuple[int | str, ...] = version.release
    if version.epoch:
        fields = (f"{version.epoch}!", *fields)
    if version.pre is not None:
        fields += (f"{version.pre[0]}{version.pre[1]}",)
    if version.post is not None:
        fields += (f"post{version.post}",)
    if version.dev is not None:
        fields += (f"dev{version.dev}",)
    if version.local is not None:
        fields += (version.local,)
    return fields


def _states(value: ast.expr, names: set[str], old: Version) -> str | None:
    """What kind of version ``value`` states as ``old`` ("string", "tuple"), if it does."""
    if names & _STRING_NAMES and isinstance(value, ast.Constant) and isinstance(value.value, str):
        try:
            return "string" if Version(value.value) == old and value.value.strip() == value.value else None
        except InvalidVersion:
            return None
    if names & _TUPLE_NAMES and isinstance(value, ast.Tuple):
        try:
            literal = ast.literal_eval(value)
        except ValueError:
            return None
        return "tuple" if literal == version_tuple(old) else None
    return None


def rewrite(source: bytes, old: Version, new: Version) -> bytes | None:
    """``source`` with each version assignment that states ``old`` restated as ``new`` (a
    string keeps its quotes); None when no assignment states ``old``."""
    try:
        source.decode("utf-8")  # ast's offsets are into UTF-8 text: any other encoding is left alone
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    if source.startswith(b"\xef\xbb\xbf"):
        return None
    edits: list[tuple[ast.expr, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if (kind := _states(value, {t.id for t in targets if isinstance(t, ast.Name)}, old)) is not None:
            edits.append((value, kind))
    if not edits:
        return None
    starts = [0, *itertools.accumulate(map(len, source.splitlines(keepends=True)))]
    out = source
    for value, kind in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
        assert value.end_lineno is not None and value.end_col_offset is not None
        a = starts[value.lineno - 1] + value.col_offset  # ast's offsets count UTF-8 bytes
        b = starts[value.end_lineno - 1] + value.end_col_offset
        if kind == "string":
            quote = out[a:b].lstrip(b"uUrR")[:1]
            text = (quote if quote in (b"'", b'"') else b'"') + str(new).encode()
            text += text[:1]
        else:
            text = repr(version_tuple(new)).encode()
        out = out[:a] + text + out[b:]
    return out


def restate(plan: MutableMapping[str, Planned], zf: zipfile.ZipFile, old: Version, new: Version) -> dict[str, bytes]:
    """Rewrite, in ``plan`` (wheel path -> member), every version file that states ``old``;
    the new bytes of each one rewritten, by wheel path."""
    if old == new:
        return {}
    rewritten = {}
    for path, item in list(plan.items()):
        if not is_version_file(path):
            continue
        if isinstance(item, zipfile.ZipInfo):
            data, mode = zf.read(item), (item.external_attr >> 16) & 0o7777 or 0o644
        else:
            data, mode = item
        if (again := rewrite(data, old, new)) is not None:
            plan[path] = (again, mode)
            rewritten[path] = again
    return rewritten


def restated_files(files: Sequence[FileRecord], rewritten: Mapping[str, bytes]) -> tuple[FileRecord, ...]:
    """The provenance's file records with the hash a rewritten version file now has."""
    return tuple(
        dataclasses.replace(f, sha256=hashlib.sha256(data).hexdigest())
        if f.sha256 is not None and (data := rewritten.get(f.wheel_path or "")) is not None
        else f
        for f in files
    )

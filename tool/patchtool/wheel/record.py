"""A wheel's ``RECORD`` read back: every file it lists checked against its sha256 and size.

A wheel's RECORD lists each member with ``sha256=<urlsafe base64, no padding>`` and its size;
an installer keeps the rows for the files it installs. Checking every row, and that nothing
unlisted is there, is what makes "consistent" mean "every file is as built", not only the
files the series changed.
"""

from __future__ import annotations

import base64
import binascii
import csv
import dataclasses
import hashlib
from collections.abc import Callable, Iterable

# md5 and sha1 are too weak to vouch for a file; PEP 376 allows any hashlib algorithm
_WEAK = frozenset({"md5", "sha1"})
_SIGNATURES = ("RECORD.jws", "RECORD.p7s")  # signatures of RECORD: never listed in it


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    path: str
    hash: str  # "sha256=..." or "" (RECORD itself, an installer's .pyc files)
    size: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Mismatch:
    """A file that is not as RECORD says."""

    path: str
    reason: str


def parse(text: str, record: str) -> tuple[dict[str, Row], list[Mismatch]]:
    """RECORD's rows by path, and what is wrong with the file itself (malformed or repeated rows)."""
    rows: dict[str, Row] = {}
    bad: list[Mismatch] = []
    try:
        lines = list(csv.reader(text.splitlines()))
    except csv.Error as exc:
        return rows, [Mismatch(path=record, reason=f"is not valid CSV: {exc}")]
    for n, fields in enumerate(lines, 1):
        if not fields:
            continue
        if len(fields) != 3:
            bad.append(Mismatch(path=record, reason=f"line {n} has {len(fields)} fields, not 3"))
            continue
        path, digest, size = fields
        if path in rows:
            bad.append(Mismatch(path=path, reason="is listed twice in RECORD"))
            continue
        rows[path] = Row(path=path, hash=digest, size=size)
    return rows, bad


def verify(
    rows: dict[str, Row], read: Callable[[str], bytes | None], *, record: str, unhashed_ok: Callable[[str], bool]
) -> tuple[int, list[Mismatch]]:
    """Check every row against ``read(path)`` (the file's bytes, None when it is not there): (how
    many files matched, what did not). ``record`` is RECORD's own path; a row without a hash is a
    mismatch unless ``unhashed_ok(path)``."""
    matched = 0
    bad: list[Mismatch] = []
    for row in rows.values():
        if row.path == record:
            continue
        if not row.hash:
            if not unhashed_ok(row.path):
                bad.append(Mismatch(path=row.path, reason="has no hash in RECORD"))
            continue
        algorithm, _, encoded = row.hash.partition("=")
        if algorithm not in hashlib.algorithms_guaranteed or algorithm in _WEAK:
            bad.append(Mismatch(path=row.path, reason=f"has a {algorithm!r} hash in RECORD, which cannot vouch for it"))
            continue
        try:
            expected = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        except (binascii.Error, ValueError):
            bad.append(Mismatch(path=row.path, reason="has a hash in RECORD that is not urlsafe base64"))
            continue
        if (data := read(row.path)) is None:
            bad.append(Mismatch(path=row.path, reason="is listed in RECORD but missing"))
            continue
        if hashlib.new(algorithm, data).digest() != expected:
            bad.append(Mismatch(path=row.path, reason=f"differs from RECORD ({algorithm} does not match)"))
        elif row.size and row.size != str(len(data)):
            bad.append(Mismatch(path=row.path, reason=f"is {len(data)} bytes, RECORD says {row.size}"))
        else:
            matched += 1
    return matched, bad


def unlisted(paths: Iterable[str], rows: dict[str, Row], *, record: str) -> list[Mismatch]:
    """The files present that RECORD does not list (RECORD itself and its signatures aside)."""
    sigs = {record.rpartition("/")[0] + "/" + s for s in _SIGNATURES}
    return [
        Mismatch(path=p, reason="is not listed in RECORD")
        for p in paths
        if p not in rows and p != record and p not in sigs
    ]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Payload:
    """What a build puts where an installer puts the package: how many files, and a sha256 over
    their RECORD rows (``path,hash,size`` lines in path order). Recorded in the provenance, it
    catches a wheel or install whose files were changed and RECORD rewritten to match."""

    files: int
    sha256: str

    @classmethod
    def of(cls, rows: Iterable[Row]) -> Payload:
        ordered = sorted(rows, key=lambda r: r.path)
        h = hashlib.sha256()
        for r in ordered:
            h.update(f"{r.path},{r.hash},{r.size}\n".encode())
        return cls(files=len(ordered), sha256=h.hexdigest())


def installed_path(member: str, *, dist_info: str) -> str | None:
    """Where an installer puts wheel member ``member``, relative to site-packages; None for the
    metadata and for what goes elsewhere (scripts, headers, data)."""
    top, _, rest = member.partition("/")
    if top == dist_info:
        return None
    if top.endswith(".data"):
        kind, _, rel = rest.partition("/")
        return rel if kind in ("purelib", "platlib") and rel else None
    return member


def payload_rows(rows: Iterable[Row], *, dist_info: str, package_copy: str | None, installed: bool) -> list[Row]:
    """The rows of ``rows`` (a wheel's RECORD, or an installer's) that make up the payload, at
    their installed paths: the provenance's package copy (it cannot hash itself), and what an
    installer adds (files outside site-packages, byte-compiled files it lists without a hash) left
    out."""
    out = []
    for r in rows:
        if installed:
            where: str | None = r.path
            if r.path.startswith((f"{dist_info}/", "../", "/")) or (not r.hash and r.path.endswith(".pyc")):
                where = None
        else:
            where = installed_path(r.path, dist_info=dist_info)
        if where is not None and where != package_copy:
            out.append(dataclasses.replace(r, path=where))
    return out

"""The release wheel repacked: members copied compressed, the series' files replaced, the version
and the ``.dist-info`` renamed, and the provenance record added with the payload it describes.

``repack`` reads as its steps: read the source wheel's layout (checked against its file name),
plan the new wheel's members, restate the package's version file, add the provenance, and write
the archive with its RECORD into ``out`` in one rename at the end (``_atomic``). Used for both ways
of ``build``: a pinned release wheel with the series' files, and a freshly built wheel restamped.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import fcntl
import hashlib
import io
import os
import re
import uuid
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from email.parser import HeaderParser
from pathlib import Path
from typing import Any, BinaryIO

from packaging.tags import Tag, parse_tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from patchtool import fsroot, progress
from patchtool.errors import BuildError, UpstreamError, UsageError
from patchtool.upstream.artifacts import damaged_as_error
from patchtool.upstream.members import open_zip, safe_members
from patchtool.versions import parse_version
from patchtool.wheel import versionfile
from patchtool.wheel.archive import ArchiveWriter, Digest
from patchtool.wheel.provenance import DIST_INFO_FILE, FileChange, Provenance
from patchtool.wheel.record import Payload, Row, installed_path

_SIGNATURES = ("RECORD", "RECORD.jws", "RECORD.p7s")  # rewritten, or invalid once anything changes


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class WheelName:
    """A wheel file name: ``{distribution}-{version}(-{build})?-{python}-{abi}-{platform}.whl``."""

    distribution: str  # as spelled in the file name
    version: Version
    build_tag: str | None
    tag_text: str  # "cp311-cp311-manylinux_2_34_x86_64"

    @classmethod
    def parse(cls, filename: str) -> WheelName:
        try:
            _, version, _, _ = parse_wheel_filename(filename)
        except InvalidWheelFilename as exc:
            raise UsageError(f"{filename!r} is not a wheel file name: {exc}") from None
        parts = filename[: -len(".whl")].split("-")
        return cls(
            distribution=parts[0],
            version=version,
            build_tag=parts[2] if len(parts) == 6 else None,
            tag_text="-".join(parts[-3:]),
        )

    @property
    def tags(self) -> frozenset[Tag]:
        return parse_tag(self.tag_text)

    def filename(self, version: Version) -> str:
        build = [self.build_tag] if self.build_tag else []
        return "-".join([self.distribution, str(version), *build, self.tag_text]) + ".whl"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Replacement:
    """New content for a member (``data`` None: the series deletes it)."""

    change: FileChange
    data: bytes | None
    mode: int = 0o644


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Repacked:
    path: Path
    sha256: str
    size: int
    members: int
    copied: int  # compressed bytes copied unchanged
    written: int  # compressed by us: changed, added, rewritten metadata, provenance
    provenance: Provenance  # as written, with its payload


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Layout:
    """Where a wheel keeps its metadata, checked against what its file name says."""

    dist_info: str  # "sglang-0.5.23.dist-info"
    stem: str  # "sglang-0.5.23": also names the optional .data directory
    metadata: bytes
    newest: tuple[int, ...]  # the newest member timestamp

    @classmethod
    def read(cls, zf: zipfile.ZipFile, members: Sequence[zipfile.ZipInfo], name: WheelName, label: str) -> _Layout:
        infos = sorted({m.filename.split("/", 1)[0] for m in members if re.match(r"[^/]*\.dist-info/", m.filename)})
        if len(infos) != 1:
            raise UpstreamError(f"{label}: expected one .dist-info directory, found {len(infos)}; refusing it")
        stem = infos[0][: -len(".dist-info")]
        dist, _, ver = stem.rpartition("-")
        expected = f"{name.distribution} {name.version}"
        if canonicalize_name(dist) != canonicalize_name(name.distribution) or _version(ver) != name.version:
            raise UpstreamError(
                f"{label}: its metadata directory is {infos[0]}, but the file name says {expected}; refusing it"
            )
        names = {m.filename for m in members}
        metadata = zf.read(f"{infos[0]}/METADATA") if f"{infos[0]}/METADATA" in names else b""
        headers = HeaderParser().parsestr(metadata.decode("utf-8", "replace"))
        meta_name, meta_version = headers.get("Name") or "", headers.get("Version") or ""
        if (
            canonicalize_name(meta_name) != canonicalize_name(name.distribution)
            or _version(meta_version) != name.version
        ):
            raise UpstreamError(
                f"{label} contains {meta_name or '?'} {meta_version or '?'} (its METADATA), "
                f"not {expected}; refusing it",
                hint="the pin names the wrong file",
            )
        wheel_file = zf.read(f"{infos[0]}/WHEEL") if f"{infos[0]}/WHEEL" in names else b""
        tags = frozenset(
            t
            for line in HeaderParser().parsestr(wheel_file.decode("utf-8", "replace")).get_all("Tag", [])
            for t in parse_tag(line.strip())
        )
        if tags != name.tags:
            found = ", ".join(sorted(str(t) for t in tags)) or "none"
            raise UpstreamError(
                f"{label}: its WHEEL file says tags {found}, but its file name says "
                f"{name.tag_text}; refusing it (a wheel for another platform?)"
            )
        newest = max((m.date_time for m in members), default=(1980, 1, 1, 0, 0, 0))
        return cls(dist_info=infos[0], stem=stem, metadata=metadata, newest=newest)


def _version(text: str) -> Version | None:
    try:
        return parse_version(text)
    except InvalidVersion:
        return None


def rewrite_version(metadata: bytes, version: Version) -> bytes:
    """METADATA with its one ``Version:`` header replaced; the body and line endings kept."""
    head, sep, body = _split_headers(metadata)
    new, n = re.subn(
        rb"^Version:[ \t]*[^\r\n]*", b"Version: " + str(version).encode(), head, count=2, flags=re.MULTILINE
    )
    if n != 1:
        raise UpstreamError(f"METADATA has {n} Version headers, expected one; refusing it")
    return new + sep + body


def _split_headers(metadata: bytes) -> tuple[bytes, bytes, bytes]:
    if (m := re.search(rb"\r?\n\r?\n", metadata)) is None:
        return metadata, b"", b""
    return metadata[: m.start()], metadata[m.start() : m.end()], metadata[m.end() :]


_Plan = dict[str, zipfile.ZipInfo | tuple[bytes, int]]  # a member copied from the source, or new bytes and mode


def repack(
    source: Path,
    out: Path,
    *,
    name: WheelName,
    version: Version,
    replace: Mapping[str, Replacement],
    provenance: Provenance,
    date_time: tuple[int, ...] | None = None,
    restamp: bool = False,
) -> Repacked:
    """Write ``source`` with ``replace`` applied, the new version and ``provenance`` (with the
    payload it now describes), into ``out``.

    Unchanged members are copied compressed; their content is still hashed for RECORD.
    New members get ``date_time`` (default: the newest timestamp in ``source``); with
    ``restamp``, copied members get it too. Entries are sorted, ``.dist-info`` last,
    RECORD at the very end.
    """
    label = source.name
    with damaged_as_error(label), open_zip(source, label) as zf, open(source, "rb") as raw:
        members = safe_members(zf, label, packed=source.stat().st_size)
        layout = _Layout.read(zf, members, name, label)
        when = tuple(date_time) if date_time is not None else layout.newest
        new_stem = f"{layout.stem.rpartition('-')[0]}-{version}"
        new_info = f"{new_stem}.dist-info"
        plan = _plan(members, layout, replace, version, new_stem=new_stem, label=label)
        rewritten = versionfile.restate(plan, zf, name.version, version)  # pkg.__version__ as METADATA
        provenance = dataclasses.replace(provenance, files=versionfile.restated_files(provenance.files, rewritten))
        provenance = _add_provenance(zf, plan, provenance, dist_info=new_info, label=label)
        return _write(
            raw,
            plan,
            out,
            name.filename(version),
            dist_info=new_info,
            label=label,
            when=when,
            restamp=restamp,
            provenance=provenance,
        )


def _plan(
    members: Sequence[zipfile.ZipInfo],
    layout: _Layout,
    replace: Mapping[str, Replacement],
    version: Version,
    *,
    new_stem: str,
    label: str,
) -> _Plan:
    """The new wheel's members by name: the signatures dropped, the series' replacements in, METADATA
    with the new version, and the ``.dist-info`` and ``.data`` directories renamed for it."""
    renames = {layout.dist_info: f"{new_stem}.dist-info", f"{layout.stem}.data": f"{new_stem}.data"}

    def renamed(member: str) -> str:
        top, sep, rest = member.partition("/")
        return renames.get(top, top) + sep + rest if sep else member

    plan: _Plan = {}
    pending = dict(replace)
    for info in members:
        top, _, rest = info.filename.partition("/")
        if top == layout.dist_info and rest in _SIGNATURES:
            continue
        if (rep := pending.pop(info.filename, None)) is not None:
            if rep.change is FileChange.ADDED:
                raise BuildError(f"the series adds {info.filename}, but {label} already has it")
            if rep.data is not None:
                plan[info.filename] = (rep.data, rep.mode)
            continue
        if info.filename == f"{layout.dist_info}/METADATA":
            plan[renamed(info.filename)] = (
                rewrite_version(layout.metadata, version),
                (info.external_attr >> 16) & 0o7777 or 0o644,
            )
            continue
        plan[renamed(info.filename)] = info
    for path, rep in pending.items():
        if rep.change is not FileChange.ADDED or rep.data is None:
            raise BuildError(f"the series changes {path}, which {label} does not ship")
        plan[path] = (rep.data, rep.mode)
    return plan


def _add_provenance(
    zf: zipfile.ZipFile, plan: _Plan, provenance: Provenance, *, dist_info: str, label: str
) -> Provenance:
    """Add the provenance record to ``plan`` (in place) in the ``.dist-info`` directory and, when it
    names one, as the package's copy; return it with the payload it describes."""
    copies = [f"{dist_info}/{DIST_INFO_FILE}"] + ([provenance.package_copy] if provenance.package_copy else [])
    for path in copies:
        if path in plan:
            raise BuildError(f"{label} already has {path}; refusing to overwrite it with the provenance record")
    provenance = dataclasses.replace(
        provenance, payload=_payload(zf, plan, dist_info=dist_info, package_copy=provenance.package_copy)
    )
    for path in copies:
        plan[path] = (provenance.to_bytes(), 0o644)
    return provenance


def _write(
    raw: BinaryIO,
    plan: _Plan,
    out: Path,
    filename: str,
    *,
    dist_info: str,
    label: str,
    when: tuple[int, ...],
    restamp: bool,
    provenance: Provenance,
) -> Repacked:
    """Write ``plan`` as ``filename`` into ``out``, copying members from ``raw`` (the source wheel):
    entries sorted, ``dist_info`` last, and the RECORD of them all at the very end."""
    order = sorted(plan, key=lambda p: (p.partition("/")[0] == dist_info, p))
    record_name = f"{dist_info}/RECORD"
    with _atomic(out, filename) as (fh, final):
        writer = ArchiveWriter(fh, label)
        rows: list[tuple[str, str, str]] = []
        copied = written = 0
        for path in progress.track(order, f"write {filename}", unit="members"):
            item = plan[path]
            digest: Digest
            if isinstance(item, zipfile.ZipInfo):
                digest = writer.copy(raw, item, name=path, date_time=when if restamp else None)
                copied += 1
            else:
                digest = writer.add(path, item[0], date_time=when, mode=item[1])
                written += 1
            rows.append((path, digest.record_hash, str(digest.size)))
        rows.append((record_name, "", ""))
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        writer.add(record_name, buf.getvalue().encode(), date_time=when, mode=0o644)
        sha = writer.finish()
        size = writer.out.offset
    return Repacked(
        path=final, sha256=sha, size=size, members=len(rows), copied=copied, written=written + 1, provenance=provenance
    )


def _payload(
    zf: zipfile.ZipFile,
    plan: Mapping[str, zipfile.ZipInfo | tuple[bytes, int]],
    *,
    dist_info: str,
    package_copy: str | None,
) -> Payload:
    """The payload the wheel will carry: its members' RECORD rows at their installed paths. Copied
    members are read once more for it: the provenance record is written before most of them."""
    rows = []
    for path, item in plan.items():
        if (where := installed_path(path, dist_info=dist_info)) is None or where == package_copy:
            continue
        h, size = hashlib.sha256(), 0
        if isinstance(item, zipfile.ZipInfo):
            with zf.open(item) as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
                    size += len(chunk)
        else:
            h.update(item[0])
            size = len(item[0])
        rows.append(Row(path=where, hash=Digest(h.digest(), size).record_hash, size=str(size)))
    return Payload.of(rows)


_PART = re.compile(r"^\..+\.whl\.[0-9a-f]{8}\.part$")  # what _atomic writes before the rename


@contextlib.contextmanager
def _atomic(out: Path, filename: str) -> Iterator[tuple[Any, Path]]:
    """A file that appears in ``out`` as ``filename`` only when the block succeeds. The partial
    file is locked while it is written; one left by a killed build is unlocked, and removed here."""
    created = not out.exists()
    fsroot.Root(out).directory()
    _remove_stale_parts(out)
    fh, part = _locked_part(out, filename)
    try:
        with fh:
            yield fh, (out / filename).absolute()
        fsroot.Root(out).rename(part.name, filename)  # never over anything but a regular file
    except BaseException:
        part.unlink(missing_ok=True)
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()
        raise


def _locked_part(out: Path, filename: str) -> tuple[BinaryIO, Path]:
    """A new partial file in ``out``, open and locked. A cleaner may take the lock between the
    open and the lock and remove the file: then it is no longer there once ours is held, so try
    another name."""
    while True:
        part = out / f".{filename}.{uuid.uuid4().hex[:8]}.part"
        fh = open(part, "xb")  # noqa: SIM115 -- returned, locked, to the caller
        fcntl.flock(fh, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError):
            if os.stat(part).st_ino == os.fstat(fh.fileno()).st_ino:
                return fh, part
        fh.close()


def _remove_stale_parts(out: Path) -> None:
    """Remove the partial wheels of builds that died: no process holds their lock any more."""
    for part in out.iterdir():
        if not _PART.match(part.name) or not part.is_file() or part.is_symlink():
            continue
        try:
            with open(part, "rb") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                part.unlink()
        except OSError:  # BlockingIOError: a build running now is writing it
            continue

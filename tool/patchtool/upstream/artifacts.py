"""A release artifact (wheel or sdist) read as the files it puts in the cache, and the record an
import keeps of the artifact it was made from.

An artifact is hostile input even when its sha256 matches the pin: every member name goes
through the one path validator before and after the pin's prefix mapping, links and other
non-files are refused, and a damaged archive is an error naming the file, never a traceback.
"""

from __future__ import annotations

import bz2
import contextlib
import dataclasses
import functools
import gzip
import itertools
import lzma
import re
import struct
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, BinaryIO, NoReturn, cast

from packaging.version import InvalidVersion, Version

from patchtool import progress
from patchtool.errors import PatchtoolError, UpstreamError
from patchtool.git import FileWrite
from patchtool.paths import tree_path_problem
from patchtool.upstream import members
from patchtool.upstream.members import (
    MAX_MEMBER_BYTES,
    MAX_RATIO,
    RATIO_FLOOR,
    MemberNames,
    bomb_reason,
    open_zip,
    safe_members,
)
from patchtool.versions import parse_version

if TYPE_CHECKING:
    from patchtool.project.pins import Artifact

IMPORT_LAYOUT = 2  # bump when the import layout changes: it changes every imported SHA
# layout 2 records the artifact's size in the import's message


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ImportRecord:
    """What an import's commit message says it was made from."""

    filename: str
    sha256: str
    size: int | None  # None: made by layout 1, which did not record it
    layout: int
    prefix: str  # "sglang/ -> python/sglang/"

    def to_message(self, upstream: str, version: Version) -> str:
        return (
            f"{upstream} {version}\n\n"
            f"Imported from {self.filename}\n"
            f"sha256 {self.sha256}\n"
            f"size {self.size}\n"
            f"layout {self.layout}: {self.prefix}\n"
        )

    @classmethod
    def parse(cls, message: str) -> ImportRecord | None:
        if (m := _RECORD.search(message)) is None:
            return None
        return cls(
            filename=m["filename"],
            sha256=m["sha256"],
            size=int(m["size"]) if m["size"] else None,
            layout=int(m["layout"]),
            prefix=m["prefix"],
        )

    @staticmethod
    def mapping(art: Artifact) -> str:
        return f"{art.prefix_from or '.'} -> {art.prefix_to or '.'}"


_RECORD = re.compile(
    r"^Imported from (?P<filename>\S+)\nsha256 (?P<sha256>[0-9a-f]{64})\n"
    r"(?:size (?P<size>\d+)\n)?layout (?P<layout>\d+): (?P<prefix>.*)$",
    re.MULTILINE,
)


@contextlib.contextmanager
def damaged_as_error(
    label: str, error: type[PatchtoolError] = UpstreamError, *, hint: str | None = None
) -> Iterator[None]:
    """Turn what a damaged archive raises while it is read (a truncated file, corrupt deflate data, a
    bad CRC) into ``error`` naming ``label``; so too what ``zipfile`` and ``tarfile`` raise on a
    malformed header they parse without checking it (a number that is no number, a record that
    ends early, headers nested past the stack), which no archive patchtool reads may end in."""
    import zlib

    try:
        yield
    except (zipfile.BadZipFile, zlib.error, EOFError, tarfile.TarError, *_MALFORMED) as exc:
        raise error(f"{label} is damaged and cannot be read ({damage(exc)}); refusing it", hint=hint) from None


# what the archive modules' parsers raise on a header they read without checking it
_MALFORMED = (ValueError, IndexError, struct.error, OverflowError, RecursionError)


def damage(exc: BaseException) -> str:
    """What a damaged archive's exception says, in words."""
    import zlib

    if isinstance(exc, zlib.error):
        return f"corrupt compressed data: {exc}"
    if isinstance(exc, EOFError):
        return "it ends early"
    if isinstance(exc, RecursionError):
        return "malformed: its headers nest too deep"
    if isinstance(exc, _MALFORMED):
        return f"malformed: {type(exc).__name__}: {exc}"
    return str(exc) or type(exc).__name__


HOSTILE_HINT = "the artifact is malformed or hostile; nothing was imported"
DAMAGED_HINT = (
    "the file matches the pin's sha256, so the pin names a damaged file: check the pin "
    "against the index; nothing was imported"
)


HEADER_LIMIT = 1 << 16  # the most one tar header may read: a GNU long name or a PAX record set
# the most extended headers (GNU long names and links, PAX headers) one member may have: a global
# PAX header, its own, a long name and a long link at the most in a well-made archive; tarfile
# reads each chain by recursion
MAX_EXTENDED_HEADERS = 8
_CHUNK = 1 << 20  # the most of an sdist inflated between two checks of its ratio


class _Bounded:
    """The uncompressed tar stream as ``tarfile`` reads it, each read at most ``limit`` bytes.
    ``tarfile`` reads a GNU long name or PAX header's data whole as it iterates, before any
    member is handed back to be checked: a 400 MiB "name" in a 400 KiB sdist is refused here,
    at its header, instead of being inflated. A member's own data is read under ``member``.

    What a tar header declares is all the data there is, but a gzip of zeros inflates a thousand
    times over, and skipping a member inflates it too: so the stream is inflated ``_CHUNK`` at a
    time, and refused (``current`` names the member) as soon as a member's data, or the whole so
    far, past ``RATIO_FLOOR`` inflates to more than ``MAX_RATIO`` times the compressed bytes it
    took, as a zip member's declared sizes are held (``inflation.bomb_reason``)."""

    def __init__(self, raw: BinaryIO, label: str, *, packed: BinaryIO) -> None:
        self.raw, self.label, self.limit, self.packed = raw, label, HEADER_LIMIT, packed
        self.current = ""
        self.extended = 0  # the extended headers read so far in a chain (``_Header``)
        self.pax: str | None = None  # the PAX header whose records are read next (``_Header``)

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0 or n > self.limit:
            self.refuse(
                f"a tar header asks to read {n if n >= 0 else 'all'} bytes at offset {self.raw.tell()}, more than "
                f"the {self.limit} a header may hold (a hostile long name or PAX header?)"
            )
        start, out = self._mark(), []
        while n > 0 and (data := self.raw.read(min(n, _CHUNK))):
            out.append(data)
            n -= len(data)
            self._check(start)
        read = b"".join(out)
        if self.pax is not None:
            header, self.pax = self.pax, None
            _refuse_sparse_records(self, header, read)
        return read

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0:  # forward: what is skipped is inflated on the way, checked as it comes
            start = self._mark()
            while (ahead := offset - self.raw.tell()) > 0 and self.raw.read(min(ahead, _CHUNK)):
                self._check(start)
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()

    def _mark(self) -> tuple[int, int]:
        return self.raw.tell(), self.packed.tell()

    def _check(self, start: tuple[int, int]) -> None:
        inflated, packed = self._mark()
        run, taken = inflated - start[0], packed - start[1]
        why = None
        if run > RATIO_FLOOR and run > MAX_RATIO * max(taken, 1):
            why = f"inflates to {run} bytes from {taken} compressed"
        elif inflated > RATIO_FLOOR and inflated > MAX_RATIO * max(packed, 1):
            why = f"brings the archive to {inflated} bytes from the first {packed} compressed"
        if why is not None:
            self.refuse(f"entry {self.current!r} {why}, more than {MAX_RATIO} times as many (a tar bomb?)")

    def refuse(self, why: str) -> NoReturn:
        raise UpstreamError(f"{self.label}: {why}; refusing it", hint=HOSTILE_HINT)

    @contextlib.contextmanager
    def member(self, size: int) -> Iterator[None]:
        """Reads of up to ``size`` bytes: a member's data, whose size was checked first."""
        self.limit = max(size, HEADER_LIMIT)
        try:
            yield
        finally:
            self.limit = HEADER_LIMIT


_PAX_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
_EXTENDED = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, *_PAX_TYPES)


class _Header(tarfile.TarInfo):
    """A tar header as ``tarfile`` reads it while it lists the members, refused where tarfile
    would read on without bound before any member is handed back to be checked: a sparse file
    (GNU type ``S``, whose chained extension blocks it loops over, or a PAX header's
    ``GNU.sparse.*`` records, whose map it reads from the data) is refused at its header, since
    an sdist never holds one, and a chain of extended headers (each read by recursion) past
    ``MAX_EXTENDED_HEADERS``. ``_proc_member`` is where tarfile dispatches on a header's type, the
    hook its source names for a subclass."""

    def _proc_member(self, archive: tarfile.TarFile) -> tarfile.TarInfo:
        bounded = cast("_Bounded", archive.fileobj)
        if self.type == tarfile.GNUTYPE_SPARSE:
            bounded.refuse(f"entry {self.name!r} is a sparse file (GNU type 'S'), which an sdist never holds")
        if self.type not in _EXTENDED:
            return _sized(bounded, cast("tarfile.TarInfo", super()._proc_member(archive)))  # type: ignore[misc]
        if bounded.extended >= MAX_EXTENDED_HEADERS:
            bounded.refuse(
                f"entry {self.name!r} is extended header {bounded.extended + 1} in a row, more than the "
                f"{MAX_EXTENDED_HEADERS} a member may have (a hostile chain of long names or PAX headers?)"
            )
        bounded.extended += 1
        if self.type in _PAX_TYPES:
            bounded.pax = self.name  # tarfile reads its records first: checked as they are read
        try:
            return _sized(bounded, cast("tarfile.TarInfo", super()._proc_member(archive)))  # type: ignore[misc]
        finally:
            bounded.extended -= 1
            bounded.pax = None


def _sized(bounded: _Bounded, member: tarfile.TarInfo) -> tarfile.TarInfo:
    """``member``, refused when its size (a PAX ``size`` record, or a base-256 size field) is
    negative: tarfile would step back in the archive by it, hiding or re-reading members. Found by
    an attack."""
    if member.size < 0:
        bounded.refuse(f"entry {member.name!r} declares a negative size ({member.size}), which is no size")
    return member


_PAX_RECORD = re.compile(rb"(\d{1,20}) ([^=\n]+)=")


def _refuse_sparse_records(bounded: _Bounded, header: str, records: bytes) -> None:
    """Refuse the PAX header ``header`` whose ``records`` name a ``GNU.sparse.*`` keyword (read as
    tarfile reads them: ``LENGTH KEYWORD=VALUE\n``, one after another)."""
    at = 0
    while (record := _PAX_RECORD.match(records, at)) is not None and int(record[1]) > 0:
        if record[2].startswith(b"GNU.sparse."):
            keyword = record[2].decode("utf-8", "replace")
            bounded.refuse(
                f"entry {header!r} is a PAX header that makes a sparse file ({keyword!r}), which an sdist never holds"
            )
        at += int(record[1])


@contextlib.contextmanager
def open_tar(path: Path, label: str) -> Iterator[tuple[tarfile.TarFile, _Bounded]]:
    """The tar archive (gzip, bzip2, xz or none) at ``path``, read through :class:`_Bounded`, each
    header as a :class:`_Header`."""
    with path.open("rb") as fh:
        magic = fh.read(6)
        fh.seek(0)
        openers = {b"\x1f\x8b": gzip.open, b"BZh": bz2.open, b"\xfd7zXZ\x00": lzma.open}
        opener: Any = next((o for m, o in openers.items() if magic.startswith(m)), contextlib.nullcontext)
        with opener(fh) as raw:
            bounded = _Bounded(raw, label, packed=fh)
            with tarfile.open(fileobj=cast("IO[bytes]", bounded), mode="r:", tarinfo=_Header) as tf:
                yield tf, bounded


@contextlib.contextmanager
def import_files(path: Path, art: Artifact) -> Iterator[list[FileWrite]]:
    """The artifact's files under ``prefix.from`` as files of the import (repository paths and
    modes, in the archive's order), every member checked before any is read: raise before
    anything is imported. Each file's content is read only when asked (``FileWrite.read``, while
    the context is open), so the import's stream holds one at a time, never the whole artifact;
    a wheel's are inflated once first, each dropped as it is checked, so a damaged one is refused
    before git is handed any (an sdist's were, as its headers were checked)."""
    with _files(path, art) as (files, wheel):
        if wheel is not None:
            zf, listed = wheel
            imported = {f.path for f in files}
            with damaged_as_error(art.filename, hint=DAMAGED_HINT):
                for info in progress.track(listed, f"read {art.filename}", unit="members"):
                    if _repository_path(info.filename, art) in imported:
                        with zf.open(info) as fh:
                            while fh.read(_CHUNK):
                                pass
        yield files


def import_paths(path: Path, art: Artifact) -> list[str]:
    """The paths :func:`import_files` would import, sorted, every member checked, none read."""
    with _files(path, art) as (files, _):
        return sorted(f.path for f in files)


_Wheel = tuple[zipfile.ZipFile, list[zipfile.ZipInfo]]


@contextlib.contextmanager
def _files(path: Path, art: Artifact) -> Iterator[tuple[list[FileWrite], _Wheel | None]]:
    """:func:`import_files`'s files, none read, and for a wheel the archive and its file members."""
    out: list[FileWrite] = []
    wheel: _Wheel | None = None
    with contextlib.ExitStack() as opened:
        with damaged_as_error(art.filename, hint=DAMAGED_HINT):
            if art.is_wheel:
                zf = opened.enter_context(open_zip(path, art.filename, hint=HOSTILE_HINT))
                wheel = zf, safe_members(zf, art.filename, packed=path.stat().st_size, hint=HOSTILE_HINT)
                for info in wheel[1]:
                    if (dest := _repository_path(info.filename, art)) is not None:
                        exe = (info.external_attr >> 16) & 0o111
                        read = _guarded(functools.partial(zf.read, info), art.filename)
                        out.append(FileWrite(dest, "100755" if exe else "100644", read=read))
            else:
                # every header checked, the total too, and every member's data inflated on the way
                files: set[str] = set()
                links: dict[str, str] = {}
                for ti, read in opened.enter_context(tar_members(path, art.filename)):
                    if ti.issym():
                        links[ti.name] = ti.linkname
                        continue
                    if not ti.isfile():
                        raise UpstreamError(f"{art.filename}: entry {ti.name!r} is not a regular file; refusing it")
                    files.add(ti.name)
                    if (dest := _repository_path(ti.name, art)) is not None:
                        mode = "100755" if ti.mode & 0o111 else "100644"
                        out.append(FileWrite(dest, mode, read=_guarded(read, art.filename)))
                out += _kept_links(art, files, links)
        for before, after in itertools.pairwise(sorted(f.path for f in out)):
            if before == after:
                raise UpstreamError(f"{art.filename}: {after} appears twice; refusing it")
        yield out, wheel


def _guarded(read: Callable[[], bytes], label: str) -> Callable[[], bytes]:
    """``read``, what a damaged archive raises as it is read turned into the refusal that names it."""

    def guarded() -> bytes:
        with damaged_as_error(label, hint=DAMAGED_HINT):
            return read()

    return guarded


def _kept_links(art: Artifact, files: set[str], links: dict[str, str]) -> list[FileWrite]:
    """The sdist's links under the prefix, as links of the import: each one refused unless it
    leads to a regular file of the sdist (``links.LinkTree``), and, once imported, to one of
    the import's, so no link in a tree of patchtool's ever points out of it."""
    from patchtool.upstream.links import LinkTree

    hint = (
        "a link inside an sdist is kept only where it leads, inside the tree, to one of its regular "
        "files; the artifact is malformed or hostile; nothing was imported"
    )
    whole = LinkTree(files, links)
    for name in sorted(links):
        if (why := whole.problem(name)) is not None:
            raise UpstreamError(f"{art.filename}: entry {name!r} is a symbolic link that {why}; refusing it", hint=hint)
    mapped = {dest: name for name in files if (dest := _repository_path(name, art)) is not None}
    kept = {dest: name for name in links if (dest := _repository_path(name, art)) is not None}
    imported = LinkTree(mapped.keys(), {dest: links[name] for dest, name in kept.items()})
    out = []
    for dest, name in sorted(kept.items()):
        if (why := imported.problem(dest)) is not None:
            raise UpstreamError(
                f"{art.filename}: entry {name!r} is a symbolic link to {whole.target(name)!r}, but imported as "
                f"{dest!r} (prefix {ImportRecord.mapping(art)}) it {why}; refusing it",
                hint="choose a prefix that holds the link's target too (init --prefix FROM:TO); nothing was imported",
            )
        out.append(FileWrite(dest, "120000", data=links[name].encode("utf-8", "surrogateescape")))
    return out


@contextlib.contextmanager
def tar_members(path: Path, label: str) -> Iterator[list[tuple[tarfile.TarInfo, Callable[[], bytes]]]]:
    """Each member of the sdist at ``path`` but its directories, in the archive's order, with a
    reader of its data (while the context is open; cheapest in that order): every header checked
    as it comes (a safe name, listed once, no sparse file, no bomb, no more members or bytes in
    all than an archive may have), and every member's data inflated on the way without being
    kept, so a bomb is refused before it is read."""
    packed, unpacked, done = path.stat().st_size, 0, 0
    names = MemberNames(label, hint=HOSTILE_HINT)
    listed: list[tuple[tarfile.TarInfo, Callable[[], bytes]]] = []
    with open_tar(path, label) as (tf, bounded):
        with progress.task(f"read {label}", total=packed, unit="bytes") as shown:
            for count, ti in enumerate(tf, 1):
                if count > members.MAX_MEMBERS:  # tarfile keeps every header it has read
                    raise UpstreamError(members.too_many(label), hint=HOSTILE_HINT)
                shown.advance(bounded.packed.tell() - done)  # the compressed bytes read so far
                done = bounded.packed.tell()
                unpacked += ti.size
                why = bomb_reason(ti.size, 0) if ti.size > MAX_MEMBER_BYTES else None
                if why is None and unpacked > members.MAX_UNPACKED_BYTES:
                    most = members.MAX_UNPACKED_BYTES
                    why = f"brings the archive to {unpacked} bytes, more than the {most} patchtool unpacks"
                if why is None and unpacked > RATIO_FLOOR and unpacked > MAX_RATIO * packed:
                    why = (
                        f"brings the archive to {unpacked} bytes from {packed} compressed, more than "
                        f"{MAX_RATIO} times as many (a tar bomb?)"
                    )
                if why is not None:
                    bounded.refuse(f"entry {ti.name!r} {why}")
                name = ti.name.removesuffix("/") if ti.isdir() else ti.name
                if (why := tree_path_problem(name)) is not None:
                    bounded.refuse(f"entry {name!r} is not a safe path: {why}")
                names.add(ti.name, is_dir=ti.isdir())
                bounded.current = ti.name  # its data is inflated next, as tarfile skips it
                if ti.isdir():
                    continue

                def read(ti: tarfile.TarInfo = ti) -> bytes:
                    bounded.current = ti.name
                    fh = tf.extractfile(ti)
                    assert fh is not None
                    with bounded.member(ti.size):
                        return fh.read()

                listed.append((ti, read))
            shown.advance(bounded.packed.tell() - done)
        yield listed


def top_directories(path: Path, art: Artifact) -> set[str]:
    """The top-level names of an sdist's members (one, ``<name>-<version>``, in a well-made one)."""
    with damaged_as_error(art.filename, hint=DAMAGED_HINT), tar_members(path, art.filename) as listed:
        return {ti.name.partition("/")[0] for ti, _ in listed}


def newest_mtime(path: Path, art: Artifact) -> int:
    """The newest modification time among the sdist's members (its headers'): the time a build
    from it stamps on what it writes, as a release wheel's newest member stamps a repack."""
    with damaged_as_error(art.filename, hint=DAMAGED_HINT), tar_members(path, art.filename) as listed:
        return max((int(ti.mtime) for ti, _ in listed), default=0)


def member_names(path: Path, art: Artifact) -> list[str]:
    """The names of the artifact's files and links, each checked, none read (where a wheel's and
    an sdist's layouts meet: ``upstream/layouts.py``)."""

    with damaged_as_error(art.filename, hint=DAMAGED_HINT):
        if art.is_wheel:
            with open_zip(path, art.filename, hint=HOSTILE_HINT) as zf:
                listed = safe_members(zf, art.filename, packed=path.stat().st_size, hint=HOSTILE_HINT)
                return sorted(info.filename for info in listed)
        with tar_members(path, art.filename) as headers:
            return sorted(ti.name for ti, _ in headers)


def _repository_path(name: str, art: Artifact) -> str | None:
    """Where member ``name`` (already checked) goes in the repository; None when outside the prefix."""
    if not name.startswith(art.prefix_from):
        return None
    if not (rel := name[len(art.prefix_from) :]):
        return None
    dest = art.prefix_to + rel
    if (why := tree_path_problem(dest)) is not None:
        raise UpstreamError(
            f"{art.filename}: entry {name!r} maps to a path that is not safe: {why}; refusing it",
            hint="check the pin's prefix; nothing was imported",
        )
    return dest


def metadata_version(path: Path, art: Artifact) -> Version | None:
    """The version the artifact's own metadata (a wheel's METADATA, an sdist's PKG-INFO) names."""
    from email.parser import HeaderParser

    with damaged_as_error(art.filename, hint=DAMAGED_HINT):
        if art.is_wheel:
            with open_zip(path, art.filename, hint="the artifact is malformed or hostile") as zf:
                names = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
                raw = zf.read(names[0]) if names else b""
        else:
            with open_tar(path, art.filename) as (tf, bounded):
                infos = (
                    t for t in tf if t.isfile() and re.fullmatch(r"[^/]+/PKG-INFO", t.name) and t.size <= HEADER_LIMIT
                )
                info = next(infos, None)
                fh = tf.extractfile(info) if info is not None else None
                with bounded.member(HEADER_LIMIT):
                    raw = fh.read() if fh else b""
    version = HeaderParser().parsestr(raw.decode("utf-8", "replace")).get("Version")
    try:
        return parse_version(version) if version else None
    except InvalidVersion:
        return None

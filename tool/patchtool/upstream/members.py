"""What a member of an archive may be, for every archive patchtool reads (an upstream wheel or
sdist): a safe path, a regular file, listed once and not also a directory, stored or deflated,
and bounded before any of it is inflated (zip and tar bombs). Reading an artifact
(``artifacts.py``) and repacking a wheel
(``wheel/repack.py``) both go through here. A zip archive is opened here too (``open_zip``): its
central directory is counted before ``zipfile`` builds a member of it.
"""

from __future__ import annotations

import contextlib
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NoReturn

from patchtool.errors import PatchtoolError, UpstreamError
from patchtool.inflation import MAX_MEMBER_BYTES as MAX_MEMBER_BYTES
from patchtool.inflation import MAX_RATIO as MAX_RATIO
from patchtool.inflation import MAX_UNPACKED_BYTES as MAX_UNPACKED_BYTES
from patchtool.inflation import RATIO_FLOOR as RATIO_FLOOR
from patchtool.inflation import bomb_reason as bomb_reason
from patchtool.paths import tree_path_problem

# far above any release's (torch's wheel has some 12,000): each costs memory and git work, and an
# empty member compresses to a few bytes, so a 4 GiB download could list billions
MAX_MEMBERS = 100_000
# what zipfile reads whole before it builds a member: some 670 bytes a member at the most members
MAX_CENTRAL_BYTES = 64 << 20

# APPNOTE.TXT 4.3.16, 4.3.15, 4.3.14: the end of central directory record, the zip64 locator and record
_END = struct.Struct("<4s4H2LH")
_LOCATOR = struct.Struct("<4sLQL")
_END64 = struct.Struct("<4sQ2H2L4Q")
_ENTRY = 46  # a central directory header's fixed part (4.3.12), its three lengths at 28


def unsafe_reason(info: zipfile.ZipInfo) -> str | None:
    """Why a member must not be extracted, repacked or imported, or None when it is safe."""
    why = tree_path_problem(info.filename.removesuffix("/") if info.is_dir() else info.filename)
    if why is not None:
        return f"is not a safe path: {why}"
    kind = (info.external_attr >> 16) & 0o170000
    if kind == 0o120000:
        return "is a symbolic link"
    if kind not in (0, 0o100000, 0o040000):
        return "is not a regular file"
    if info.flag_bits & 0x1:
        return "is encrypted"
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        return f"uses compression method {info.compress_type} (a wheel uses stored or deflate)"
    return bomb_reason(info.file_size, info.compress_size)


class MemberNames:
    """The names an archive lists so far: a file listed twice, or a name that is a file and also a
    directory of other members (``six.py`` and ``six.py/x.py``), is refused, since an import or
    an unpacker would silently keep only one of them."""

    def __init__(self, label: str, *, hint: str | None = None, error: type[PatchtoolError] = UpstreamError) -> None:
        self.label, self.hint, self.error = label, hint, error
        self.files: set[str] = set()
        self.dirs: dict[str, str] = {}  # every directory the members make, with the first member in it

    def add(self, name: str, *, is_dir: bool) -> None:
        """Record member ``name`` (a safe path); raise when it clashes with one listed before."""
        name = name.removesuffix("/")
        parts = name.split("/")
        ancestors = ["/".join(parts[:i]) for i in range(1, len(parts))]
        for above in ancestors:
            if above in self.files:
                self.refuse(f"entry {name!r} lies beneath {above!r}, which is also a file")
        if name in self.files:
            self.refuse(f"entry {name!r} appears twice" if not is_dir else f"entry {name!r} is a file and a directory")
        if not is_dir:
            if name in self.dirs:
                self.refuse(f"entry {name!r} is a file and also the directory of {self.dirs[name]!r}")
            self.files.add(name)
        else:
            self.dirs.setdefault(name, name + "/")
        for above in ancestors:
            self.dirs.setdefault(above, name)

    def refuse(self, why: str) -> NoReturn:
        raise self.error(f"{self.label}: {why}; refusing it", hint=self.hint)


def safe_members(
    zf: zipfile.ZipFile,
    label: str,
    *,
    packed: int,
    hint: str | None = None,
    error: type[PatchtoolError] = UpstreamError,
) -> list[zipfile.ZipInfo]:
    """The file members of ``zf``, an archive of ``packed`` bytes; refuse (``error``) links,
    unsafe or duplicate names (a file listed twice, or also a directory), odd methods and bombs:
    a member, or all of them together, past ``RATIO_FLOOR`` declaring more than ``MAX_RATIO``
    times its compressed bytes (the whole against the file's own size, which no member's
    declared sizes can lift), as an sdist is held as it inflates."""
    names = MemberNames(label, hint=hint, error=error)
    out = []
    if len(zf.infolist()) > MAX_MEMBERS:
        raise error(too_many(label), hint=hint)
    if (total := sum(info.file_size for info in zf.infolist())) > MAX_UNPACKED_BYTES:
        raise error(
            f"{label}: its members declare {total} bytes in all, more than the {MAX_UNPACKED_BYTES} "
            "patchtool unpacks; refusing it",
            hint=hint,
        )
    for info in zf.infolist():
        if (reason := unsafe_reason(info)) is not None:
            raise error(f"{label}: entry {info.filename!r} {reason}; refusing it", hint=hint)
        names.add(info.filename, is_dir=info.is_dir())
        if not info.is_dir():
            out.append(info)
    if total > RATIO_FLOOR and total > MAX_RATIO * max(packed, 1):
        raise error(
            f"{label}: its members declare {total} bytes in all from {packed} compressed, more than {MAX_RATIO} "
            "times as many (a zip bomb?); refusing it",
            hint=hint,
        )
    return out


def too_many(label: str) -> str:
    return f"{label}: it has more than the {MAX_MEMBERS} members patchtool unpacks; refusing it"


@contextlib.contextmanager
def open_zip(
    path: Path, label: str, *, hint: str | None = None, error: type[PatchtoolError] = UpstreamError
) -> Iterator[zipfile.ZipFile]:
    """The zip archive at ``path``, once its central directory was found to list at most
    ``MAX_MEMBERS`` members in at most ``MAX_CENTRAL_BYTES`` (``error`` otherwise): ``zipfile``
    reads the whole directory and builds every member before anyone can count them."""
    with open(path, "rb") as fh:
        check_listing(fh, label, hint=hint, error=error)
        fh.seek(0)
        with zipfile.ZipFile(fh) as zf:
            yield zf


def check_listing(fh: BinaryIO, label: str, *, hint: str | None, error: type[PatchtoolError]) -> None:
    """Refuse the zip archive ``fh`` whose end record (or zip64 end record) declares more than
    ``MAX_MEMBERS`` members, or a central directory over ``MAX_CENTRAL_BYTES``, or whose directory
    holds more members than that whatever it declares (zipfile reads the directory, not the count),
    each header counted, none built. What is no zip archive is left for zipfile to say so."""
    if (found := _central_directory(fh)) is None:
        return
    declared, start, size = found
    if declared > MAX_MEMBERS:
        raise error(too_many(label), hint=hint)
    if size > MAX_CENTRAL_BYTES:
        raise error(
            f"{label}: its central directory declares {size} bytes, more than the {MAX_CENTRAL_BYTES} patchtool "
            "reads; refusing it",
            hint=hint,
        )
    if start < 0:
        return
    fh.seek(start)
    listing = fh.read(size)
    at = count = 0
    while at + _ENTRY <= len(listing) and listing[at : at + 4] == b"PK\x01\x02":
        count += 1
        if count > MAX_MEMBERS:
            raise error(too_many(label), hint=hint)
        name, extra, comment = struct.unpack_from("<3H", listing, at + 28)
        at += _ENTRY + name + extra + comment


def _central_directory(fh: BinaryIO) -> tuple[int, int, int] | None:
    """The members the archive declares, where its central directory starts and its size, found
    as ``zipfile`` finds them: the end record last in the file, else the last one in its final
    64 KiB, and the zip64 record just before its locator, just before the end record."""
    if (end := fh.seek(0, 2)) < _END.size:
        return None
    fh.seek(end - _END.size)
    record = fh.read(_END.size)
    at = end - _END.size
    if record[:4] != b"PK\x05\x06" or record[-2:] != b"\0\0":
        window = max(end - (1 << 16) - _END.size, 0)
        fh.seek(window)
        tail = fh.read()
        found = tail.rfind(b"PK\x05\x06")
        if found < 0 or len(tail) - found < _END.size:
            return None
        at, record = window + found, tail[found : found + _END.size]
    declared, size = _END.unpack(record)[4:6]
    start = at - size
    if at >= _LOCATOR.size + _END64.size:
        fh.seek(at - _LOCATOR.size - _END64.size)
        zip64, locator = fh.read(_END64.size), fh.read(_LOCATOR.size)
        if locator[:4] == b"PK\x06\x07" and zip64[:4] == b"PK\x06\x06":
            declared, size = _END64.unpack(zip64)[7:9]
            start = at - _LOCATOR.size - _END64.size - size
    return declared, start, size

"""Wheel archives at the byte level: safe member listing, raw copies, deterministic writing.

Unchanged members are copied as their compressed bytes (never recompressed) while
their content is hashed for ``RECORD``; new members are deflated at a fixed level.
The writer emits no timestamps, extra fields or comments of its own, so the same
members in the same order always give the same bytes.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import struct
import time
import zipfile
import zlib
from collections.abc import Iterator
from typing import BinaryIO, Protocol

from patchtool.errors import BuildError, UpstreamError

CHUNK = 1 << 20
DEFLATE_LEVEL = 6  # fixed, so a rebuild compresses new members to the same bytes
_LOCAL = struct.Struct("<4sHHHHHLLLHH")  # local file header, without name and extra
_CENTRAL = struct.Struct("<4sHHHHHHLLLHHHHHLL")
_END = struct.Struct("<4sHHHHLLH")
_LIMIT32 = 0xFFFFFFFF
_UNIX_MADE_BY = (3 << 8) | 20  # created on Unix by zip spec 2.0
_NEEDED = 20
_UTF8_FLAG = 0x800
_EARLIEST = (1980, 1, 1, 0, 0, 0)
LAST_EPOCH = 4354819198  # 2107-12-31 23:59:58 UTC: a zip's date field ends in 2107


@dataclasses.dataclass(frozen=True, slots=True)
class Digest:
    """What ``RECORD`` says about a member: ``sha256=<urlsafe b64, no padding>`` and size."""

    sha256: bytes
    size: int

    @property
    def record_hash(self) -> str:
        return "sha256=" + base64.urlsafe_b64encode(self.sha256).rstrip(b"=").decode()


def date_time_of(epoch: int) -> tuple[int, int, int, int, int, int]:
    """A zip timestamp (UTC, 2-second resolution, not before 1980) for ``epoch``."""
    if epoch > LAST_EPOCH:
        raise BuildError(
            f"timestamp {epoch} is after 2107-12-31, the last date a zip member can carry",
            hint=f"give a SOURCE_DATE_EPOCH of at most {LAST_EPOCH}",
        )
    t = time.gmtime(max(epoch, 315532800))
    return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)


@dataclasses.dataclass(slots=True)
class _Written:
    name: bytes
    fields: tuple[int, ...]  # flags, method, time, date, crc, sizes: what the local and central headers share
    external_attr: int
    offset: int


class _HashingFile:
    """Counts and hashes what is written, so the result's sha256 needs no second read."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.offset = 0
        self.sha256 = hashlib.sha256()

    def write(self, data: bytes) -> None:
        self.fh.write(data)
        self.sha256.update(data)
        self.offset += len(data)


class ArchiveWriter:
    """Writes a zip member by member; ``finish()`` adds the central directory."""

    def __init__(self, fh: BinaryIO, label: str) -> None:
        self.out = _HashingFile(fh)
        self.label = label
        self.entries: list[_Written] = []

    def add(self, name: str, data: bytes, *, date_time: tuple[int, ...], mode: int) -> Digest:
        """A new member, deflated at ``DEFLATE_LEVEL``."""
        comp = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, -15, 8, zlib.Z_DEFAULT_STRATEGY)
        payload = comp.compress(data) + comp.flush()
        attr = (0o100000 | (mode & 0o7777)) << 16  # a regular file with ``mode``
        self._header(name, zipfile.ZIP_DEFLATED, date_time, zlib.crc32(data), len(payload), len(data), attr)
        self.out.write(payload)
        return Digest(hashlib.sha256(data).digest(), len(data))

    def copy(
        self, src: BinaryIO, info: zipfile.ZipInfo, *, name: str, date_time: tuple[int, ...] | None = None
    ) -> Digest:
        """Copy ``info``'s compressed bytes from ``src`` unchanged, checking its CRC and size."""
        src.seek(info.header_offset)
        head = src.read(_LOCAL.size)
        if len(head) != _LOCAL.size or head[:4] != b"PK\x03\x04":
            raise UpstreamError(f"{self.label}: entry {info.filename!r} has no valid local header")
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        src.seek(info.header_offset + _LOCAL.size + name_len + extra_len)
        attr = info.external_attr if info.external_attr >> 16 else (0o100644 << 16)
        self._header(
            name, info.compress_type, date_time or info.date_time, info.CRC, info.compress_size, info.file_size, attr
        )
        sha, crc, size = hashlib.sha256(), 0, 0
        inflate = zlib.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
        try:
            for chunk in _read_exactly(src, info.compress_size, self.label, info.filename):
                self.out.write(chunk)
                for plain in _inflate(inflate, chunk):
                    sha.update(plain)
                    crc = zlib.crc32(plain, crc)
                    size += len(plain)
        except zlib.error as exc:
            raise UpstreamError(
                f"{self.label}: entry {info.filename!r} has corrupt compressed data ({exc}); the archive is damaged"
            ) from None
        if inflate is not None and not inflate.eof:
            raise UpstreamError(f"{self.label}: entry {info.filename!r} is truncated; refusing it")
        if crc != info.CRC or size != info.file_size:
            raise UpstreamError(
                f"{self.label}: entry {info.filename!r} does not match its CRC or size; the archive is damaged"
            )
        return Digest(sha.digest(), size)

    def finish(self) -> str:
        """Write the central directory; returns the archive's sha256 hex digest."""
        start = self.out.offset
        if len(self.entries) > 0xFFFF:
            raise UpstreamError(f"{self.label}: more than 65535 members needs ZIP64, which is not supported")
        for e in self.entries:
            self.out.write(
                _CENTRAL.pack(
                    b"PK\x01\x02", _UNIX_MADE_BY, _NEEDED, *e.fields, len(e.name), 0, 0, 0, 0, e.external_attr, e.offset
                )
            )
            self.out.write(e.name)
        size = self.out.offset - start
        if start > _LIMIT32 or size > _LIMIT32:
            raise UpstreamError(f"{self.label}: over 4 GiB needs ZIP64, which is not supported")
        n = len(self.entries)
        self.out.write(_END.pack(b"PK\x05\x06", 0, 0, n, n, size, start, 0))
        return self.out.sha256.hexdigest()

    def _header(
        self,
        name: str,
        method: int,
        date_time: tuple[int, ...],
        crc: int,
        compressed: int,
        size: int,
        external_attr: int,
    ) -> None:
        if max(compressed, size, self.out.offset) >= _LIMIT32:
            raise UpstreamError(f"{self.label}: {name} is past 4 GiB; ZIP64 is not supported")
        raw = name.encode("utf-8")
        flags = 0 if raw.isascii() else _UTF8_FLAG
        y, mo, d, h, mi, s = max(tuple(date_time), _EARLIEST)[:6]
        dos_time = (h << 11) | (mi << 5) | (s // 2)
        fields = (flags, method, dos_time, ((y - 1980) << 9) | (mo << 5) | d, crc, compressed, size)
        self.entries.append(_Written(raw, fields, external_attr, self.out.offset))
        self.out.write(_LOCAL.pack(b"PK\x03\x04", _NEEDED, *fields, len(raw), 0))
        self.out.write(raw)


def _read_exactly(src: BinaryIO, n: int, label: str, name: str) -> Iterator[bytes]:
    while n > 0:
        chunk = src.read(min(n, CHUNK))
        if not chunk:
            raise UpstreamError(f"{label}: entry {name!r} is truncated; refusing it")
        n -= len(chunk)
        yield chunk


class Inflater(Protocol):
    """What ``_inflate`` uses of ``zlib.decompressobj()``, whose class zlib does not name publicly."""

    @property
    def unconsumed_tail(self) -> bytes: ...
    @property
    def eof(self) -> bool: ...
    def decompress(self, data: bytes, /, max_length: int = 0) -> bytes: ...


def _inflate(inflate: Inflater | None, chunk: bytes) -> Iterator[bytes]:
    """The plain bytes of ``chunk``, at most CHUNK at a time, so memory stays bounded."""
    if inflate is None:
        yield chunk
        return
    data = chunk
    while True:
        plain = inflate.decompress(data, CHUNK)
        if plain:
            yield plain
        data = inflate.unconsumed_tail
        if not data and (len(plain) < CHUNK or inflate.eof):  # a full CHUNK may leave output pending
            return

"""A release artifact (wheel or sdist) read as the files it puts in the cache, and the record an
import keeps of the artifact it was made from.

An artifact is hostile input even when its sha256 matches the pin: every member name goes
through the one path validator before and after the pin's prefix mapping, links and other
non-files are refused, and a damaged archive is an error naming the file, never a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from patchtool.errors import PatchtoolError, UpstreamError
from patchtool.git import FileWrite
from patchtool.paths import tree_path_problem
from patchtool.versions import parse_version

if TYPE_CHECKING:
    from patchtool.upstream.pins import Artifact

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
        return (f"{upstream} {version}\n\n"
                f"Imported from {self.filename}\n"
                f"sha256 {self.sha256}\n"
                f"size {self.size}\n"
                f"layout {self.layout}: {self.prefix}\n")

    @classmethod
    def parse(cls, message: str) -> ImportRecord | None:
        m = _RECORD.search(message)
        if m is None:
            return None
        return cls(filename=m["filename"], sha256=m["sha256"], size=int(m["size"]) if m["size"] else None,
                   layout=int(m["layout"]), prefix=m["prefix"])

    @staticmethod
    def mapping(art: Artifact) -> str:
        return f"{art.prefix_from or '.'} -> {art.prefix_to or '.'}"


_RECORD = re.compile(r"^Imported from (?P<filename>\S+)\nsha256 (?P<sha256>[0-9a-f]{64})\n"
                     r"(?:size (?P<size>\d+)\n)?layout (?P<layout>\d+): (?P<prefix>.*)$", re.MULTILINE)


@contextlib.contextmanager
def damaged_as_error(label: str, error: type[PatchtoolError] = UpstreamError, *,
                     hint: str | None = None) -> Iterator[None]:
    """Turn what a damaged archive raises while it is read (a truncated file, corrupt deflate data, a
    bad CRC) into ``error`` naming ``label``."""
    import tarfile
    import zipfile
    import zlib

    try:
        yield
    except (zipfile.BadZipFile, zlib.error, EOFError, tarfile.TarError) as exc:
        raise error(f"{label} is damaged and cannot be read ({damage(exc)}); refusing it", hint=hint) from None


def damage(exc: BaseException) -> str:
    """What a damaged archive's exception says, in words."""
    import zlib

    if isinstance(exc, zlib.error):
        return f"corrupt compressed data: {exc}"
    if isinstance(exc, EOFError):
        return "it ends early"
    return str(exc) or type(exc).__name__


DAMAGED_HINT = ("the file matches the pin's sha256, so the pin names a damaged file: check the pin "
                "against the index; nothing was imported")


def read_files(path: Path, art: Artifact) -> list[FileWrite]:
    """The artifact's files under ``prefix.from`` as files of the import (repository paths, modes,
    contents), sorted; every member name checked; raise before anything is imported."""
    import tarfile
    import zipfile

    from patchtool.wheel.archive import MAX_MEMBER_BYTES, MAX_RATIO, RATIO_FLOOR, bomb_reason, safe_members

    out: list[FileWrite] = []
    with damaged_as_error(art.filename, hint=DAMAGED_HINT):
        if art.is_wheel:
            with zipfile.ZipFile(path) as zf:
                for info in safe_members(zf, art.filename, hint="the artifact is malformed or hostile; "
                                                                "nothing was imported"):
                    dest = _repository_path(info.filename, art)
                    if dest is not None:
                        exe = (info.external_attr >> 16) & 0o111
                        out.append(FileWrite(dest, "100755" if exe else "100644", data=zf.read(info)))
        else:
            packed, unpacked = path.stat().st_size, 0
            with tarfile.open(path, "r:*") as tf:
                for ti in tf:  # each header checked as it comes: a bomb is refused before it is inflated
                    unpacked += ti.size
                    why = bomb_reason(ti.size, 0) if ti.size > MAX_MEMBER_BYTES else None
                    if why is None and unpacked > RATIO_FLOOR and unpacked > MAX_RATIO * packed:
                        why = (f"brings the archive to {unpacked} bytes from {packed} compressed, more than "
                               f"{MAX_RATIO} times as many (a tar bomb?)")
                    if why is not None:
                        raise UpstreamError(f"{art.filename}: entry {ti.name!r} {why}; refusing it",
                                            hint="the artifact is malformed or hostile; nothing was imported")
                    _check_name(ti.name.removesuffix("/") if ti.isdir() else ti.name, art)
                    if ti.isdir():
                        continue
                    if not ti.isfile():
                        raise UpstreamError(f"{art.filename}: entry {ti.name!r} is not a regular file; "
                                            "refusing it")
                    dest = _repository_path(ti.name, art)
                    if dest is None:
                        continue
                    fh = tf.extractfile(ti)
                    assert fh is not None
                    out.append(FileWrite(dest, "100755" if ti.mode & 0o111 else "100644", data=fh.read()))
    out.sort(key=lambda f: f.path)
    for before, after in itertools.pairwise(out):
        if before.path == after.path:
            raise UpstreamError(f"{art.filename}: {after.path} appears twice; refusing it")
    return out


def _check_name(name: str, art: Artifact) -> None:
    why = tree_path_problem(name)
    if why is not None:
        raise UpstreamError(f"{art.filename}: entry {name!r} is not a safe path: {why}; refusing it",
                            hint="the artifact is malformed or hostile; nothing was imported")


def _repository_path(name: str, art: Artifact) -> str | None:
    """Where member ``name`` (already checked) goes in the repository; None when outside the prefix."""
    if not name.startswith(art.prefix_from):
        return None
    rel = name[len(art.prefix_from):]
    if not rel:
        return None
    dest = art.prefix_to + rel
    why = tree_path_problem(dest)
    if why is not None:
        raise UpstreamError(f"{art.filename}: entry {name!r} maps to a path that is not safe: {why}; "
                            "refusing it", hint="check the pin's prefix; nothing was imported")
    return dest


def metadata_version(path: Path, art: Artifact) -> Version | None:
    """The version the artifact's own metadata (a wheel's METADATA, an sdist's PKG-INFO) names."""
    import tarfile
    import zipfile
    from email.parser import HeaderParser

    with damaged_as_error(art.filename, hint=DAMAGED_HINT):
        if art.is_wheel:
            with zipfile.ZipFile(path) as zf:
                names = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
                raw = zf.read(names[0]) if names else b""
        else:
            with tarfile.open(path, "r:*") as tf:
                names = [n for n in tf.getnames() if re.fullmatch(r"[^/]+/PKG-INFO", n)]
                fh = tf.extractfile(names[0]) if names else None
                raw = fh.read() if fh else b""
    version = HeaderParser().parsestr(raw.decode("utf-8", "replace")).get("Version")
    try:
        return parse_version(version) if version else None
    except InvalidVersion:
        return None

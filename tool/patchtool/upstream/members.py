"""What a member of an archive may be, for every archive patchtool reads (an upstream wheel or
sdist): a safe path, a regular file, listed once and not also a directory, stored or deflated,
and bounded before any of it is inflated (zip and tar bombs). Reading an artifact
(``artifacts.py``) and repacking a wheel
(``wheel/repack.py``) both go through here.
"""

from __future__ import annotations

import zipfile
from typing import NoReturn

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
    zf: zipfile.ZipFile, label: str, *, hint: str | None = None, error: type[PatchtoolError] = UpstreamError
) -> list[zipfile.ZipInfo]:
    """The file members of ``zf``; refuse (``error``) links, unsafe or duplicate names (a file
    listed twice, or also a directory), odd methods and bombs."""
    names = MemberNames(label, hint=hint, error=error)
    out = []
    if len(zf.infolist()) > MAX_MEMBERS:
        raise error(too_many(label), hint=hint)
    total = sum(info.file_size for info in zf.infolist())
    if total > MAX_UNPACKED_BYTES:
        raise error(
            f"{label}: its members declare {total} bytes in all, more than the {MAX_UNPACKED_BYTES} "
            "patchtool unpacks; refusing it",
            hint=hint,
        )
    for info in zf.infolist():
        reason = unsafe_reason(info)
        if reason is not None:
            raise error(f"{label}: entry {info.filename!r} {reason}; refusing it", hint=hint)
        names.add(info.filename, is_dir=info.is_dir())
        if not info.is_dir():
            out.append(info)
    return out


def too_many(label: str) -> str:
    return f"{label}: it has more than the {MAX_MEMBERS} members patchtool unpacks; refusing it"

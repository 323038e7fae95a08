"""What a member of an archive may be, for every archive patchtool reads (an upstream wheel or
sdist): a safe path, a regular file, stored or deflated, and bounded before any of it is inflated
(zip and tar bombs). Reading an artifact (``artifacts.py``) and repacking a wheel
(``wheel/repack.py``) both go through here.
"""

from __future__ import annotations

import zipfile

from patchtool.errors import PatchtoolError, UpstreamError
from patchtool.inflation import MAX_MEMBER_BYTES as MAX_MEMBER_BYTES
from patchtool.inflation import MAX_RATIO as MAX_RATIO
from patchtool.inflation import MAX_UNPACKED_BYTES as MAX_UNPACKED_BYTES
from patchtool.inflation import RATIO_FLOOR as RATIO_FLOOR
from patchtool.inflation import bomb_reason as bomb_reason
from patchtool.paths import tree_path_problem


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


def safe_members(
    zf: zipfile.ZipFile, label: str, *, hint: str | None = None, error: type[PatchtoolError] = UpstreamError
) -> list[zipfile.ZipInfo]:
    """The file members of ``zf``; refuse (``error``) links, unsafe or duplicate names, odd methods
    and bombs."""
    seen: set[str] = set()
    out = []
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
        if info.is_dir():
            continue
        if info.filename in seen:
            raise error(f"{label}: entry {info.filename!r} appears twice; refusing it", hint=hint)
        seen.add(info.filename)
        out.append(info)
    return out

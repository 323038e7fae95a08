"""Writing a file so that a reader, or a crash, finds the old content or the new, never a part.

``write`` puts the data in a temporary file in the target's directory, syncs it, renames it over
the target (``os.replace``: atomic on one filesystem) and syncs the directory, so the rename
itself survives a power cut. Every state file, memo and report patchtool writes whole goes
through it; the journal (``journal``) uses ``write_synced`` and ``sync_dir`` for its own commit
point.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write(path: Path, data: bytes | str) -> None:
    """``data`` (text is written as UTF-8) at ``path``, all at once. The file gets the usual
    permissions (0666 less the umask), as a plain write would give it."""
    tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
    try:
        write_synced(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    sync_dir(path.parent)


def write_synced(path: Path, data: bytes | str) -> None:
    """``data`` in a new file at ``path`` (one that exists is refused), flushed to the disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        fh.flush()
        os.fsync(fh.fileno())


def sync_dir(path: Path) -> None:
    """Flush ``path``'s entries (a rename into it) to the disk, where the system allows it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

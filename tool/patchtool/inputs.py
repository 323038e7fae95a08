"""The one way patchtool reads a local file it was pointed at by name (``import FILE``, ``retread
add --from-file FILE``, a ``file:`` URL the user allowed): a regular file, bounded in size.

A device, a FIFO or a socket is refused before a byte is read (it is opened without blocking,
so a FIFO with no writer cannot hang the command), and so is a file larger than its cap: a name
such as ``/dev/zero`` or ``/dev/stdin`` makes the command fail with a message, never read
forever or wait. Files inside the repository go through ``paths.read_inside``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, BinaryIO

from patchtool.errors import PatchtoolError, UsageError
from patchtool.paths import MAX_INPUT_BYTES, Refusal, check_opened, file_kind, read_bounded


def _refusal(path: Path, what: str, error: type[PatchtoolError]) -> Refusal:
    def refuse(why: str, hint: str) -> PatchtoolError:
        return error(f"{path}: {what} {why}", file=str(path), hint=hint)

    return refuse


def open_named(path: Path, *, what: str, limit: int, error: type[PatchtoolError] = UsageError) -> BinaryIO:
    """``path`` opened for reading when it is a regular file of at most ``limit`` bytes; ``error``
    naming ``what`` it should be otherwise (FileNotFoundError when there is none)."""
    before = os.stat(path)
    if (kind := file_kind(before.st_mode)) is not None:
        raise error(
            f"{path}: {what} is {kind}, not a regular file; refusing to read it",
            file=str(path),
            hint="name a regular file",
        )
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        check_opened(fd, before, limit, _refusal(path, what, error))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_named(path: Path, *, what: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (``open_named``), never more than ``limit``."""
    with open_named(path, what=what, limit=limit) as fh:
        return read_bounded(fh.fileno(), limit, _refusal(path, what, UsageError))


def read_named_text(path: Path, *, what: str, limit: int = MAX_INPUT_BYTES) -> str:
    """``read_named`` as UTF-8 text; a UsageError naming the file when it is not UTF-8."""
    data = read_named(path, what=what, limit=limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{path}: {what} is not UTF-8 ({exc.reason} at byte {exc.start})", file=str(path), hint="save it as UTF-8"
        ) from None


def loads_json(text: str | bytes) -> Any:
    """``json.loads``, with nesting too deep for the parser (``[[[[...``: a RecursionError) raised
    as the ValueError every other malformed document raises: a hostile file is a message."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None

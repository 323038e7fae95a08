"""What compressed data may declare, and inflate to, before any of it is inflated: the bomb bounds
every archive member (``upstream/members.py``) and every binary patch hunk (``diff/binary.py``)
is held to.
"""

from __future__ import annotations

import zlib

# no member over 1 GiB, none of more than 16 MiB that inflates over 200 times its compressed size,
# 8 GiB in all
MAX_MEMBER_BYTES = 1 << 30
MAX_RATIO = 200
RATIO_FLOOR = 16 << 20
MAX_UNPACKED_BYTES = 8 << 30
_CHUNK = 1 << 20


def bomb_reason(size: int, compressed: int) -> str | None:
    """Why data that declares ``size`` bytes from ``compressed`` ones must not be inflated."""
    if size > MAX_MEMBER_BYTES:
        return f"declares {size} bytes, more than the {MAX_MEMBER_BYTES} a member may have"
    if size > RATIO_FLOOR and size > MAX_RATIO * max(compressed, 1):
        return f"declares {size} bytes from {compressed} compressed, more than {MAX_RATIO} times as many (a zip bomb?)"
    return None


def inflated(data: bytes, limit: int, *, head: int = 0) -> tuple[int, bytes]:
    """How many bytes zlib ``data`` inflates to, counted ``_CHUNK`` at a time and never past
    ``limit + 1`` (more than ``limit`` says only that), with its first ``head`` bytes. Raises
    ``zlib.error`` for data that is not zlib or ends early."""
    inflate = zlib.decompressobj()
    total, first = 0, b""
    pending = data
    while total <= limit:
        out = inflate.decompress(pending, min(_CHUNK, limit + 1 - total))
        pending = inflate.unconsumed_tail
        if len(first) < head:
            first += out[: head - len(first)]
        total += len(out)
        if not out and not pending:
            break
    if total <= limit and not inflate.eof:
        raise zlib.error("the compressed data ends early")
    return total, first

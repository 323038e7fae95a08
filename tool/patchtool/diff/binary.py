"""A ``GIT binary patch``'s hunks, checked as git's parse_binary reads them and bounded before git
inflates them: ``git apply`` allocates the size a hunk declares (``literal N``, ``delta N``) and a
delta's result before it inflates a byte, so a small patch could ask for gigabytes. A hunk must
declare no more than an archive's member may (``inflation.bomb_reason``: 1 GiB, and over 16 MiB
at most 200 times its compressed size), and must inflate to exactly what it declares: counted a
chunk at a time, never more than its declared size and one byte. ``git apply`` holds every hunk of
a patch inflated, and every delta's result, before it writes any: together they may declare at
most ``MAX_PATCH_BINARY_BYTES`` (256 MiB; git's peak is about twice that) in one patch file.
"""

from __future__ import annotations

import base64
import re
import zlib

from patchtool.inflation import MAX_MEMBER_BYTES, bomb_reason, inflated

MAX_PATCH_BINARY_BYTES = 256 << 20  # every binary hunk of one patch file and its deltas' results
_HUNK = re.compile(r"(literal|delta) (\d{1,20})")  # git: strtoul
_LENGTHS = {chr(c): c - ord("A") + 1 for c in range(ord("A"), ord("Z") + 1)} | {
    chr(c): c - ord("a") + 27 for c in range(ord("a"), ord("z") + 1)
}


class BinaryRefused(Exception):
    """A binary hunk git would call corrupt, or one that would inflate past its bounds."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.message, self.line = message, line


class Declared:
    """What the binary hunks of one patch file declare so far, each hunk and each delta's result:
    all of it is in git apply's memory at once."""

    def __init__(self) -> None:
        self.total = 0

    def add(self, size: int, what: str, at: int) -> None:
        self.total += size
        if self.total > MAX_PATCH_BINARY_BYTES:
            raise BinaryRefused(
                f"{what} brings the patch's binary hunks to {self.total} bytes, more than the "
                f"{MAX_PATCH_BINARY_BYTES} one patch may declare in all (git apply holds them at once); refusing it",
                at,
            )


def skip_binary(lines: list[str], i: int, declared: Declared) -> int:
    """The index of the first line after the binary hunks that follow 'GIT binary patch' (at
    ``lines[i - 1]``): the forward hunk and, where there is one, the reverse one, each added to
    what the patch file's hunks ``declared``."""
    for which in ("forward", "reverse"):
        if (m := _HUNK.fullmatch(lines[i]) if i < len(lines) else None) is None:
            if which == "reverse":
                return i
            raise BinaryRefused(f"corrupt binary patch at line {i + 1}: no 'literal N' or 'delta N' line", i + 1)
        i = _hunk(lines, i + 1, m.group(1), int(m.group(2)), declared)
    return i


def _hunk(lines: list[str], i: int, kind: str, size: int, declared: Declared) -> int:
    """Check one hunk whose header is ``lines[i - 1]``; the index after its closing empty line."""
    at = i  # the header's line number
    data = bytearray()
    while i < len(lines) and lines[i]:
        line = lines[i]
        i += 1
        length = _LENGTHS.get(line[0])
        most = (len(line) - 1) // 5 * 4
        if length is None or len(line) < 6 or (len(line) - 1) % 5 or not most - 4 < length <= most:
            raise BinaryRefused(f"corrupt binary patch at line {i}: {line[:40]!r} is no line of base85 data", i)
        try:
            data += base64.b85decode(line[1:])[:length]
        except ValueError:
            raise BinaryRefused(f"corrupt binary patch at line {i}: {line[:40]!r} is not base85", i) from None
    if i >= len(lines):
        raise BinaryRefused(f"corrupt binary patch at line {i}: the {kind} hunk at line {at} has no end", i)
    what = f"binary patch at line {at}: its {kind} hunk"
    if why := bomb_reason(size, len(data)):
        raise BinaryRefused(f"{what} {why}; refusing it", at)
    declared.add(size, what, at)
    try:
        got, head = inflated(bytes(data), size, head=20)
    except zlib.error as exc:
        raise BinaryRefused(f"corrupt {what} does not inflate: {exc}", at) from None
    if got != size:
        more = "more than" if got > size else f"{got} bytes, not"
        raise BinaryRefused(f"{what} inflates to {more} the {size} bytes it declares; refusing it", at)
    if kind == "delta" and (target := _delta_target(head)) is not None:
        if target > MAX_MEMBER_BYTES:
            raise BinaryRefused(
                f"{what} makes a file of {target} bytes, more than the {MAX_MEMBER_BYTES} a file may have; refusing it",
                at,
            )
        declared.add(target, what, at)
    return i + 1


def _delta_target(head: bytes) -> int | None:
    """The result size a git delta's header declares (after the source size), or None if cut short."""
    pos, sizes = 0, []
    for _ in range(2):
        value = shift = 0
        while True:
            if pos >= len(head):
                return None
            byte = head[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        sizes.append(value)
    return sizes[1]

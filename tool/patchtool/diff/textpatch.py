"""The diff model's hunks applied to text in memory, the way ``git apply`` applies them, and a
line diff.

``apply`` follows ``git apply`` without fuzz: a hunk's whole preimage (context and removed
lines) must match exactly; it is looked for at the position the hunk names, then alternately
one line further back and forward; a hunk that starts at line 1 must match at the beginning and
one with no trailing context at the end. A line an earlier hunk left (its context and added
lines) is never matched again: git marks it patched, so hunks that overlap are refused rather
than applied to each other's output. Each hunk's offset is reported, so an application at the
exact old positions ("unchanged") tells itself from one that moved ("shifted").

``diff`` finds the changed blocks between two versions of a file (patience anchors, then
``difflib`` between them): enough to say where a merged hunk landed, at a fraction of
``difflib``'s cost on the 6,000-line files upstream has.
"""

from __future__ import annotations

import bisect
import dataclasses
import difflib
from collections.abc import Sequence

from patchtool.diff.model import Hunk


@dataclasses.dataclass(frozen=True, slots=True)
class AppliedHunks:
    """Hunks applied to one file's lines: the lines they leave, and where each hunk went."""

    lines: list[str]
    offsets: tuple[int, ...]  # per hunk: lines away from where it said it was (negated in reverse, as git)
    starts: tuple[int, ...]  # per hunk: 0-based line of its postimage in the result


def apply(lines: Sequence[str], hunks: Sequence[Hunk], *, reverse: bool = False) -> AppliedHunks | None:
    """``hunks`` applied to ``lines`` (each with its newline), or None where one does not apply."""
    image = list(lines)
    patched = [False] * len(image)  # git's LINE_PATCHED: left by an earlier hunk
    offsets, starts = [], []
    for hunk in hunks:
        pre, post = hunk.image(reverse)
        new_pos = hunk.old_start if reverse else hunk.new_start
        expected = new_pos - 1 if new_pos else 0
        at_start, at_end = _held_to(hunk, reverse)
        if (found := _find(image, patched, pre, expected, at_start, at_end)) is None:
            return None
        image[found : found + len(pre)] = post
        patched[found : found + len(pre)] = [True] * len(post)
        offsets.append(expected - found if reverse else found - expected)  # git reports it so
        starts.append(found)
    return AppliedHunks(image, tuple(offsets), tuple(starts))


def _held_to(hunk: Hunk, reverse: bool) -> tuple[bool, bool]:
    """Whether git holds ``hunk`` to the file's start, and to its end (no context after it)."""
    old_pos = hunk.new_start if reverse else hunk.old_start
    return old_pos in (0, 1), hunk.trailing() == 0


class Searchable:
    """One file's lines, indexed by their text, for asking of one hunk at a time whether it applies
    alone as ``apply`` would place it: it is looked for only where its rarest line is, not at every
    line as git scans (a patch of thousands of failing hunks on a long file), and the lines compared
    are counted: past ``most``, ``fits`` answers None (not looked at)."""

    def __init__(self, lines: Sequence[str], *, most: int) -> None:
        self.lines, self.most, self.compared = list(lines), most, 0
        self.at: dict[str, list[int]] = {}
        for i, line in enumerate(self.lines):
            self.at.setdefault(line, []).append(i)

    def fits(self, hunk: Hunk, *, reverse: bool = False) -> bool | None:
        pre = hunk.image(reverse)[0]
        last = len(self.lines) - len(pre)
        at_start, at_end = _held_to(hunk, reverse)
        if last < 0:
            return False
        if at_start or at_end:
            places: Sequence[int] = [0] if at_start else [last]
            if at_start and at_end and last != 0:
                return False
        elif not pre:
            return True
        else:
            k = min(range(len(pre)), key=lambda i: len(self.at.get(pre[i], ())))
            places = [q - k for q in self.at.get(pre[k], ()) if 0 <= q - k <= last]
        for pos in places:
            self.compared += len(pre)
            if self.compared > self.most:
                return None
            if self.lines[pos : pos + len(pre)] == pre:
                return True
        return False


def _find(
    image: list[str], patched: list[bool], pre: list[str], expected: int, at_start: bool, at_end: bool
) -> int | None:
    size = len(pre)
    last = len(image) - size
    if last < 0:
        return None

    def fits(pos: int) -> bool:
        return image[pos : pos + size] == pre and not any(patched[pos : pos + size])

    if at_start:
        return 0 if (not at_end or last == 0) and fits(0) else None
    if at_end:
        return last if fits(last) else None
    expected = min(max(expected, 0), last)
    first = pre[0] if pre else None
    back = fwd = expected
    if fits(expected):
        return expected
    while back > 0 or fwd < last:
        if fwd < last:
            fwd += 1
            if (first is None or image[fwd] == first) and fits(fwd):
                return fwd
        if back > 0:
            back -= 1
            if (first is None or image[back] == first) and fits(back):
                return back
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Block:
    """A changed region: ``a[a_start:a_end]`` became ``b[b_start:b_end]`` (0-based)."""

    a_start: int
    a_end: int
    b_start: int
    b_end: int


def diff(a: Sequence[str], b: Sequence[str]) -> list[Block]:
    """The changed blocks between two line lists, in order."""
    out: list[Block] = []
    _diff(a, b, 0, len(a), 0, len(b), out)
    return out


def _diff(a: Sequence[str], b: Sequence[str], alo: int, ahi: int, blo: int, bhi: int, out: list[Block]) -> None:
    while alo < ahi and blo < bhi and a[alo] == b[blo]:
        alo += 1
        blo += 1
    while alo < ahi and blo < bhi and a[ahi - 1] == b[bhi - 1]:
        ahi -= 1
        bhi -= 1
    if alo == ahi or blo == bhi:
        if alo != ahi or blo != bhi:
            out.append(Block(alo, ahi, blo, bhi))
        return
    if not (anchors := _anchors(a, b, alo, ahi, blo, bhi)):
        if (ahi - alo) * (bhi - blo) > 4_000_000:  # nothing to align on: one block, as a diff would say
            out.append(Block(alo, ahi, blo, bhi))
            return
        ops = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False).get_opcodes()
        out += [Block(alo + i1, alo + i2, blo + j1, blo + j2) for tag, i1, i2, j1, j2 in ops if tag != "equal"]
        return
    for i, j in anchors:
        _diff(a, b, alo, i, blo, j, out)
        alo, blo = i + 1, j + 1
    _diff(a, b, alo, ahi, blo, bhi, out)


def _anchors(a: Sequence[str], b: Sequence[str], alo: int, ahi: int, blo: int, bhi: int) -> list[tuple[int, int]]:
    """Lines that occur once in each side, kept in the longest order-preserving run (patience)."""
    count_a: dict[str, int] = {}
    for i in range(alo, ahi):
        count_a[a[i]] = -1 if a[i] in count_a else i
    count_b: dict[str, int] = {}
    for j in range(blo, bhi):
        count_b[b[j]] = -1 if b[j] in count_b else j
    pairs = sorted((i, count_b[line]) for line, i in count_a.items() if i >= 0 and count_b.get(line, -1) >= 0)
    # longest increasing subsequence of the b positions (patience sorting)
    tails: list[int] = []
    back: list[int] = []
    tail_at: list[int] = []
    for k, (_, j) in enumerate(pairs):
        pos = bisect.bisect_left(tails, j)
        tails[pos : pos + 1], tail_at[pos : pos + 1] = [j], [k]  # the pile's new top, or a new pile
        back.append(tail_at[pos - 1] if pos else -1)
    chain = []
    k = tail_at[-1] if tail_at else -1
    while k >= 0:
        chain.append(pairs[k])
        k = back[k]
    return chain[::-1]

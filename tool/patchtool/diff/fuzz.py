"""Hunks applied the way GNU ``patch --fuzz=N`` applies them (what ``git apply`` cannot do).

GNU patch 2.7's rules (``locate_hunk``, ``patch_match``, ``apply_hunk`` in its ``patch.c``):
each hunk is looked for at its old line plus the offset the previous hunk of the file moved by,
then one line further forward and back, alternately, never before the last line an earlier hunk
changed. At fuzz F it ignores up to F of its leading and trailing context lines (fewer on the
side that has less context, so a hunk at the start or end of the file stays anchored there); F
rises from 0 to N (at most the hunk's context) until it is found. The lines it ignores are kept
as the file has them. The first hunk of a file found only in reverse is a patch already applied
(or reversed): refused, as ``patch --forward`` does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from patchtool.diff.model import ADDED, CONTEXT, REMOVED, Hunk


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Placed:
    """Where one hunk applied: ``offset`` lines from its header's old line, ignoring ``fuzz``
    context lines at each end."""

    hunk: int  # 1-based, within its file
    fuzz: int
    offset: int

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Fuzzed:
    """A file's hunks applied: the lines they leave, and where each went."""

    lines: list[str]
    placed: tuple[Placed, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class _Hunk:
    """A hunk as GNU patch reads it: its pattern (old lines), and context counts."""

    first: int  # 1-based old line of the pattern's first line
    lines: tuple[tuple[str, str], ...]  # (kind, text)
    pattern: tuple[str, ...]
    prefix: int
    suffix: int

    @classmethod
    def of(cls, hunk: Hunk, *, reverse: bool = False) -> _Hunk:
        swap = {ADDED: REMOVED, REMOVED: ADDED, CONTEXT: CONTEXT}
        lines = tuple((swap[ln.kind] if reverse else ln.kind, ln.text) for ln in hunk.lines)
        pattern = tuple(text for kind, text in lines if kind != ADDED)
        first = hunk.new_start if reverse else hunk.old_start
        # an empty pattern appends after its line
        return cls(first + (not pattern), lines, pattern, hunk.leading(), hunk.trailing())


MAX_COMPARED = 20_000_000  # lines compared in one file's search: a real series needs thousands


class TooCostly(Exception):
    """The search compared more than ``MAX_COMPARED`` lines: a hunk of many repeated lines over a
    file of them costs its size times the file's, at every position and fuzz level."""

    def __init__(self, hunk: int) -> None:
        super().__init__(f"hunk {hunk}")
        self.hunk = hunk


def apply(lines: Sequence[str], hunks: Sequence[Hunk], *, fuzz: int, reverse: bool = False) -> Fuzzed | None:
    """``hunks`` applied to ``lines`` (each with its newline) with at most ``fuzz`` lines of fuzz
    (``reverse``: taken out, as ``patch -R``), or None where one does not apply (or the first
    applies only the other way). TooCostly where the search would compare more than
    ``MAX_COMPARED`` lines."""
    state = _State(list(lines))
    placed = []
    for n, hunk in enumerate(hunks, 1):
        h = _Hunk.of(hunk, reverse=reverse)
        found = None
        state.hunk = n
        for level in range(min(fuzz, max(h.prefix, h.suffix)) + 1):
            found = state.locate(h, level)
            if found is None and n == 1 and state.locate(_Hunk.of(hunk, reverse=not reverse), level) is not None:
                return None  # already applied, or a reversed patch
            if found is not None:
                break
        if found is None or not state.apply(h, found):
            return None
        placed.append(Placed(hunk=n, fuzz=level, offset=found - h.first))
    return Fuzzed(lines=state.finish(), placed=tuple(placed))


class _State:
    """GNU patch's walk through one file: the input, what is written so far, the last input line
    consumed (``frozen``) and the running offset."""

    def __init__(self, lines: list[str]) -> None:
        self.input = lines
        self.out: list[str] = []
        self.frozen = self.offset = self.hunk = 0
        self.compared = 0  # lines compared so far, bounded by MAX_COMPARED

    def locate(self, h: _Hunk, fuzz: int) -> int | None:
        """The 1-based input line where ``h``'s pattern starts at ``fuzz``, or None; moves the
        running offset when found."""
        n, size = len(self.input), len(h.pattern)
        guess = h.first + self.offset
        context = max(h.prefix, h.suffix)
        prefix_fuzz, suffix_fuzz = fuzz + h.prefix - context, fuzz + h.suffix - context
        max_where = n - (size - suffix_fuzz) + 1
        min_where = self.frozen + 1  # never over a line an earlier hunk already wrote
        max_pos, max_neg = max_where - guess, guess - min_where
        widest = max(max_pos, max_neg)
        if not size:
            return guess
        if guess <= max_neg:
            max_neg = guess - 1
        if prefix_fuzz < 0 and h.first <= 1:  # only the start of the file
            if suffix_fuzz < 0 and (size != n or h.prefix < self.frozen):
                return None
            offset = 1 - guess
            if self.frozen <= h.prefix and offset <= max_pos and self._match(h, guess + offset, 0, max(suffix_fuzz, 0)):
                return self._found(guess, offset)
            return None
        prefix_fuzz = max(prefix_fuzz, 0)
        if suffix_fuzz < 0:  # only the end of the file
            offset = guess - (n - size + 1)
            if offset <= max_neg and self._match(h, guess - offset, prefix_fuzz, 0):
                return self._found(guess, -offset)
            return None
        # where the guess lies outside [min_where, max_where], the walk starts at that bound's distance
        start = guess - max_where if max_pos < 0 else guess - min_where if max_neg < 0 else 0
        for offset in range(start, widest + 1):
            if offset <= max_pos and self._match(h, guess + offset, prefix_fuzz, suffix_fuzz):
                return self._found(guess, offset)
            if offset <= max_neg and offset != 0 and self._match(h, guess - offset, prefix_fuzz, suffix_fuzz):
                return self._found(guess, -offset)
        return None

    def _found(self, guess: int, offset: int) -> int:
        self.offset += offset
        return guess + offset

    def _match(self, h: _Hunk, where: int, prefix_fuzz: int, suffix_fuzz: int) -> bool:
        start = where - 1 + prefix_fuzz
        wanted = h.pattern[prefix_fuzz : len(h.pattern) - suffix_fuzz]
        self.compared += len(wanted)
        if self.compared > MAX_COMPARED:
            raise TooCostly(self.hunk)
        return start >= 0 and list(wanted) == self.input[start : start + len(wanted)]

    def apply(self, h: _Hunk, where: int) -> bool:
        """``h`` written at input line ``where``: context and fuzzed lines stay as the input has
        them, removed lines are skipped, added lines come from the hunk. False for hunks out of
        order (GNU's "misordered hunks")."""
        old = 0  # pattern lines passed
        for kind, text in h.lines:
            if kind == CONTEXT:
                old += 1
                continue
            if not self._copy_till(where - 1 + old):
                return False
            if kind == REMOVED:
                self.frozen += 1
                old += 1
            else:
                self.out.append(text)
        return True

    def _copy_till(self, last: int) -> bool:
        if self.frozen > last:
            return False
        self.out += self.input[self.frozen : last]
        self.frozen = last
        return True

    def finish(self) -> list[str]:
        self._copy_till(len(self.input))
        return self.out

"""A regular expression read from a repository's file, run by RE2 in time linear in its input.

A stranger's pattern must not hang ``check`` or ``retread scan`` (``(.|.|.)*QQQ``) nor crash
them (``x{99999999999}``, deep nesting); Python's backtracking ``re`` does both, RE2 neither.
Each pattern is compiled once, where its TOML is read, into a ``RepoPattern``; RE2 refuses what
it cannot run in linear time (backreferences, lookaround) and that refusal is the user's message.
patchtool's own fixed regexes stay on ``re``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import re2  # type: ignore[import-untyped]

MAX_LENGTH = 2000  # characters: longer than any hand-written guard, short of a generated one
MAX_MEMORY = 8 << 20  # bytes RE2 may use for one compiled pattern (RE2's own default, made explicit)

UNSUPPORTED_HINT = (
    "patterns in patchtool's files run on RE2 (linear time): no backreferences (\\1), "
    "lookahead or lookbehind ((?=, (?!, (?<=, (?<!), atomic groups or possessive "
    "quantifiers, (?x), \\Z (write \\z) or \\u (write \\x{...}); see "
    "https://github.com/google/re2/wiki/Syntax"
)


def _options() -> Any:
    options = re2.Options()
    options.max_mem = MAX_MEMORY
    options.log_errors = False  # the refusal is reported as a Problem, not logged to stderr
    return options


_OPTIONS = _options()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RepoPattern:
    """A compiled pattern from a file; ``pattern`` is its text as written there."""

    pattern: str
    multiline: bool  # ^ and $ match at every line (assumptions, revisit conditions, code guards)
    compiled: Any = dataclasses.field(compare=False, repr=False)

    @classmethod
    def parse(cls, text: str, *, multiline: bool) -> RepoPattern:
        """The pattern ``text``; ValueError, with the message the user sees, where RE2 refuses it."""
        if len(text) > MAX_LENGTH:
            raise PatternRefused(
                f"regular expression of {len(text)} characters is longer than the {MAX_LENGTH} patchtool accepts",
                hint="split it into several guards or assumptions, or match a shorter, distinctive part",
            )
        try:
            compiled = re2.compile(f"(?m){text}" if multiline else text, _OPTIONS)
        except re2.error as exc:
            why = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
            raise PatternRefused(
                f"invalid regular expression {text!r}: RE2 refuses it: {why}", hint=UNSUPPORTED_HINT
            ) from None
        return cls(pattern=text, multiline=multiline, compiled=compiled)

    def search(self, text: str) -> str | None:
        """The first text that matches in ``text``, or None."""
        return None if (m := self.compiled.search(text)) is None else str(m.group(0))

    def count(self, text: str) -> int:
        """How many non-overlapping matches ``text`` holds."""
        return sum(1 for _ in self.compiled.finditer(text))

    def fullmatch(self, text: str) -> bool:
        return self.compiled.fullmatch(text) is not None


class PatternRefused(ValueError):
    """A pattern RE2 will not run, with a hint on what to write instead."""

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def multiline_pattern(text: str) -> RepoPattern:
    """A ``Fields.parsed`` parser: a search pattern, ``^``/``$`` at every line."""
    return RepoPattern.parse(text, multiline=True)


def value_pattern(text: str) -> RepoPattern:
    """A ``Fields.parsed`` parser: the values a knob is matched against in full."""
    return RepoPattern.parse(text, multiline=False)

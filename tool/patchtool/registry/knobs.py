"""How a use of a knob is recognised in one line of text: a launch line, an argument list, an
env file, a YAML or JSON manifest, or a line of code.

Pure functions over strings. A value can sit on the line after its name (one argument per
list item, a Kubernetes ``name:`` / ``value:`` pair); the caller hands that line in as
``following`` and a use that starts on ``line`` and reads its value from there is found.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchtool.registry.entries import Guard

_FALSY = ("false", "0", "", "none", "off", "no")

# a literal a flag's server-args field is set to in code or JSON
_LITERAL = r"(?P<value>True|False|true|false|None|-?\d+(?:\.\d+)?|\"[^\"]*\"|'[^']*')"
# the value of a config key: a quoted string, or a token with an optional call (EnvInt(8))
_TOKEN = r"(?P<value>\"[^\"]*\"|'[^']*'|[\w.+-]+(?:\([^()]*\))?)"
# `=` as an assignment or keyword argument, never part of ==, !=, <=, >=
_ASSIGN = r"(?<![=!<>])=(?!=)"
# an optional type annotation before the `=` (num_warps: int = 8, NUM_WARPS: tl.constexpr = 8)
_ANNOTATION = r"(?:\s*:\s*[A-Za-z_][\w.]*(?:\[[^\]=]*\])?)?"
_TUPLE_ASSIGN = re.compile(
    r"^\s*(?P<lhs>[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)+)\s*,?\s*" + _ASSIGN + r"\s*(?P<rhs>.+)$"
)


def find_use(guard: Guard, line: str, *, python: bool = False, following: str = "") -> str | None:
    """The text in ``line`` that uses ``guard``'s knob, or None.

    In Python source a flag counts only as a string of its own (``"--flag"``, an argument list)
    or as its field set to a literal: prose that names the flag is not a use, and neither is a
    comment. A use whose value sits on ``following`` (the next line) is found on ``line``.
    """
    if guard.type.value == "pattern":
        assert guard.regex is not None
        return guard.regex.search(line)
    text = _code(line) if python else line
    found = _first_use(guard, text, python=python, limit=len(text))
    if found is None and following.strip():
        joined = f"{text.rstrip()} {_item(following)}"
        found = _first_use(guard, joined, python=python, limit=len(text.rstrip()))
    return found


def _first_use(guard: Guard, text: str, *, python: bool, limit: int) -> str | None:
    """The first use that starts before ``limit`` (the end of the line itself)."""
    for start, found, value, literal in _uses(guard, text, python=python):
        # without values: any use on a command line; a truthy literal in code
        ok = guard.values.fullmatch(value) if guard.values is not None else not literal or value.lower() not in _FALSY
        if ok and start < limit:
            return found
    return None


def _uses(guard: Guard, text: str, *, python: bool) -> Iterator[tuple[int, str, str, bool]]:
    """Every (start, text, value, whether the value must be a truthy literal) naming the knob."""
    kind = guard.type.value
    for name in (guard.name, *guard.aliases):
        for pattern, literal in _use_patterns(kind, name):
            for m in pattern.finditer(text):
                unquoted = text[max(0, m.start() - 1) : m.start()] not in ("'", '"')
                if python and kind == "flag" and not literal and unquoted:
                    continue
                yield m.start(), m.group(0).strip(), unwrap(m.group("value") or ""), literal
        if kind == "config":
            yield from _tuple_uses(name, text)


def _tuple_uses(key: str, text: str) -> Iterator[tuple[int, str, str, bool]]:
    """``BLOCK_T, NUM_WARPS, NUM_STAGES = 16, 8, 2``: the value at the key's position."""
    if (m := _TUPLE_ASSIGN.match(text)) is None:
        return
    names = [n.strip() for n in m.group("lhs").split(",")]
    values = [v.strip() for v in m.group("rhs").strip().strip("()[]").split(",") if v.strip()]
    if len(names) != len(values):
        return
    ident = _config_name(key)
    for name, value in zip(names, values, strict=True):
        if ident.fullmatch(name.rsplit(".", 1)[-1]):
            yield m.start("lhs"), m.group(0).strip(), unwrap(value), False


def _config_name(key: str) -> re.Pattern[str]:
    """The key itself, or a constant that ends in it: num_warps, NUM_WARPS, MMA_NUM_WARPS."""
    return re.compile(rf"(?i:(?:\w*_)?{re.escape(key)})")


def unwrap(value: str) -> str:
    """``"1"`` -> ``1``; ``EnvBool(True)``, ``tl.constexpr(8)`` -> the argument."""
    value = value.strip().strip("\"'")
    m = re.fullmatch(r"[\w.]+\((.*)\)", value)
    return m.group(1).strip().strip("\"'") if m else value


def _item(line: str) -> str:
    """The next line as the continuation of this one: a YAML list item loses its dash."""
    return line.strip().removeprefix("- ")


def _code(line: str) -> str:
    """A Python line without its trailing comment (a ``#`` outside string literals)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == "\\":
                continue
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[:i]
    return line


@functools.cache
def _use_patterns(kind: str, name: str) -> list[tuple[re.Pattern[str], bool]]:
    """Regexes that find a use of the knob, each with whether its value must be a truthy literal."""
    n = re.escape(name)
    found: list[tuple[re.Pattern[str], bool]]
    if kind == "flag":
        field = re.escape(name.lstrip("-").replace("-", "_"))
        found = [
            # --flag, --flag value, --flag=value, "--flag", "value", "--flag" "value" (argument lists)
            (
                re.compile(
                    rf"(?<![\w-]){n}(?![\w-])(?:\s*=\s*|[\"']?\s*,\s*|[\"']?\s+)?"
                    # one shell word: --flag="8" and --flag '8' give 8, as the shell reads them
                    rf"(?P<value>(?:\"[^\"]*\"|'[^']*'|[^\s\"',\])}}])*)"
                ),
                False,
            ),
            # the server-args field set in code or JSON: flag_name = True, "flag_name": 4, flag_name: int = 4
            (re.compile(rf"(?<![\w])[\"']?{field}[\"']?\s*(?::\s*[A-Za-z_][\w\[\], ]*)?\s*[:=]\s*" + _LITERAL), True),
        ]
    elif kind == "env":
        value = r"(?P<value>\w+\([^)]*\)|[\"']?[^\s\"',;}]*)"
        found = [
            # NAME=1, export NAME=1, Environment="NAME=1", NAME: "1", "NAME": "1", os.environ["NAME"] = "1",
            # and upstream's own default NAME = EnvBool(True)
            (re.compile(rf"(?<![\w]){n}(?![\w])[\"']?\]?\s*[=:]\s*{value}"), False),
            # a Kubernetes / JSON env entry: name: NAME then value: "1" (same line, flow map, or the next line)
            (
                re.compile(
                    rf"\bname[\"']?\s*:\s*[\"']?{n}(?![\w])[\"']?\s*,?\s*(?:-\s+)?[\"']?value[\"']?\s*:\s*{value}"
                ),
                False,
            ),
            # the same pair with value: first
            (
                re.compile(
                    r"\bvalue[\"']?\s*:\s*(?P<value>\"[^\"]*\"|'[^']*'|[^\s,}]+)\s*,?\s*(?:-\s+)?"
                    rf"[\"']?name[\"']?\s*:\s*[\"']?{n}(?![\w])"
                ),
                False,
            ),
        ]
    else:  # config key, in the assignment forms code, TOML, YAML and JSON use
        ident = rf"(?<![\w]){_config_name(name).pattern}(?![\w])"
        found = [
            # index_topk = 1024, MMA_NUM_WARPS = 8, num_warps=8 (a keyword argument), num_warps: int = 8
            (re.compile(ident + _ANNOTATION + r"\s*" + _ASSIGN + r"\s*" + _TOKEN), False),
            # "index_topk": 1024 (JSON, a dict), index_topk: 1024 (YAML)
            (re.compile(ident + r"[\"']?\s*:\s*" + _TOKEN), False),
        ]
    return found

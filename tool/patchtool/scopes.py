"""Where a hunk sits: the enclosing function or class of a line, and whether a region drifted.

Python files are read by indentation (qualified names such as ``Scheduler._add_request_to_queue``);
other files use git's default function-name rule (the nearest line above that starts with a
letter, ``_`` or ``$``), which finds C, CUDA and C++ function headers.
"""

from __future__ import annotations

import dataclasses
import functools
import re

_FUNCNAME = re.compile(r"^[A-Za-z_$].*")


@dataclasses.dataclass(frozen=True, slots=True)
class Scope:
    name: str  # "Class.method", "<module>", or a header line for non-Python files
    start: int  # 1-based, inclusive
    end: int


_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+def|def|class)[ \t]+([A-Za-z_]\w*)")
_TRIPLE = re.compile(r'"""|\'\'\'')
_STRING = re.compile(r"'[^'\\]*(?:\\.[^'\\]*)*'|\"[^\"\\]*(?:\\.[^\"\\]*)*\"")
_COMMENT = re.compile(r"#.*$")
_TRIPLE_WHOLE = re.compile(r'""".*?"""|\'\'\'.*?\'\'\'')


@functools.lru_cache(maxsize=64)
def python_scopes(source: str) -> tuple[Scope, ...]:
    """Every def and class with its qualified name and line span, in one pass over the lines.

    Indentation decides nesting, as it does for Python; lines inside triple-quoted strings are
    skipped so a dedented string cannot end a scope. Much cheaper than ``ast`` on the 300 kB
    files SGLang has, and it tolerates files that do not parse.
    """
    scopes: list[Scope] = []
    stack: list[tuple[int, str, int]] = []  # (indent, qualified name, start line)
    last_code = 0
    in_string = False
    depth = 0  # open brackets: a continuation line's indentation says nothing about scope
    for number, line in enumerate(source.split("\n"), 1):  # git's lines, not str.splitlines'
        # plain str methods before any regex: this runs on every line of 6,000-line files
        has_quote = '"' in line or "'" in line
        quotes = line.count('"""') + line.count("'''") if has_quote else 0
        if in_string:
            in_string = quotes % 2 == 0
            continue
        stripped = line.strip()
        if not stripped or stripped[0] == "#":
            continue
        code = line
        if has_quote:
            code = _TRIPLE_WHOLE.sub('""', code)
            code = _TRIPLE.split(code, maxsplit=1)[0]  # an opening triple quote: the rest is string
            code = _STRING.sub('""', code)
        if "#" in code:
            code = _COMMENT.sub("", code)
        opened = depth
        if "(" in code or ")" in code or "[" in code or "]" in code or "{" in code or "}" in code:
            depth = max(0, depth + code.count("(") + code.count("[") + code.count("{")
                        - code.count(")") - code.count("]") - code.count("}"))
        if opened:
            last_code = number
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            _, name, start = stack.pop()
            scopes.append(Scope(name, start, last_code))
        m = _DEF.match(line) if stripped[0] in "acd" else None
        if m:
            prefix = f"{stack[-1][1]}." if stack else ""
            stack.append((indent, prefix + m.group(2), number))
        if quotes % 2 == 1:
            in_string = True
        last_code = number
    while stack:
        _, name, start = stack.pop()
        scopes.append(Scope(name, start, last_code))
    return tuple(sorted(scopes, key=lambda s: s.start))


def scope_at(path: str, source: str, line: int) -> Scope:
    """The innermost scope that contains ``line`` (1-based) of ``source``."""
    if path.endswith(".py"):
        inner = [s for s in python_scopes(source) if s.start <= line <= s.end]
        if inner:
            return max(inner, key=lambda s: s.start)
        return Scope("<module>", 1, source.count("\n") + 1)
    lines = source.split("\n")
    for i in range(min(line, len(lines)) - 1, -1, -1):
        if _FUNCNAME.match(lines[i]):
            return Scope(lines[i].strip(), i + 1, i + 1)
    return Scope("<top>", 1, 1)


def scope_text(path: str, source: str, name: str) -> str | None:
    """The source of the scope called ``name`` (None when it does not exist)."""
    if not path.endswith(".py"):
        return None
    lines = source.split("\n")
    for s in python_scopes(source):
        if s.name == name:
            return "\n".join(lines[s.start - 1:s.end])
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Hunk:
    """One hunk of a diff: where its first change is in the old and new file, and what it changes."""

    path: str
    old_line: int  # 1-based line of the first removed line, or of the line after the insertion point
    new_line: int  # likewise in the new file: the first added line
    added: tuple[str, ...]
    removed: tuple[str, ...]
    preimage: tuple[str, ...]  # context and removed lines, in order
    header: str


_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse_hunks(diff: str) -> list[Hunk]:
    """Hunks of a git diff, with the exact positions of each hunk's first change."""
    hunks: list[Hunk] = []
    path = ""
    lines = diff.split("\n")  # git's lines: a form feed inside one does not end it
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("+++ "):
            path = line[4:].removeprefix("b/")
        m = _HEADER.match(line)
        i += 1
        if not m:
            continue
        old_no, old_len = int(m.group(1)), int(m.group(2) or 1)
        new_no, new_len = int(m.group(3)), int(m.group(4) or 1)
        if old_len == 0:
            old_no += 1  # "-N,0" names the line before an insertion
        if new_len == 0:
            new_no += 1
        added: list[str] = []
        removed: list[str] = []
        pre: list[str] = []
        first: tuple[int, int] | None = None
        seen_old = seen_new = 0
        while i < len(lines) and (seen_old < old_len or seen_new < new_len):
            tag, text = lines[i][:1], lines[i][1:]
            i += 1
            if tag == "\\":
                continue
            if tag in ("+", "-") and first is None:
                first = (old_no + seen_old, new_no + seen_new)
            if tag == "+":
                added.append(text)
                seen_new += 1
            elif tag == "-":
                removed.append(text)
                pre.append(text)
                seen_old += 1
            else:
                pre.append(text)
                seen_old += 1
                seen_new += 1
        old_first, new_first = first or (old_no, new_no)
        hunks.append(Hunk(path, old_first, new_first, tuple(added), tuple(removed), tuple(pre), line))
    return hunks

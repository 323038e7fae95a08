"""The one TOML writer: every file patchtool writes in TOML comes out of ``dumps``.

Writes go through tomlkit, so comments, order and layout people wrote are kept. Whatever was
edited, the text is parsed again with the standard library's ``tomllib`` and compared with the
document before anyone may write it: a manifest patchtool writes always parses, and says exactly
what the document says.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from typing import Any

import tomlkit
import tomlkit.exceptions
from tomlkit.items import AoT, Array, Comment, InlineTable, Table, Whitespace

from patchtool.errors import InternalError, InvalidInput
from patchtool.project import fields


def parse(text: str, *, file: str) -> tomlkit.TOMLDocument:
    """``text`` as an editable document; InvalidInput naming ``file`` when it is not TOML."""
    if too_large := fields.toml_size_problem(text, file=file):
        raise too_large
    try:
        return tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise InvalidInput(f"{file} is not valid TOML: {exc}", file=file) from None


def value(text: str) -> Any:
    """The one TOML value ``text`` (what follows ``key = ``), read by the parser that reads the
    manifest to edit it, with its guard (no value nested more than 100 levels deep); ValueError
    saying what is wrong."""
    try:
        doc = tomlkit.parse(f"x = {text}\n")
    except tomlkit.exceptions.ParseError as exc:  # its place, less the "x = " in front
        what = str(exc).removesuffix(f" at line {exc.line} col {exc.col}")
        where = f"column {exc.col - 4}" if exc.line == 1 else f"line {exc.line}, column {exc.col}"
        raise ValueError(f"{what} ({where} of the value)") from None
    except (tomlkit.exceptions.TOMLKitError, ValueError) as exc:  # a key given twice; int()'s 4300 digits
        raise ValueError(str(exc)) from None
    if more := [k for k in doc if k != "x"]:
        raise ValueError(f"more follows the value ({more[0]} = ...)")
    return doc.unwrap()["x"]


def dumps(doc: tomlkit.TOMLDocument | Mapping[str, Any], *, file: str) -> str:
    """The document as text, ending in a newline, verified to parse back to the same data; in a
    document, one blank line after each table of an array of tables (``[[patch]]``), none at the end."""
    if isinstance(doc, tomlkit.TOMLDocument):
        _space_tables(doc)
    text = tomlkit.dumps(doc)
    if not text.endswith("\n"):
        text += "\n"
    expected = doc.unwrap() if isinstance(doc, tomlkit.TOMLDocument) else dict(doc)
    try:
        again = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InternalError(f"patchtool produced invalid TOML for {file} ({exc}); nothing was written") from None
    if again != _plain(expected):
        raise InternalError(
            f"the TOML patchtool produced for {file} does not read back as written; nothing was written"
        )
    return text


def _space_tables(doc: tomlkit.TOMLDocument) -> None:
    """One blank line after every ``[[key]]`` table but the document's last (none there): tomlkit
    gives a new table none and a moved one what it had, so edits would otherwise pile them up or
    glue tables together. A table that ends in a comment keeps its layout (it may head the next).
    The line goes at the end of what the table holds last: its last sub-table's, where it ends in
    one (``[[patch.gpu_verification]]``), so a table is followed by one blank line however nested."""
    tables = [t for value in doc.values() if isinstance(value, AoT) for t in value.body]
    for n, t in enumerate(tables):
        if n:  # the line before the first table is the document's
            t.trivia.indent = t.trivia.indent.lstrip("\n")
        last = _innermost_last(t)
        body = last.value.body
        if body and isinstance(body[-1][1], Comment):
            continue
        while body and isinstance(body[-1][1], Whitespace):
            body.pop()
        if n < len(tables) - 1:
            last.add(tomlkit.nl())


def _innermost_last(table: Table) -> Table:
    """The table whose lines end ``table``'s text: itself, or its last sub-table's innermost last."""
    while table.value.body:
        item = table.value.body[-1][1]
        if isinstance(item, AoT) and item.body:
            table = item.body[-1]
        elif isinstance(item, Table) and not isinstance(item, InlineTable):
            table = item
        else:
            break
    return table


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def inline_table(values: Mapping[str, Any]) -> InlineTable:
    """An inline table written ``{ key = value, ... }``, as people write them (tomlkit's own has no
    spaces inside the braces)."""
    table = tomlkit.inline_table()
    table.update(values)
    inner = table.as_string().strip()[1:-1].strip()
    item = tomlkit.parse(f"x = {{ {inner} }}\n" if inner else "x = {}\n")["x"]
    assert isinstance(item, InlineTable)
    return item


def lines_array(values: Iterable[str]) -> Array:
    """An array of strings written one a line (each is a sentence, too long to share a line)."""
    out = tomlkit.array()
    out.extend(values)
    return out.multiline(True)


def table(values: Mapping[str, Any], *, literal: tuple[str, ...] = ()) -> Table:
    """A table from plain values: dicts become inline tables, lists of dicts arrays of tables, and
    the strings under the keys in ``literal`` literal strings where they can be (regexes stay
    readable without doubled backslashes)."""
    t = tomlkit.table()
    for key, value in values.items():
        if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            aot = tomlkit.aot()
            for item in value:
                aot.append(table(item, literal=literal))
            t.add(key, aot)
        elif isinstance(value, Mapping):
            t.add(key, inline_table(value))
        elif isinstance(value, str) and key in literal and "'" not in value and "\n" not in value:
            t.add(key, tomlkit.string(value, literal=True))
        else:
            t.add(key, value)
    return t


def append_table(doc: tomlkit.TOMLDocument, key: str, value: Table) -> None:
    """Append ``value`` to the array of tables ``key`` (``[[key]]``), creating it if needed (an
    empty ``key = []`` counts as none)."""
    existing = doc.get(key)
    if isinstance(existing, AoT):
        existing.append(value)
        return
    if existing is not None:
        if not (isinstance(existing, list) and len(existing) == 0):
            raise InvalidInput(f"'{key}' is not an array of tables ([[{key}]])")
        del doc[key]
    set_tables(doc, key, [value])


def take_table(doc: tomlkit.TOMLDocument, key: str, index: int) -> Table:
    """Remove the ``index``-th ``[[key]]`` table and return it; the key goes with its last table
    (tomlkit would write an empty array of tables as ``key = []`` at the top of the file)."""
    tables = doc[key]
    taken = tables.pop(index)
    if len(tables) == 0:
        del doc[key]
    assert isinstance(taken, Table)
    return taken


def set_tables(doc: tomlkit.TOMLDocument, key: str, tables: list[Table]) -> None:
    """Make ``[[key]]`` exactly ``tables``, in order; none removes the key."""
    if not tables:
        doc.pop(key, None)
        return
    aot = tomlkit.aot()
    for t in tables:
        aot.append(t)
    if key in doc:
        doc[key] = aot  # in place: the file keeps its layout
    else:
        doc.append(key, aot)

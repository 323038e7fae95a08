"""``patchtool edit ID``: a patch's entry in ``patchset.toml`` changed, validated, written.

The entry is edited in the manifest's own document (tomlkit), so the comments and layout people
wrote stay; the edited manifest must parse with the same parser every command reads it with
before it is written, through the journal, by the one TOML writer. An edit that changes nothing
writes nothing. ``id`` and ``file`` are the patch's identity, not metadata: ``edit`` keeps them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import tomlkit
from tomlkit.items import AoT, InlineTable, Table

from patchtool.errors import InvalidInput, Problem, UsageError
from patchtool.paths import read_inside
from patchtool.project import journal, tomlio
from patchtool.project.fields import load_toml
from patchtool.project.manifest import MANIFEST_NAME, Manifest
from patchtool.project.metadata import Status
from patchtool.project.repository import Project, manifest_document, manifest_text
from patchtool.series.checks import outside_pin
from patchtool.series.ids import in_series
from patchtool.series.metadata import DEFAULT_MARK
from patchtool.urls import SourceUrl

FIELDS = ("why", "owner", "kind", "applies_to", "drop_when")  # what the options set, by key
IDENTITY = ("id", "file")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Edited:
    id: str
    changed: tuple[str, ...]  # the keys whose values changed (dotted: upstream.status)
    written: tuple[str, ...]  # the files written: none when nothing changed

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "changed": list(self.changed), "written": list(self.written)}


def entry_text(project: Project, ident: str) -> str:
    """The ``[[patch]]`` table of ``ident`` as TOML text, with its comments."""
    _, table = _table(manifest_document(project.root), project, ident)
    doc = tomlkit.document()
    doc.append("patch", AoT([table]))
    return tomlkit.dumps(doc)


def set_fields(project: Project, ident: str, values: Mapping[str, str], upstream: Mapping[str, str]) -> Edited:
    """Set the entry's ``values`` (keys of ``FIELDS``) and ``upstream`` (``status``, ``url``)."""
    if "status" in upstream and upstream["status"] not in tuple(Status):
        raise UsageError(
            f"--upstream-status {upstream['status']}: not an upstream status",
            hint=f"one of {', '.join(Status)}",
        )
    if "url" in upstream:
        _check_url(upstream["url"])
    doc = manifest_document(project.root)
    _, table = _table(doc, project, ident)
    for key, value in values.items():
        table[key] = value  # tomlkit keeps the comment on the line
        if DEFAULT_MARK in table[key].trivia.comment:  # a value given here was chosen: the TODO goes
            table[key].trivia.comment = table[key].trivia.comment_ws = ""
    old = table.get("upstream")
    if isinstance(old, Table):  # a [patch.upstream] sub-table or dotted keys: edited where they are, comments kept
        old.update(upstream)
    elif upstream:  # an inline table holds no comment: written anew, the comment after it kept
        table["upstream"] = tomlio.inline_table({**(old.unwrap() if isinstance(old, InlineTable) else {}), **upstream})
    return _write(project, ident, doc)


def replace_entry(project: Project, ident: str, text: str, *, source: str) -> Edited:
    """Make ``text`` (one ``[[patch]]`` table, as ``entry_text`` gave it and someone edited it)
    the entry of ``ident``; ``source`` names where the text came from in messages."""
    try:
        edited = tomlio.parse(text, file=source)
    except InvalidInput as exc:
        raise UsageError(f"{exc.message}; nothing was written", hint=f"run `patchtool edit {ident}` again") from None
    tables = edited.get("patch")
    if set(edited) != {"patch"} or not isinstance(tables, AoT) or len(tables) != 1:
        raise UsageError(f"{source} must hold one [[patch]] table, the entry of {ident}; nothing was written")
    new = tables[0]
    doc = manifest_document(project.root)
    index, table = _table(doc, project, ident)
    for key in IDENTITY:
        if new.get(key) != table.get(key):
            raise UsageError(
                f"patch {ident}: edit changes metadata, not the patch's {key}; nothing was written",
                file=MANIFEST_NAME,
                hint=f"keep {key} = {table[key].as_string().strip()}",
            )
    doc["patch"][index] = new
    return _write(project, ident, doc)


def _table(doc: Any, project: Project, ident: str) -> tuple[int, Table]:
    in_series(project, ident)
    index = next(i for i, t in enumerate(doc["patch"]) if str(t.get("id")) == ident)
    table = doc["patch"][index]
    assert isinstance(table, Table)
    return index, table


def _check_url(text: str) -> None:
    """An upstream url is a link people follow: https or http, with a host (SourceUrl's rules);
    never a file: URL or a path, which SourceUrl would take from the user."""
    try:
        scheme = SourceUrl.parse(text, key="upstream.url", user=True).scheme
    except ValueError:
        scheme = None
    if scheme not in ("https", "http"):
        raise UsageError(
            f"--upstream-url {text}: an upstream url is a link people follow: "
            "only an https:// or http:// URL with a host is accepted"
        )


def _write(project: Project, ident: str, doc: Any) -> Edited:
    """Validate the edited manifest with the manifest's parser, then write it (or nothing, when
    nothing changed)."""
    text = manifest_text(doc)
    try:
        after = Manifest.from_dict(load_toml(text, file=MANIFEST_NAME))
    except InvalidInput as exc:
        problems = [_located(p, ident) for p in exc.problems] or [Problem(message=exc.message, file=MANIFEST_NAME)]
        raise UsageError(
            f"patch {ident}: the edited entry is not valid; nothing was written", file=MANIFEST_NAME, problems=problems
        ) from None
    if text == read_inside(project.root, MANIFEST_NAME).decode("utf-8"):
        return Edited(id=ident, changed=(), written=())
    old, new = project.manifest.get(ident).to_dict(), after.get(ident).to_dict()
    changed = tuple(_changed(old, new))
    index = next(i for i, e in enumerate(after.patches) if e.id == ident)
    outside = outside_pin(project.pin(), after.patches[index], index) if "applies_to" in changed else None
    if outside:  # `check` would refuse what this writes
        raise UsageError(
            f"patch {ident}: the edited entry is not valid; nothing was written",
            file=MANIFEST_NAME,
            problems=[
                dataclasses.replace(
                    outside,
                    message=f"{outside.message}; nothing was written",
                    hint="applies_to must admit the pin's version: rebase to a version inside it first, or widen it",
                )
            ],
        )
    return Edited(id=ident, changed=changed, written=tuple(journal.commit(project.root, {MANIFEST_NAME: text})))


def _located(problem: Problem, ident: str) -> Problem:
    """A problem of the edited text: its line is in a text never written, so it names the key."""
    return dataclasses.replace(problem, line=None, message=f"{problem.message}; nothing was written").located(
        file=MANIFEST_NAME, patch=ident
    )


def _changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    out = []
    for key in dict.fromkeys([*old, *new]):
        a, b = old.get(key), new.get(key)
        if a != b and isinstance(a, Mapping) and isinstance(b, Mapping):
            out += [f"{key}.{k}" for k in _changed(a, b)]
        elif a != b:
            out.append(key)
    return out

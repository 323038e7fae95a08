"""The metadata a new patch starts with: what ``new`` and ``import`` were told, a skeleton for the
rest, and how ``check`` tells a skeleton's default from a value someone chose.

Two values must parse for the manifest to load at all (``kind`` and ``applies_to``), so the
skeleton cannot leave them as TODO text the way it does ``owner``, ``why`` and ``drop_when``.
It writes them with a ``# TODO: the skeleton's default ...`` comment on their line instead, and
``check`` flags a value only while both hold: it is still the default and the comment is still
there. A value given to ``new``/``import`` gets no comment, a value edited to anything else is
not the default, and a default kept on purpose is kept by deleting the comment, so a chosen
value is never flagged. Recognising the default values alone would flag every patch that really
is a correctness fix for all versions.

``new`` runs before the entry exists (``export`` creates it from the commit), so what it was told
waits in ``.patchtool/new-<id>/metadata.json`` until the export that creates the entry, which
removes it in the same transaction.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.items import Table

from patchtool import fsroot, paths
from patchtool.errors import InvalidInput, Problem, UsageError
from patchtool.inputs import loads_json
from patchtool.paths import id_problem
from patchtool.project import statedir, tomlio
from patchtool.project.fields import Fields
from patchtool.project.manifest import PLACEHOLDER, PatchEntry

FIELDS = ("kind", "owner", "why", "applies_to", "drop_when")  # in the order an entry lists them
SKELETON_DEFAULTS: Mapping[str, str] = {"kind": "correctness", "applies_to": ">=0"}
DEFAULT_MARK = f"{PLACEHOLDER}: the skeleton's default"
_TODO_TEXT = {"owner": "who maintains it", "why": "why the patch exists", "drop_when": "when to drop it"}
_CHOOSE = {
    "kind": "correctness, performance, reliability or operations?",
    "applies_to": "the upstream versions it is verified on?",
}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Metadata:
    """Values for a new entry; None: not given (the skeleton's placeholder or default then)."""

    id: str | None = None
    kind: str | None = None
    owner: str | None = None
    why: str | None = None
    applies_to: str | None = None
    drop_when: str | None = None

    def given(self) -> dict[str, str]:
        """The entry's fields that were given (``id`` aside), by key."""
        return {k: v for k in FIELDS if (v := getattr(self, k)) is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Metadata:
        """Pure; ValueError naming what is wrong."""
        if unknown := sorted(set(data) - {"id", *FIELDS}):
            raise ValueError(f"unknown keys {', '.join(unknown)}")
        if bad := [k for k, v in data.items() if not isinstance(v, str)]:
            raise ValueError(f"{', '.join(sorted(bad))} must be strings")
        return cls(**data)

    def to_dict(self) -> dict[str, str]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def placeholder_subject(ident: str) -> str:
    """The subject ``new`` gives a patch's commit, until someone writes one."""
    return f"{ident}: describe the change"


def todo_fields(given: Metadata | None) -> list[str]:
    """The fields a skeleton made with ``given`` leaves to fill in."""
    values = given.given() if given is not None else {}
    return [k for k in FIELDS if k not in values]


def validate(meta: Metadata) -> Metadata:
    """``meta`` when every value given passes the manifest's own rules (an id, a kind, a PEP 440
    specifier, non-empty text); UsageError listing every one that does not."""
    problems: list[Problem] = []
    entry = {
        "id": meta.id or "new",
        "file": "patches/0001-new.patch",
        **{k: SKELETON_DEFAULTS.get(k, "given") for k in FIELDS},
        **meta.given(),
        "upstream": {"status": "pending"},
    }
    PatchEntry.read(Fields(entry, "", problems))
    named = {"id"} if meta.id is not None else set()
    if mine := [dataclasses.replace(p, patch=None) for p in problems if p.key in named | set(meta.given())]:
        raise UsageError("; ".join(f"{p.key}: {p.message}" for p in mine), problems=mine)
    return meta


def skeleton(ident: str, file: str, given: Metadata | None = None) -> Table:
    """A new entry that parses, with every value not ``given`` marked for ``check`` to refuse
    until someone fills it in: TODO text, or a default with a TODO comment on its line."""
    values = given.given() if given is not None else {}
    t = tomlkit.table()
    t.add("id", ident)
    t.add("file", file)
    for key in FIELDS:
        if key in values:
            t.add(key, values[key])
        elif key in SKELETON_DEFAULTS:
            item = tomlkit.item(SKELETON_DEFAULTS[key])
            item.comment(f"{DEFAULT_MARK}; {_CHOOSE[key]} (delete this comment to keep it)")
            item.trivia.comment_ws = "  "
            t.add(key, item)
        else:
            t.add(key, f"{PLACEHOLDER}: {_TODO_TEXT[key]}")
    t.add("upstream", tomlio.inline_table({"status": "pending"}))
    return t


def unfilled_defaults(doc: Any) -> list[tuple[int, str, str]]:
    """``(patch index, key, value)`` of every ``[[patch]]`` value in the manifest document ``doc``
    (tomlkit) that is still the skeleton's default and still carries the skeleton's comment."""
    found = []
    for i, table in enumerate(doc.get("patch", [])):
        for key, default in SKELETON_DEFAULTS.items():
            item = table.get(key) if isinstance(table, Table) else None
            comment = str(getattr(getattr(item, "trivia", None), "comment", "")).lstrip("#").strip()
            if item is not None and str(item) == default and comment.startswith(DEFAULT_MARK):
                found.append((i, key, default))
    return found


# -- what `new` was told, until the export that creates the entry ----------------------------


def pending_tree(ident: str) -> str:
    """The directory that holds what ``new`` was told about ``ident``: the export removes it."""
    return f"{statedir.STATE_DIR}/new-{ident}"


def _pending_file(ident: str) -> str:
    return f"{pending_tree(ident)}/metadata.json"


def save_pending(root: Path, ident: str, meta: Metadata) -> None:
    """Keep ``meta`` for the export that creates ``ident``'s entry (atomically); a later ``new``
    of the same id replaces it, or forgets it when told nothing."""
    if not meta.given() and not (root / pending_tree(ident)).exists():
        return
    statedir.ensure(root)
    if not meta.given():
        fsroot.Root(root).rmtree(pending_tree(ident))
        statedir.tidy(root)
        return
    fsroot.Root(root).write(_pending_file(ident), json.dumps({"schema": 1, **meta.to_dict()}, indent=2, sort_keys=True))


def load_pending(root: Path, ident: str) -> Metadata | None:
    """What ``new`` was told about ``ident``, or None; InvalidInput when the file is not one
    patchtool writes (it is read like every other file of the repository: hostile)."""
    rel = _pending_file(ident)
    if id_problem(ident) is not None or (text := paths.read_text_if_present(root, rel)) is None:
        return None
    statedir.refuse_tracked(root)  # what a clone brought along is never taken as what `new` was told
    try:
        data = loads_json(text)
        if not isinstance(data, dict) or data.pop("schema", None) != 1:
            raise ValueError("not a record of schema 1")
        if (meta := Metadata.from_dict(data)).id != ident:
            raise ValueError(f"it names {meta.id!r}, not {ident!r}")
        return validate(meta)
    except (ValueError, UsageError) as exc:
        raise InvalidInput(
            f"{rel} is not metadata patchtool wrote: {exc}",
            file=rel,
            hint=f"delete {pending_tree(ident)}/ and fill in the entry after the export",
        ) from None

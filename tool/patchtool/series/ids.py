"""Ids for patches that arrive without one (a commit without a trailer, an imported patch): a
slug of the subject, made unique against the ids the series has or had; and the entry an id
names in the series."""

from __future__ import annotations

import re
from collections.abc import Collection

from patchtool.errors import UsageError
from patchtool.project.manifest import PatchEntry
from patchtool.project.repository import Project


def slug(text: str, limit: int = 48) -> str:
    """``text`` as an id: lower-case words joined by '-', at most ``limit`` characters, cut after
    a whole word (a first word longer than that is cut where it must be)."""
    found = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if len(found) > limit:
        head = found[: limit + 1]
        found = head[: head.rfind("-")] if "-" in head else found[:limit]
    return found or "patch"


def unique_id(base: str, taken: Collection[str]) -> str:
    """``base``, or ``base-2``, ... : an id none of ``taken`` is."""
    ident, n = base, 2
    while ident in taken:
        ident, n = f"{base}-{n}", n + 1
    return ident


def in_series(project: Project, ident: str) -> PatchEntry:
    """The entry of ``ident`` in the series; UsageError naming the ids there are (and saying so
    when ``ident`` was dropped)."""
    try:
        return project.manifest.get(ident)
    except KeyError:
        pass
    if (gone := next((d for d in project.manifest.dropped if d.entry.id == ident), None)) is not None:
        raise UsageError(
            f"patch {ident!r} was dropped at {gone.dropped_at}: {gone.reason}",
            hint=f"its entry is under [[dropped]] in patchset.toml, its file {gone.entry.file}",
        )
    ids = ", ".join(e.id for e in project.manifest.patches) or "none"
    raise UsageError(f"no patch {ident!r} in the series", hint=f"known: {ids}")

"""Ids for patches that arrive without one (a commit without a trailer, an imported patch): a
slug of the subject, made unique against the ids the series has or had."""

from __future__ import annotations

import re
from collections.abc import Collection


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

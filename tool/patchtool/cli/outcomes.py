"""How each patch outcome is shown, once for every renderer: the terminal tables and the HTML pages.

(Here rather than on ``PatchOutcome`` itself: how an outcome looks is the edge's business, not the replay's.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

from patchtool.rebase.replay import PatchOutcome


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Look:
    word: str  # in every cell, table or page, so nothing rests on the colour alone
    code: str  # one character, for a scan matrix too wide for words
    colour: str  # the HTML cell's background, light enough for dark text


LOOKS: Mapping[PatchOutcome, Look] = MappingProxyType(
    {
        PatchOutcome.UNCHANGED: Look(word="unchanged", code="=", colour="#a8dcaa"),
        PatchOutcome.SHIFTED: Look(word="shifted", code="~", colour="#d9eeb0"),
        PatchOutcome.MERGED: Look(word="3-way", code="3", colour="#ffe08a"),
        PatchOutcome.PARTLY_UPSTREAM: Look(word="partly", code="P", colour="#c5e3f6"),
        PatchOutcome.UPSTREAM: Look(word="upstream", code="U", colour="#8cc8ee"),
        PatchOutcome.CONFLICT: Look(word="conflict", code="X", colour="#f29b9b"),
        PatchOutcome.TARGET_GONE: Look(word="gone", code="G", colour="#d6b0e6"),
        PatchOutcome.DROPPED: Look(word="dropped", code="D", colour="#d4d4d4"),
        PatchOutcome.NOT_REACHED: Look(word="not reached", code="-", colour="#f0f0f0"),
    }
)


def css_class(outcome: PatchOutcome) -> str:
    """``o-conflict``, ``o-target-gone``: the HTML class that carries the outcome's colour."""
    return "o-" + outcome.name.lower().replace("_", "-")

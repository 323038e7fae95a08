"""What a patch says about upstream's commits: the references its message and its manifest entry
make, read as text, so the rebase can ask upstream's history about each (``upstream.history``).

A *named* reference says the patch carries that upstream commit: DEP-3 ``Origin:`` (with or
without its ``upstream,``/``backport,`` word; not ``vendor,``/``other,``), ``Applied-Upstream:``,
git's ``(cherry picked from commit X)``, a stable backport's ``commit X upstream`` and ``Backport
of X from main``, and the manifest's ``upstream.ref``. A *candidate* only may: the commit a
format-patch ``From <sha>`` line named (a local commit of whoever exported it, often not
upstream's). An advisory id (``CVE-2024-1234``, ``GHSA-xxxx-xxxx-xxxx``) in the subject is a
hint: an upstream commit whose message carries the same id is a candidate, never proof.

Pure: text in, records out.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterable, Sequence

_HEX = r"[0-9a-f]{7,40}"
_COMMIT_URL = re.compile(rf"https?://\S+?/(?:-/)?commits?/({_HEX})\b", re.IGNORECASE)
_COMMIT_WORD = re.compile(rf"\bcommit:\s*({_HEX})\b", re.IGNORECASE)
_BARE = re.compile(rf"^({_HEX})$", re.IGNORECASE)
_FIELD = re.compile(r"^(Origin|Applied-Upstream):[ \t]*(.*)$", re.IGNORECASE | re.MULTILINE)
_CHERRY = re.compile(rf"^\(cherry picked from commit ({_HEX})\)\s*$", re.IGNORECASE | re.MULTILINE)
_UPSTREAM_LINE = re.compile(r"^(?:\[\s*)?commit ([0-9a-f]{40})(?:\s*\])? upstream\b", re.IGNORECASE | re.MULTILINE)
_BACKPORT_OF = re.compile(rf"\bbackport(?:ed)? of (?:commit )?({_HEX})\b", re.IGNORECASE)
_ADVISORY = re.compile(r"\b(CVE-\d{4}-\d{4,7}|GHSA(?:-[23456789cfghjmpqrvwx]{4}){3})\b", re.IGNORECASE)
_NOT_UPSTREAM = ("vendor", "other")  # DEP-3's Origin words for a patch that is not upstream's


class Said(enum.StrEnum):
    """Where a reference was read."""

    ORIGIN = "Origin"
    APPLIED_UPSTREAM = "Applied-Upstream"
    CHERRY_PICKED = "cherry picked from"
    STABLE_UPSTREAM = "commit X upstream"
    BACKPORT_OF = "Backport of"
    MANIFEST_REF = "upstream.ref"
    FORMAT_PATCH_FROM = "From <sha>"

    @property
    def names(self) -> bool:
        """Whether it names the upstream commit the patch carries (else it is a candidate only)."""
        return self is not Said.FORMAT_PATCH_FROM


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Reference:
    """One upstream commit a patch refers to: ``commit`` (7 to 40 lower-case hex), where it was
    ``said``, and the ``text`` that said it (a line of the message, or the manifest's key)."""

    commit: str
    said: Said
    text: str

    @property
    def named(self) -> bool:
        return self.said.names

    def to_dict(self) -> dict[str, object]:
        return {"commit": self.commit, "said": str(self.said), "text": self.text, "named": self.named}


def _commits_in(value: str) -> list[str]:
    """The commits a field's value names: commit URLs, ``commit:<id>``, or the value alone as an id."""
    found = [m.group(1) for m in _COMMIT_URL.finditer(value)] + [m.group(1) for m in _COMMIT_WORD.finditer(value)]
    if not found:
        found = [m.group(1) for part in re.split(r"[\s,]+", value) if (m := _BARE.match(part))]
    return [c.lower() for c in found if any(ch.isdigit() for ch in c)]


def in_message(message: str) -> tuple[Reference, ...]:
    """The references a patch's message makes, in the order it makes them."""
    out: list[tuple[int, Reference]] = []
    for m in _FIELD.finditer(message):
        name, value = m.group(1).lower(), m.group(2)
        if name == "origin" and value.partition(",")[0].strip().lower() in _NOT_UPSTREAM:
            continue
        said = Said.ORIGIN if name == "origin" else Said.APPLIED_UPSTREAM
        out += [(m.start(), Reference(commit=c, said=said, text=m.group(0).strip())) for c in _commits_in(value)]
    for pattern, said in (
        (_CHERRY, Said.CHERRY_PICKED),
        (_UPSTREAM_LINE, Said.STABLE_UPSTREAM),
        (_BACKPORT_OF, Said.BACKPORT_OF),
    ):
        out += [
            (m.start(), Reference(commit=m.group(1).lower(), said=said, text=_line_at(message, m.start())))
            for m in pattern.finditer(message)
            if any(ch.isdigit() for ch in m.group(1))
        ]
    return tuple(r for _, r in sorted(out, key=lambda pair: pair[0]))


def _line_at(text: str, at: int) -> str:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return text[start : end if end >= 0 else len(text)].strip()


def references(
    message: str,
    *,
    upstream_ref: str | None = None,
    picked: Sequence[str] = (),
    exported_from: str | None = None,
) -> tuple[Reference, ...]:
    """Every upstream commit a patch refers to, each once (the first, strongest saying kept):
    those of its ``message``, the manifest's ``upstream.ref`` (where it is a commit id), the
    commits import read as cherry-picked (``picked``), and the format-patch ``From <sha>``
    commit (``exported_from``), a candidate only."""
    found: list[Reference] = list(in_message(message))
    if upstream_ref:
        found += [
            Reference(commit=c, said=Said.MANIFEST_REF, text=f"upstream.ref = {upstream_ref!r}")
            for c in _commits_in(upstream_ref)
        ]
    found += [
        Reference(commit=c.lower(), said=Said.CHERRY_PICKED, text=f"(cherry picked from commit {c})")
        for c in picked
        if _BARE.match(c)
    ]
    if exported_from and _BARE.match(exported_from) and set(exported_from) != {"0"}:
        found.append(Reference(commit=exported_from.lower(), said=Said.FORMAT_PATCH_FROM, text=f"From {exported_from}"))
    return _once(found)


def _once(found: Iterable[Reference]) -> tuple[Reference, ...]:
    """Each commit once: a named saying over a candidate, else the first; a short id that is the
    prefix of a longer one is the same commit."""
    out: list[Reference] = []
    for ref in found:
        if (same := next((i for i, r in enumerate(out) if _same(r.commit, ref.commit)), None)) is None:
            out.append(ref)
        elif ref.named and not out[same].named:
            out[same] = ref
        elif len(ref.commit) > len(out[same].commit) and ref.named == out[same].named:
            out[same] = dataclasses.replace(out[same], commit=ref.commit)
    return tuple(out)


def _same(a: str, b: str) -> bool:
    return a.startswith(b) or b.startswith(a)


def advisories(subject: str) -> tuple[str, ...]:
    """The advisory ids (``CVE-YYYY-N``, ``GHSA-xxxx-xxxx-xxxx``) a subject carries, upper-case
    (a GHSA id's letters lower-case, as GitHub writes them), each once."""
    found = _ADVISORY.findall(subject)
    return tuple(dict.fromkeys(t.upper() if t.upper().startswith("CVE-") else "GHSA" + t[4:].lower() for t in found))


def carries(message: str, advisory: str) -> bool:
    """Whether a commit message names ``advisory`` (as ``advisories`` spells it)."""
    return advisory in advisories(message)


def reverts(message: str) -> tuple[str, ...]:
    """The commits a message says it reverts (``git revert``'s ``This reverts commit X.``)."""
    return tuple(
        dict.fromkeys(m.group(1).lower() for m in re.finditer(r"\bThis reverts commit ([0-9a-f]{40})\b", message))
    )

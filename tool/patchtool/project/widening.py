"""Widening a patch's ``applies_to`` to admit one more version, minimally and as a person would write it.

Each clause that already admits the version stays as written; each that excludes it is moved just far
enough: ``<1.1`` becomes ``<=1.1``, ``==1.0`` becomes ``>=1.0,<=1.1``, ``~=1.0.2`` and ``==1.0.*``
become the range they meant stretched to the version, and ``!=1.1`` goes. Pure: text in, text out.
"""

from __future__ import annotations

from packaging.specifiers import InvalidSpecifier, Specifier, SpecifierSet
from packaging.version import InvalidVersion, Version


def _bump(release: tuple[int, ...]) -> Version:
    """The first version past a prefix: 1.0 -> 1.1 (for ``==1.0.*``, and ``~=1.0.2`` as ``1.0``)."""
    return Version(".".join(str(n) for n in (*release[:-1], release[-1] + 1)))


def _range(low: Version, high: Version, version: Version, *, high_open: bool) -> list[str]:
    """``>=low,<high`` (or ``<=high``) stretched to admit ``version``."""
    lower = f">={min(low, version)}"
    if version < high or (version == high and not high_open):
        return [lower, f"<{high}" if high_open else f"<={high}"]
    return [lower, f"<={version}"]


def _clause(spec: Specifier, version: Version) -> list[str]:
    """``spec`` moved to admit ``version`` (it does not yet)."""
    op, text = spec.operator, spec.version
    if op == "!=":
        return []
    if op in ("<", "<="):
        return [f"<={version}"]
    if op in (">", ">="):
        return [f">={version}"]
    if op == "~=":
        return _range(Version(text), _bump(Version(text).release[:-1]), version, high_open=True)
    if text.endswith(".*"):  # == with a wildcard
        prefix = Version(text[:-2])
        return _range(prefix, _bump(prefix.release), version, high_open=True)
    exact = Version(text)  # == or ===
    return [f">={min(exact, version)}", f"<={max(exact, version)}"]


def widen(applies_to: str, version: Version) -> str | None:
    """``applies_to`` changed as little as it takes to admit ``version`` (itself when it already
    does), or None when no such change reads plainly (the caller leaves it for a person)."""
    try:
        if version in SpecifierSet(applies_to):
            return applies_to
        clauses = [Specifier(c.strip()) for c in applies_to.split(",") if c.strip()]
        out: list[str] = []
        for spec in clauses:
            moved = [str(spec)] if spec.contains(version, prereleases=True) else _clause(spec, version)
            out += [c for c in moved if c not in out]
        text = ",".join(out) or f">={version}"
        return text if version in SpecifierSet(text) else None
    except (InvalidSpecifier, InvalidVersion):
        return None

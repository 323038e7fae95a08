"""Where a wheel's layout meets an sdist's: the prefix mapping a pin of the other kind needs so
that the repository's paths, and so every patch, stay what they are.

A wheel holds the packages at its root (``pkg/``, ``six.py``); an sdist holds them under its top
directory, at ``pkg-1.0/pkg/`` or ``pkg-1.0/src/pkg/``. The sdist directory that holds them (its
*home*) is found from the two files themselves: the directory under which most of the wheel's
files are in the sdist. A wheel file ``w`` is then the sdist's ``home + w``, and the repository
path the old pin gives that sdist member (or the sdist member the old wheel pin's path gives) is
where the new pin must put it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from patchtool.errors import UpstreamError
from patchtool.names import PrefixTemplate, TreePrefix
from patchtool.project.pins import Artifact


def installed(wheel_members: Iterable[str]) -> list[str]:
    """The wheel's files an installer puts in site-packages as they are: not its ``.dist-info``
    nor its ``.data``."""
    return [m for m in wheel_members if not m.partition("/")[0].endswith((".dist-info", ".data"))]


def home(sdist_members: Iterable[str], wheel_members: Iterable[str]) -> str | None:
    """The sdist directory (``pkg-1.0/`` or ``pkg-1.0/src/``) under which the most of the wheel's
    installed files are found; the shortest where two hold as many; None where none is."""
    by_base: dict[str, list[str]] = defaultdict(list)
    for w in installed(wheel_members):
        by_base[w.rpartition("/")[2]].append(w)
    score: dict[str, int] = defaultdict(int)
    for s in sdist_members:
        for w in by_base.get(s.rpartition("/")[2], ()):
            if s == w or s.endswith("/" + w):
                score[s[: len(s) - len(w)]] += 1
    return min(score, key=lambda d: (-score[d], len(d), d), default=None)


def wheel_prefix(
    old: Artifact, old_members: list[str], new: Artifact, new_members: list[str]
) -> tuple[PrefixTemplate, TreePrefix]:
    """The prefix mapping of the wheel ``new`` that puts its files where the sdist pin ``old``
    puts the same files: ``pkg-{version}/`` -> ``""`` gives ``""`` -> ``src/`` for a src layout."""
    found = _home(old, old_members, new, new_members)
    frm, to = old.prefix_from, old.prefix_to
    if found.startswith(frm):  # the whole package directory is imported: the wheel's root goes below to
        return PrefixTemplate(""), _tree_prefix(to + found[len(frm) :], old, new)
    if frm.startswith(found):  # the pin takes part of the package: so does the wheel
        return PrefixTemplate(frm[len(found) :]), to
    raise _unrelated(old, new, f"its packages are under {found!r} in {old.filename}, outside the pin's {frm!r}")


def sdist_prefix(
    old: Artifact, old_members: list[str], new: Artifact, new_members: list[str]
) -> tuple[PrefixTemplate, TreePrefix]:
    """The prefix mapping of the sdist ``new`` that puts its files where the wheel pin ``old``
    puts the same files: ``""`` -> ``""`` gives ``pkg-{version}/src/`` -> ``""`` for a src layout."""
    found = _home(new, new_members, old, old_members)
    try:
        template = PrefixTemplate(found + old.prefix_from).generalised(new.version)
        template.at(new.version)
    except ValueError as exc:
        raise _unrelated(old, new, str(exc)) from None
    return template, old.prefix_to


def _home(sdist: Artifact, sdist_members: list[str], wheel: Artifact, wheel_members: list[str]) -> str:
    if (found := home(sdist_members, wheel_members)) is None:
        raise _unrelated(sdist, wheel, f"none of {wheel.filename}'s files is in {sdist.filename}")
    return found


def _tree_prefix(text: str, old: Artifact, new: Artifact) -> TreePrefix:
    try:
        return TreePrefix(text)
    except ValueError as exc:
        raise _unrelated(old, new, str(exc)) from None


def _unrelated(a: Artifact, b: Artifact, why: str) -> UpstreamError:
    return UpstreamError(
        f"no prefix mapping puts {b.filename}'s files where {a.filename}'s are: {why}",
        hint="write the pin by hand with its [artifact.prefix] (docs/pins.md)",
    )

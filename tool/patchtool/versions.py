"""PEP 440 versions and specifiers read from a file or the command line: packaging's parsers, with
every way they refuse a text as ``InvalidVersion``/``InvalidSpecifier``.

packaging turns each release number into an ``int``: past Python's 4300 digits that is a plain
``ValueError``, which a caller catching ``InvalidVersion`` does not expect. A specifier is
checked whole where it is read, not first when a version is tested against it.
"""

from __future__ import annotations

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version


def parse_version(text: str) -> Version:
    """``Version(text)``; InvalidVersion for whatever packaging cannot hold."""
    try:
        return Version(text)
    except InvalidVersion:
        raise
    except ValueError as exc:  # a release number int() refuses
        raise InvalidVersion(f"Invalid version: {text[:40]!r}...: {exc}") from None


def parse_specifier(text: str) -> SpecifierSet:
    """``SpecifierSet(text)`` whose every version packaging can hold; InvalidSpecifier otherwise."""
    found = SpecifierSet(text)
    for spec in found:
        if spec.operator != "===":  # an arbitrary-equality string is compared as text
            try:
                parse_version(spec.version.removesuffix(".*"))
            except InvalidVersion:
                raise InvalidSpecifier(f"Invalid specifier: {text[:40]!r}") from None
    return found

"""Which of a release's files a pin takes: its sdist, its wheel (a pure one first, else the one
this interpreter would install), or one file by name (``init``, ``pin add`` and ``rebase --to``
with ``--sdist``, ``--wheel`` or ``--filename``)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from packaging.tags import sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from patchtool.errors import UpstreamError, UsageError
from patchtool.names import ArtifactFilename, Distribution

if TYPE_CHECKING:
    from patchtool.upstream.index import IndexFile

_UNIVERSAL = {"py3-none-any", "py2.py3-none-any"}
KINDS = ("sdist", "wheel")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FileChoice:
    """What the command line asked for: a kind (None: the active pin's), or one file by name."""

    kind: str | None = None  # "sdist" | "wheel"
    filename: ArtifactFilename | None = None

    @classmethod
    def of(cls, *, sdist: bool = False, wheel: bool = False, filename: str | None = None) -> FileChoice:
        """The choice ``--sdist``, ``--wheel`` and ``--filename NAME`` make; a usage error where they
        disagree."""
        if sdist and wheel:
            raise UsageError("--sdist and --wheel exclude each other")
        kind = "wheel" if wheel else "sdist" if sdist else None
        if filename is None:
            return cls(kind=kind)
        try:
            name = ArtifactFilename(filename)
        except ValueError as exc:
            raise UsageError(
                f"--filename {filename!r}: {exc}", hint="give a release file's name as the index lists it"
            ) from None
        named = "wheel" if name.is_wheel else "sdist"
        if kind is not None and kind != named:
            raise UsageError(f"--filename {filename} names {_a(named)}, not {_a(kind)}", hint=f"leave out --{kind}")
        return cls(kind=named, filename=name)

    @property
    def given(self) -> bool:
        return self.kind is not None


def _a(kind: str) -> str:
    return f"an {kind}" if kind == "sdist" else f"a {kind}"


def kind_of(filename: str) -> str:
    return "wheel" if filename.endswith(".whl") else "sdist"


def release_file(files: list[IndexFile], dist: Distribution, version: Version, choice: FileChoice) -> IndexFile:
    """The index's entry of the release file ``choice`` names among ``files`` (the distribution's,
    as the index lists them): the file named, else the sdist (``.tar.gz`` before ``.zip``), else
    the wheel: a pure one first, then the one this interpreter prefers, then the only one."""
    wheel = choice.kind == "wheel"
    found: list[tuple[ArtifactFilename, IndexFile]] = []
    for entry in files:
        try:
            name = ArtifactFilename(entry.filename)
        except ValueError:
            continue
        if canonicalize_name(name.distribution) == dist.canonical and name.version == version:
            found.append((name, entry))
    if choice.filename is not None:
        if not (named := [entry for name, entry in found if name == choice.filename]):
            raise UpstreamError(
                f"{dist} {version} has no {choice.filename} on the index",
                hint=f"files for {version}: {', '.join(sorted(n for n, _ in found)) or 'none'}",
            )
        return named[0]
    kind = "wheel" if wheel else "sdist"
    if not (of_kind := [(name, entry) for name, entry in found if name.is_wheel == wheel]):
        other = "--sdist" if wheel else "--wheel"
        raise UpstreamError(
            f"{dist} {version} has no {kind} on the index", hint=f"check the name and version, or try {other}"
        )
    if not wheel:
        return min(of_kind, key=lambda pair: (not pair[0].endswith(".tar.gz"), pair[0]))[1]
    return _wheel_for_here(of_kind, dist, version)


def _wheel_for_here(
    wheels: list[tuple[ArtifactFilename, IndexFile]], dist: Distribution, version: Version
) -> IndexFile:
    rank = {str(tag): i for i, tag in enumerate(sys_tags())}

    def key(name: ArtifactFilename) -> tuple[bool, int, str]:
        tags = {str(t) for t in parse_wheel_filename(name)[3]}
        return (not tags & _UNIVERSAL, min((rank[t] for t in tags if t in rank), default=len(rank)), name)

    best = min(wheels, key=lambda pair: key(pair[0]))
    impure, here, _ = key(best[0])
    if not impure or here < len(rank) or len(wheels) == 1:
        return best[1]
    raise UsageError(
        f"{dist} {version} has {len(wheels)} platform wheels, none pure and none for this interpreter: "
        f"{', '.join(sorted(n for n, _ in wheels)[:6])}",
        hint="name one with --filename, or fork the sdist (--sdist)",
    )

"""``patchtool init``: a patch repository for a fork of any Python package, from nothing.

The steps: refuse a directory that has a manifest; resolve the first pin (a release file on the
index: its name, sha256 and size, the prefix guessed from the artifact's layout; or a git tag's
commit); ``git init`` where no git work tree is; write ``patchset.toml``, the pin and a
``.gitignore`` as one journal transaction; then ``check``. Nothing is written before the pin
resolved and the prefix was found to hold files.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from patchtool import git, paths
from patchtool.errors import UpstreamError, UsageError
from patchtool.names import ArtifactFilename, Distribution, PrefixTemplate, TreePrefix, UpstreamName
from patchtool.project import journal
from patchtool.project.manifest import MANIFEST_NAME
from patchtool.project.pins import (
    DEFAULT_INDEX,
    PINS_DIR,
    SHA256_HEX,
    Artifact,
    Pin,
    pin_to_toml,
    release_pin_name,
)
from patchtool.series.checks import CheckReport, GpuProblems, run_check
from patchtool.upstream.cache import Cache
from patchtool.urls import SourceUrl
from patchtool.versions import parse_version

IGNORED = ("build/", "dist/", "work/", ".patchtool/")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Request:
    """What ``init`` was asked for, as the command line gave it."""

    upstream: str | None = None  # NAME==VERSION
    kind: str | None = None  # "sdist" | "wheel"; None: sdist
    filename: str | None = None  # one release file by name (its kind implied)
    git_url: str | None = None
    tag: str | None = None
    prefix: str | None = None  # FROM:TO
    index: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Initialised:
    root: Path
    pin: Pin
    prefix_guessed: bool
    git_init: bool
    written: tuple[str, ...]
    check: CheckReport

    def to_dict(self) -> dict[str, Any]:
        art, src = self.pin.artifact, self.pin.git
        return {
            "root": str(self.root),
            "pin": self.pin.name,
            "upstream": self.pin.upstream,
            "version": str(self.pin.version),
            "source": self.pin.use,
            "artifact": None
            if art is None
            else {
                "filename": art.filename,
                "sha256": art.sha256,
                "size": art.size,
                "index": art.index.text,
                "prefix": {"from": art.prefix_from_template, "to": art.prefix_to, "at_version": art.prefix_from},
                "prefix_guessed": self.prefix_guessed,
            },
            "git": None if src is None else {"url": src.url.text, "tag": src.tag, "commit": src.commit},
            "git_init": self.git_init,
            "written": list(self.written),
            "check": {"ok": self.check.ok, **self.check.to_dict()},
        }


def init(root: Path, cache: Cache, request: Request, *, gpu_problems: GpuProblems) -> Initialised:
    """Make ``root`` a patch repository with no patches on the release ``request`` names; its
    ``check`` reads the GPU results as ``gpu_problems`` does."""
    refuse_existing(root)
    pin, guessed = resolve(cache, request)
    pin_rel = f"{PINS_DIR}/{pin.name}.toml"
    if os.path.lexists(root / pin_rel):
        raise UsageError(
            f"{pin_rel} exists already",
            file=pin_rel,
            hint="init writes the first pin: remove it, or write patchset.toml by hand",
        )
    files = {
        MANIFEST_NAME: f'schema = 1\npin = "{pin.name}"   # {pin_rel}\n',
        pin_rel: pin_to_toml(pin, comment=f"{pin.upstream} {pin.version}: written by `patchtool init`."),
        journal.GITIGNORE: _gitignore(paths.read_text_if_present(root, journal.GITIGNORE)),
    }
    journal.changed_files(root, files)  # an unreachable destination is refused before git init
    if made_git := not git.in_work_tree(root):
        git.init_repository(root)
    return Initialised(
        root=root,
        pin=pin,
        prefix_guessed=guessed,
        git_init=made_git,
        written=tuple(journal.commit(root, files)),
        check=run_check(root, cache=cache, gpu_problems=gpu_problems),
    )


def refuse_existing(root: Path) -> None:
    if os.path.lexists(root / MANIFEST_NAME):
        raise UsageError(
            f"exists already in {root}: it is a patch repository",
            file=MANIFEST_NAME,
            hint="init starts a new one in a directory without a manifest; "
            "`patchtool pin add VERSION` adds a pin to this one",
        )


def _gitignore(existing: str | None) -> str:
    """The repository's .gitignore with patchtool's outputs in it; what it held already kept."""
    text = existing or ""
    have = {line.strip() for line in text.splitlines()}
    if not (missing := [entry for entry in IGNORED if entry not in have and entry.rstrip("/") not in have]):
        return text
    return text + ("\n" if text and not text.endswith("\n") else "") + "".join(f"{m}\n" for m in missing)


# -- the first pin ------------------------------------------------------------------------------


def resolve(cache: Cache, request: Request) -> tuple[Pin, bool]:
    """The first pin and whether its prefix was guessed (not given with --prefix). Nothing is written."""
    if (request.git_url is None) != (request.tag is None):
        raise UsageError("--git URL and --tag T go together")
    if request.upstream is None and request.git_url is None:
        raise UsageError(
            "give the upstream release to fork: --upstream NAME==VERSION, or --git URL --tag T",
            hint="e.g. patchtool init --upstream attrs==23.1.0 --sdist",
        )
    if request.upstream is None and (request.kind or request.filename or request.prefix or request.index):
        raise UsageError(
            "--sdist, --wheel, --filename, --prefix and --index choose a release file: give --upstream NAME==VERSION"
        )
    from patchtool.upstream.pinning import git_source, tag_version

    dist, version = _requirement(request.upstream) if request.upstream else (None, None)
    if version is None:
        assert request.tag is not None
        version = tag_version(request.tag)
    upstream = _upstream_name(dist.canonical if dist else _repository_name(request.git_url or ""))
    name = release_pin_name(upstream, version)
    src = None if request.git_url is None or request.tag is None else git_source(cache, request.git_url, request.tag)
    if dist is None:
        return Pin(name=name, upstream=upstream, version=version, git=src, artifact=None, use="git"), False
    art, guessed = _artifact(cache, dist, version, request)
    version = art.version  # as the artifact spells it (4.2 for a 4.2.0 asked for)
    name = release_pin_name(upstream, version)
    return Pin(name=name, upstream=upstream, version=version, git=src, artifact=art, use="artifact"), guessed


def _requirement(text: str) -> tuple[Distribution, Version]:
    name, sep, version = text.partition("==")
    try:
        if not sep:
            raise ValueError("no ==VERSION")
        return Distribution(name.strip()), parse_version(version.strip())
    except (ValueError, InvalidVersion) as exc:
        raise UsageError(
            f"--upstream {text!r}: {exc}", hint="give NAME==VERSION, e.g. --upstream attrs==23.1.0"
        ) from None


def _repository_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")


def _upstream_name(text: str) -> UpstreamName:
    try:
        return UpstreamName(canonicalize_name(text))
    except ValueError as exc:
        raise UsageError(
            f"{text!r} cannot name the upstream's pins: {exc}", hint="give --upstream NAME==VERSION"
        ) from None


def _index(request: Request) -> SourceUrl:
    try:
        return SourceUrl.parse((request.index or DEFAULT_INDEX).rstrip("/"), user=request.index is not None)
    except ValueError as exc:
        raise UsageError(f"--index {request.index!r}: {exc}", hint=f"e.g. --index {DEFAULT_INDEX}") from None


def _artifact(cache: Cache, dist: Distribution, version: Version, request: Request) -> tuple[Artifact, bool]:
    """The release file on the index, downloaded and verified; its prefix given or guessed."""
    from patchtool.upstream.artifacts import import_paths
    from patchtool.upstream.releasefiles import FileChoice, release_file

    index = _index(request)
    choice = FileChoice.of(wheel=request.kind == "wheel", sdist=request.kind == "sdist", filename=request.filename)
    if choice.kind is None:
        choice = FileChoice(kind="sdist")
    entry = release_file(cache.index.files_of(index, dist), dist, version, choice)
    filename = ArtifactFilename(entry.filename)
    version = filename.version
    if not isinstance(sha := entry.sha256, str) or not SHA256_HEX.match(sha):
        raise UpstreamError(
            f"the index gives no sha256 for {filename}; refusing an unverifiable file",
            hint="patchtool takes a release file only by its sha256",
        )
    whole = Artifact(
        distribution=dist,
        version=version,
        filename=filename,
        sha256=sha,
        size=entry.size if type(entry.size) is int and 0 < entry.size < 2**63 else None,
        index=index,
        prefix_from_template=PrefixTemplate(""),
        prefix_to=TreePrefix(""),
    )
    upstream = _upstream_name(dist.canonical)
    probe = Pin(name=release_pin_name(upstream, version), upstream=upstream, version=version, artifact=whole)
    with cache.locked():
        members = import_paths(cache.artifact_path(probe), whole)
    if request.prefix is None:
        template, to = guess_prefix(members, whole), TreePrefix("")
    else:
        template, to = _given_prefix(request.prefix, version)
    at = template.at(version)
    if not any(m.startswith(at) and m != at for m in members):
        raise UsageError(
            f"{filename} has no files under {at!r}",
            hint=f"its top entries: {', '.join(sorted({m.split('/', 1)[0] for m in members})[:8])}; "
            "give --prefix FROM:TO",
        )
    return dataclasses.replace(whole, prefix_from_template=template, prefix_to=to), request.prefix is None


def guess_prefix(members: list[str], art: Artifact) -> PrefixTemplate:
    """What of the artifact the repository holds: a wheel's root; an sdist's one top directory
    (with its version as ``{version}``), so the whole sdist: its tests and docs are what a
    downstream series patches too."""
    tops = {m.partition("/")[0] for m in members}
    if art.is_wheel or len(tops) != 1 or any("/" not in m for m in members):
        return PrefixTemplate("")
    return PrefixTemplate(f"{tops.pop()}/").generalised(art.version)


def _given_prefix(text: str, version: Version) -> tuple[PrefixTemplate, TreePrefix]:
    source, sep, dest = text.partition(":")
    try:
        if not sep:
            raise ValueError("no ':' between FROM and TO")
        template = PrefixTemplate(source)
        template.at(version)
        return template, TreePrefix(dest)
    except ValueError as exc:
        raise UsageError(
            f"--prefix {text!r}: {exc}",
            hint="give FROM:TO, each empty or a directory ending in '/', e.g. --prefix 'attrs-{version}/src/:'",
        ) from None

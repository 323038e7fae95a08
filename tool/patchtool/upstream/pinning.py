"""The pins of one project (``upstream-pins/``): made by command, listed with who needs them, removed
when nothing does.

``new_pin`` finds a release on the index through the active pin's artifact (file name, sha256,
size, prefix) or resolves a git tag to its commit; ``write_pin`` and ``remove_pin`` write through
the journal, under the repository lock the command holds. A pin is needed while it is active or a
rebase in progress names it; ``pin list`` also says which patches' ``applies_to`` admit it.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from patchtool import git
from patchtool.errors import UpstreamError, UsageError
from patchtool.project import journal
from patchtool.project.pins import PINS_DIR, GitSource, Pin, load_pin, pin_path, pin_to_toml, release_pin_name
from patchtool.project.repository import Project
from patchtool.upstream.cache import Cache
from patchtool.upstream.releasefiles import FileChoice
from patchtool.upstream.releases import SAME, pin_for_version, pin_name_for
from patchtool.urls import SourceUrl
from patchtool.versions import parse_version

_TAG_VERSION = re.compile(r"^v?(\d[\w.+!-]*)$")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PinInfo:
    """One pin of the project and what needs it."""

    name: str
    version: str
    source: str  # "artifact" or "git"
    active: bool
    rebase: str | None  # "from" / "to" while a rebase in progress names it
    admitted_by: tuple[str, ...]  # patches whose applies_to admits its version
    cached: bool

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "admitted_by": list(self.admitted_by)}


@dataclasses.dataclass(frozen=True, slots=True)
class PinList:
    """``pin list``'s result."""

    pins: tuple[PinInfo, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"pins": [p.to_dict() for p in self.pins]}


@dataclasses.dataclass(frozen=True, slots=True)
class PinAdded:
    """``pin add``'s result: the pin and the files written."""

    pin: Pin
    written: tuple[str, ...]
    warnings: tuple[str, ...] = ()  # what upstream's history in the cache says against its [git] tag

    def to_dict(self) -> dict[str, Any]:
        pin, art, git = self.pin, self.pin.artifact, self.pin.git
        return {
            "name": pin.name,
            "version": str(pin.version),
            "source": pin.use,
            "written": list(self.written),
            **({"filename": art.filename, "sha256": art.sha256, "size": art.size} if art else {}),
            **({"url": git.url.text, "tag": git.tag, "commit": git.commit} if git else {}),
            **({"warnings": list(self.warnings)} if self.warnings else {}),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class PinRemoved:
    """``pin remove``'s result."""

    name: str
    written: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "written": list(self.written)}


def _rebase_pins(root: Path) -> dict[str, str]:
    from patchtool.project.stopped import in_progress

    found = in_progress(root)
    return {} if found is None else {found.old_pin: "from", found.new_pin: "to"}


def is_cached(cache: Cache, pin: Pin) -> bool:
    """Whether the cache holds the pin's upstream already (no download or fetch needed)."""
    if not cache.repo.git_dir.is_dir():
        return False
    if pin.use == "git":
        return pin.git is not None and pin.git.commit is not None and cache.repo.has_object(pin.git.commit)
    art = pin.artifact
    assert art is not None
    return cache.holds(art)


def pin_names(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / PINS_DIR).glob("*.toml"))


def list_pins(project: Project, cache: Cache) -> list[PinInfo]:
    """Every pin in upstream-pins/, oldest version first."""
    rebase = _rebase_pins(project.root)
    pins = sorted((load_pin(project.root, name) for name in pin_names(project.root)), key=lambda p: (p.version, p.name))
    return [
        PinInfo(
            name=p.name,
            version=str(p.version),
            source=p.use,
            active=p.name == project.manifest.pin,
            rebase=rebase.get(p.name),
            cached=is_cached(cache, p),
            admitted_by=tuple(e.id for e in project.manifest.patches if p.version in e.applies_to),
        )
        for p in pins
    ]


def tag_version(tag: str) -> Version:
    """The version a release tag names (``v1.2``, ``1.2``); a usage error when it names none."""
    m = _TAG_VERSION.match(tag)
    try:
        return parse_version(m.group(1) if m else tag)
    except InvalidVersion:
        raise UsageError(f"tag {tag!r} names no version", hint="give --version V with it") from None


def _given_version(version: str) -> Version:
    try:
        return parse_version(version.removeprefix("v"))
    except InvalidVersion:
        raise UsageError(f"{version!r} is not a version", hint="e.g. 0.5.22") from None


def new_pin(
    project: Project,
    cache: Cache,
    version: str | None,
    *,
    git_url: str | None = None,
    tag: str | None = None,
    choice: FileChoice = SAME,
) -> Pin:
    """A pin for ``version`` of the active pin's upstream: from the index, like the active pin's
    artifact or the file ``choice`` names (the other kind mapped to the same repository paths),
    or (``git_url`` and ``tag``) the tag's commit. Nothing is written."""
    template = project.pin()
    if git_url is not None or tag is not None:
        if git_url is None or tag is None:
            raise UsageError("--git URL and --tag T go together")
        if choice.given:
            raise UsageError("--sdist, --wheel and --filename choose a release file on the index, not a git tag")
        return _git_pin(template, cache, git_url, tag, version)
    if version is None:
        raise UsageError("give the version to pin (e.g. 0.5.22), or --git URL --tag T")
    wanted = _given_version(version)
    if template.artifact is None:
        raise UsageError(
            f"the active pin {template.name} has no [artifact] to find releases on an index by",
            hint="pin a git tag instead: --git URL --tag T",
        )
    made = pin_for_version(dataclasses.replace(template, use="artifact"), wanted, cache=cache, choice=choice)
    return dataclasses.replace(made, name=pin_name_for(project.root, made, template))


def _git_pin(template: Pin, cache: Cache, given: str, tag: str, version: str | None) -> Pin:
    pinned = _given_version(version) if version else tag_version(tag)
    return Pin(
        name=release_pin_name(template.upstream, pinned),
        upstream=template.upstream,
        version=pinned,
        git=git_source(cache, given, tag),
        artifact=None,
        use="git",
    )


def git_source(cache: Cache, given: str, tag: str) -> GitSource:
    """The git source of tag ``tag`` of the remote the user named (``given``: a url, or a local
    repository's path, written down as an absolute one), resolved to its commit through the cache."""
    try:  # the user's own url, so it may be local
        url = SourceUrl.parse(str(Path(given).absolute()) if Path(given).is_dir() else given, git=True, user=True)
    except ValueError as exc:
        raise UsageError(
            f"--git {given!r}: {exc}", hint="give the remote's https URL, or a local repository's path"
        ) from None
    if not git.ref_format_ok(f"refs/tags/{tag}"):
        raise UsageError(f"{tag!r} is not a tag name git accepts")
    if (commit := cache.fetch_tag(url, tag, hint="check the URL and the tag")) is None:
        raise UpstreamError(f"tag {tag} at {url} names no commit")
    return GitSource(url=url, tag=tag, commit=commit)


def write_pin(root: Path, pin: Pin) -> list[str]:
    """``upstream-pins/<name>.toml`` for ``pin``; refused when a pin of that name exists."""
    if (path := pin_path(root, pin.name)).exists() or path.is_symlink():
        raise UsageError(
            f"pin {pin.name} exists already ({PINS_DIR}/{pin.name}.toml)",
            hint=f"`patchtool pin remove {pin.name}` first to replace it",
        )
    text = pin_to_toml(pin, comment=f"{pin.upstream} {pin.version}: written by `patchtool pin add`.")
    return journal.commit(root, {f"{PINS_DIR}/{pin.name}.toml": text})


def remove_pin(project: Project, name: str) -> list[str]:
    """Remove a pin nothing depends on: never the active one, nor one a rebase in progress names."""
    load_pin(project.root, name)  # a usage error naming the known pins when there is none
    if name == project.manifest.pin:
        raise UsageError(
            f"pin {name} is the active pin (patchset.toml names it)",
            hint="rebase onto another pin first (`patchtool rebase --to VERSION`)",
        )
    if (role := _rebase_pins(project.root).get(name)) is not None:
        raise UsageError(
            f"the rebase in progress moves the series {role} pin {name}",
            hint="finish it first: `patchtool rebase --continue`, `--skip --reason ...` or `--abort`",
        )
    return journal.commit(project.root, {}, remove=[f"{PINS_DIR}/{name}.toml"])

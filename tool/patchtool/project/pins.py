"""Upstream pins: ``upstream-pins/<name>.toml`` says exactly which upstream the series applies to,
its git source and/or its release artifact, each verifiable by hash.

The schema (``Pin``, ``GitSource``, ``Artifact``) is read from plain mappings, every problem
collected with its dotted key; ``load_pin`` is the one place that reads a pin file and
``pin_to_toml`` writes one through the one TOML writer (``project.tomlio``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import Version

from patchtool import paths
from patchtool.errors import InvalidInput, Problem, UsageError
from patchtool.names import ArtifactFilename, Distribution, PinName, PrefixTemplate, TreePrefix, UpstreamName
from patchtool.project.fields import MAX_SCHEMA, Fields, load_toml, pep440_version, raise_if
from patchtool.urls import SourceUrl

PINS_DIR = "upstream-pins"
DEFAULT_INDEX = "https://pypi.org/simple"  # the index of a pin that names none
PYPI = SourceUrl.parse(DEFAULT_INDEX)
MAX_ARTIFACT_BYTES = 4 << 30  # the most an artifact may be, its pinned size included: 4 GiB
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")

__all__ = [
    "PINS_DIR",
    "Artifact",
    "GitSource",
    "Pin",
    "canonicalize_name",
    "load_pin",
    "pin_name",
    "pin_path",
    "pin_to_toml",
    "release_pin_name",
]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GitSource:
    """Upstream's repository: its ``url``, the ``tag`` of the pin's release and, where the pin
    builds from it (``use = "git"``), the tag's ``commit``. ``template``: the pin file's ``tag``
    where it holds ``{version}`` (``"v{version}"``), which names every release's tag."""

    url: SourceUrl
    tag: str
    commit: str | None = None
    template: str | None = None

    PLACEHOLDER = "{version}"

    @classmethod
    def read(cls, f: Fields, version: Version | None = None, *, file: str) -> GitSource | None:
        url = f.parsed("url", lambda t: SourceUrl.parse(t, git=True, file=file, key=f.key("url")))
        tag = f.string("tag")
        commit = f.string("commit", required=False)
        f.done()
        if commit is not None and not _SHA1.match(commit):
            f.problem("commit", f"{commit!r} is not a full 40-hex commit SHA")
            return None
        template = None
        if tag is not None and ("{" in tag or "}" in tag):
            if "{" in tag.replace(cls.PLACEHOLDER, "") or "}" in tag.replace(cls.PLACEHOLDER, ""):
                f.problem("tag", f"{tag!r}: the only placeholder a tag may hold is {cls.PLACEHOLDER}")
                return None
            template = tag
            tag = tag.replace(cls.PLACEHOLDER, str(version)) if version is not None else tag
        if url is None or tag is None:
            return None
        return cls(url=url, tag=tag, commit=commit, template=template)

    def tag_for(self, version: Version, at: Version) -> str | None:
        """The tag of release ``version`` (this source is release ``at``'s): by the template, else
        by the literal tag with ``at`` spelt in it (``v0.5.23`` gives ``v0.5.24``); None when the
        tag does not spell its version."""
        return template.replace(self.PLACEHOLDER, str(version)) if (template := self.generalised(at)) else None

    def generalised(self, at: Version) -> str | None:
        """The template a literal tag of release ``at`` follows (``v0.5.23`` -> ``v{version}``), or None."""
        if self.template:
            return self.template
        spelt = str(at)
        if self.tag.count(spelt) != 1 or re.search(rf"[0-9.]{re.escape(spelt)}|{re.escape(spelt)}\.?[0-9]", self.tag):
            return None
        return self.tag.replace(spelt, self.PLACEHOLDER)

    def at(self, version: Version, *, commit: str | None = None, was: Version | None = None) -> GitSource:
        """This repository at release ``version``: its tag by the template, else as the literal tag
        of release ``was`` spells it (``2.2.2`` gives ``2.3.8``), else ``v<version>``; the commit
        given (a tag's commit is known only once fetched)."""
        template = self.template or (self.generalised(was) if was is not None else None)
        tag = template.replace(self.PLACEHOLDER, str(version)) if template else f"v{version}"
        return dataclasses.replace(self, tag=tag, commit=commit)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Artifact:
    distribution: Distribution
    version: Version
    filename: ArtifactFilename
    sha256: str
    # path prefix inside the artifact as the pin writes it ("sglang/", "attrs-{version}/src/")
    prefix_from_template: PrefixTemplate
    prefix_to: TreePrefix  # where it lives in the repository ("python/sglang/")
    index: SourceUrl = PYPI
    url: SourceUrl | None = None
    size: int | None = None
    tree: str | None = None  # git tree of the normalised import, recorded once verified

    def __post_init__(self) -> None:
        _typed(
            self,
            distribution=Distribution,
            filename=ArtifactFilename,
            prefix_from_template=PrefixTemplate,
            prefix_to=TreePrefix,
        )
        self.prefix_from  # noqa: B018 -- a template that is no safe prefix at this version is refused here

    @property
    def prefix_from(self) -> TreePrefix:
        """The path prefix inside this artifact: the template at its version."""
        return self.prefix_from_template.at(self.version)

    @property
    def is_wheel(self) -> bool:
        return self.filename.is_wheel

    @classmethod
    def read(cls, f: Fields, pin_version: Version | None, *, file: str) -> Artifact | None:
        dist = f.parsed("distribution", Distribution)
        version = f.parsed("version", pep440_version)
        filename = f.parsed("filename", ArtifactFilename)
        sha256 = f.string("sha256")
        prefix = f.table("prefix")
        prefix_from = prefix_to = None
        if prefix is not None:
            prefix_from = _prefix_template(prefix, version)
            if (to := prefix.string("to", nonempty=False)) is not None:
                try:
                    prefix_to = TreePrefix(to)
                except ValueError as exc:
                    prefix.problem("to", f"{exc}: the import would put files there")
            prefix.done()
        index = f.parsed("index", lambda t: SourceUrl.parse(t, file=file, key=f.key("index")), required=False)
        url = f.parsed("url", lambda t: SourceUrl.parse(t, file=file, key=f.key("url")), required=False)
        size = f.integer(
            "size",
            required=False,
            minimum=1,
            maximum=MAX_ARTIFACT_BYTES,
            hint="no artifact patchtool downloads is bigger (docs/pins.md)",
        )
        tree = f.string("tree", required=False)
        f.done()
        if sha256 is not None and not SHA256_HEX.match(sha256):
            f.problem("sha256", f"{sha256!r} is not a sha256 hex digest (64 lower-case hex digits)")
            return None
        if tree is not None and not _SHA1.match(tree):
            f.problem("tree", f"{tree!r} is not a 40-hex git tree id")
            return None
        if None in (dist, version, filename, sha256, prefix_from, prefix_to):
            return None
        assert dist and version and filename and sha256 is not None
        assert prefix_from is not None and prefix_to is not None
        file_dist, file_version = filename.distribution, filename.version
        if canonicalize_name(file_dist) != dist.canonical or file_version != version:
            f.problem(
                "filename",
                f"{filename!r} is {file_dist} {file_version}, not {dist} {version}",
                hint="the artifact must be the pinned release",
            )
            return None
        if pin_version is not None and version != pin_version:
            f.problem("version", f"artifact version {version} differs from the pin's {pin_version}")
            return None
        return cls(
            distribution=dist,
            version=version,
            filename=filename,
            sha256=sha256,
            prefix_from_template=prefix_from,
            prefix_to=prefix_to,
            index=index or SourceUrl.parse(DEFAULT_INDEX, file=file, key=f.key("index")),
            url=url,
            size=size,
            tree=tree,
        )


def _prefix_template(table: Fields, version: Version | None) -> PrefixTemplate | None:
    """``prefix.from``: a prefix, or a template whose one placeholder, ``{version}``, gives a prefix
    at the artifact's version."""
    if (value := table.string("from", nonempty=False)) is None:
        return None
    try:
        template = PrefixTemplate(value)
        if version is not None:
            template.at(version)
    except ValueError as exc:
        shown = f" (at version {version})" if PrefixTemplate.PLACEHOLDER in value else ""
        table.problem("from", f"{exc}{shown}")
        return None
    return template


def _typed(record: object, **kinds: type) -> None:
    """TypeError unless each field named is of its checked type: a name from a file reaches a
    record only through its type's constructor, never as a raw string."""
    for field, kind in kinds.items():
        value = getattr(record, field)
        if not isinstance(value, kind):
            raise TypeError(f"{type(record).__name__}.{field} must be a {kind.__name__}, not {value!r}")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Pin:
    name: PinName
    upstream: UpstreamName
    version: Version
    git: GitSource | None = None
    artifact: Artifact | None = None
    use: str = "artifact"

    def __post_init__(self) -> None:
        _typed(self, name=PinName, upstream=UpstreamName)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, name: str, file: str) -> Pin:
        problems: list[Problem] = []
        f = Fields(data, "", problems)
        try:
            pin = PinName(name)
        except ValueError as exc:
            raise InvalidInput(f"{file}: {exc}", file=file) from None
        schema = f.integer("schema", maximum=MAX_SCHEMA)
        if schema is not None and schema != 1:
            f.problem("schema", f"unsupported pin schema {schema}")
        upstream = f.parsed("name", UpstreamName)  # it names pin files
        version = f.parsed("version", pep440_version)
        git_fields = f.table("git", required=False)
        gsrc = GitSource.read(git_fields, version, file=file) if git_fields else None
        art_fields = f.table("artifact", required=False)
        art = Artifact.read(art_fields, version, file=file) if art_fields else None
        use = f.choice("use", ("artifact", "git"), required=False)
        f.done()
        if git_fields is None and art_fields is None:
            f.problem(None, "a pin needs a [git] source, an [artifact] source, or both")
        if use is None and not problems:
            use = "artifact" if art is not None else "git"
        if use == "git" and gsrc is not None and gsrc.commit is None:
            f.problem(
                "git.commit",
                "the git source is used, so it must name the exact commit",
                hint='add commit = "<40-hex sha of the tag>"',
            )
        if use == "artifact" and art_fields is None and git_fields is not None:
            f.problem("use", 'use = "artifact" but the pin has no [artifact]')
        if use == "git" and git_fields is None:
            f.problem("use", 'use = "git" but the pin has no [git]')
        raise_if(problems, f"{file} is not a valid pin", file=file)
        assert upstream and version and use
        return cls(name=pin, upstream=upstream, version=version, git=gsrc, artifact=art, use=use)


def pin_name(text: str) -> PinName:
    """``text`` as a pin name; one that is not an id (a path, ``..``) is a usage error."""
    try:
        return PinName(text)
    except ValueError as exc:
        raise UsageError(
            str(exc), hint=f"a pin is named by its file in {PINS_DIR}/ without .toml, e.g. sglang-0.5.23"
        ) from None


def release_pin_name(upstream: UpstreamName, version: Version, suffix: str = "") -> PinName:
    """``<upstream>-<version><suffix>``, the name of the pin for another release."""
    try:
        return PinName(f"{upstream}-{version}{suffix}")
    except ValueError as exc:
        raise UsageError(
            f"{upstream} {version} cannot be pinned under a pin name: {exc}",
            hint="pin the release by hand under a name of your own",
        ) from None


def pin_path(root: Path, name: str) -> Path:
    """``upstream-pins/<name>.toml``; a name that is not an id (a path, ``..``) is a usage error."""
    return root / PINS_DIR / f"{pin_name(name)}.toml"


def load_pin(root: Path, name: str) -> Pin:
    rel = pin_path(root, name).relative_to(root).as_posix()
    try:
        text = paths.read_inside(root, rel).decode("utf-8")
    except FileNotFoundError:
        known = sorted(p.stem for p in (root / PINS_DIR).glob("*.toml"))
        raise UsageError(
            f"no pin named {name!r}: {rel} does not exist", file=rel, hint=f"known pins: {', '.join(known) or 'none'}"
        ) from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{rel} is not UTF-8: {exc}", file=rel) from None
    return Pin.from_dict(load_toml(text, file=rel), name=name, file=rel)


def pin_to_toml(pin: Pin, *, comment: str = "") -> str:
    """The pin file for ``pin``, in the layout of upstream-pins/, through the one TOML writer."""
    import tomlkit

    from patchtool.project import tomlio

    doc = tomlkit.document()
    for line in comment.splitlines():
        doc.add(tomlkit.comment(line))
    doc.update({"schema": 1, "name": pin.upstream, "version": str(pin.version), "use": pin.use})
    if pin.git:
        src = {"url": pin.git.url.text, "tag": pin.git.template or pin.git.tag}
        src |= {"commit": pin.git.commit} if pin.git.commit else {}
        doc.add(tomlkit.nl())
        doc.add("git", tomlio.table(src))
    if pin.artifact:
        a = pin.artifact
        art: dict[str, Any] = {
            "index": a.index.text,
            "distribution": a.distribution,
            "version": str(a.version),
            "filename": a.filename,
            "sha256": a.sha256,
        }
        art |= {"size": a.size} if a.size else {}
        art |= {"url": a.url.text} if a.url else {}
        art["prefix"] = {"from": a.prefix_from_template, "to": a.prefix_to}
        art |= {"tree": a.tree} if a.tree else {}
        doc.add(tomlkit.nl())
        doc.add("artifact", tomlio.table(art))
    return tomlio.dumps(doc, file=f"{PINS_DIR}/{pin.name}.toml")

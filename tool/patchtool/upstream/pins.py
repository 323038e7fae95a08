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

from packaging.utils import (
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from patchtool import paths
from patchtool.errors import InvalidInput, Problem, UsageError
from patchtool.project.fields import Fields, load_toml, raise_if
from patchtool.upstream.index import DEFAULT_INDEX, url_problem
from patchtool.versions import parse_version

PINS_DIR = "upstream-pins"
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")

__all__ = ["PINS_DIR", "Artifact", "GitSource", "Pin", "artifact_name", "canonicalize_name", "load_pin", "pin_path",
           "pin_to_toml"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GitSource:
    url: str
    tag: str
    commit: str | None = None

    @classmethod
    def read(cls, f: Fields) -> GitSource | None:
        url = f.string("url")
        tag = f.string("tag")
        commit = f.string("commit", required=False)
        f.done()
        if commit is not None and not _SHA1.match(commit):
            f.problem("commit", f"{commit!r} is not a full 40-hex commit SHA")
            return None
        if url is None or tag is None:
            return None
        return cls(url=url, tag=tag, commit=commit)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Artifact:
    distribution: str
    version: Version
    filename: str
    sha256: str
    prefix_from: str  # path prefix inside the artifact ("sglang/")
    prefix_to: str  # where it lives in the repository ("python/sglang/")
    index: str = DEFAULT_INDEX
    url: str | None = None
    size: int | None = None
    tree: str | None = None  # git tree of the normalised import, recorded once verified

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")

    @classmethod
    def read(cls, f: Fields, pin_version: Version | None) -> Artifact | None:
        dist = f.string("distribution")
        version = f.parsed("version", _version)
        filename = f.string("filename")
        sha256 = f.string("sha256")
        prefix = f.table("prefix")
        prefix_from = prefix_to = None
        if prefix is not None:
            prefix_from = prefix.string("from", nonempty=False)
            prefix_to = prefix.string("to", nonempty=False)
            prefix.done()
        index = f.string("index", required=False) or DEFAULT_INDEX
        url = f.string("url", required=False)
        size = f.integer("size", required=False, minimum=1)
        tree = f.string("tree", required=False)
        f.done()
        if sha256 is not None and not SHA256_HEX.match(sha256):
            f.problem("sha256", f"{sha256!r} is not a sha256 hex digest (64 lower-case hex digits)")
            return None
        if tree is not None and not _SHA1.match(tree):
            f.problem("tree", f"{tree!r} is not a 40-hex git tree id")
            return None
        for name, value in (("prefix.from", prefix_from), ("prefix.to", prefix_to)):
            if value and not value.endswith("/"):
                f.problem(name, f"{value!r} must end with '/'")
                return None
        if prefix_to and (why := paths.tree_path_problem(prefix_to[:-1])) is not None:
            f.problem("prefix.to", f"{why}: the import would put files there")
            return None
        for name, value in (("index", index), ("url", url)):
            if value is not None and (why := url_problem(value)) is not None:
                f.problem(name, f"{value!r} {why}")
        if None in (dist, version, filename, sha256, prefix_from, prefix_to):
            return None
        assert dist and version and filename and sha256 is not None
        file_dist, file_version = artifact_name(filename)
        if file_dist is None or file_version is None:
            f.problem("filename", f"{filename!r} is neither a wheel nor an sdist file name")
            return None
        if canonicalize_name(file_dist) != canonicalize_name(dist) or file_version != version:
            f.problem("filename", f"{filename!r} is {file_dist} {file_version}, not {dist} {version}",
                      hint="the artifact must be the pinned release")
            return None
        if pin_version is not None and version != pin_version:
            f.problem("version", f"artifact version {version} differs from the pin's {pin_version}")
            return None
        return cls(distribution=dist, version=version, filename=filename, sha256=sha256,
                   prefix_from=prefix_from or "", prefix_to=prefix_to or "", index=index,
                   url=url, size=size, tree=tree)


def _version(text: str) -> Version:
    try:
        return parse_version(text)
    except InvalidVersion:
        raise ValueError(f"{text!r} is not a PEP 440 version") from None


def artifact_name(filename: str) -> tuple[str | None, Version | None]:
    """(distribution, version) of a wheel or sdist file name, as packaging reads it; (None, None)
    when it is neither."""
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
            return name, version
        return parse_sdist_filename(filename)
    except ValueError:  # InvalidWheelFilename, InvalidSdistFilename, InvalidVersion, or digits int() refuses
        return None, None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Pin:
    name: str
    upstream: str
    version: Version
    git: GitSource | None = None
    artifact: Artifact | None = None
    use: str = "artifact"

    @property
    def tag(self) -> str:
        return f"v{self.version}"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, name: str, file: str) -> Pin:
        problems: list[Problem] = []
        f = Fields(data, "", problems)
        schema = f.integer("schema")
        if schema is not None and schema != 1:
            f.problem("schema", f"unsupported pin schema {schema}")
        upstream = f.parsed("name", lambda t: paths.check_id(t, "upstream name"))  # it names pin files
        version = f.parsed("version", _version)
        git_fields = f.table("git", required=False)
        gsrc = GitSource.read(git_fields) if git_fields else None
        art_fields = f.table("artifact", required=False)
        art = Artifact.read(art_fields, version) if art_fields else None
        use = f.choice("use", ("artifact", "git"), required=False)
        f.done()
        if git_fields is None and art_fields is None:
            f.problem(None, "a pin needs a [git] source, an [artifact] source, or both")
        if use is None and not problems:
            use = "artifact" if art is not None else "git"
        if use == "git" and gsrc is not None and gsrc.commit is None:
            f.problem("git.commit", "the git source is used, so it must name the exact commit",
                      hint="add commit = \"<40-hex sha of the tag>\"")
        if use == "artifact" and art_fields is None and git_fields is not None:
            f.problem("use", "use = \"artifact\" but the pin has no [artifact]")
        if use == "git" and git_fields is None:
            f.problem("use", "use = \"git\" but the pin has no [git]")
        raise_if(problems, f"{file} is not a valid pin", file=file)
        assert upstream and version and use
        return cls(name=name, upstream=upstream, version=version, git=gsrc, artifact=art, use=use)


def pin_path(root: Path, name: str) -> Path:
    """``upstream-pins/<name>.toml``; a name that is not an id (a path, ``..``) is a usage error."""
    why = paths.id_problem(name, "pin name")
    if why:
        raise UsageError(why, hint=f"a pin is named by its file in {PINS_DIR}/ without .toml, e.g. sglang-0.5.23")
    return root / PINS_DIR / f"{name}.toml"


def load_pin(root: Path, name: str) -> Pin:
    rel = pin_path(root, name).relative_to(root).as_posix()
    try:
        text = paths.read_inside(root, rel).decode("utf-8")
    except FileNotFoundError:
        known = sorted(p.stem for p in (root / PINS_DIR).glob("*.toml"))
        raise UsageError(f"no pin named {name!r}: {rel} does not exist", file=rel,
                         hint=f"known pins: {', '.join(known) or 'none'}") from None
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
        src = {"url": pin.git.url, "tag": pin.git.tag}
        if pin.git.commit:
            src["commit"] = pin.git.commit
        doc.add(tomlkit.nl())
        doc.add("git", tomlio.table(src))
    if pin.artifact:
        a = pin.artifact
        art: dict[str, Any] = {"index": a.index, "distribution": a.distribution, "version": str(a.version),
                               "filename": a.filename, "sha256": a.sha256}
        if a.size:
            art["size"] = a.size
        if a.url:
            art["url"] = a.url
        art["prefix"] = {"from": a.prefix_from, "to": a.prefix_to}
        if a.tree:
            art["tree"] = a.tree
        doc.add(tomlkit.nl())
        doc.add("artifact", tomlio.table(art))
    return tomlio.dumps(doc, file=f"{PINS_DIR}/{pin.name}.toml")

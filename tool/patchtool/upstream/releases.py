"""Another release of the pinned upstream as a pin: found on the index through the pin's artifact,
or fetched through its git source (``rebase --to``, ``scan``)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from patchtool.errors import InvalidInput, UpstreamError, UsageError
from patchtool.names import ArtifactFilename, PinName, PrefixTemplate
from patchtool.project.pins import (
    MAX_ARTIFACT_BYTES,
    PINS_DIR,
    SHA256_HEX,
    Artifact,
    GitSource,
    Pin,
    load_pin,
    release_pin_name,
)
from patchtool.upstream.cache import Cache
from patchtool.upstream.releasefiles import KINDS, FileChoice, kind_of, release_file
from patchtool.versions import parse_version

if TYPE_CHECKING:
    from patchtool.upstream.index import IndexFile

SAME = FileChoice()  # the same kind of file as the pin's
_VERSION_TARGET = re.compile(r"^v?(\d+(?:\.\d+)+(?:(?:a|b|rc|\.post|\.dev)\d+)*)$")


def sibling_filename(art: Artifact, version: Version) -> ArtifactFilename:
    """The name the same kind of artifact (same wheel tags, same sdist archive) has at another version."""
    if art.is_wheel:
        tags = art.filename[:-4].split("-", 2)[2]
        return ArtifactFilename(f"{art.filename.split('-', 1)[0]}-{version}-{tags}.whl")
    stem = art.filename[: art.filename.rindex("-")]
    return ArtifactFilename(f"{stem}-{version}{_archive(art.filename)}")


def _archive(filename: str) -> str:
    return ".zip" if filename.endswith(".zip") else ".tar.gz"


def release_version(art: Artifact, filename: str) -> Version | None:
    """The version of the release file ``filename`` when it is the same kind as ``art``: a wheel
    with the same tags for a wheel pin, an sdist for an sdist pin; None for any other file."""
    try:
        name = ArtifactFilename(filename)
    except ValueError:
        return None
    if name.is_wheel != art.is_wheel or canonicalize_name(name.distribution) != art.distribution.canonical:
        return None
    if art.is_wheel and parse_wheel_filename(name)[3] != parse_wheel_filename(art.filename)[3]:
        return None
    return name.version


def target_version(target: str) -> Version | None:
    """TARGET as a release version (``0.5.23``, ``v0.5.23``); None when it is none (a commit)."""
    if (m := _VERSION_TARGET.match(target)) is None:
        return None
    try:
        return parse_version(m.group(1))
    except InvalidVersion:
        raise UsageError(f"{target!r} is not a version") from None


def release_pin(root: Path, pin: Pin, version: Version, *, cache: Cache, choice: FileChoice = SAME) -> Pin:
    """The pin of ``version`` of the kind ``choice`` names (the same as ``pin``'s where it names
    none): its own file in upstream-pins/ when there is one (a pin written or corrected by hand is
    taken as it is), else one found through ``pin``'s sources, named as ``pin_name_for`` says."""
    kind = choice.kind or pin_kind(pin)
    if (found := _pinned(root, pin, version, kind, choice)) is not None:
        return found
    made = pin_for_version(pin, version, cache=cache, choice=choice)
    if str(made.version) != str(version) and (found := _pinned(root, pin, made.version, kind, choice)) is not None:
        return found  # the release's pin under its own spelling
    return dataclasses.replace(made, name=pin_name_for(root, made, pin))


def pin_kind(pin: Pin) -> str:
    """``sdist``, ``wheel``, or ``git`` for a pin that uses its git source."""
    return "git" if pin.use == "git" or pin.artifact is None else kind_of(pin.artifact.filename)


def pin_name_for(root: Path, made: Pin, active: Pin) -> PinName:
    """The name of a new release pin: ``<upstream>-<version>``, with ``-wheel`` or ``-sdist`` after it
    where its kind is not the active pin's, or where that name is a pin of another release file
    already (a wheel pin and an sdist pin of one release both have a name)."""
    kind = pin_kind(made)
    plain = release_pin_name(made.upstream, made.version)
    if kind not in KINDS:
        return made.name
    if kind == pin_kind(active) and _file_in(root, plain) in (None, _file_of(made)):
        return plain
    return release_pin_name(made.upstream, made.version, f"-{kind}")


def _file_of(pin: Pin) -> str | None:
    return pin.artifact.filename if pin.use == "artifact" and pin.artifact is not None else None


def _file_in(root: Path, name: str) -> str | None:
    """The release file the pin named ``name`` uses; None where there is no such pin, or it cannot
    be read (the caller's error, later), or it uses no release file."""
    if not os.path.lexists(root / PINS_DIR / f"{name}.toml"):
        return None
    try:
        return _file_of(load_pin(root, name))
    except (InvalidInput, UsageError):
        return None


def _pinned(root: Path, pin: Pin, version: Version, kind: str, choice: FileChoice) -> Pin | None:
    """The pin file of ``version`` of that kind already in upstream-pins/: ``<upstream>-<version>``,
    then ``<upstream>-<version>-<kind>``; None where neither is. A file under such a name that pins
    another release is an error; one of another kind is another pin (for an artifact pin, or
    wherever the command line named a kind)."""
    names = [release_pin_name(pin.upstream, version)]
    if kind in KINDS:
        names.append(release_pin_name(pin.upstream, version, f"-{kind}"))
    for name in names:
        rel = f"{PINS_DIR}/{name}.toml"
        if not os.path.lexists(root / rel):
            continue
        found = load_pin(root, name)
        if found.upstream != pin.upstream or found.version != version:
            raise InvalidInput(
                f"{rel} pins {found.upstream} {found.version}, not {pin.upstream} {version}",
                file=rel,
                hint=f"a pin for {pin.upstream} {version} is named {name}",
            )
        judged = choice.given or (pin_kind(pin) != "git" and pin_kind(found) != "git")
        if judged and pin_kind(found) != kind:
            continue
        if choice.filename is not None and (found.artifact is None or found.artifact.filename != choice.filename):
            continue
        return found
    return None


def pin_for_version(pin: Pin, version: Version, *, cache: Cache, choice: FileChoice = SAME) -> Pin:
    """A pin for another release of the same upstream, found through the pin's sources: the same
    kind of file as the pin's, or the one ``choice`` names (a wheel for an sdist pin, say, with the
    prefix mapping that keeps the repository's paths)."""
    name = release_pin_name(pin.upstream, version)
    if pin.use == "artifact":
        art = pin.artifact
        assert art is not None
        # always this pin's own index: an import in the shared cache may have been made from another
        # project's index or url, and its sha256 is that project's word, not this index's
        files = cache.index.files(art)
        other = choice.kind is not None and choice.kind != kind_of(art.filename)
        entry = (
            release_file(files, art.distribution, version, choice)
            if choice.filename is not None or other
            else _sibling_entry(art, files, version)
        )
        filename = ArtifactFilename(entry.filename)
        # the release as the artifact spells its version (4.2 for a 4.2.0 asked for): its prefix does
        version = filename.version
        name = release_pin_name(pin.upstream, version, f"-{kind_of(filename)}" if other else "")
        if not (sha := entry.sha256):
            raise UpstreamError(
                f"the index gives no sha256 for {filename}; refusing an unverifiable file",
                hint="patchtool takes a release file only by its sha256: use an index that lists it, "
                "as PEP 691 `hashes` or a PEP 503 `#sha256=` link, or pin the git tag with "
                "`pin add --git URL --tag T`",
            )
        if not isinstance(sha, str) or not SHA256_HEX.match(sha):
            raise UpstreamError(
                f"the index gives {sha!r} as the sha256 of {filename}, which is not a sha256 hex digest; refusing it",
                hint="check the pin's 'index'",
            )
        size = entry.size  # an int (no bool) a pin takes, else unknown
        listed_size = size if type(size) is int and 0 < size <= MAX_ARTIFACT_BYTES else None
        try:  # an sdist's top directory names its version: a literal prefix of the old one is moved with it
            new_art = dataclasses.replace(
                art,
                version=version,
                filename=filename,
                sha256=sha,
                url=None,
                tree=None,
                size=listed_size,
                prefix_from_template=PrefixTemplate("") if other else art.prefix_from_template.generalised(art.version),
            )
        except ValueError as exc:
            raise UpstreamError(
                f"the prefix.from of {pin.name} gives no path in {filename}: {exc}",
                hint=f"write the pin {name} by hand",
            ) from None
        git_src = pin.git.at(version, was=pin.version) if pin.git else None
        found = Pin(name=name, upstream=pin.upstream, version=version, git=git_src, artifact=new_art, use="artifact")
        if other:
            return dataclasses.replace(found, artifact=_across_layouts(cache, pin, found))
        return found if new_art.is_wheel else dataclasses.replace(found, artifact=_at_top(cache, found, art))
    if choice.given:
        raise UsageError(
            f"pin {pin.name} uses its git source: --sdist, --wheel and --filename choose a release file on an index",
            hint="pin a release file by hand, or leave them out to fetch the tag",
        )
    src = pin.git
    assert src is not None
    commit = cache.fetch_tag(src.url, src.at(version, was=pin.version).tag)
    return Pin(
        name=name,
        upstream=pin.upstream,
        version=version,
        git=src.at(version, commit=commit, was=pin.version),
        artifact=None,
        use="git",
    )


def _sibling_entry(art: Artifact, files: list[IndexFile], version: Version) -> IndexFile:
    """The index's entry of the file of ``version`` of the same kind as ``art``: the same archive
    (.tar.gz or .zip) first, then the name packaging writes."""
    listed = [e for e in files if release_version(art, e.filename) == version]
    sibling = sibling_filename(art, version)
    if not listed:
        same = sorted(e.filename for e in files if f"-{version}-" in e.filename or f"-{version}." in e.filename)
        raise UpstreamError(
            f"{art.distribution} {version} has no {sibling} on the index",
            hint=f"files for {version}: {', '.join(same) or 'none'}",
        )
    return min(listed, key=lambda e: (_archive(e.filename) != _archive(art.filename), e.filename != sibling))


def _across_layouts(cache: Cache, old: Pin, new: Pin) -> Artifact:
    """``new``'s artifact, of the other kind than ``old``'s, with the prefix mapping that puts its
    files where ``old``'s puts the same files (``upstream/layouts.py``); both files downloaded and
    verified."""
    from patchtool.upstream.artifacts import member_names
    from patchtool.upstream.layouts import sdist_prefix, wheel_prefix

    was, art = old.artifact, new.artifact
    assert was is not None and art is not None
    with cache.locked():
        was_members = member_names(cache.artifact_path(old), was)
        members = member_names(cache.artifact_path(new), art)
    template, to = (wheel_prefix if art.is_wheel else sdist_prefix)(was, was_members, art, members)
    return dataclasses.replace(art, prefix_from_template=template, prefix_to=to)


def names_release(directory: str, distribution: str, version: Version) -> bool:
    """Whether ``directory`` is ``<name>-<version>`` of that release, each spelled any way that
    means it: the name by its normalised form, the version by PEP 440 equality (``Jinja2-3.1.2``,
    ``jinja2-3.1.4``, ``Django-4.2`` for 4.2.0)."""
    stem, dash, spelled = directory.rpartition("-")
    try:
        same = canonicalize_name(stem) == canonicalize_name(distribution)
        return bool(dash) and same and parse_version(spelled) == version
    except InvalidVersion:
        return False


def _at_top(cache: Cache, pin: Pin, old: Artifact) -> Artifact:
    """``pin``'s sdist with its prefix under the top directory the sdist really has: a release
    may spell its name or version another way than the last (``Jinja2-3.1.2/`` then
    ``jinja2-3.1.4/``), so where the old prefix began with the old sdist's top directory, the new
    one begins with the new sdist's, read from the file (downloaded and verified)."""
    from patchtool.upstream.artifacts import top_directories

    art = pin.artifact
    assert art is not None
    top, slash, rest = old.prefix_from.partition("/")
    if not slash or not names_release(top, old.distribution, old.version):
        return art
    with cache.locked():
        tops = top_directories(cache.artifact_path(pin), art)
    if len(tops) != 1:
        return art
    (found,) = tops
    stem = found.rpartition("-")[0]
    head = f"{stem}-{PrefixTemplate.PLACEHOLDER}" if stem and found == f"{stem}-{art.version}" else found
    try:
        return dataclasses.replace(art, prefix_from_template=PrefixTemplate(f"{head}/{rest}"))
    except ValueError as exc:  # a top directory with braces in it
        raise UpstreamError(
            f"{art.filename} unpacks to {found!r}, which gives no prefix: {exc}",
            hint=f"write the pin {pin.name} by hand",
        ) from None


def resolve_target(pin: Pin, target: str, *, cache: Cache) -> Pin:
    """TARGET as a tag (v0.5.23), a version (0.5.23) or a commit, as a new pin."""
    if (version := target_version(target)) is not None:
        return pin_for_version(pin, version, cache=cache)
    if re.fullmatch(r"[0-9a-f]{7,40}", target):
        if pin.git is None:
            raise UsageError(
                f"{target} looks like a commit, but pin {pin.name} has no [git] source",
                hint=f"give a release version of {pin.upstream}, as {pin.version}",
            )
        if (commit := cache.repo.resolve(target)) is None:
            cache.fetch(pin.git.url, target, f"commit {target}")
            commit = cache.repo.resolve(target)
        if commit is None:
            raise UpstreamError(f"commit {target} is not in {pin.git.url}")
        version = stated_version(cache, pin.upstream, commit) or pin.version
        return Pin(
            name=release_pin_name(pin.upstream, version, f"-g{commit[:12]}"),
            upstream=pin.upstream,
            version=version,
            git=GitSource(url=pin.git.url, tag=pin.git.tag, commit=commit),
            artifact=None,
            use="git",
        )
    # the examples are this pin's own: another package's tags would mislead
    raise UsageError(
        f"{target!r} is neither a version, a tag (v{pin.version}) nor a commit",
        hint=f"name a release of {pin.upstream} by its version or tag (as {pin.version} or v{pin.version})"
        + (f", or a commit of {pin.git.url}" if pin.git is not None else ""),
    )


def stated_version(cache: Cache, distribution: str, commit: str) -> Version | None:
    """The version the tree at ``commit`` states for ``distribution``: a static ``version`` in a
    ``pyproject.toml`` at the top or one directory down that names it, else ``__version__`` in the
    package's ``version.py``/``__init__.py`` (at the top, under ``src/`` or one directory down);
    None where the tree states none (a version computed at build time, say)."""
    package = re.escape(canonicalize_name(distribution).replace("-", "_"))
    where = re.compile(rf"(?:[^/]+/)?(?:src/)?{package}/(?:_?version|__init__)\.py|(?:[^/]+/)?pyproject\.toml")
    tree = cache.repo.tree_of(commit)
    paths = sorted(
        (p for p in cache.repo.tree_paths(tree) if where.fullmatch(p)),
        key=lambda p: (not p.endswith(".toml"), p.count("/"), p.endswith("__init__.py"), p),
    )
    found = cache.repo.cat_files(tree, paths)
    for path in paths:
        text = (found.get(path) or b"").decode("utf-8", "replace")
        if path.endswith(".toml"):
            try:
                project = tomllib.loads(text).get("project")
            except tomllib.TOMLDecodeError:
                continue
            if (
                not isinstance(project, dict)
                or not isinstance(project.get("name"), str)
                or canonicalize_name(project["name"]) != canonicalize_name(distribution)
            ):
                continue
            stated = project.get("version")
        else:
            m = re.search(r"^__version__\s*=\s*[\"']([^\"'\n]+)[\"']", text, re.MULTILINE)
            stated = m.group(1) if m else None
        if isinstance(stated, str):
            with contextlib.suppress(InvalidVersion):
                return parse_version(stated)
    return None

"""Upstream pins and the cache that turns each into a verified local git commit.

A pin (``upstream-pins/<name>.toml``) says exactly which upstream the series
applies to: its git source and/or its release artifact, each verifiable by hash.
``Cache.ensure(pin)`` yields the commit, importing a release artifact
deterministically (fixed author, dates and layout) so that importing the same
release twice yields the same commit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import os
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from patchtool import git, paths, progress
from patchtool.errors import GitError, InvalidInput, Problem, UpstreamError, UsageError
from patchtool.project.fields import Fields, load_toml, raise_if
from patchtool.upstream.artifacts import IMPORT_LAYOUT, ImportRecord, metadata_version, read_files
from patchtool.upstream.download import Fetcher, url_problem

PINS_DIR = "upstream-pins"
DEFAULT_INDEX = "https://pypi.org/simple"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")


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
        if sha256 is not None and not _SHA256.match(sha256):
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
        file_dist, file_version = _artifact_name(filename)
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
        return Version(text)
    except InvalidVersion:
        raise ValueError(f"{text!r} is not a PEP 440 version") from None


def canonicalize_name(name: str) -> str:
    """PEP 503's normalised project name (packaging.utils has it too, behind a 20 ms import)."""
    return re.sub(r"[-_.]+", "-", name).lower()


_WHEEL_NAME = re.compile(r"^([A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?)-([^-]+)(?:-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")
_SDIST_NAME = re.compile(r"^(.+)-([^-]+)\.(?:tar\.gz|zip)$")


def _artifact_name(filename: str) -> tuple[str | None, Version | None]:
    """(distribution, version) of a wheel or sdist file name, as the wheel and sdist specs name them."""
    m = _WHEEL_NAME.match(filename) if filename.endswith(".whl") else _SDIST_NAME.match(filename)
    if m is None:
        return None, None
    try:
        return m.group(1), Version(m.group(2))
    except InvalidVersion:
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


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Base:
    """The pinned upstream as a commit in the cache repository."""

    pin: Pin
    commit: str
    tree: str
    ref: str
    source: str  # "artifact" or "git"


class Cache:
    """``<root>/upstream.git`` holds every upstream; ``<root>/downloads`` the verified artifacts."""

    def __init__(self, root: Path, *, fetcher: Fetcher | None = None) -> None:
        self.root = root
        self.fetcher = fetcher or Fetcher()
        self.repo = git.Repo(root / "upstream.git")
        self._ensured: dict[str, Base] = {}  # pin (as its file's text) -> base, for this process
        self._tags: dict[str, tuple[str, str, str]] = {}

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def ensure(self, pin: Pin) -> Base:
        """The pin's upstream in the cache (imported or fetched when missing), verified; the answer
        is remembered for the life of this Cache, which is one command."""
        key = pin_to_toml(pin)
        if key not in self._ensured:
            self._ensured[key] = self._ensure(pin)
        return self._ensured[key]

    def _ensure(self, pin: Pin) -> Base:
        with self.locked():
            git.Repo.init_bare(self.repo.git_dir)
            if pin.use == "git":
                return self._ensure_git(pin)
            return self._ensure_artifact(pin)

    # -- release artifacts -------------------------------------------------------------
    def _ensure_artifact(self, pin: Pin) -> Base:
        art = pin.artifact
        assert art is not None
        ref = f"refs/tags/{pin.tag}"
        existing = self._tag(ref)
        old = ""
        if existing is not None:
            commit, tree, message = existing
            record = self._verify_cached(pin, commit, tree, message)
            if record.layout == IMPORT_LAYOUT:
                return Base(pin=pin, commit=commit, tree=tree, ref=ref, source="artifact")
            old = commit  # an older layout's import of the same file: import it again, as this one does
        path = self.artifact_path(pin)
        with progress.task(f"import {art.filename} into the cache"):
            commit = self._import(pin, path)
        tree = self.repo.tree_of(commit)
        if art.tree is not None and tree != art.tree:
            raise UpstreamError(
                f"the import of {art.filename} has tree {tree}, but pin {pin.name} records {art.tree}",
                file=f"{PINS_DIR}/{pin.name}.toml",
                hint="the pin's 'tree' is wrong or the import layout changed; fix the pin")
        self.repo.update_ref(ref, commit, old)
        self._tags.pop(ref, None)
        return Base(pin=pin, commit=commit, tree=tree, ref=ref, source="artifact")

    def _verify_cached(self, pin: Pin, commit: str, tree: str, message: str) -> ImportRecord:
        """The record of the cached import, refused unless it is the import of what the pin names:
        the same file, sha256 and size, the same prefix, and the pin's tree if it records one."""
        art = pin.artifact
        assert art is not None
        where = f"{PINS_DIR}/{pin.name}.toml"
        drop = f"`git --git-dir={self.repo.git_dir} tag -d {pin.tag}`"
        record = ImportRecord.parse(message)
        if record is None:
            raise UpstreamError(
                f"the cached tag {pin.tag} ({commit[:12]}) is not an import patchtool made: the tag moved "
                "or the cache was changed", file=where, hint=f"remove it with {drop} and run again to re-import")
        differ = [f"{what}: the pin says {ours}, the import recorded {theirs}"
                  for what, ours, theirs in (("file", art.filename, record.filename),
                                             ("sha256", art.sha256, record.sha256),
                                             ("size", art.size, record.size),
                                             ("prefix", ImportRecord.mapping(art), record.prefix))
                  if ours is not None and theirs is not None and ours != theirs]
        if art.tree is not None and tree != art.tree:
            differ.append(f"tree: the pin says {art.tree}, the import has {tree}")
        if differ:
            raise UpstreamError(
                f"pin {pin.name} does not match the cached import {pin.tag} ({commit[:12]}): "
                + "; ".join(differ), file=where,
                hint=f"if the pin is right, remove the cached import with {drop} and run again: the artifact is "
                     "then downloaded and verified against the pin; otherwise correct the pin")
        return record

    def _tag(self, ref: str) -> tuple[str, str, str] | None:
        """(commit, tree, message) of an import tag, read once a command: resolving a release
        and ensuring it both need it. A tag not there yet is asked again (an import may add it)."""
        if ref not in self._tags:
            found = self.repo.commit_info(ref)
            if found is None:
                return None
            self._tags[ref] = found
        return self._tags[ref]

    def imported(self, art: Artifact, version: Version, filename: str) -> tuple[str, int] | None:
        """(sha256, size) of ``filename``, when the cache holds its import and the file itself:
        what the index said when it was downloaded and verified. Release files on an index never
        change, so a rebase or scan to a release already in the cache asks the index nothing."""
        info = self._tag(f"refs/tags/v{version}")
        if info is None:
            return None
        record = ImportRecord.parse(info[2])
        if record is None or record.filename != filename:
            return None
        path = self.root / "downloads" / record.sha256[:2] / filename
        if not path.is_file():
            return None
        return record.sha256, path.stat().st_size

    def artifact_path(self, pin: Pin) -> Path:
        """The verified artifact, downloading it when it is not cached yet."""
        art = pin.artifact
        assert art is not None
        dest_dir = self.root / "downloads" / art.sha256[:2]
        dest = dest_dir / art.filename
        if not (dest.exists() and _sha256(dest) == art.sha256):
            dest_dir.mkdir(parents=True, exist_ok=True)
            url = art.url or self._lookup(art)
            resumed = self.fetcher.download(url, dest, size=art.size)
            digest = _sha256(dest)
            if digest != art.sha256 and resumed:
                # pieced together from several transfers (or a partial file a killed command left):
                # the pieces may not fit, so the hash says nothing yet about the pin; start afresh
                dest.unlink()
                self.fetcher.download(url, dest, size=art.size, resume=False)
                digest = _sha256(dest)
            if digest != art.sha256:
                dest.unlink()
                raise UpstreamError(
                    f"{art.filename}: sha256 is {digest}, but pin {pin.name} says {art.sha256}; "
                    "the file was not used", file=f"{PINS_DIR}/{pin.name}.toml",
                    hint="if upstream really re-published the file, verify it and update the pin's sha256")
        size = dest.stat().st_size
        if art.size is not None and size != art.size:
            raise UpstreamError(f"{art.filename} has the pin's sha256 but is {size} bytes, not the {art.size} "
                                f"the pin says", file=f"{PINS_DIR}/{pin.name}.toml",
                                hint="the pin's size is wrong; correct it")
        return dest

    def _lookup(self, art: Artifact) -> str:
        for entry in index_files(self.fetcher, art):
            if entry.get("filename") == art.filename:
                listed = entry.get("hashes", {}).get("sha256")
                if listed and listed != art.sha256:
                    raise UpstreamError(
                        f"the index lists {art.filename} with sha256 {listed}, the pin says "
                        f"{art.sha256}; refusing it", hint="verify the release and fix the pin")
                return str(entry["url"])
        raise UpstreamError(f"{art.filename} is not on the index {_index_url(art)}",
                            hint="check the pin's filename and version")

    def _import(self, pin: Pin, path: Path) -> str:
        """One root commit of the artifact's files, every path checked before git sees any."""
        art = pin.artifact
        assert art is not None
        files = read_files(path, art)
        meta_version = metadata_version(path, art)
        if meta_version != art.version:
            raise UpstreamError(f"{art.filename} contains {art.distribution} {meta_version}, "
                                f"not {art.version}; refusing it", hint="the pin names the wrong file")
        if not files:
            raise UpstreamError(f"{art.filename} has no files under {art.prefix_from!r}",
                                hint="check the pin's prefix.from")
        record = ImportRecord(filename=art.filename, sha256=art.sha256, size=path.stat().st_size,
                              layout=IMPORT_LAYOUT, prefix=ImportRecord.mapping(art))
        ident = git.Ident(*git.FIXED_IDENT)
        commit = git.NewCommit(message=record.to_message(pin.upstream, art.version), author=ident,
                               committer=ident, files=tuple(files))
        building = f"refs/patchtool/import/{art.sha256}"  # fast-import moves a ref; the tag replaces it
        (sha,) = self.repo.write_commits(None, [commit], ref=building)
        self.repo.delete_ref(building)
        return sha

    # -- git sources -------------------------------------------------------------------
    def _ensure_git(self, pin: Pin) -> Base:
        src = pin.git
        assert src is not None and src.commit is not None
        ref = f"refs/patchtool/git/{src.tag}"
        where = f"{PINS_DIR}/{pin.name}.toml"
        if not self.repo.has_object(f"{src.commit}^{{commit}}"):
            with self.repo.scratch() as scratch:  # nothing reaches the cache until the tag is verified
                try:
                    scratch.fetch(src.url, f"+refs/tags/{src.tag}:refs/probe/tag")
                except GitError as exc:
                    raise UpstreamError(f"could not fetch tag {src.tag} from {src.url}: {exc}", file=where,
                                        hint="check the network, and the url and tag in the pin") from None
                got = scratch.resolve("refs/probe/tag")
                if got != src.commit:
                    raise self._not_the_tag(pin, scratch, got)
                fetched = f"refs/patchtool/fetch/{src.tag}"
                self.repo.fetch(str(scratch.git_dir), f"+refs/probe/tag:{fetched}")
                self.repo.delete_ref(fetched)
        self.repo.update_ref(ref, src.commit)
        return Base(pin=pin, commit=src.commit, tree=self.repo.tree_of(src.commit), ref=ref,
                    source="git")

    def _not_the_tag(self, pin: Pin, scratch: git.Repo, got: str | None) -> UpstreamError:
        """The tag resolves to another commit than the pin's: it moved, or the pin's commit is wrong."""
        src = pin.git
        assert src is not None and src.commit is not None
        where = f"{PINS_DIR}/{pin.name}.toml"
        try:
            scratch.fetch(src.url, f"{src.commit}:refs/probe/pinned")
        except GitError:  # the remote does not have it, or will not serve a commit by its sha
            return UpstreamError(
                f"pin {pin.name} names commit {src.commit}, which {src.url} does not have (its tag {src.tag} is "
                f"{got}); refusing it", file=where,
                hint="the pin's commit is wrong (a typo?), or the tag moved and its old commit is gone: verify the "
                     "tag's commit upstream and correct the pin")
        return UpstreamError(
            f"tag {src.tag} at {src.url} is {got}, but pin {pin.name} says {src.commit}: the tag moved; refusing it",
            file=where, hint="verify the new commit upstream before updating the pin")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


_VERSION_TARGET = re.compile(r"^v?(\d+(?:\.\d+)+(?:(?:a|b|rc|\.post|\.dev)\d+)*)$")


def _index_url(art: Artifact) -> str:
    override = os.environ.get("PATCHTOOL_INDEX_URL")
    if override:
        why = url_problem(override)
        if why is not None:
            raise UsageError(f"PATCHTOOL_INDEX_URL={override!r} {why}",
                             hint="set it to a PEP 691 index such as https://pypi.org/simple, or unset it")
        return override.rstrip("/")
    return art.index.rstrip("/")


def index_files(fetcher: Fetcher, art: Artifact) -> list[dict[str, Any]]:
    """The distribution's files on the pin's PEP 691 index, each ``url`` made absolute."""
    base = f"{_index_url(art)}/{canonicalize_name(art.distribution)}/"
    page = fetcher.json(base)
    files = page.get("files") if isinstance(page, dict) else None
    if not isinstance(files, list):
        raise UpstreamError(f"the package index at {base} did not answer with a PEP 691 project page",
                            hint="check the pin's 'index'")
    out = []
    for entry in files:
        if not isinstance(entry, dict) or not isinstance(entry.get("hashes", {}), dict):
            continue
        entry = dict(entry)
        entry["url"] = urllib.parse.urljoin(base, str(entry.get("url", "")))
        out.append(entry)
    return out


def sibling_filename(art: Artifact, version: Version) -> str:
    """The same kind of artifact (same wheel tags) for another version."""
    if art.is_wheel:
        tags = art.filename[:-4].split("-", 2)[2]
        return f"{art.filename.split('-', 1)[0]}-{version}-{tags}.whl"
    stem = art.filename.split("-", 1)[0]
    ext = ".tar.gz" if art.filename.endswith(".tar.gz") else ".zip"
    return f"{stem}-{version}{ext}"


def pin_for_version(pin: Pin, version: Version, *, cache: Cache) -> Pin:
    """A pin for another release of the same upstream, found through the pin's sources."""
    name = f"{pin.upstream}-{version}"
    if pin.use == "artifact":
        art = pin.artifact
        assert art is not None
        filename = sibling_filename(art, version)
        known = cache.imported(art, version, filename)
        if known is not None:  # imported earlier, from the file the index named then
            sha, size = known
            new_art = dataclasses.replace(art, version=version, filename=filename, sha256=sha, size=size,
                                          url=None, tree=None)
            git_src = dataclasses.replace(pin.git, tag=f"v{version}", commit=None) if pin.git else None
            return Pin(name=name, upstream=pin.upstream, version=version, git=git_src, artifact=new_art,
                       use="artifact")
        listed = {e.get("filename"): e for e in index_files(cache.fetcher, art)}
        entry = listed.get(filename)
        if entry is None:
            same = sorted(str(f) for f in listed if f"-{version}-" in str(f) or f"-{version}." in str(f))
            raise UpstreamError(f"{art.distribution} {version} has no {filename} on the index",
                                hint=f"files for {version}: {', '.join(same) or 'none'}")
        sha = entry.get("hashes", {}).get("sha256")
        if not sha:
            raise UpstreamError(f"the index gives no sha256 for {filename}; refusing an unverifiable file")
        if not isinstance(sha, str) or not _SHA256.match(sha):
            raise UpstreamError(f"the index gives {sha!r} as the sha256 of {filename}, which is not a sha256 "
                                "hex digest; refusing it", hint="check the pin's 'index'")
        listed_size = entry.get("size")
        new_art = dataclasses.replace(art, version=version, filename=filename, sha256=sha, url=None, tree=None,
                                      size=listed_size if isinstance(listed_size, int) and listed_size > 0 else None)
        git_src = dataclasses.replace(pin.git, tag=f"v{version}", commit=None) if pin.git else None
        return Pin(name=name, upstream=pin.upstream, version=version, git=git_src, artifact=new_art,
                   use="artifact")
    src = pin.git
    assert src is not None
    tag = f"v{version}"
    fetched = f"refs/patchtool/fetch/{tag}"
    with cache.locked():
        git.Repo.init_bare(cache.repo.git_dir)
        try:
            cache.repo.fetch(src.url, f"+refs/tags/{tag}:{fetched}")
        except Exception as exc:
            raise UpstreamError(f"could not fetch tag {tag} from {src.url}: {exc}") from None
        commit = cache.repo.resolve(fetched)
        cache.repo.delete_ref(fetched)
    return Pin(name=name, upstream=pin.upstream, version=version,
               git=GitSource(url=src.url, tag=tag, commit=commit), artifact=None, use="git")


def resolve_target(pin: Pin, target: str, *, cache: Cache) -> Pin:
    """TARGET as a tag (v0.5.23), a version (0.5.23) or a commit, as a new pin."""
    m = _VERSION_TARGET.match(target)
    if m:
        try:
            version = Version(m.group(1))
        except InvalidVersion:
            raise UsageError(f"{target!r} is not a version") from None
        return pin_for_version(pin, version, cache=cache)
    if re.fullmatch(r"[0-9a-f]{7,40}", target):
        if pin.git is None:
            raise UsageError(f"{target} looks like a commit, but pin {pin.name} has no [git] source",
                             hint="give a release version, e.g. 0.5.24")
        commit = cache.repo.resolve(target)
        if commit is None:
            with cache.locked():
                cache.repo.fetch(pin.git.url, target)
            commit = cache.repo.resolve(target)
        if commit is None:
            raise UpstreamError(f"commit {target} is not in {pin.git.url}")
        raw = cache.repo.cat_files(cache.repo.tree_of(commit), ["python/sglang/version.py"])
        text = (raw.get("python/sglang/version.py") or b"").decode()
        vm = re.search(r"__version__\s*=\s*[\"']([^\"']+)", text)
        version = Version(vm.group(1)) if vm else pin.version
        return Pin(name=f"{pin.upstream}-{version}-g{commit[:12]}", upstream=pin.upstream, version=version,
                   git=GitSource(url=pin.git.url, tag=pin.git.tag, commit=commit), artifact=None, use="git")
    raise UsageError(f"{target!r} is neither a version, a tag (v0.5.23) nor a commit")


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

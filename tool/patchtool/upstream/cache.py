"""The cache: ``<root>/upstream.git`` holds every upstream a pin names as a verified local commit,
``<root>/downloads/<sha256>/<filename>`` the verified release artifacts, each in a directory of
its own hash (two files of one name, from two indexes, never share one). One lock guards every
writer.

``Cache.ensure(pin)`` yields the commit, importing a release artifact deterministically (fixed
author, dates and layout) so that importing the same release twice yields the same commit, or
fetching a git source's tag and checking it is the commit the pin names. Each is kept under a
ref named by everything it is made from (``refnames``: an import by distribution, version and
the artifact's sha256, a git source by its url and tag), so projects on one cache never meet.

The lock (``locked``) is held by every command that changes the cache: an import, a fetch, a
prune, and every write of a ref under ``refs/patchtool/`` (the git layer takes it, see
``git.Repo``'s ``ref_guard``). A lock file git left beside one of those refs is therefore stale
once the lock is ours (its owner was killed, a ``git fast-import`` by kill -9): it is removed
before the ref is written, so a killed process never stops every later one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from patchtool import fsroot, git
from patchtool.errors import GitError, UpstreamError
from patchtool.git.limits import FetchLimits
from patchtool.project import lock
from patchtool.project.pins import PINS_DIR, Artifact, Pin
from patchtool.upstream.artifacts import IMPORT_LAYOUT, ImportRecord, import_files, metadata_version
from patchtool.upstream.index import Fetcher, PackageIndex
from patchtool.upstream.refnames import fetch_ref, git_ref, import_ref
from patchtool.urls import LocalUrls, SourceUrl, allowed_by_environment


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

    def __init__(
        self,
        root: Path,
        *,
        fetcher: Fetcher | None = None,
        index_url: str | None = None,
        allow_local: LocalUrls | bool | None = None,
        fetch_limits: FetchLimits | None = None,
    ) -> None:
        """``allow_local``: the user lets the repository's urls be local or plain http (the CLI
        passes what ``--allow-local-urls`` and the environment say; default: the environment);
        ``fetch_limits``: how long and how much a git fetch may take (default: the environment's)."""
        self.root = root
        self.allow_local = allowed_by_environment() if allow_local is None else LocalUrls.of(allow_local)
        self.fetch_limits = fetch_limits or FetchLimits.from_environment()
        self.fetcher = fetcher or Fetcher(allow_local=self.allow_local)
        self.index = PackageIndex(self.fetcher, override=index_url)
        self.repo = git.Repo(root / "upstream.git", ref_guard=self.locked, own=True)
        self._held = 0  # how deep this process is in ``locked``: the lock is taken once, at the outermost
        self._thread_lock = threading.RLock()
        self._ensured: dict[str, Base] = {}  # pin (its repr: every field) -> base, for this process
        self._tags: dict[str, tuple[str, str, str]] = {}

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the cache's lock, alone; again from inside it is a no-op. Busy (exit 75) when
        another command keeps it past ``$PATCHTOOL_LOCK_TIMEOUT``, as the repository's lock."""
        with self._thread_lock, contextlib.ExitStack() as outermost:
            if not self._held:
                self.root.mkdir(parents=True, exist_ok=True)
                path = self.root / "lock"
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
                outermost.callback(os.close, fd)  # releases the lock
                lock.wait_for(fd, path, exclusive=True, what=f"the cache {self.root}")
            self._held += 1
            try:
                yield
            finally:
                self._held -= 1

    def fetch(self, url: SourceUrl, refspec: str, what: str, *, hint: str | None = None) -> None:
        """``refspec`` fetched from ``url`` into the cache, under its lock, within its limits; where git
        fails, UpstreamError: could not fetch ``what``."""
        with self.locked():
            git.Repo.init_bare(self.repo.git_dir)
            try:
                self.repo.fetch(url, refspec, allow_local=self.allow_local, limits=self.fetch_limits)
            except GitError as exc:
                raise UpstreamError(f"could not fetch {what} from {url}: {exc}", hint=hint) from None

    def fetch_tag(self, url: SourceUrl, tag: str, *, hint: str | None = None) -> str | None:
        """The commit the tag ``tag`` at ``url`` names, fetched into the cache (its objects stay, its ref
        does not)."""
        fetched = fetch_ref(url, tag)
        with self.locked():
            self.fetch(url, f"+refs/tags/{tag}:{fetched}", f"tag {tag}", hint=hint)
            commit = self.repo.resolve(fetched)
            self.repo.delete_ref(fetched)
        return commit

    def ensure(self, pin: Pin) -> Base:
        """The pin's upstream in the cache (imported or fetched when missing), verified; the answer
        is remembered for the life of this Cache, which is one command."""
        key = repr(pin)  # not pin_to_toml: that is the TOML writer (tomlkit), too dear for a key
        if not self._ensured and (self.repo.git_dir / "HEAD").is_file():
            self.repo.restore_config()  # checked before each command uses it: the cache is data
        if key not in self._ensured:
            self._ensured[key] = self._ensure(pin)
        return self._ensured[key]

    def _ensure(self, pin: Pin) -> Base:
        if (found := self._cached(pin)) is not None:  # no lock: a ref moves atomically, and what it names is verified
            return found
        with self.locked():
            git.Repo.init_bare(self.repo.git_dir)
            if pin.use == "git":
                return self._ensure_git(pin)
            return self._ensure_artifact(pin)

    def _cached(self, pin: Pin) -> Base | None:
        """The pin's upstream when the cache holds it already, verified, or None: what readers
        of a warm cache need, without waiting on a writer's lock."""
        if not (self.repo.git_dir / "HEAD").is_file():
            return None
        if pin.use == "git":
            src = pin.git
            assert src is not None and src.commit is not None
            ref = git_ref(src.url, src.tag)
            if self.repo.resolve(ref) != src.commit:
                return None
            return Base(pin=pin, commit=src.commit, tree=self.repo.tree_of(src.commit), ref=ref, source="git")
        assert pin.artifact is not None
        return self._imported(pin, _import_ref(pin.artifact))[0]

    # -- release artifacts -------------------------------------------------------------
    def _imported(self, pin: Pin, ref: str) -> tuple[Base | None, str]:
        """The pin's import that ``ref`` names, verified, where it is of this import layout; and its
        commit ("" where there is none): one of an older layout is the same file, imported again."""
        if (existing := self._tag(ref)) is None:
            return None, ""
        commit, tree, message = existing
        if self._verify_cached(pin, commit, tree, message).layout != IMPORT_LAYOUT:
            return None, commit
        return Base(pin=pin, commit=commit, tree=tree, ref=ref, source="artifact"), commit

    def _ensure_artifact(self, pin: Pin) -> Base:
        art = pin.artifact
        assert art is not None
        ref = _import_ref(art)
        self._tags.pop(ref, None)  # read again under the lock: another command may have moved it
        found, old = self._imported(pin, ref)
        if found is not None:
            return found
        commit = self._import(pin, self.artifact_path(pin))
        tree = self.repo.tree_of(commit)
        if art.tree is not None and tree != art.tree:
            raise UpstreamError(
                f"the import of {art.filename} has tree {tree}, but pin {pin.name} records {art.tree}",
                file=f"{PINS_DIR}/{pin.name}.toml",
                hint="the pin's 'tree' is wrong or the import layout changed; fix the pin",
            )
        self.repo.update_ref(ref, commit, old)
        self._tags.pop(ref, None)
        return Base(pin=pin, commit=commit, tree=tree, ref=ref, source="artifact")

    def _verify_cached(self, pin: Pin, commit: str, tree: str, message: str) -> ImportRecord:
        """The record of the cached import, refused unless it is the import of what the pin names:
        the same file, sha256 and size, the same prefix, and the pin's tree if it records one."""
        art = pin.artifact
        assert art is not None
        where = f"{PINS_DIR}/{pin.name}.toml"
        tag = _import_ref(art).removeprefix("refs/tags/")
        drop = f"`git --git-dir={self.repo.git_dir} tag -d {tag}`"
        if (record := ImportRecord.parse(message)) is None:
            raise UpstreamError(
                f"the cached tag {tag} ({commit[:12]}) is not an import patchtool made: the tag moved "
                "or the cache was changed",
                file=where,
                hint=f"remove it with {drop} and run again to re-import",
            )
        differ = [
            f"{what}: the pin says {ours}, the import recorded {theirs}"
            for what, ours, theirs in (
                ("file", art.filename, record.filename),
                ("sha256", art.sha256, record.sha256),
                ("size", art.size, record.size),
                ("prefix", ImportRecord.mapping(art), record.prefix),
            )
            if ours is not None and theirs is not None and ours != theirs
        ]
        if art.tree is not None and tree != art.tree:
            differ.append(f"tree: the pin says {art.tree}, the import has {tree}")
        if differ:
            raise UpstreamError(
                f"pin {pin.name} does not match the cached import {tag} ({commit[:12]}): " + "; ".join(differ),
                file=where,
                hint=f"if the pin is right, remove the cached import with {drop} and run again: the artifact is "
                "then downloaded and verified against the pin; otherwise correct the pin",
            )
        return record

    def _tag(self, ref: str) -> tuple[str, str, str] | None:
        """(commit, tree, message) of an import tag, read once a command: resolving a release
        and ensuring it both need it. A tag not there yet is asked again (an import may add it)."""
        if ref not in self._tags:
            if (found := self.repo.commit_info(ref)) is None:
                return None
            self._tags[ref] = found
        return self._tags[ref]

    def holds(self, art: Artifact) -> bool:
        """Whether the cache holds the import of exactly this artifact and its file."""
        info = self._tag(_import_ref(art)) if (self.repo.git_dir / "HEAD").is_file() else None
        record = ImportRecord.parse(info[2]) if info is not None else None
        return (
            record is not None
            and (record.sha256, record.filename) == (art.sha256, art.filename)
            and (self.root / download_rel(art.sha256, art.filename)).is_file()
        )

    def artifact_path(self, pin: Pin) -> Path:
        """The verified artifact, downloading it when it is not cached yet."""
        art = pin.artifact
        assert art is not None
        disk = fsroot.Root(self.root)
        rel = download_rel(art.sha256, art.filename)
        dest = self.root / rel
        if not (disk.kind(rel) == stat.S_IFREG and _file_sha256(dest) == art.sha256):
            disk.directory(rel.rpartition("/")[0])
            url = art.url or self._lookup(art)
            resumed = self.fetcher.download(url, dest, size=art.size)
            if (digest := _file_sha256(dest)) != art.sha256 and resumed:
                # pieced together from several transfers (or a partial file a killed command left):
                # the pieces may not fit, so the hash says nothing yet about the pin; start afresh
                disk.unlink(rel)
                self.fetcher.download(url, dest, size=art.size, resume=False)
                digest = _file_sha256(dest)
            if digest != art.sha256:
                disk.unlink(rel)
                raise UpstreamError(
                    f"{art.filename}: sha256 is {digest}, but pin {pin.name} says {art.sha256}; the file was not used",
                    file=f"{PINS_DIR}/{pin.name}.toml",
                    hint="if upstream really re-published the file, verify it and update the pin's sha256",
                )
        size = dest.stat().st_size
        if art.size is not None and size != art.size:
            raise UpstreamError(
                f"{art.filename} has the pin's sha256 but is {size} bytes, not the {art.size} the pin says",
                file=f"{PINS_DIR}/{pin.name}.toml",
                hint="the pin's size is wrong; correct it",
            )
        return dest

    def _lookup(self, art: Artifact) -> SourceUrl:
        for entry in self.index.files(art):
            if entry.filename == art.filename:
                if (listed := entry.sha256) and listed != art.sha256:
                    raise UpstreamError(
                        f"the index lists {art.filename} with sha256 {listed}, the pin says {art.sha256}; refusing it",
                        hint="verify the release and fix the pin",
                    )
                if entry.url is None:
                    raise UpstreamError(
                        f"the index links {art.filename} to no URL patchtool fetches from: {entry.url_problem}",
                        hint="check the pin's 'index'",
                    )
                return entry.url
        raise UpstreamError(
            f"{art.filename} is not on the index {self.index.url(art)}", hint="check the pin's filename and version"
        )

    def _import(self, pin: Pin, path: Path) -> str:
        """One root commit of the artifact's files, every path checked before git sees any."""
        art = pin.artifact
        assert art is not None
        with import_files(path, art) as files:  # each file's content read as git takes it
            if (meta_version := metadata_version(path, art)) != art.version:
                raise UpstreamError(
                    f"{art.filename} contains {art.distribution} {meta_version}, not {art.version}; refusing it",
                    hint="the pin names the wrong file",
                )
            if not files:
                raise UpstreamError(
                    f"{art.filename} has no files under {art.prefix_from!r}", hint="check the pin's prefix.from"
                )
            record = ImportRecord(
                filename=art.filename,
                sha256=art.sha256,
                size=path.stat().st_size,
                layout=IMPORT_LAYOUT,
                prefix=ImportRecord.mapping(art),
            )
            ident = git.Ident(*git.FIXED_IDENT)
            commit = git.NewCommit(
                message=record.to_message(pin.upstream, art.version), author=ident, committer=ident, files=tuple(files)
            )
            building = f"refs/patchtool/import/{art.sha256}"  # fast-import moves a ref; the tag replaces it
            shown = f"import {art.filename} into the cache"
            (sha,) = self.repo.write_commits(None, [commit], ref=building, shown_as=shown)
        self.repo.delete_ref(building)
        return sha

    # -- git sources -------------------------------------------------------------------
    def _ensure_git(self, pin: Pin) -> Base:
        src = pin.git
        assert src is not None and src.commit is not None
        ref = git_ref(src.url, src.tag)
        where = f"{PINS_DIR}/{pin.name}.toml"
        if not self.repo.has_object(f"{src.commit}^{{commit}}"):
            with self.repo.scratch() as scratch:  # nothing reaches the cache until the tag is verified
                try:
                    scratch.fetch(
                        src.url,
                        f"+refs/tags/{src.tag}:refs/probe/tag",
                        allow_local=self.allow_local,
                        limits=self.fetch_limits,
                    )
                except GitError as exc:
                    raise UpstreamError(
                        f"could not fetch tag {src.tag} from {src.url}: {exc}",
                        file=where,
                        hint="check the network, and the url and tag in the pin",
                    ) from None
                if (got := scratch.resolve("refs/probe/tag")) != src.commit:
                    raise self._not_the_tag(pin, scratch, got)
                fetched = fetch_ref(src.url, src.tag)
                self.repo.fetch_from(scratch, f"+refs/probe/tag:{fetched}")
                self.repo.delete_ref(fetched)
        self.repo.update_ref(ref, src.commit)
        return Base(pin=pin, commit=src.commit, tree=self.repo.tree_of(src.commit), ref=ref, source="git")

    def _not_the_tag(self, pin: Pin, scratch: git.Repo, got: str | None) -> UpstreamError:
        """The tag resolves to another commit than the pin's: it moved, or the pin's commit is wrong."""
        src = pin.git
        assert src is not None and src.commit is not None
        where = f"{PINS_DIR}/{pin.name}.toml"
        try:
            scratch.fetch(
                src.url, f"{src.commit}:refs/probe/pinned", allow_local=self.allow_local, limits=self.fetch_limits
            )
        except GitError:  # the remote does not have it, or will not serve a commit by its sha
            return UpstreamError(
                f"pin {pin.name} names commit {src.commit}, which {src.url} does not have (its tag {src.tag} is "
                f"{got}); refusing it",
                file=where,
                hint="the pin's commit is wrong (a typo?), or the tag moved and its old commit is gone: verify the "
                "tag's commit upstream and correct the pin",
            )
        return UpstreamError(
            f"tag {src.tag} at {src.url} is {got}, but pin {pin.name} says {src.commit}: the tag moved; refusing it",
            file=where,
            hint="verify the new commit upstream before updating the pin",
        )


def download_rel(sha256: str, filename: str) -> str:
    """Where, beneath the cache, the release file of that sha256 is kept."""
    return f"downloads/{sha256}/{filename}"


def _import_ref(art: Artifact) -> str:
    return import_ref(art.distribution, art.version, art.sha256, ImportRecord.mapping(art))


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()

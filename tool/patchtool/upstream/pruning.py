"""What the cache holds and who uses it (``patchtool cache``), and pruning what nothing uses
(``patchtool cache prune``).

A release import (its tag, its file in ``downloads/``) or a fetched git tag is used while a pin
of this project, or of another project registered in the cache (one with a checkout record
naming its directory, which still exists), names it: its ref is the very ref ``refnames`` names
for the pin, so a ref an older patchtool named (``refs/tags/v<version>``) is used by nobody. Pruning removes the tags
and files nothing uses, the private temporary directories (``<cache>/tmp/<pid>-*``, see
``cli/confinement.py``) of commands that are gone (killed: one that ends removes its own), forgets
worktrees whose directories are gone, removes the lock files a
killed git left beside patchtool's own refs (no living writer holds one: each writes under the
cache's lock, ``upstream.cache``), and leaves the objects to
``git gc``: only what no ref reaches goes, after git's grace period unless ``--now``. All of it
happens under the cache's lock, held exclusively, so no import or fetch runs meanwhile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from patchtool import fsroot
from patchtool.errors import InvalidInput, UsageError
from patchtool.git import housekeeping
from patchtool.inputs import loads_json
from patchtool.project.pins import PINS_DIR, Pin, load_pin
from patchtool.upstream.artifacts import ImportRecord
from patchtool.upstream.cache import Cache, download_rel
from patchtool.upstream.namespaces import BRANCHES, REFS, project_key
from patchtool.upstream.refnames import GIT_SOURCES, IMPORTS, git_ref, import_ref, import_version


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Release:
    """One upstream the cache holds: an import tag (and its file) or a fetched git tag."""

    ref: str
    kind: str  # "artifact" or "git"
    version: str
    filename: str | None = None
    download_bytes: int = 0
    used_by: tuple[str, ...]  # "<project dir>: <pin>"

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "used_by": list(self.used_by)}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Namespace:
    """One project's refs in the cache (checkout branches, a rebase's replayed commits)."""

    key: str
    root: str | None  # the project's directory, where a checkout record names it
    exists: bool
    this_project: bool
    refs: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CacheReport:
    path: str
    size_bytes: int
    releases: tuple[Release, ...] = ()
    namespaces: tuple[Namespace, ...] = ()
    checkouts: tuple[str, ...] = ()
    objects: dict[str, int] = dataclasses.field(default_factory=dict)  # git count-objects -v; {}: no cache yet
    removed: tuple[str, ...] = ()  # prune: the refs and files it removed (or would, in a dry run)
    freed_bytes: int = 0
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "releases": [r.to_dict() for r in self.releases],
            "namespaces": [dataclasses.asdict(n) for n in self.namespaces],
            "checkouts": list(self.checkouts),
            "removed": list(self.removed),
        }


def _tree_size(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _project_pins(root: Path) -> list[Pin]:
    """The pins in a project's upstream-pins/ that read; one that does not is no use to anyone."""
    out = []
    for path in sorted((root / PINS_DIR).glob("*.toml")):
        with contextlib.suppress(InvalidInput, UsageError, OSError):
            out.append(load_pin(root, path.stem))
    return out


def _registered(cache: Cache) -> dict[str, Path]:
    """key -> directory of each project a checkout record names."""
    out: dict[str, Path] = {}
    records = cache.repo.git_dir / "patchtool" / "checkouts"
    for path in sorted(records.rglob("*.json")) if records.is_dir() else []:  # a branch may hold '/'
        try:
            data = loads_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("root"), str):
            out[path.relative_to(records).parts[0]] = Path(data["root"])
    return out


def _users(this: Path, registered: dict[str, Path]) -> list[tuple[str, Pin]]:
    """(project dir, pin) for every pin of this project and of each registered project still there."""
    roots = dict.fromkeys([this.resolve(), *(r for r in registered.values() if r.is_dir())])
    return [(str(r), pin) for r in roots for pin in _project_pins(r)]


def _releases(cache: Cache, users: list[tuple[str, Pin]]) -> list[Release]:
    repo = cache.repo
    out = []
    for ref in housekeeping.refs(repo, IMPORTS):
        info = repo.commit_info(ref)
        record = ImportRecord.parse(info[2]) if info else None
        file = cache.root / download_rel(record.sha256, record.filename) if record else None
        used = tuple(
            f"{where}: {p.name}"
            for where, p in users
            if p.artifact is not None
            and record is not None
            and p.artifact.sha256 == record.sha256
            and import_ref(p.artifact.distribution, p.artifact.version, p.artifact.sha256, record.prefix) == ref
            and ImportRecord.mapping(p.artifact) == record.prefix
        )
        version = import_version(ref, record.sha256, record.prefix) if record else None
        out.append(
            Release(
                ref=ref,
                kind="artifact",
                version=version or ref.removeprefix(IMPORTS),
                filename=record.filename if record else None,
                download_bytes=file.stat().st_size if file and file.is_file() else 0,
                used_by=used,
            )
        )
    for ref in housekeeping.refs(repo, GIT_SOURCES):
        pins = [(where, p) for where, p in users if p.use == "git" and p.git and git_ref(p.git.url, p.git.tag) == ref]
        version = pins[0][1].git.tag if pins and pins[0][1].git else ref.removeprefix(GIT_SOURCES)
        out.append(
            Release(ref=ref, kind="git", version=version, used_by=tuple(f"{where}: {p.name}" for where, p in pins))
        )
    return out


def _namespaces(cache: Cache, this: Path, registered: dict[str, Path]) -> list[Namespace]:
    counts: dict[str, int] = {}
    for ref in housekeeping.refs(cache.repo, f"{REFS}/", f"refs/heads/{BRANCHES}/"):
        key = ref.removeprefix(f"refs/heads/{BRANCHES}/").removeprefix(f"{REFS}/").split("/", 1)[0]
        if len(key) == 16 and all(c in "0123456789abcdef" for c in key):
            counts[key] = counts.get(key, 0) + 1
    ours = project_key(this)
    return [
        Namespace(
            key=k,
            root=str(registered[k]) if k in registered else None,
            exists=k == ours or (k in registered and registered[k].is_dir()),
            this_project=k == ours,
            refs=n,
        )
        for k, n in sorted(counts.items())
    ]


def survey(cache: Cache, this: Path) -> CacheReport:
    """What the cache holds, who uses each release, and its size."""
    if not (cache.repo.git_dir / "HEAD").is_file():
        return CacheReport(path=str(cache.root), size_bytes=_tree_size(cache.root) if cache.root.is_dir() else 0)
    registered = _registered(cache)
    return CacheReport(
        path=str(cache.root),
        size_bytes=_tree_size(cache.root),
        releases=tuple(_releases(cache, _users(this, registered))),
        namespaces=tuple(_namespaces(cache, this, registered)),
        checkouts=tuple(w.path for w in cache.repo.worktrees()[1:]),
        objects=housekeeping.count_objects(cache.repo),
    )


def _unused_downloads(cache: Cache, kept: set[str]) -> list[Path]:
    """The files in downloads/ that no pin names (``kept``: their paths beneath the cache), partial
    downloads (the lock says none is running), and those an older patchtool kept elsewhere."""
    downloads = cache.root / "downloads"
    files = sorted(p for p in downloads.glob("*/*") if p.is_file()) if downloads.is_dir() else []
    return [p for p in files if p.relative_to(cache.root).as_posix() not in kept]


_PRIVATE_TMP = re.compile(r"^([1-9][0-9]*)-")  # what ``cli.confinement._private_tmp`` names: <pid>-<random>


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # none, or a number no pid reaches
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _abandoned_tmp(cache: Cache) -> list[Path]:
    """The private temporary directories whose command is gone: a kill left them behind. One of a
    living process is kept (a reused pid keeps a dead one's too, harmlessly, until it ends)."""
    tmp = cache.root / "tmp"
    entries = sorted(tmp.iterdir()) if tmp.is_dir() and not tmp.is_symlink() else []
    return [
        p
        for p in entries
        if (m := _PRIVATE_TMP.match(p.name)) and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1)))
    ]


def prune(
    cache: Cache, this: Path, *, dry_run: bool, now: bool, force: bool = False, unexported: Sequence[Any] = ()
) -> CacheReport:
    """Remove the imports, fetched tags and downloads no pin uses, forget gone worktrees, then let
    ``git gc`` drop what no ref reaches. Holds the cache's lock throughout. ``unexported``: the
    work only the HEAD of a worktree whose directory is gone holds, which forgetting it would lose:
    refused unless ``force`` (or ``dry_run``)."""
    if unexported and not force and not dry_run:
        raise UsageError(
            "the cache holds commits no patch file carries that only a removed worktree keeps: "
            + "; ".join(u.describe() for u in unexported)
            + "; pruning would forget that worktree and lose them",
            hint="keep them on a branch first (`git -C CACHE/upstream.git branch NAME COMMIT`, CACHE as "
            "`patchtool cache` shows it), or `patchtool cache prune --force` discards them",
        )
    with cache.locked():
        before = survey(cache, this)
        unused = [r for r in before.releases if not r.used_by]
        users = _users(this, _registered(cache))
        files = _unused_downloads(
            cache, {download_rel(p.artifact.sha256, p.artifact.filename) for _, p in users if p.artifact is not None}
        )
        temporary = _abandoned_tmp(cache)
        removed = tuple([r.ref for r in unused] + [str(p.relative_to(cache.root)) for p in files + temporary])
        file_bytes = sum(p.stat().st_size for p in files) + sum(map(_tree_size, temporary))
        if dry_run:
            return dataclasses.replace(before, removed=removed, dry_run=dry_run, freed_bytes=file_bytes)
        for p in temporary:
            fsroot.Root(cache.root).rmtree(p.relative_to(cache.root).as_posix())
        if not before.objects:
            return dataclasses.replace(before, removed=removed, freed_bytes=file_bytes)
        for r in unused:
            cache.repo.delete_ref(r.ref)
        for p in files:
            fsroot.Root(cache.root).unlink(p.relative_to(cache.root).as_posix())
            with contextlib.suppress(OSError):  # its directory, once empty
                fsroot.Root(cache.root).rmdir(p.parent.relative_to(cache.root).as_posix())
        housekeeping.clear_ref_locks(cache.repo)
        cache.repo.prune_worktrees()
        housekeeping.gc(cache.repo, now=now)
        after = survey(cache, this)
    shrunk = _object_kib(before.objects) - _object_kib(after.objects)
    return dataclasses.replace(after, removed=removed, freed_bytes=file_bytes + max(0, shrunk) * 1024)


def _object_kib(counts: dict[str, int]) -> int:
    return counts.get("size", 0) + counts.get("size-pack", 0) + counts.get("size-garbage", 0)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Cleared:
    """What ``cache clear`` removed, and the unexported checkout commits it discarded (``--force``)."""

    path: str
    removed: tuple[str, ...]
    discarded: tuple[dict[str, Any], ...] = ()
    described: tuple[str, ...] = ()  # each of ``discarded`` in words

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "removed": list(self.removed), "discarded": list(self.discarded)}


def clear(cache: Cache, *, force: bool, unexported: list[Any]) -> Cleared:
    """Remove everything in the cache but its lock and the running command's temporary directory,
    under the cache's lock. ``unexported``: the work no patch file carries (``series.unexported``),
    which lives only here: refused unless ``force``."""
    if unexported and not force:
        raise UsageError(
            "the cache holds commits no patch file carries: "
            + "; ".join(u.describe() for u in unexported)
            + "; clearing it would lose them",
            hint="`patchtool export` (with --branch NAME for another branch) writes a checkout branch's commits "
            "into the series (put work held elsewhere on that branch first: `git switch`, `git cherry-pick`, "
            "`git stash pop`); `patchtool cache clear --force` discards them",
        )
    removed = []
    with cache.locked():
        if cache.root.is_dir():
            for entry in sorted(cache.root.iterdir()):
                if entry.name in ("lock", "tmp"):
                    continue
                fsroot.Root(cache.root).rmtree(entry.name)
                removed.append(entry.name)
        for p in _abandoned_tmp(cache):
            fsroot.Root(cache.root).rmtree(p.relative_to(cache.root).as_posix())
            removed.append(p.relative_to(cache.root).as_posix())
    return Cleared(
        path=str(cache.root),
        removed=tuple(removed),
        discarded=tuple(u.to_dict() for u in unexported),
        described=tuple(u.describe() for u in unexported),
    )

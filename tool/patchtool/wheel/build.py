"""Patched wheels: the pinned release wheel repacked with the series, or a build of the pinned commit.

``build_wheel`` reads as its steps: load the pin and the series, apply the series
in the cache (one commit per patch), name the result (``<upstream>+pt.<series
hash>``), then either repack the pinned release wheel (``use = "artifact"``) or
build the patched git checkout with the standard build frontend (``use = "git"``),
and write the wheel with its provenance into ``out`` in one rename at the end.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import fcntl
import hashlib
import io
import os
import re
import tempfile
import tomllib
import uuid
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from email.parser import HeaderParser
from pathlib import Path
from typing import Any, BinaryIO

from packaging.tags import Tag, parse_tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from patchtool import __version__, git, progress
from patchtool.errors import ApplyConflict, BuildError, InvalidInput, Problem, UpstreamError, UsageError
from patchtool.project.repository import LoadedPatch, Project
from patchtool.series.apply import apply_series
from patchtool.upstream.artifacts import damaged_as_error
from patchtool.upstream.cache import Base, Cache
from patchtool.upstream.pins import Pin
from patchtool.wheel import frontend, versionfile
from patchtool.wheel.archive import ArchiveWriter, Digest, date_time_of, safe_members
from patchtool.wheel.provenance import (
    DIST_INFO_FILE,
    PACKAGE_FILE,
    FileRecord,
    PatchRecord,
    Provenance,
    UpstreamSource,
    local_version,
    series_hash,
)
from patchtool.wheel.record import Payload, Row, installed_path

_SIGNATURES = ("RECORD", "RECORD.jws", "RECORD.p7s")  # rewritten, or invalid once anything changes


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class WheelName:
    """A wheel file name: ``{distribution}-{version}(-{build})?-{python}-{abi}-{platform}.whl``."""

    distribution: str  # as spelled in the file name
    version: Version
    build_tag: str | None
    tag_text: str  # "cp311-cp311-manylinux_2_34_x86_64"

    @classmethod
    def parse(cls, filename: str) -> WheelName:
        try:
            _, version, _, _ = parse_wheel_filename(filename)
        except InvalidWheelFilename as exc:
            raise UsageError(f"{filename!r} is not a wheel file name: {exc}") from None
        parts = filename[:-len(".whl")].split("-")
        return cls(distribution=parts[0], version=version,
                   build_tag=parts[2] if len(parts) == 6 else None, tag_text="-".join(parts[-3:]))

    @property
    def tags(self) -> frozenset[Tag]:
        return parse_tag(self.tag_text)

    def filename(self, version: Version) -> str:
        build = [self.build_tag] if self.build_tag else []
        return "-".join([self.distribution, str(version), *build, self.tag_text]) + ".whl"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Replacement:
    """New content for a member (``data`` None: the series deletes it)."""

    change: str  # "added" | "modified" | "deleted"
    data: bytes | None
    mode: int = 0o644


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Repacked:
    path: Path
    sha256: str
    size: int
    members: int
    copied: int  # compressed bytes copied unchanged
    written: int  # compressed by us: changed, added, rewritten metadata, provenance
    provenance: Provenance  # as written, with its payload


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BuildResult:
    pin: str
    way: str  # "repack" | "build"
    source: str  # the release wheel's file name, or the git url and commit
    wheel: Repacked
    provenance: Provenance
    warnings: tuple[str, ...] = ()  # what the build backend warned about

    def to_dict(self) -> dict[str, Any]:
        w = self.wheel
        return {"pin": self.pin, "way": self.way, "source": self.source, "wheel": str(w.path),
                "filename": w.path.name, "version": self.provenance.version,
                "series_hash": self.provenance.series_hash, "sha256": w.sha256, "size": w.size,
                "members": w.members, "copied": w.copied, "written": w.written,
                "warnings": list(self.warnings), "provenance": self.provenance.to_dict()}


def build_wheel(project: Project, cache: Cache, *, out: Path, pin_name: str | None = None,
                source_date_epoch: int | None = None, isolation: bool = True) -> BuildResult:
    """Build the patched wheel for a pin into ``out``; nothing is written there unless it succeeds."""
    pin = project.pin(pin_name)
    loaded = project.series()
    if pin.use == "artifact":
        art = pin.artifact
        assert art is not None
        if not art.is_wheel:
            raise UsageError(f"pin {pin.name} names {art.filename}, an sdist; repacking needs the release wheel",
                             hint="pin the wheel, or build from source with use = \"git\"")
        check_shipped(loaded, art.prefix_to, f"{art.filename} (it ships {art.prefix_to} as "
                                             f"{art.prefix_from or './'})")
    base = cache.ensure(pin)
    commits = _apply(cache, pin, base, loaded)
    prov = _provenance(pin, base, loaded, commits, source_date_epoch)
    changes = cache.repo.diff_tree(base.commit, prov.tip)
    if pin.use == "artifact":
        return _repack_release(cache, pin, changes, prov, out)
    return _build_from_git(cache, pin, base, loaded, changes, prov, out, isolation=isolation)


def _provenance(pin: Pin, base: Base, loaded: Sequence[LoadedPatch], commits: Sequence[str],
                source_date_epoch: int | None) -> Provenance:
    """The record of what goes in, and the version label its series hash gives (files come later)."""
    upstream = UpstreamSource.of(pin)
    shas = [hashlib.sha256(lp.path.read_bytes()).hexdigest() for lp in loaded]
    digest = series_hash(pin=pin.name, upstream=upstream, tool_version=__version__,
                         patches=[(lp.id, lp.entry.file, sha) for lp, sha in zip(loaded, shas, strict=True)],
                         source_date_epoch=source_date_epoch)
    records = tuple(PatchRecord(id=lp.id, file=lp.entry.file, sha256=sha, subject=lp.patch.subject, commit=c)
                    for lp, sha, c in zip(loaded, shas, commits, strict=True))
    return Provenance(tool_version=__version__, pin=pin.name, version=str(local_version(pin.version, digest)),
                      series_hash=digest, upstream=upstream, base=base.commit,
                      tip=commits[-1] if commits else base.commit, patches=records, files=(),
                      source_date_epoch=source_date_epoch)


def check_shipped(loaded: Sequence[LoadedPatch], prefix: str, what: str) -> None:
    """Every path a patch touches must be under ``prefix``, the part of the tree the wheel ships."""
    problems = []
    for lp in loaded:
        for f in lp.patch.files:
            for path in dict.fromkeys(p for p in (f.source, f.path) if p):
                if not path.startswith(prefix):
                    problems.append(Problem(
                        file=lp.entry.file, patch=lp.id, code="not-shipped",
                        message=f"changes {path}, which the wheel does not ship: {what}",
                        hint="a wheel carries only the package; keep such changes out of the series"))
    if problems:
        raise InvalidInput(problems[0].render() if len(problems) == 1 else
                           f"{len(problems)} changes to files the wheel does not ship", problems=problems)


def _apply(cache: Cache, pin: Pin, base: Base, loaded: Sequence[LoadedPatch]) -> list[str]:
    """The series applied in the cache: one commit per patch, in order."""
    result = apply_series(cache.repo, base.commit, loaded, commit=True)
    if not result.ok:
        failed = result.failed
        assert failed is not None
        data = {"pin": pin.name, "base": base.commit, "patches": [r.to_dict() for r in result.results]}
        raise ApplyConflict(f"patch {failed.id} ({failed.file}) does not apply at {pin.name}; no wheel built",
                            result=result, data=data, hint="run `patchtool apply --keep-failed` to debug it")
    return [r.commit for r in result.results if r.commit]


def _mode(git_mode: str, path: str) -> int:
    if git_mode not in ("100644", "100755"):
        raise BuildError(f"the series makes {path} a {'symbolic link' if git_mode == '120000' else 'non-file'} "
                         f"(mode {git_mode}); a wheel can carry only regular files")
    return 0o755 if git_mode == "100755" else 0o644


# -- way (a): repack the pinned release wheel ------------------------------------------------

def _repack_release(cache: Cache, pin: Pin, changes: Sequence[git.TreeChange], prov: Provenance,
                    out: Path) -> BuildResult:
    art = pin.artifact
    assert art is not None
    source = cache.artifact_path(pin)  # verified against the pin's sha256
    blobs = cache.repo.cat_files(prov.tip, [c.path for c in changes if c.status != "D"])
    replace: dict[str, Replacement] = {}
    files = []
    for c in changes:
        wheel_path = art.prefix_from + c.path[len(art.prefix_to):]
        data = blobs.get(c.path)
        change = {"A": "added", "D": "deleted"}.get(c.status, "modified")
        mode = _mode(c.new_mode, c.path) if data is not None else 0o644
        replace[wheel_path] = Replacement(change=change, data=data, mode=mode)
        files.append(FileRecord(path=c.path, change=change, wheel_path=wheel_path,
                                sha256=hashlib.sha256(data).hexdigest() if data is not None else None))
    package_copy = art.prefix_from + PACKAGE_FILE if art.prefix_from else None
    prov = dataclasses.replace(prov, files=tuple(files), package_copy=package_copy)
    when = date_time_of(prov.source_date_epoch) if prov.source_date_epoch is not None else None
    repacked = repack(source, out, name=WheelName.parse(art.filename), version=Version(prov.version),
                      replace=replace, provenance=prov, date_time=when)
    return BuildResult(pin=pin.name, way="repack", source=art.filename, wheel=repacked,
                       provenance=repacked.provenance)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Layout:
    """Where a wheel keeps its metadata, checked against what its file name says."""

    dist_info: str  # "sglang-0.5.23.dist-info"
    stem: str  # "sglang-0.5.23": also names the optional .data directory
    metadata: bytes
    newest: tuple[int, ...]  # the newest member timestamp

    @classmethod
    def read(cls, zf: zipfile.ZipFile, members: Sequence[zipfile.ZipInfo], name: WheelName,
             label: str) -> _Layout:
        infos = sorted({m.filename.split("/", 1)[0] for m in members if "/" in m.filename
                        and m.filename.split("/", 1)[0].endswith(".dist-info")})
        if len(infos) != 1:
            raise UpstreamError(f"{label}: expected one .dist-info directory, found {len(infos)}; refusing it")
        stem = infos[0][:-len(".dist-info")]
        dist, _, ver = stem.rpartition("-")
        expected = f"{name.distribution} {name.version}"
        if canonicalize_name(dist) != canonicalize_name(name.distribution) or _version(ver) != name.version:
            raise UpstreamError(f"{label}: its metadata directory is {infos[0]}, but the file name says "
                                f"{expected}; refusing it")
        names = {m.filename for m in members}
        metadata = zf.read(f"{infos[0]}/METADATA") if f"{infos[0]}/METADATA" in names else b""
        headers = HeaderParser().parsestr(metadata.decode("utf-8", "replace"))
        meta_name, meta_version = headers.get("Name") or "", headers.get("Version") or ""
        if (canonicalize_name(meta_name) != canonicalize_name(name.distribution)
                or _version(meta_version) != name.version):
            raise UpstreamError(f"{label} contains {meta_name or '?'} {meta_version or '?'} (its METADATA), "
                                f"not {expected}; refusing it", hint="the pin names the wrong file")
        wheel_file = zf.read(f"{infos[0]}/WHEEL") if f"{infos[0]}/WHEEL" in names else b""
        tags = frozenset(t for line in HeaderParser().parsestr(wheel_file.decode("utf-8", "replace"))
                         .get_all("Tag", []) for t in parse_tag(line.strip()))
        if tags != name.tags:
            found = ", ".join(sorted(str(t) for t in tags)) or "none"
            raise UpstreamError(f"{label}: its WHEEL file says tags {found}, but its file name says "
                                f"{name.tag_text}; refusing it (a wheel for another platform?)")
        newest = max((m.date_time for m in members), default=(1980, 1, 1, 0, 0, 0))
        return cls(dist_info=infos[0], stem=stem, metadata=metadata, newest=newest)


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def rewrite_version(metadata: bytes, version: Version) -> bytes:
    """METADATA with its one ``Version:`` header replaced; the body and line endings kept."""
    head, sep, body = _split_headers(metadata)
    new, n = re.subn(rb"^Version:[ \t]*[^\r\n]*", b"Version: " + str(version).encode(), head,
                     count=2, flags=re.MULTILINE)
    if n != 1:
        raise UpstreamError(f"METADATA has {n} Version headers, expected one; refusing it")
    return new + sep + body


def _split_headers(metadata: bytes) -> tuple[bytes, bytes, bytes]:
    m = re.search(rb"\r?\n\r?\n", metadata)
    if m is None:
        return metadata, b"", b""
    return metadata[:m.start()], metadata[m.start():m.end()], metadata[m.end():]


def repack(source: Path, out: Path, *, name: WheelName, version: Version,
           replace: Mapping[str, Replacement], provenance: Provenance,
           date_time: tuple[int, ...] | None = None, restamp: bool = False) -> Repacked:
    """Write ``source`` with ``replace`` applied, the new version and ``provenance`` (with the
    payload it now describes), into ``out``.

    Unchanged members are copied compressed; their content is still hashed for RECORD.
    New members get ``date_time`` (default: the newest timestamp in ``source``); with
    ``restamp``, copied members get it too. Entries are sorted, ``.dist-info`` last,
    RECORD at the very end.
    """
    label = source.name
    with damaged_as_error(label), zipfile.ZipFile(source) as zf, open(source, "rb") as raw:
        members = safe_members(zf, label)
        layout = _Layout.read(zf, members, name, label)
        when = tuple(date_time) if date_time is not None else layout.newest
        new_stem = f"{layout.stem.rpartition('-')[0]}-{version}"
        new_info = f"{new_stem}.dist-info"
        renames = {layout.dist_info: new_info, f"{layout.stem}.data": f"{new_stem}.data"}

        def renamed(member: str) -> str:
            top, sep, rest = member.partition("/")
            return renames.get(top, top) + sep + rest if sep else member

        plan: dict[str, zipfile.ZipInfo | tuple[bytes, int]] = {}
        pending = dict(replace)
        for info in members:
            top, _, rest = info.filename.partition("/")
            if top == layout.dist_info and rest in _SIGNATURES:
                continue
            rep = pending.pop(info.filename, None)
            if rep is not None:
                if rep.change == "added":
                    raise BuildError(f"the series adds {info.filename}, but {label} already has it")
                if rep.data is not None:
                    plan[info.filename] = (rep.data, rep.mode)
                continue
            if info.filename == f"{layout.dist_info}/METADATA":
                plan[renamed(info.filename)] = (rewrite_version(layout.metadata, version),
                                                (info.external_attr >> 16) & 0o7777 or 0o644)
                continue
            plan[renamed(info.filename)] = info
        for path, rep in pending.items():
            if rep.change != "added" or rep.data is None:
                raise BuildError(f"the series changes {path}, which {label} does not ship")
            plan[path] = (rep.data, rep.mode)
        rewritten = versionfile.restate(plan, zf, name.version, version)  # pkg.__version__ as METADATA
        if rewritten:
            provenance = dataclasses.replace(provenance, files=versionfile.restated_files(provenance.files, rewritten))
        record_name = f"{new_info}/RECORD"
        copies = [f"{new_info}/{DIST_INFO_FILE}"] + ([provenance.package_copy] if provenance.package_copy else [])
        for path in copies:
            if path in plan:
                raise BuildError(f"{label} already has {path}; refusing to overwrite it with the provenance record")
        provenance = dataclasses.replace(provenance, payload=_payload(zf, plan, dist_info=new_info,
                                                                      package_copy=provenance.package_copy))
        for path in copies:
            plan[path] = (provenance.to_bytes(), 0o644)
        order = sorted(plan, key=lambda p: (p.partition("/")[0] == new_info, p))
        with _atomic(out, name.filename(version)) as (fh, final):
            writer = ArchiveWriter(fh, label)
            rows: list[tuple[str, str, str]] = []
            copied = written = 0
            for path in progress.track(order, f"write {name.filename(version)}", unit="members"):
                item = plan[path]
                digest: Digest
                if isinstance(item, zipfile.ZipInfo):
                    digest = writer.copy(raw, item, name=path, date_time=when if restamp else None)
                    copied += 1
                else:
                    digest = writer.add(path, item[0], date_time=when, mode=item[1])
                    written += 1
                rows.append((path, digest.record_hash, str(digest.size)))
            rows.append((record_name, "", ""))
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows(rows)
            writer.add(record_name, buf.getvalue().encode(), date_time=when, mode=0o644)
            sha = writer.finish()
            size = writer.out.offset
    return Repacked(path=final, sha256=sha, size=size, members=len(rows), copied=copied, written=written + 1,
                    provenance=provenance)


def _payload(zf: zipfile.ZipFile, plan: Mapping[str, zipfile.ZipInfo | tuple[bytes, int]], *, dist_info: str,
             package_copy: str | None) -> Payload:
    """The payload the wheel will carry: its members' RECORD rows at their installed paths. Copied
    members are read once more for it: the provenance record is written before most of them."""
    rows = []
    for path, item in plan.items():
        where = installed_path(path, dist_info=dist_info)
        if where is None or where == package_copy:
            continue
        h, size = hashlib.sha256(), 0
        if isinstance(item, zipfile.ZipInfo):
            with zf.open(item) as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
                    size += len(chunk)
        else:
            h.update(item[0])
            size = len(item[0])
        rows.append(Row(path=where, hash=Digest(h.digest(), size).record_hash, size=str(size)))
    return Payload.of(rows)


_PART = re.compile(r"^\..+\.whl\.[0-9a-f]{8}\.part$")  # what _atomic writes before the rename


@contextlib.contextmanager
def _atomic(out: Path, filename: str) -> Iterator[tuple[Any, Path]]:
    """A file that appears in ``out`` as ``filename`` only when the block succeeds. The partial
    file is locked while it is written; one left by a killed build is unlocked, and removed here."""
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    _remove_stale_parts(out)
    final = out / filename
    fh, part = _locked_part(out, filename)
    try:
        with fh:
            yield fh, final.absolute()
        os.replace(part, final)
    except BaseException:
        part.unlink(missing_ok=True)
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()
        raise


def _locked_part(out: Path, filename: str) -> tuple[BinaryIO, Path]:
    """A new partial file in ``out``, open and locked. A cleaner may take the lock between the
    open and the lock and remove the file: then it is no longer there once ours is held, so try
    another name."""
    while True:
        part = out / f".{filename}.{uuid.uuid4().hex[:8]}.part"
        fh = open(part, "xb")
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            if os.stat(part).st_ino == os.fstat(fh.fileno()).st_ino:
                return fh, part
        except FileNotFoundError:
            pass
        fh.close()


def _remove_stale_parts(out: Path) -> None:
    """Remove the partial wheels of builds that died: no process holds their lock any more."""
    for part in out.iterdir():
        if not _PART.match(part.name) or not part.is_file() or part.is_symlink():
            continue
        try:
            with open(part, "rb") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                part.unlink()
        except OSError:  # BlockingIOError: a build running now is writing it
            continue


# -- way (b): build the patched git checkout ---------------------------------------------------

def find_project_dir(repo: git.Repo, tree: str, distribution: str) -> str:
    """The directory ("" or "python/") whose pyproject.toml names ``distribution``."""
    candidates = sorted((p for p in repo.tree_paths(tree) if p.endswith("pyproject.toml")
                         and p.count("/") <= 1 and p.rpartition("/")[2] == "pyproject.toml"),
                        key=lambda p: (p.count("/"), p))
    contents = repo.cat_files(tree, candidates)
    for path in candidates:
        try:
            data = tomllib.loads((contents[path] or b"").decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            continue
        project = data.get("project")
        name = project.get("name") if isinstance(project, dict) else None
        if isinstance(name, str) and canonicalize_name(name) == canonicalize_name(distribution):
            return path[:-len("pyproject.toml")]
    raise BuildError(f"no pyproject.toml at the top of the tree or one directory down names {distribution}",
                     hint="the git source must be the project that builds the pinned distribution")


def _build_from_git(cache: Cache, pin: Pin, base: Base, loaded: Sequence[LoadedPatch],
                    changes: Sequence[git.TreeChange], prov: Provenance, out: Path, *,
                    isolation: bool) -> BuildResult:
    src = pin.git
    assert src is not None
    project_dir = find_project_dir(cache.repo, base.tree, pin.upstream)
    check_shipped(loaded, project_dir, f"the wheel is built from {project_dir or './'}")
    epoch = prov.source_date_epoch
    if epoch is None:
        epoch = cache.repo.commit_time(base.commit)
    with tempfile.TemporaryDirectory(prefix="patchtool-build-") as tmp:
        checkout = Path(tmp) / "src"
        cache.repo.worktree_add(checkout, prov.tip)
        try:
            with progress.task(f"build {pin.upstream} {prov.version} from {src.tag}"):
                built, notes = frontend.build_wheel(
                    checkout / project_dir, Path(tmp) / "dist", isolation=isolation,
                    env={"SETUPTOOLS_SCM_PRETEND_VERSION": prov.version, "SOURCE_DATE_EPOCH": str(epoch)})
        finally:
            cache.repo.worktree_remove(checkout)
        name = WheelName.parse(built.name)
        if canonicalize_name(name.distribution) != canonicalize_name(pin.upstream) or \
                name.version.public != pin.version.public:
            raise BuildError(f"the build produced {built.name}, not {pin.upstream} {pin.version}",
                             hint="the git source builds another distribution or version")
        files, package = _built_files(cache.repo, prov.tip, built, changes, project_dir, pin.upstream)
        package_copy = f"{package}/{PACKAGE_FILE}" if package else None
        prov = dataclasses.replace(prov, files=files, package_copy=package_copy)
        repacked = repack(built, out, name=name, version=Version(prov.version), replace={}, provenance=prov,
                          date_time=date_time_of(epoch), restamp=True)
    return BuildResult(pin=pin.name, way="build", source=f"{src.url} {src.commit}", wheel=repacked,
                       provenance=repacked.provenance, warnings=notes)


def _built_files(repo: git.Repo, tip: str, built: Path, changes: Sequence[git.TreeChange], project_dir: str,
                 distribution: str) -> tuple[tuple[FileRecord, ...], str | None]:
    """Where the built wheel holds each changed file, checked to be the patched bytes."""
    blobs = repo.cat_files(tip, [c.path for c in changes if c.status != "D"])
    with zipfile.ZipFile(built) as zf:
        names = set(zf.namelist())
        tops = {n.split("/", 1)[0] for n in names if "/" in n}
        records = []
        for c in changes:
            rel = c.path[len(project_dir):]
            candidates = [rel] + ([rel[len("src/"):]] if rel.startswith("src/") else [])
            data = blobs.get(c.path)
            change = {"A": "added", "D": "deleted"}.get(c.status, "modified")
            if data is None:
                where = next((p for p in candidates if p.split("/", 1)[0] in tops and "/" in p), None)
                if where is not None and where in names:
                    raise BuildError(f"the built wheel still contains {where}, which the series deletes")
                records.append(FileRecord(path=c.path, change=change, wheel_path=where))
                continue
            _mode(c.new_mode, c.path)
            where = next((p for p in candidates if p in names), None)
            if where is not None and zf.read(where) != data:
                raise BuildError(f"the built wheel's {where} differs from the patched {c.path}",
                                 hint="the build backend rewrites this file; patch its source instead")
            records.append(FileRecord(path=c.path, change=change, wheel_path=where,
                                      sha256=hashlib.sha256(data).hexdigest()))
    package = canonicalize_name(distribution).replace("-", "_")
    return tuple(records), package if package in tops else None

"""Patched wheels: the pinned release wheel repacked with the series, or a build of the pinned commit.

``build_wheel`` reads as its steps: load the pin and the series, apply the series
in the cache (one commit per patch), name the result (``<upstream>+pt.<series
hash>``), then either repack the pinned release wheel (``use = "artifact"``) or
build the patched git checkout with the standard build frontend (``use = "git"``),
and write the wheel with its provenance into ``out`` in one rename at the end
(``patchtool.wheel.repack``, which both ways end with).
"""

from __future__ import annotations

import dataclasses
import hashlib
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import Version

from patchtool import __version__, git, progress
from patchtool.errors import ApplyConflict, BuildError, InvalidInput, Problem, UsageError
from patchtool.project.pins import Pin
from patchtool.project.repository import LoadedPatch, Project
from patchtool.series.apply import SeriesAtPin, apply_series
from patchtool.upstream.cache import Base, Cache
from patchtool.upstream.members import open_zip
from patchtool.wheel import frontend
from patchtool.wheel.archive import date_time_of
from patchtool.wheel.provenance import (
    PACKAGE_FILE,
    FileChange,
    FileRecord,
    PatchRecord,
    Provenance,
    UpstreamSource,
    local_version,
    series_hash,
)
from patchtool.wheel.repack import Repacked, Replacement, WheelName, repack


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BuildResult:
    pin: str
    way: str  # "repack" | "build"
    source: str  # the release wheel's file name, or the git url and commit
    wheel: Repacked
    warnings: tuple[str, ...] = ()  # what the build backend warned about

    @property
    def provenance(self) -> Provenance:
        return self.wheel.provenance

    def to_dict(self) -> dict[str, Any]:
        w = self.wheel
        return {
            "pin": self.pin,
            "way": self.way,
            "source": self.source,
            "wheel": str(w.path),
            "filename": w.path.name,
            "version": self.provenance.version,
            "series_hash": self.provenance.series_hash,
            "sha256": w.sha256,
            "size": w.size,
            "members": w.members,
            "copied": w.copied,
            "written": w.written,
            "warnings": list(self.warnings),
            "provenance": self.provenance.to_dict(),
        }


def build_wheel(
    project: Project,
    cache: Cache,
    *,
    out: Path,
    pin_name: str | None = None,
    source_date_epoch: int | None = None,
    isolation: bool = True,
    confined: bool = True,
    from_sdist: bool = False,
) -> BuildResult:
    """Build the patched wheel for a pin into ``out``; nothing is written there unless it succeeds.
    ``confined``: a git pin's build backend, someone else's code, runs in a Landlock sandbox
    (``frontend.build_wheel``); so does an sdist pin's, which runs only where ``from_sdist`` says so."""
    pin = project.pin(pin_name)
    loaded = project.series()
    sdist = pin.use == "artifact" and pin.artifact is not None and not pin.artifact.is_wheel
    if from_sdist and not sdist:
        raise UsageError(
            f"--from-sdist builds an sdist pin's patched tree, and pin {pin.name} is no sdist pin",
            hint="leave it out: a wheel pin is repacked, a git pin built from its commit",
        )
    if pin.use == "artifact":
        art = pin.artifact
        assert art is not None
        if sdist and not from_sdist:
            raise UsageError(
                f"pin {pin.name} names {art.filename}, an sdist; repacking needs the release wheel",
                hint=f"move the series onto the release's wheel: `patchtool rebase --to {pin.version} --wheel` "
                f"(or `patchtool pin add {pin.version} --wheel` and `build --pin` it); or `build --from-sdist` "
                "runs upstream's build backend on the patched sdist, confined",
            )
        if sdist:
            project_dir = _sdist_project_dir(pin)
            check_shipped(loaded, project_dir, f"the wheel is built from {art.filename}'s tree, {project_dir or './'}")
        else:
            check_shipped(
                loaded, art.prefix_to, f"{art.filename} (it ships {art.prefix_to} as {art.prefix_from or './'})"
            )
    base = cache.ensure(pin)
    prov = _provenance(pin, base, loaded, _apply(cache, pin, base, loaded), source_date_epoch)
    changes = cache.repo.diff_tree(base.commit, prov.tip)
    if pin.use == "artifact" and not sdist:
        return _repack_release(cache, pin, changes, prov, out)
    return _build_tree(cache, pin, base, loaded, changes, prov, out, isolation=isolation, confined=confined)


def _provenance(
    pin: Pin, base: Base, loaded: Sequence[LoadedPatch], commits: Sequence[str], source_date_epoch: int | None
) -> Provenance:
    """The record of what goes in, and the version label its series hash gives (files come later)."""
    upstream = UpstreamSource.of(pin)
    shas = [hashlib.sha256(lp.path.read_bytes()).hexdigest() for lp in loaded]
    digest = series_hash(
        pin=pin.name,
        upstream=upstream,
        tool_version=__version__,
        patches=[(lp.id, lp.entry.file, sha) for lp, sha in zip(loaded, shas, strict=True)],
        source_date_epoch=source_date_epoch,
    )
    records = tuple(
        PatchRecord(id=lp.id, file=lp.entry.file, sha256=sha, subject=lp.patch.subject, commit=c)
        for lp, sha, c in zip(loaded, shas, commits, strict=True)
    )
    return Provenance(
        tool_version=__version__,
        pin=pin.name,
        version=str(local_version(pin.version, digest)),
        series_hash=digest,
        upstream=upstream,
        base=base.commit,
        tip=commits[-1] if commits else base.commit,
        patches=records,
        files=(),
        source_date_epoch=source_date_epoch,
    )


def check_shipped(loaded: Sequence[LoadedPatch], prefix: str, what: str) -> None:
    """Every path a patch touches must be under ``prefix``, the part of the tree the wheel ships."""
    problems = [
        Problem(
            file=lp.entry.file,
            patch=lp.id,
            code="not-shipped",
            message=f"changes {path}, which the wheel does not ship: {what}",
            hint="a wheel carries only the package; keep such changes out of the series",
        )
        for lp in loaded
        for f in lp.patch.files
        for path in dict.fromkeys(p for p in (f.source, f.path) if p)
        if not path.startswith(prefix)
    ]
    if problems:
        raise InvalidInput(
            problems[0].render() if len(problems) == 1 else f"{len(problems)} changes to files the wheel does not ship",
            problems=problems,
        )


def _apply(cache: Cache, pin: Pin, base: Base, loaded: Sequence[LoadedPatch]) -> list[str]:
    """The series applied in the cache: one commit per patch, in order."""
    if not (result := apply_series(cache.repo, base.commit, loaded, commit=True)).ok:
        failed = result.failed
        assert failed is not None
        raise ApplyConflict(
            f"patch {failed.id} ({failed.file}) does not apply at {pin.name}; no wheel built",
            result=result,
            data=SeriesAtPin(pin=pin.name, series=result),
            hint="run `patchtool apply --keep-failed` to debug it",
        )
    return [r.commit for r in result.results if r.commit]


def _sha256(data: bytes | None) -> str | None:
    return hashlib.sha256(data).hexdigest() if data is not None else None


def _mode(git_mode: str, path: str) -> int:
    if git_mode not in ("100644", "100755"):
        raise BuildError(
            f"the series makes {path} a {'symbolic link' if git_mode == '120000' else 'non-file'} "
            f"(mode {git_mode}); a wheel can carry only regular files"
        )
    return 0o755 if git_mode == "100755" else 0o644


# -- way (a): repack the pinned release wheel ------------------------------------------------


def _repack_release(
    cache: Cache, pin: Pin, changes: Sequence[git.TreeChange], prov: Provenance, out: Path
) -> BuildResult:
    art = pin.artifact
    assert art is not None
    source = cache.artifact_path(pin)  # verified against the pin's sha256
    blobs = cache.repo.cat_files(prov.tip, [c.path for c in changes if c.status != "D"])
    replace: dict[str, Replacement] = {}
    files = []
    for c in changes:
        wheel_path = art.prefix_from + c.path[len(art.prefix_to) :]
        data = blobs.get(c.path)
        change = FileChange.of(c.status)
        mode = _mode(c.new_mode, c.path) if data is not None else 0o644
        replace[wheel_path] = Replacement(change=change, data=data, mode=mode)
        files.append(FileRecord(path=c.path, change=change, wheel_path=wheel_path, sha256=_sha256(data)))
    package_copy = art.prefix_from + PACKAGE_FILE if art.prefix_from else None
    prov = dataclasses.replace(prov, files=tuple(files), package_copy=package_copy)
    repacked = repack(
        source,
        out,
        name=WheelName.parse(art.filename),
        version=Version(prov.version),
        replace=replace,
        provenance=prov,
        date_time=date_time_of(prov.source_date_epoch) if prov.source_date_epoch is not None else None,
    )
    return BuildResult(pin=pin.name, way="repack", source=art.filename, wheel=repacked)


# -- ways (b) and (c): build the patched git checkout, or the patched sdist by explicit choice ----


def find_project_dir(repo: git.Repo, tree: str, distribution: str) -> str:
    """The directory ("" or "python/") whose pyproject.toml names ``distribution``."""
    found = [p for p in repo.tree_paths(tree) if p.count("/") <= 1 and p.rpartition("/")[2] == "pyproject.toml"]
    candidates = sorted(found, key=lambda p: (p.count("/"), p))
    contents = repo.cat_files(tree, candidates)
    for path in candidates:
        try:
            data = tomllib.loads((contents[path] or b"").decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            continue
        project = data.get("project")
        name = project.get("name") if isinstance(project, dict) else None
        if isinstance(name, str) and canonicalize_name(name) == canonicalize_name(distribution):
            return path[: -len("pyproject.toml")]
    raise BuildError(
        f"no pyproject.toml at the top of the tree or one directory down names {distribution}",
        hint="the git source must be the project that builds the pinned distribution",
    )


def _sdist_project_dir(pin: Pin) -> str:
    """Where the sdist's top directory is in the tree: its ``prefix.to``, for a pin that imports
    the whole sdist (its ``prefix.from`` is one top directory); another pin holds no project to build."""
    art = pin.artifact
    assert art is not None
    if not (top := art.prefix_from) or top.count("/") != 1:
        raise UsageError(
            f"pin {pin.name} imports {top or './'} of {art.filename}, not its top directory: "
            "its tree is not a project a build backend can build",
            hint=f'pin the whole sdist (prefix.from = "{art.distribution}-{{version}}/", as init does), '
            f"or its wheel: `patchtool rebase --to {pin.version} --wheel`",
        )
    return art.prefix_to


def _build_tree(
    cache: Cache,
    pin: Pin,
    base: Base,
    loaded: Sequence[LoadedPatch],
    changes: Sequence[git.TreeChange],
    prov: Provenance,
    out: Path,
    *,
    isolation: bool,
    confined: bool,
) -> BuildResult:
    """The patched tree (a git pin's commit, or an sdist pin's tree by explicit choice) checked out
    and built by its own backend (confined), then written as a repack is: provenance added, the
    version restamped."""
    from patchtool.upstream.artifacts import newest_mtime

    epoch = prov.source_date_epoch
    if pin.use == "artifact":
        art = pin.artifact
        assert art is not None
        project_dir, source, origin = _sdist_project_dir(pin), str(art.filename), str(art.filename)
        if epoch is None:
            with cache.locked():
                epoch = newest_mtime(cache.artifact_path(pin), art)
    else:
        src = pin.git
        assert src is not None
        project_dir = find_project_dir(cache.repo, base.tree, pin.upstream)
        check_shipped(loaded, project_dir, f"the wheel is built from {project_dir or './'}")
        source, origin = f"{src.url} {src.commit}", src.tag
        if epoch is None:
            epoch = cache.repo.commit_time(base.commit)
    task = f"build {pin.upstream} {prov.version} from {origin}"
    with tempfile.TemporaryDirectory(prefix="patchtool-build-") as tmp:
        checkout = Path(tmp) / "src"
        cache.repo.worktree_add(checkout, prov.tip)
        try:
            with progress.task(task):
                built, notes = frontend.build_wheel(
                    checkout / project_dir,
                    Path(tmp) / "dist",
                    isolation=isolation,
                    confined=confined,
                    reads=(checkout, cache.repo.git_dir),  # a file finder (setuptools-scm) asks git what is tracked
                    env={"SETUPTOOLS_SCM_PRETEND_VERSION": prov.version, "SOURCE_DATE_EPOCH": str(epoch)},
                )
        finally:
            cache.repo.worktree_remove(checkout)
        name = WheelName.parse(built.name)
        if (
            canonicalize_name(name.distribution) != canonicalize_name(pin.upstream)
            or name.version.public != pin.version.public
        ):
            raise BuildError(
                f"the build produced {built.name}, not {pin.upstream} {pin.version}",
                hint=f"{'the git source' if pin.use == 'git' else source} builds another distribution or version",
            )
        files, package = _built_files(cache.repo, prov.tip, built, changes, project_dir, pin.upstream)
        prov = dataclasses.replace(prov, files=files, package_copy=f"{package}/{PACKAGE_FILE}" if package else None)
        repacked = repack(
            built,
            out,
            name=name,
            version=Version(prov.version),
            replace={},
            provenance=prov,
            date_time=date_time_of(epoch),
            restamp=True,
        )
    return BuildResult(pin=pin.name, way="build", source=source, wheel=repacked, warnings=notes)


def _built_files(
    repo: git.Repo, tip: str, built: Path, changes: Sequence[git.TreeChange], project_dir: str, distribution: str
) -> tuple[tuple[FileRecord, ...], str | None]:
    """Where the built wheel holds each changed file, checked to be the patched bytes."""
    blobs = repo.cat_files(tip, [c.path for c in changes if c.status != "D"])
    with open_zip(built, built.name, error=BuildError) as zf:
        names = set(zf.namelist())
        tops = {n.split("/", 1)[0] for n in names if "/" in n}
        records = []
        for c in changes:
            rel = c.path[len(project_dir) :]
            candidates = [rel] + ([rel[len("src/") :]] if rel.startswith("src/") else [])
            if (data := blobs.get(c.path)) is None:
                where = next((p for p in candidates if p.split("/", 1)[0] in tops and "/" in p), None)
                if where is not None and where in names:
                    raise BuildError(f"the built wheel still contains {where}, which the series deletes")
            else:
                _mode(c.new_mode, c.path)
                where = next((p for p in candidates if p in names), None)
                if where is not None and zf.read(where) != data:
                    raise BuildError(
                        f"the built wheel's {where} differs from the patched {c.path}",
                        hint="the build backend rewrites this file; patch its source instead",
                    )
            change = FileChange.of(c.status)
            records.append(FileRecord(path=c.path, change=change, wheel_path=where, sha256=_sha256(data)))
    package = canonicalize_name(distribution).replace("-", "_")
    return tuple(records), package if package in tops else None

"""What a patched wheel contains, recorded inside it and read back from a wheel or an install.

The record names the upstream (and how it was verified), every patch with the
sha256 of its file, and every file the series changed with its new sha256. The
series hash, which the local version label carries, is computed from exactly the
inputs that determine the wheel's bytes, so the same inputs always give the same
label and the same label means the same wheel.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import importlib.metadata
import json
import os
import zipfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import Version

from patchtool import paths
from patchtool.errors import ExitCode, InvalidInput, PatchtoolError, Problem, UsageError
from patchtool.inputs import loads_json
from patchtool.project.fields import MAX_SCHEMA, Fields, raise_if
from patchtool.project.pins import Pin
from patchtool.upstream.artifacts import damage, damaged_as_error
from patchtool.upstream.members import open_zip, safe_members
from patchtool.wheel import record as wheelrecord
from patchtool.wheel.archive import LAST_EPOCH

SCHEMA = 1
LAYOUT = 2  # bump when the wheel layout patchtool writes changes: it changes every label
# 2: the package's version.py/_version.py state the patched version (wheel/versionfile.py)
DIST_INFO_FILE = "patchtool-provenance.json"
PACKAGE_FILE = "_patchtool_provenance.json"
MAX_PAYLOAD_FILES = 1_000_000  # files a wheel's payload may count: far above any real wheel's
LABEL_PREFIX = "pt"
_NOT_THE_BUILD = "this is not the build the record describes"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpstreamSource:
    """The pinned upstream as the pin identifies it: by artifact hash or by git commit."""

    name: str
    version: str
    source: str  # "artifact" | "git"
    filename: str | None = None
    sha256: str | None = None
    url: str | None = None
    tag: str | None = None
    commit: str | None = None

    @classmethod
    def of(cls, pin: Pin) -> UpstreamSource:
        if pin.use == "artifact":
            art = pin.artifact
            assert art is not None
            return cls(
                name=pin.upstream,
                version=str(pin.version),
                source="artifact",
                filename=art.filename,
                sha256=art.sha256,
                url=art.url.text if art.url else None,
            )
        src = pin.git
        assert src is not None
        return cls(
            name=pin.upstream, version=str(pin.version), source="git", url=src.url.text, tag=src.tag, commit=src.commit
        )

    @classmethod
    def read(cls, f: Fields) -> UpstreamSource:
        out = cls(
            name=f.string("name") or "",
            version=f.string("version") or "",
            source=f.choice("source", ("artifact", "git")) or "",
            filename=f.string("filename", required=False),
            sha256=f.string("sha256", required=False),
            url=f.string("url", required=False),
            tag=f.string("tag", required=False),
            commit=f.string("commit", required=False),
        )
        f.done()
        return out

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PatchRecord:
    id: str
    file: str
    sha256: str  # of the patch file's bytes
    subject: str
    commit: str  # the deterministic commit apply_series made for it

    @classmethod
    def read(cls, f: Fields) -> PatchRecord:
        out = cls(**{field.name: f.string(field.name) or "" for field in dataclasses.fields(cls)})
        f.done()
        return out


class FileChange(enum.StrEnum):
    """What the series did to a file."""

    ADDED = "added"
    MODIFIED = "modified"
    DELETED = "deleted"

    @classmethod
    def of(cls, status: str) -> FileChange:
        """The change a ``git diff-tree`` status letter stands for (a rename or copy modifies)."""
        return {"A": cls.ADDED, "D": cls.DELETED}.get(status, cls.MODIFIED)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FileRecord:
    """A file the series changed: its repository path, where the wheel holds it, its new hash."""

    path: str
    change: FileChange
    wheel_path: str | None = None  # None: the wheel does not ship it (a build file)
    sha256: str | None = None  # None when deleted

    @classmethod
    def read(cls, f: Fields) -> FileRecord | None:
        """The record, or None where ``change`` is not one (``f`` holds the problem)."""
        path, change = f.string("path") or "", f.choice("change", tuple(FileChange))
        wheel_path, sha256 = f.string("wheel_path", required=False), f.string("sha256", required=False)
        f.done()
        if change is None:
            return None
        return cls(path=path, change=FileChange(change), wheel_path=wheel_path, sha256=sha256)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None} | {"change": str(self.change)}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Provenance:
    tool_version: str
    pin: str
    version: str  # the wheel's version, with the series label
    series_hash: str
    upstream: UpstreamSource
    base: str  # the upstream commit in the cache
    tip: str  # the commit of the last patch
    patches: tuple[PatchRecord, ...]
    files: tuple[FileRecord, ...]
    package_copy: str | None = None  # this record's copy inside the package, if any
    source_date_epoch: int | None = None
    payload: wheelrecord.Payload | None = None  # the installed files as built (records before it lack it)
    schema: int = SCHEMA

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str) -> Provenance:
        problems: list[Problem] = []
        f = Fields(data, "", problems)
        if (schema := f.integer("schema", maximum=MAX_SCHEMA)) is not None and schema != SCHEMA:
            f.problem("schema", f"unsupported provenance schema {schema}")
        tool = f.table("tool")
        tool_version = ""
        if tool is not None:
            if tool.string("name") not in (None, "patchtool"):
                tool.problem("name", "not written by patchtool")
            tool_version = tool.string("version") or ""
            tool.done()
        pin, version, series_hash = f.string("pin"), f.string("version"), f.string("series_hash")
        up = f.table("upstream")
        upstream = UpstreamSource.read(up) if up is not None else None
        base, tip = f.string("base"), f.string("tip")
        package_copy = f.string("package_copy", required=False)
        epoch = f.integer("source_date_epoch", required=False, maximum=LAST_EPOCH)
        payload = None
        if (pf := f.table("payload", required=False)) is not None:
            files_count, digest = pf.integer("files", minimum=0, maximum=MAX_PAYLOAD_FILES), pf.string("sha256")
            pf.done()
            if files_count is not None and digest is not None:
                payload = wheelrecord.Payload(files=files_count, sha256=digest)
        patches = tuple(PatchRecord.read(t) for t in f.tables("patches", required=True))
        files = tuple(r for t in f.tables("files", required=True) if (r := FileRecord.read(t)) is not None)
        f.done()
        raise_if(problems, f"{file} is not a valid patchtool provenance record", file=file)
        assert pin and version and series_hash and upstream and base and tip
        return cls(
            tool_version=tool_version,
            pin=pin,
            version=version,
            series_hash=series_hash,
            upstream=upstream,
            base=base,
            tip=tip,
            patches=patches,
            files=files,
            package_copy=package_copy,
            source_date_epoch=epoch,
            payload=payload,
        )

    def to_dict(self) -> dict[str, Any]:
        optional = {
            "package_copy": self.package_copy,
            "source_date_epoch": self.source_date_epoch,
            "payload": dataclasses.asdict(self.payload) if self.payload is not None else None,
        }
        return {
            "schema": self.schema,
            "tool": {"name": "patchtool", "version": self.tool_version},
            "pin": self.pin,
            "version": self.version,
            "series_hash": self.series_hash,
            "upstream": self.upstream.to_dict(),
            "base": self.base,
            "tip": self.tip,
            **{k: v for k, v in optional.items() if v is not None},
            "patches": [dataclasses.asdict(p) for p in self.patches],
            "files": [f.to_dict() for f in self.files],
        }

    def to_bytes(self) -> bytes:
        return (json.dumps(self.to_dict(), indent=2) + "\n").encode()


def series_hash(
    *,
    pin: str,
    upstream: UpstreamSource,
    patches: Sequence[tuple[str, str, str]],
    tool_version: str,
    source_date_epoch: int | None,
) -> str:
    """sha256 over everything that determines the wheel's bytes; ``patches``: (id, file, sha256)."""
    doc = {
        "layout": LAYOUT,
        "tool": tool_version,
        "pin": pin,
        "upstream": upstream.to_dict(),
        "patches": [{"id": i, "file": f, "sha256": s} for i, f, s in patches],
        "source_date_epoch": source_date_epoch,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def local_version(upstream: Version, digest: str) -> Version:
    """``<upstream>+pt.<12 hex of the series hash>`` (after upstream's own local label, if any)."""
    label = f"{LABEL_PREFIX}.{digest[:12]}"
    return Version(f"{upstream.public}+{upstream.local}.{label}" if upstream.local else f"{upstream.public}+{label}")


# -- reading it back ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FileCheck:
    path: str  # where the wheel holds it
    expected: str  # sha256 hex, or "absent" for a file the series deleted
    state: str  # "ok" | "modified" | "missing" | "present"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ProvenanceReport:
    """A record read back, and whether what it describes is really there."""

    target: str
    kind: str  # "wheel" | "installed"
    location: str
    metadata_version: str | None
    provenance: Provenance
    checks: tuple[FileCheck, ...]
    problems: tuple[Problem, ...]
    record_listed: int = 0  # files RECORD vouches for (by hash and size)
    record_matched: int = 0  # of them, those that are as RECORD says

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "kind": self.kind,
            "location": self.location,
            "metadata_version": self.metadata_version,
            "provenance": self.provenance.to_dict(),
            "files": [dataclasses.asdict(c) for c in self.checks],
            "record": {"listed": self.record_listed, "matched": self.record_matched},
            "problems": [p.to_dict() for p in self.problems],
        }


@dataclasses.dataclass(frozen=True, slots=True)
class ProvenanceReports:
    """``provenance`` of several targets (``dist/*.whl`` where dist/ holds more than one wheel):
    each one's report, and the errors of those that gave none."""

    reports: tuple[ProvenanceReport, ...]
    refused: tuple[Problem, ...]

    @property
    def ok(self) -> bool:
        return not self.refused and all(r.ok for r in self.reports)

    @property
    def problems(self) -> tuple[Problem, ...]:
        return self.refused + tuple(p for r in self.reports for p in r.problems)

    def to_dict(self) -> dict[str, Any]:
        return {
            "reports": [r.to_dict() for r in self.reports],
            "refused": [p.to_dict() for p in self.refused],
            "ok": self.ok,
        }


def locate_all(targets: Sequence[str], paths: Sequence[str]) -> tuple[ProvenanceReports, ExitCode]:
    """Each of ``targets`` as ``locate`` reads it; one that cannot be read is a problem naming it,
    and the exit code is the first such error's, else 1 where a report found a problem."""
    reports, refused, code = [], [], ExitCode.OK
    for target in targets:
        try:
            reports.append(locate(target, paths))
        except PatchtoolError as exc:
            refused += [dataclasses.replace(p, file=p.file or target) for p in exc.as_problems()]
            code = code or exc.exit_code
    found = ProvenanceReports(tuple(reports), tuple(refused))
    return found, code or (ExitCode.OK if found.ok else ExitCode.PROBLEMS)


def locate(target: str, paths: Sequence[str]) -> ProvenanceReport:
    """``target``: a wheel file, a ``.dist-info`` directory, or a distribution installed in ``paths``."""
    path = Path(target)
    if path.suffix == ".whl":
        if not path.is_file():
            raise UsageError(f"{target}: no such wheel file")
        return read_wheel(path)
    if path.suffix == ".dist-info" and path.is_dir():
        return read_installed(importlib.metadata.PathDistribution(path), target=target, location=str(path.absolute()))
    if not (found := list(importlib.metadata.distributions(name=target, path=list(paths)))):
        raise UsageError(
            f"no distribution named {target!r} is installed in {', '.join(paths) or 'sys.path'}",
            hint="pass a wheel file, a .dist-info directory, or --path SITE_PACKAGES",
        )
    return read_installed(found[0], target=target, location=str(found[0].locate_file("")))


def _parse(raw: bytes, label: str) -> Provenance:
    try:
        data = loads_json(raw)
    except ValueError as exc:
        raise InvalidInput(f"{label} is not valid JSON: {exc}", file=label) from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{label} is not a JSON object", file=label)
    return Provenance.from_dict(data, file=label)


def _version_problem(prov: Provenance, metadata_version: str | None, where: str) -> list[Problem]:
    if metadata_version == prov.version:
        return []
    why = f"the provenance record says {prov.version}: the record belongs to another build"
    return [Problem(file=where, code="version", message=f"METADATA says version {metadata_version}, {why}")]


def _check_files(prov: Provenance, read: Callable[[str], bytes | None]) -> tuple[list[FileCheck], list[Problem]]:
    """Compare each changed file's recorded hash with ``read(wheel_path) -> bytes | None``."""
    checks: list[FileCheck] = []
    problems: list[Problem] = []
    for rec in prov.files:
        if rec.wheel_path is None:
            continue
        data = read(rec.wheel_path)
        if rec.sha256 is None:
            state = "ok" if data is None else "present"
        else:
            state = (
                "missing" if data is None else "ok" if hashlib.sha256(data).hexdigest() == rec.sha256 else "modified"
            )
        checks.append(
            FileCheck(path=rec.wheel_path, expected="absent" if rec.sha256 is None else rec.sha256, state=state)
        )
        if state != "ok":
            what = {
                "missing": "is missing",
                "modified": "differs from the patched file",
                "present": "is present, but the series deletes it",
            }[state]
            problems.append(Problem(file=rec.wheel_path, code="file", message=what, hint=_NOT_THE_BUILD))
    return checks, problems


def _check_record(
    prov: Provenance,
    text: str | None,
    read: Callable[[str], bytes | None],
    present: Sequence[str],
    *,
    record: str,
    installed: bool,
    reported: set[str],
) -> tuple[int, int, list[Problem]]:
    """Every file against RECORD, and RECORD against the payload the build recorded: (files listed
    with a hash, files that match, problems). Files ``reported`` already (by the series check) are
    not reported twice."""
    if text is None:
        why = "is missing: nothing vouches for the files"
        return 0, 0, [Problem(file=record, code="record", message=why, hint=_NOT_THE_BUILD)]
    rows, bad = wheelrecord.parse(text, record)
    payload_problem = []
    if prov.payload is not None:
        here = wheelrecord.Payload.of(
            wheelrecord.payload_rows(
                rows.values(), dist_info=record.rpartition("/")[0], package_copy=prov.package_copy, installed=installed
            )
        )
        if here != prov.payload:
            why = (
                f"lists {here.files} package files (payload sha256 {here.sha256[:16]}...), but the build "
                f"made {prov.payload.files} (payload sha256 {prov.payload.sha256[:16]}...): files were "
                "changed, added or removed and RECORD rewritten after the build"
            )
            payload_problem.append(Problem(file=record, code="payload", message=why, hint=_NOT_THE_BUILD))
    if installed:  # what an installer put outside site-packages is not the build's: never read
        rows = {path: row for path, row in rows.items() if paths.tree_path_problem(path) is None}
    # an installer lists the .pyc files it compiles without a hash; a wheel has none of those
    matched, mismatched = wheelrecord.verify(
        rows, read, record=record, unhashed_ok=lambda p: installed and p.endswith(".pyc")
    )
    bad += mismatched + wheelrecord.unlisted(present, rows, record=record)
    listed = sum(1 for r in rows.values() if r.hash)
    problems = [
        Problem(file=m.path, code="record", message=m.reason, hint=_NOT_THE_BUILD)
        for m in bad
        if m.path not in reported
    ]
    return listed, matched, problems + payload_problem


def _report(
    prov: Provenance,
    raw: bytes,
    read: Callable[[str], bytes | None],
    record_text: Callable[[], str | None],
    present: Sequence[str],
    *,
    target: str,
    kind: str,
    location: str,
    metadata_version: str | None,
    where: str,
    record: str,
) -> ProvenanceReport:
    """What ``read`` (a wheel's members, an install's files) holds against the record ``prov`` (``raw``
    its bytes): the version, the package's copy, the series' files, then RECORD (``record_text``)."""
    problems = _version_problem(prov, metadata_version, where) + _copy_problems(prov, raw, read)
    checks, file_problems = _check_files(prov, read)
    problems += file_problems
    listed, matched, record_problems = _check_record(
        prov,
        record_text(),
        read,
        present,
        record=record,
        installed=kind == "installed",
        reported={p.file for p in problems if p.file},
    )
    return ProvenanceReport(
        target=target,
        kind=kind,
        location=location,
        metadata_version=metadata_version,
        provenance=prov,
        checks=tuple(checks),
        problems=tuple(problems + record_problems),
        record_listed=listed,
        record_matched=matched,
    )


def read_wheel(path: Path) -> ProvenanceReport:
    label = path.name
    hint = "the wheel file is damaged or hostile; build it again"
    with (
        damaged_as_error(label, InvalidInput, hint="the wheel file is damaged; build it again"),
        open_zip(path, label, hint=hint, error=InvalidInput) as zf,  # the import's bounds, here and below
    ):
        names = {i.filename for i in safe_members(zf, label, packed=path.stat().st_size, hint=hint, error=InvalidInput)}

        def read(member: str) -> bytes | None:
            if member not in names:
                return None
            try:
                return zf.read(member)
            except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                raise InvalidInput(
                    f"{label}: entry {member!r} is damaged and cannot be read ({damage(exc)})",
                    file=label,
                    hint="the wheel file is damaged; build it again",
                ) from None

        records = sorted(n for n in names if n.count("/") == 1 and n.endswith(f".dist-info/{DIST_INFO_FILE}"))
        if not records:
            raise InvalidInput(
                f"{label} has no patchtool provenance (no *.dist-info/{DIST_INFO_FILE}): "
                "it was not built by `patchtool build`",
                file=label,
            )
        raw = read(records[0]) or b""
        prov = _parse(raw, f"{label}:{records[0]}")
        dist_info = records[0].split("/", 1)[0]
        meta = read(f"{dist_info}/METADATA") or b""
        record = f"{dist_info}/RECORD"
        return _report(
            prov,
            raw,
            read,
            lambda: None if (text := read(record)) is None else text.decode("utf-8", "replace"),
            sorted(names),
            target=str(path),
            kind="wheel",
            location=str(path.absolute()),
            metadata_version=HeaderParser().parsestr(meta.decode("utf-8", "replace")).get("Version"),
            where=label,
            record=record,
        )


def _copy_problems(prov: Provenance, raw: bytes, read: Callable[[str], bytes | None]) -> list[Problem]:
    """The package's copy of the provenance record, which must be the record itself."""
    if prov.package_copy is None:
        return []
    if (copy := read(prov.package_copy)) == raw:
        return []
    message = f"the package's copy of the provenance record {'is missing' if copy is None else 'differs'}"
    return [Problem(file=prov.package_copy, code="copy", message=message)]


def read_installed(dist: importlib.metadata.Distribution, *, target: str, location: str) -> ProvenanceReport:
    name = dist.metadata["Name"] or target
    if (text := dist.read_text(DIST_INFO_FILE)) is None:
        raise InvalidInput(
            f"{name} {dist.version} in {location} has no patchtool provenance "
            f"({DIST_INFO_FILE} in its .dist-info): it was not built by `patchtool build`",
            file=location,
        )
    raw = text.encode()
    prov = _parse(raw, f"{canonicalize_name(name)} {dist.version}: {DIST_INFO_FILE}")
    root = Path(str(dist.locate_file("")))

    def read(rel: str) -> bytes | None:
        """A regular file beneath site-packages (``paths.read_inside``): never a ``../`` path, a link
        out, a device or a pipe a hostile RECORD names; None for anything else."""
        try:
            return paths.read_inside(root, rel)
        except FileNotFoundError:
            return None
        except InvalidInput as exc:
            if exc.problems and exc.problems[0].message.startswith("cannot be read"):
                raise InvalidInput(f"{root / rel} {exc.problems[0].message}", file=str(root / rel)) from None
            return None

    info_dir = _dist_info_dir(dist, root)
    return _report(
        prov,
        raw,
        read,
        lambda: dist.read_text("RECORD"),
        _package_files(root, prov.package_copy) + (_package_files(root, f"{info_dir}/") if info_dir else []),
        target=target,
        kind="installed",
        location=location,
        metadata_version=dist.version,
        where=location,
        record=f"{info_dir}/RECORD" if info_dir else "RECORD",
    )


def _dist_info_dir(dist: importlib.metadata.Distribution, root: Path) -> str | None:
    """The ``.dist-info`` directory's path relative to ``root``, as RECORD names it."""
    if (where := getattr(dist, "_path", None)) is None:  # PathDistribution's directory: the only way to its name
        return None
    try:
        return Path(where).relative_to(root).as_posix()
    except ValueError:
        return None


def _package_files(root: Path, owned: str | None) -> list[str]:
    """Every file (byte-compiled caches aside) under the top-level directory of ``owned``, a path
    the distribution alone owns (its package, its .dist-info): an unlisted one was added later."""
    if not owned or "/" not in owned:
        return []
    top = root / owned.split("/", 1)[0]
    if top.is_symlink() or not top.is_dir():
        return []
    out = []
    for here, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = Path(here).relative_to(root).as_posix()
        out += [f"{rel}/{f}" for f in sorted(files)]
    return out

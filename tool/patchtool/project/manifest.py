"""``patchset.toml``: the series in order and every patch's metadata.

Parsing is pure (``Manifest.from_dict``); ``load`` is the one place that reads
the file. The patch file owns the diff, author and subject; this owns the rest. An entry's
records live beside it: ``metadata`` (upstream status, evidence, knobs, scope, overrides),
``verification`` (assumptions, GPU checks) and ``conditions`` (drop and revisit conditions).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet

from patchtool.errors import InvalidInput, Problem
from patchtool.names import PatchId, RepoPath
from patchtool.paths import read_inside
from patchtool.project.conditions import Revisit
from patchtool.project.fields import (
    MAX_SCHEMA,
    Fields,
    KeyLines,
    complete,
    key_line,
    load_toml,
    pep440_specifier,
    raise_if,
)
from patchtool.project.metadata import (
    Evidence,
    Imported,
    Knob,
    KnobRelation,
    KnobType,
    Override,
    Scalar,
    Scope,
    Status,
    Upstream,
)
from patchtool.project.verification import Assumption, GpuCheck

__all__ = [  # the entry's records are importable from here, where the manifest is
    "MANIFEST_NAME",
    "PLACEHOLDER",
    "SCHEMA",
    "Assumption",
    "Dropped",
    "Evidence",
    "GpuCheck",
    "Imported",
    "Kind",
    "Knob",
    "KnobRelation",
    "KnobType",
    "Manifest",
    "Override",
    "PatchEntry",
    "Scalar",
    "Scope",
    "Status",
    "Upstream",
    "key_line",
    "load",
    "parse_text",
]

SCHEMA = 1
PLACEHOLDER = "TODO"  # what a scaffolded entry's values start with until someone fills them in
MANIFEST_NAME = "patchset.toml"


class Kind(enum.StrEnum):
    CORRECTNESS = "correctness"
    PERFORMANCE = "performance"
    RELIABILITY = "reliability"
    OPERATIONS = "operations"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PatchEntry:
    id: str
    file: str
    kind: Kind
    why: str
    owner: str
    upstream: Upstream
    applies_to: SpecifierSet
    drop_when: str
    evidence: tuple[Evidence, ...] = ()
    knobs: tuple[Knob, ...] = ()
    scope: Scope | None = None
    assumptions: tuple[Assumption, ...] = ()
    gpu_verification: tuple[GpuCheck, ...] = ()
    overrides: tuple[Override, ...] = ()
    drop_if: tuple[Revisit, ...] = ()  # machine-checkable forms of drop_when
    imported: Imported | None = None  # where an imported patch came from, as it came
    requires: tuple[str, ...] = ()  # ids of earlier patches this one needs applied first
    experiment: str | None = None  # why it is an experiment (no figure yet); export --pr refuses it
    standalone: bool = False  # `check` applies it alone at the pin onto what it requires

    @classmethod
    def read(cls, f: Fields) -> PatchEntry | None:
        ident = f.parsed("id", PatchId)
        f.patch = ident or f.patch
        file = f.parsed("file", _patch_file)
        kind = f.choice("kind", tuple(Kind))
        why = f.string("why")
        owner = f.string("owner", one_line=True)
        up_fields = f.table("upstream")
        upstream = Upstream.read(up_fields) if up_fields else None
        applies_to = f.parsed("applies_to", pep440_specifier, one_line=True)
        drop_when = f.string("drop_when", one_line=True)
        rows = complete([Evidence.read(x) for x in f.tables("evidence")])
        knob_rows = complete([Knob.read(x) for x in f.tables("knobs")])
        scope_fields = f.table("scope", required=False)
        scope = Scope.read(scope_fields) if scope_fields else None
        assumptions = [Assumption.read(x) for x in f.tables("assumptions")]
        gpu_rows = complete([GpuCheck.read(x) for x in f.tables("gpu_verification")])
        override_rows = complete([Override.read(x) for x in f.tables("overrides")])
        drop_rows = complete([Revisit.read(x) for x in f.tables("drop_if")])
        imported_fields = f.table("imported", required=False)
        imported = Imported.read(imported_fields) if imported_fields is not None else None
        requires = _requires(f)
        experiment = f.string("experiment", required=False)
        standalone = f.boolean("standalone", required=False)
        f.done()
        seen: set[str] = set()
        for i, a in enumerate(assumptions):
            if a is not None and a.id in seen:
                f.problem(f"assumptions[{i}].id", f"duplicate assumption id {a.id!r}")
            elif a is not None:
                seen.add(a.id)
        checks = complete(assumptions)
        if (
            ident is None
            or file is None
            or kind is None
            or why is None
            or owner is None
            or upstream is None
            or applies_to is None
            or drop_when is None
            or rows is None
            or knob_rows is None
            or checks is None
            or gpu_rows is None
            or override_rows is None
            or drop_rows is None
            or (imported_fields is not None and imported is None)
            or requires is None
            or ("experiment" in f.data and experiment is None)
            or ("standalone" in f.data and standalone is None)
        ):
            return None
        return cls(
            id=ident,
            file=file,
            kind=Kind(kind),
            why=why,
            owner=owner,
            upstream=upstream,
            applies_to=applies_to,
            drop_when=drop_when,
            evidence=rows,
            knobs=knob_rows,
            scope=scope,
            assumptions=checks,
            gpu_verification=gpu_rows,
            overrides=override_rows,
            drop_if=drop_rows,
            imported=imported,
            requires=requires,
            experiment=experiment,
            standalone=bool(standalone),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "file": self.file,
            "kind": self.kind.value,
            "owner": self.owner,
            "why": self.why,
            "upstream": self.upstream.to_dict(),
            "applies_to": str(self.applies_to),
            "drop_when": self.drop_when,
        }
        out |= {"requires": list(self.requires)} if self.requires else {}
        out |= {"experiment": self.experiment} if self.experiment is not None else {}
        out |= {"standalone": True} if self.standalone else {}
        out |= {"scope": self.scope.to_dict()} if self.scope else {}
        for key in ("evidence", "knobs", "assumptions", "gpu_verification", "overrides", "drop_if"):
            out[key] = [record.to_dict() for record in getattr(self, key)]
        return out | ({"imported": self.imported.to_dict()} if self.imported is not None else {})


def _requires(f: Fields) -> tuple[str, ...] | None:
    """The optional ``requires`` list: patch ids, each once; None (a problem recorded) if invalid."""
    if "requires" not in f.data:
        return ()
    if (listed := f.str_list("requires")) is None:
        return None
    before = len(f.problems)
    for i, text in enumerate(listed):
        try:
            PatchId(text)
        except ValueError as exc:
            f.problem(f"requires[{i}]", str(exc))
        if text in listed[:i]:
            f.problem(f"requires[{i}]", f"{text!r} is listed twice")
    return listed if len(f.problems) == before else None


def _patch_file(text: str) -> str:
    path = RepoPath(text)
    if not path.startswith("patches/") or not path.endswith(".patch"):
        raise ValueError(f"{text!r} must be a .patch file under patches/")
    return path


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Dropped:
    """A patch taken out of the series, kept with its metadata and the reason it went."""

    entry: PatchEntry
    reason: str
    dropped_at: str  # the upstream version (or pin) at which it was dropped
    merged_evidence: tuple[str, ...] = ()  # upstream merged it: what showed so when the rebase dropped it

    @classmethod
    def read(cls, f: Fields) -> Dropped | None:
        reason = f.string("reason")
        dropped_at = f.string("dropped_at")
        evidence = f.str_list("merged_evidence", required=False) if "merged_evidence" in f.data else ()
        rest = {k: v for k, v in f.data.items() if k not in ("reason", "dropped_at", "merged_evidence")}
        entry = PatchEntry.read(Fields(rest, f.path, f.problems, patch=f.patch))
        if entry is None or reason is None or dropped_at is None or evidence is None:
            return None
        return cls(entry=entry, reason=reason, dropped_at=dropped_at, merged_evidence=evidence)

    def to_dict(self) -> dict[str, Any]:
        out = {**self.entry.to_dict(), "reason": self.reason, "dropped_at": self.dropped_at}
        return {**out, "merged_evidence": list(self.merged_evidence)} if self.merged_evidence else out


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Manifest:
    schema: int
    pin: str
    patches: tuple[PatchEntry, ...]
    registry: str | None = None
    dropped: tuple[Dropped, ...] = ()

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        file: str = MANIFEST_NAME,
        line_of: Callable[[str], int | None] = lambda _key: None,
    ) -> Manifest:
        """The manifest in ``data``; ``line_of`` (a dotted key's line in the text, when the
        caller has it) lets a problem that involves two entries name the other one's line."""
        problems: list[Problem] = []
        f = Fields(data, "", problems)
        schema = f.integer("schema", maximum=MAX_SCHEMA)
        if schema is not None and schema != SCHEMA:
            f.problem(
                "schema", f"unsupported schema {schema}; this patchtool reads schema {SCHEMA}", hint="upgrade patchtool"
            )
        pin = f.parsed("pin", PatchId)
        registry = f.parsed("registry", RepoPath, required=False)
        patch_tables = f.tables("patch", required=False)  # a fork may start with no patch
        entries = [PatchEntry.read(pf) for pf in patch_tables]
        dropped_tables = f.tables("dropped")
        dropped = [Dropped.read(x) for x in dropped_tables]
        f.done()
        _check_unique(entries, patch_tables)
        _check_not_dropped(entries, dropped, dropped_tables, line_of)
        _check_requires(entries, patch_tables)
        raise_if(problems, f"{file} is not a valid patch set", file=file)
        assert schema is not None and pin is not None
        return cls(
            schema=schema,
            pin=pin,
            registry=registry,
            patches=tuple(e for e in entries if e is not None),
            dropped=tuple(d for d in dropped if d is not None),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": self.schema, "pin": self.pin}
        out |= {"registry": self.registry} if self.registry else {}
        out["patch"] = [p.to_dict() for p in self.patches]
        return out | ({"dropped": [d.to_dict() for d in self.dropped]} if self.dropped else {})

    def get(self, patch_id: str) -> PatchEntry:
        for p in self.patches:
            if p.id == patch_id:
                return p
        raise KeyError(patch_id)


def _check_unique(entries: list[PatchEntry | None], tables: list[Fields]) -> None:
    ids: dict[str, int] = {}
    files: dict[str, int] = {}
    for i, (entry, f) in enumerate(zip(entries, tables, strict=True)):
        if entry is None:
            continue
        if entry.id in ids:
            f.problem(
                "id",
                f"duplicate patch id {entry.id!r} (also patch[{ids[entry.id]}])",
                hint="every patch needs its own id",
            )
        ids.setdefault(entry.id, i)
        if entry.file in files:
            f.problem(
                "file",
                f"{entry.file} is listed twice (also patch[{files[entry.file]}])",
                hint="a patch appears once in the series; remove the duplicate entry",
            )
        files.setdefault(entry.file, i)


def _check_requires(entries: list[PatchEntry | None], tables: list[Fields]) -> None:
    """Each id an entry requires is a patch earlier in the series: the series applies in order."""
    position = {e.id: i for i, e in enumerate(entries) if e is not None}
    for i, (entry, f) in enumerate(zip(entries, tables, strict=True)):
        if entry is None:
            continue
        for k, dep in enumerate(entry.requires):
            if dep == entry.id:
                f.problem(f"requires[{k}]", f"{entry.id!r} requires itself", hint="remove it from its own requires")
            elif dep not in position:
                f.problem(
                    f"requires[{k}]",
                    f"{dep!r} is no patch of the series",
                    hint="name a patch id of this patchset.toml (a dropped patch cannot be required)",
                )
            elif position[dep] > i:
                f.problem(
                    f"requires[{k}]",
                    f"{dep!r} comes after {entry.id!r} in the series (patch[{position[dep]}])",
                    hint="a patch can only require patches before it: move it after what it requires",
                )


def _check_not_dropped(
    entries: list[PatchEntry | None],
    dropped: list[Dropped | None],
    tables: list[Fields],
    line_of: Callable[[str], int | None],
) -> None:
    """An id names one patch: in the series or dropped, never both."""
    active = {e.id: i for i, e in enumerate(entries) if e is not None}
    for d, f in zip(dropped, tables, strict=True):
        if d is None or d.entry.id not in active:
            continue
        key = f"patch[{active[d.entry.id]}]"
        line = line_of(f"{key}.id")
        f.problem(
            "id",
            f"id {d.entry.id!r} is dropped here and also in the series ({key}{f', line {line}' if line else ''})",
            hint="an id is either in the series or dropped: give the new patch its own id, or "
            "delete this [[dropped]] entry if it is the same patch come back",
        )


def parse_text(text: str, *, file: str = MANIFEST_NAME) -> Manifest:
    data = load_toml(text, file=file)
    lines = KeyLines(text)
    try:
        return Manifest.from_dict(data, file=file, line_of=lines.line)
    except InvalidInput as exc:
        raise InvalidInput(
            exc.message, file=file, problems=[p.located(line=lines.line(p.key)) for p in exc.problems]
        ) from None


def load(path: Path) -> Manifest:
    """Read and parse ``patchset.toml``; the only place that reads it."""
    name = path.name
    try:
        text = read_inside(path.parent, name).decode("utf-8")
    except FileNotFoundError:
        raise InvalidInput(
            f"{path} not found", file=name, hint="run patchtool from the patch repository (where patchset.toml is)"
        ) from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path} is not UTF-8: {exc}", file=name) from None
    return parse_text(text, file=name)

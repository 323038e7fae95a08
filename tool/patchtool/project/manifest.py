"""``patchset.toml``: the series in order and every patch's metadata.

Parsing is pure (``Manifest.from_dict``); ``load`` is the one place that reads
the file. The patch file owns the diff, author and subject; this owns the rest.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from patchtool.errors import InvalidInput, Problem
from patchtool.paths import read_inside
from patchtool.project.conditions import Revisit
from patchtool.project.fields import Fields, _ident, _regex, _repo_path, _specifier, _version, load_toml, raise_if

SCHEMA = 1
PLACEHOLDER = "TODO"  # what a scaffolded entry's values start with until someone fills them in
MANIFEST_NAME = "patchset.toml"


class Kind(enum.StrEnum):
    CORRECTNESS = "correctness"
    PERFORMANCE = "performance"
    RELIABILITY = "reliability"
    OPERATIONS = "operations"


class Status(enum.StrEnum):
    """DEP-3 / Yocto ``Upstream-Status`` vocabulary."""

    PENDING = "pending"
    SUBMITTED = "submitted"
    BACKPORT = "backport"
    INAPPROPRIATE = "inappropriate"
    DENIED = "denied"
    MERGED = "merged"


# the detail each status must carry, and the ones it may carry
_STATUS_REQUIRES: dict[Status, tuple[str, ...]] = {
    Status.PENDING: (),
    Status.SUBMITTED: ("url",),
    Status.BACKPORT: ("ref",),
    Status.INAPPROPRIATE: ("reason",),
    Status.DENIED: (),
    Status.MERGED: ("version",),
}
_STATUS_DETAILS = ("url", "ref", "reason", "version")





@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Upstream:
    status: Status
    url: str | None = None
    ref: str | None = None
    reason: str | None = None
    version: Version | None = None

    @classmethod
    def read(cls, f: Fields) -> Upstream | None:
        status = f.choice("status", tuple(Status))
        details = {name: f.string(name, required=False) for name in _STATUS_DETAILS if name != "version"}
        version = f.parsed("version", _version, required=False)
        f.done()
        if status is None:
            return None
        st = Status(status)
        present = {k for k, v in details.items() if v is not None} | ({"version"} if version else set())
        missing = [k for k in _STATUS_REQUIRES[st] if k not in present]
        for k in missing:
            f.problem(k, f"status {st.value!r} needs {k!r}",
                      hint=f"e.g. status = \"{st.value}\", {k} = \"...\"")
        if st is Status.SUBMITTED and details["url"] and not re.match(r"^https?://", details["url"]):
            f.problem("url", f"{details['url']!r} is not an http(s) URL")
            return None
        if missing:
            return None
        return cls(status=st, version=version, **details)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status.value}
        for name in _STATUS_DETAILS:
            value = getattr(self, name)
            if value is not None:
                out[name] = str(value)
        return out

    def __str__(self) -> str:
        detail = self.url or self.ref or self.reason or (str(self.version) if self.version else "")
        return f"{self.status.value} {detail}".strip()


Scalar = str | int | float


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Evidence:
    """A measurement, as data: ``+12.8% throughput at concurrency 64`` is metric/before/after/change."""

    metric: str
    source: str
    before: Scalar | None = None
    after: Scalar | None = None
    change: str | None = None
    conditions: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def read(cls, f: Fields) -> Evidence | None:
        metric = f.string("metric")
        source = f.string("source")
        values = {name: v for name in ("before", "after") if (v := f.scalar(name)) is not None}
        change = f.string("change", required=False)
        conditions = f.str_map("conditions", required=False) or {}
        f.done()
        if not (values or change):
            f.problem(None, "evidence needs a measured value: 'before'/'after' or 'change'")
            return None
        if metric is None or source is None:
            return None
        return cls(metric=metric, source=source, change=change, conditions=conditions, **values)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"metric": self.metric}
        for name in ("before", "after", "change"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.conditions:
            out["conditions"] = dict(self.conditions)
        out["source"] = self.source
        return out


class KnobType(enum.StrEnum):
    ENV = "env"
    FLAG = "flag"


class KnobRelation(enum.StrEnum):
    ADDS = "adds"  # the patch introduces the knob
    NEEDS = "needs"  # the patch relies on the knob being set


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Knob:
    name: str
    type: KnobType
    relation: KnobRelation
    recommended: Mapping[str, str]  # role ("prefill", "decode", "all") -> value
    default: str | None = None
    note: str | None = None

    @classmethod
    def read(cls, f: Fields) -> Knob | None:
        name = f.string("name")
        typ = f.choice("type", tuple(KnobType))
        relation = f.choice("relation", tuple(KnobRelation))
        recommended = f.str_map("recommended")
        default = f.string("default", required=False)
        note = f.string("note", required=False)
        f.done()
        if name and typ == KnobType.FLAG and not name.startswith("--"):
            f.problem("name", f"a server flag starts with '--', got {name!r}")
            return None
        if name and typ == KnobType.ENV and not re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
            f.problem("name", f"{name!r} is not an environment variable name")
            return None
        if recommended is not None and not recommended:
            f.problem("recommended", "name at least one role, e.g. { decode = \"0\" }")
            return None
        if None in (name, typ, relation, recommended):
            return None
        assert name and typ and relation and recommended is not None
        return cls(name=name, type=KnobType(typ), relation=KnobRelation(relation),
                   recommended=recommended, default=default, note=note)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type.value,
                               "relation": self.relation.value,
                               "recommended": dict(self.recommended)}
        if self.default is not None:
            out["default"] = self.default
        if self.note is not None:
            out["note"] = self.note
        return out


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Scope:
    hardware: tuple[str, ...]
    model: tuple[str, ...]

    @classmethod
    def read(cls, f: Fields) -> Scope | None:
        hardware = f.str_list("hardware")
        model = f.str_list("model")
        f.done()
        if hardware is None or model is None:
            return None
        return cls(hardware=hardware, model=model)

    def to_dict(self) -> dict[str, Any]:
        return {"hardware": list(self.hardware), "model": list(self.model)}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Assumption:
    """What a patch assumes about upstream: a file exists, a regex matches N times."""

    id: str
    file: str
    why: str
    exists: bool = True
    pattern: re.Pattern[str] | None = None
    count: int | None = None  # exactly
    min_count: int | None = None  # at least

    @classmethod
    def read(cls, f: Fields) -> Assumption | None:
        ident = f.parsed("id", _ident)
        file = f.parsed("file", _repo_path)
        why = f.string("why")
        exists = f.boolean("exists", required=False)
        pattern = f.parsed("regex", _regex, required=False)
        count = f.integer("count", required=False, minimum=0)
        min_count = f.integer("min_count", required=False, minimum=1)
        f.done()
        if count is not None and min_count is not None:
            f.problem("count", "give either 'count' (exactly) or 'min_count' (at least), not both")
            return None
        if (count is not None or min_count is not None) and pattern is None:
            f.problem("regex", "a count needs a 'regex' to count")
            return None
        if exists is False and pattern is not None:
            f.problem("regex", "a file that must not exist has no content to match")
            return None
        if ident is None or file is None or why is None:
            return None
        if pattern is not None and count is None and min_count is None:
            min_count = 1
        return cls(id=ident, file=file, why=why, exists=exists if exists is not None else True,
                   pattern=pattern, count=count, min_count=min_count)

    def describe(self) -> str:
        if not self.exists:
            return f"{self.file} does not exist"
        if self.pattern is None:
            return f"{self.file} exists"
        if self.count is not None:
            n = "no" if self.count == 0 else f"exactly {self.count}"
            return f"{self.file} has {n} match(es) of /{self.pattern.pattern}/"
        return f"{self.file} has at least {self.min_count} match(es) of /{self.pattern.pattern}/"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "file": self.file}
        if not self.exists:
            out["exists"] = False
        if self.pattern is not None:
            out["regex"] = self.pattern.pattern
        if self.count is not None:
            out["count"] = self.count
        elif self.min_count is not None:
            out["min_count"] = self.min_count
        out["why"] = self.why
        return out


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GpuCheck:
    """A verification that needs a GPU: what to run and what to expect."""

    run: str
    expect: str
    hardware: str | None = None

    @classmethod
    def read(cls, f: Fields) -> GpuCheck | None:
        run = f.string("run")
        expect = f.string("expect")
        hardware = f.string("hardware", required=False)
        f.done()
        if run is None or expect is None:
            return None
        return cls(run=run, expect=expect, hardware=hardware)

    def to_dict(self) -> dict[str, Any]:
        out = {"run": self.run, "expect": self.expect}
        if self.hardware:
            out["hardware"] = self.hardware
        return out

    def selectors(self) -> tuple[str, ...]:
        """The GPU checks ``run`` selects (pytest node ids or paths under tests/gpu); ValueError with
        the message `check` shows when ``run`` is not such a command (prose, say)."""
        return gpu_run_selectors(self.run)


GPU_CHECKS_DIR = "tests/gpu"
_PYTEST_FLAGS = frozenset({"-q", "-v", "-vv", "-x", "-s", "-ra", "-rA", "--no-header"})  # select nothing
_RUN_FORMS = ("python -m pytest tests/gpu/FILE.py::TEST", "python tests/gpu/run.py [tests/gpu/...]",
              "nox -s gpu [-- tests/gpu/...]")


def gpu_run_selectors(run: str) -> tuple[str, ...]:
    """Pure: the checks a ``gpu_verification.run`` command selects, by the forms it may take:
    ``python -m pytest SEL...`` (or ``pytest SEL...``), ``python tests/gpu/run.py [SEL...]`` and
    ``nox -s gpu [-- SEL...]``, every SEL a path or node id under tests/gpu. A command is what a
    results file can be matched to; anything else is refused."""
    try:
        argv = shlex.split(run)
    except ValueError:  # an unclosed quote: prose with an apostrophe, most likely
        argv = []
    rest: list[str] | None = None
    if argv[:1] in (["python"], ["python3"]) and argv[1:3] == ["-m", "pytest"]:
        rest = [a for a in argv[3:] if a not in _PYTEST_FLAGS]
    elif argv[:1] == ["pytest"]:
        rest = [a for a in argv[1:] if a not in _PYTEST_FLAGS]
    elif argv[:1] in (["python"], ["python3"]) and argv[1:2] == [f"{GPU_CHECKS_DIR}/run.py"]:
        rest = argv[2:] or [GPU_CHECKS_DIR]
    elif argv[:3] == ["nox", "-s", "gpu"]:
        rest = argv[4:] if argv[3:4] == ["--"] else argv[3:]
        rest = rest or [GPU_CHECKS_DIR]
    if rest is None:
        raise ValueError(f"not a command that runs checks under tests/gpu: {_clip(run)}; write one of "
                         f"{', '.join(repr(f) for f in _RUN_FORMS)}")
    if not rest:
        raise ValueError(f"{_clip(run)} names no check; name it, e.g. '{_RUN_FORMS[0]}'")
    for arg in rest:
        path = arg.split("::", 1)[0].rstrip("/")
        if arg.startswith("-"):
            raise ValueError(f"{_clip(run)}: option {arg!r} is not allowed; select checks by node id "
                             f"({GPU_CHECKS_DIR}/FILE.py::TEST) so results can be matched to them")
        if path != GPU_CHECKS_DIR and not (path.startswith(f"{GPU_CHECKS_DIR}/") and path.endswith(".py")):
            raise ValueError(f"{_clip(run)}: {arg!r} is not a check under {GPU_CHECKS_DIR}/ "
                             f"(a path or node id such as {GPU_CHECKS_DIR}/test_0002_mma.py::test_name)")
    return tuple(rest)


def _clip(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit] + "...")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Override:
    """A patch that deliberately re-introduces a rejected idea, and why."""

    entry: str
    justification: str

    @classmethod
    def read(cls, f: Fields) -> Override | None:
        entry = f.parsed("entry", _ident)
        justification = f.string("justification")
        f.done()
        if entry is None or justification is None:
            return None
        return cls(entry=entry, justification=justification)

    def to_dict(self) -> dict[str, Any]:
        return {"entry": self.entry, "justification": self.justification}




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

    @classmethod
    def read(cls, f: Fields) -> PatchEntry | None:
        ident = f.parsed("id", _ident)
        f.patch = ident or f.patch
        file = f.parsed("file", _patch_file)
        kind = f.choice("kind", tuple(Kind))
        why = f.string("why")
        owner = f.string("owner")
        up_fields = f.table("upstream")
        upstream = Upstream.read(up_fields) if up_fields else None
        applies_to = f.parsed("applies_to", _specifier)
        drop_when = f.string("drop_when")
        evidence = [Evidence.read(x) for x in f.tables("evidence")]
        knobs = [Knob.read(x) for x in f.tables("knobs")]
        scope_fields = f.table("scope", required=False)
        scope = Scope.read(scope_fields) if scope_fields else None
        assumptions = [Assumption.read(x) for x in f.tables("assumptions")]
        gpu = [GpuCheck.read(x) for x in f.tables("gpu_verification")]
        overrides = [Override.read(x) for x in f.tables("overrides")]
        drop_if = [Revisit.read(x) for x in f.tables("drop_if")]
        f.done()
        seen: set[str] = set()
        for i, a in enumerate(assumptions):
            if a is not None and a.id in seen:
                f.problem(f"assumptions[{i}].id", f"duplicate assumption id {a.id!r}")
            elif a is not None:
                seen.add(a.id)
        parts = (ident, file, kind, why, owner, upstream, applies_to, drop_when)
        if any(p is None for p in parts) or None in evidence + knobs + assumptions + gpu + overrides + drop_if:
            return None
        return cls(id=ident, file=file, kind=Kind(kind), why=why, owner=owner,  # type: ignore[arg-type]
                   upstream=upstream, applies_to=applies_to, drop_when=drop_when,  # type: ignore[arg-type]
                   evidence=tuple(evidence), knobs=tuple(knobs), scope=scope,  # type: ignore[arg-type]
                   assumptions=tuple(assumptions), gpu_verification=tuple(gpu),  # type: ignore[arg-type]
                   overrides=tuple(overrides), drop_if=tuple(drop_if))  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "file": self.file, "kind": self.kind.value, "owner": self.owner,
            "why": self.why, "upstream": self.upstream.to_dict(),
            "applies_to": str(self.applies_to), "drop_when": self.drop_when,
        }
        if self.scope:
            out["scope"] = self.scope.to_dict()
        out["evidence"] = [e.to_dict() for e in self.evidence]
        out["knobs"] = [k.to_dict() for k in self.knobs]
        out["assumptions"] = [a.to_dict() for a in self.assumptions]
        out["gpu_verification"] = [g.to_dict() for g in self.gpu_verification]
        out["overrides"] = [o.to_dict() for o in self.overrides]
        out["drop_if"] = [c.to_dict() for c in self.drop_if]
        return out


def _patch_file(text: str) -> str:
    path = _repo_path(text)
    if not path.startswith("patches/") or not path.endswith(".patch"):
        raise ValueError(f"{text!r} must be a .patch file under patches/")
    return path


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Dropped:
    """A patch taken out of the series, kept with its metadata and the reason it went."""

    entry: PatchEntry
    reason: str
    dropped_at: str  # the upstream version (or pin) at which it was dropped

    @classmethod
    def read(cls, f: Fields) -> Dropped | None:
        reason = f.string("reason")
        dropped_at = f.string("dropped_at")
        rest = {k: v for k, v in f.data.items() if k not in ("reason", "dropped_at")}
        inner = Fields(rest, f.path, f.problems, patch=f.patch)
        entry = PatchEntry.read(inner)
        if entry is None or reason is None or dropped_at is None:
            return None
        return cls(entry=entry, reason=reason, dropped_at=dropped_at)

    def to_dict(self) -> dict[str, Any]:
        return {**self.entry.to_dict(), "reason": self.reason, "dropped_at": self.dropped_at}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Manifest:
    schema: int
    pin: str
    patches: tuple[PatchEntry, ...]
    registry: str | None = None
    dropped: tuple[Dropped, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str = MANIFEST_NAME,
                  line_of: Callable[[str], int | None] = lambda key: None) -> Manifest:
        """The manifest in ``data``; ``line_of`` (a dotted key's line in the text, when the
        caller has it) lets a problem that involves two entries name the other one's line."""
        problems: list[Problem] = []
        f = Fields(data, "", problems)
        schema = f.integer("schema")
        if schema is not None and schema != SCHEMA:
            f.problem("schema", f"unsupported schema {schema}; this patchtool reads schema {SCHEMA}",
                      hint="upgrade patchtool")
        pin = f.parsed("pin", _ident)
        registry = f.parsed("registry", _repo_path, required=False)
        patch_tables = f.tables("patch", required=False)  # a fork may start with no patch
        entries = []
        for pf in patch_tables:
            entries.append(PatchEntry.read(pf))
        dropped_tables = f.tables("dropped")
        dropped = [Dropped.read(x) for x in dropped_tables]
        f.done()
        _check_unique(entries, patch_tables, problems)
        _check_not_dropped(entries, dropped, dropped_tables, line_of)
        raise_if(problems, f"{file} is not a valid patch set", file=file)
        assert schema is not None and pin is not None
        return cls(schema=schema, pin=pin, registry=registry,
                   patches=tuple(e for e in entries if e is not None),
                   dropped=tuple(d for d in dropped if d is not None))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": self.schema, "pin": self.pin}
        if self.registry:
            out["registry"] = self.registry
        out["patch"] = [p.to_dict() for p in self.patches]
        if self.dropped:
            out["dropped"] = [d.to_dict() for d in self.dropped]
        return out

    def get(self, patch_id: str) -> PatchEntry:
        for p in self.patches:
            if p.id == patch_id:
                return p
        raise KeyError(patch_id)


def _check_unique(entries: list[PatchEntry | None], tables: list[Fields],
                  problems: list[Problem]) -> None:
    ids: dict[str, int] = {}
    files: dict[str, int] = {}
    for i, (entry, f) in enumerate(zip(entries, tables, strict=True)):
        if entry is None:
            continue
        if entry.id in ids:
            f.problem("id", f"duplicate patch id {entry.id!r} (also patch[{ids[entry.id]}])",
                      hint="every patch needs its own id")
        ids.setdefault(entry.id, i)
        if entry.file in files:
            f.problem("file", f"{entry.file} is listed twice (also patch[{files[entry.file]}])",
                      hint="a patch appears once in the series; remove the duplicate entry")
        files.setdefault(entry.file, i)


def _check_not_dropped(entries: list[PatchEntry | None], dropped: list[Dropped | None],
                       tables: list[Fields], line_of: Callable[[str], int | None]) -> None:
    """An id names one patch: in the series or dropped, never both."""
    active = {e.id: i for i, e in enumerate(entries) if e is not None}
    for d, f in zip(dropped, tables, strict=True):
        if d is None or d.entry.id not in active:
            continue
        key = f"patch[{active[d.entry.id]}]"
        line = line_of(f"{key}.id")
        f.problem("id", f"id {d.entry.id!r} is dropped here and also in the series "
                        f"({key}{f', line {line}' if line else ''})",
                  hint="an id is either in the series or dropped: give the new patch its own id, or "
                       "delete this [[dropped]] entry if it is the same patch come back")


def parse_text(text: str, *, file: str = MANIFEST_NAME) -> Manifest:
    data = load_toml(text, file=file)
    try:
        return Manifest.from_dict(data, file=file, line_of=lambda key: key_line(text, key))
    except InvalidInput as exc:
        raise InvalidInput(exc.message, file=file,
                           problems=[p.located(line=key_line(text, p.key)) for p in exc.problems]) from None


def load(path: Path) -> Manifest:
    """Read and parse ``patchset.toml``; the only place that reads it."""
    name = path.name
    try:
        text = read_inside(path.parent, name).decode("utf-8")
    except FileNotFoundError:
        raise InvalidInput(f"{path} not found", file=name,
                           hint="run patchtool from the patch repository (where patchset.toml is)") from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path} is not UTF-8: {exc}", file=name) from None
    return parse_text(text, file=name)


_HEADER_RE = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\-\"]+)\s*\]\]?")


def key_line(text: str, key: str | None) -> int | None:
    """Best-effort line number of a dotted key such as ``patch[2].upstream.status``."""
    if not key:
        return None
    parts = re.findall(r"([A-Za-z0-9_\-]+)(?:\[(\d+)\])?", key)
    lines = text.splitlines()
    start, end = 0, len(lines)
    prefix: list[str] = []
    line: int | None = None
    for name, index in parts:
        prefix.append(name)
        table = ".".join(prefix)
        if index:
            hits = [i for i in range(start, end) if re.match(rf"^\s*\[\[\s*{re.escape(table)}\s*\]\]", lines[i])]
            n = int(index)
            if n >= len(hits):
                return line
            start = hits[n]
            nxt = [i for i in range(start + 1, end) if _HEADER_RE.match(lines[i])
                   and _HEADER_RE.match(lines[i]).group(1).strip('"') == table]  # type: ignore[union-attr]
            end = nxt[0] if nxt else end
            line = start + 1
            continue
        found = None
        for i in range(start, end):
            if re.match(rf"^\s*{re.escape(name)}\s*=", lines[i]) or re.match(
                    rf"^\s*\[\s*{re.escape(table)}\s*\]", lines[i]):
                found = i
                break
        if found is None:
            return line
        line = found + 1
        start = found
    return line

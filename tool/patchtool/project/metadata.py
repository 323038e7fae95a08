"""The records a patch's entry in ``patchset.toml`` holds besides its identity: its upstream
status (DEP-3's vocabulary), measured evidence, the knobs it adds or needs, the hardware and
models it is for, and the rejected ideas it deliberately overrides. Each reads itself from a
``fields.Fields`` view of its table (pure) and writes itself back with ``to_dict``.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping
from typing import Any

from packaging.version import Version

from patchtool.names import PatchId, RepoPath
from patchtool.project.fields import Fields, pep440_version


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
        details = {
            name: f.string(name, required=False, one_line=name != "reason")
            for name in _STATUS_DETAILS
            if name != "version"
        }
        version = f.parsed("version", pep440_version, required=False)
        f.done()
        if status is None:
            return None
        st = Status(status)
        present = {k for k, v in details.items() if v is not None} | ({"version"} if version else set())
        missing = [k for k in _STATUS_REQUIRES[st] if k not in present]
        for k in missing:
            f.problem(k, f"status {st.value!r} needs {k!r}", hint=f'e.g. status = "{st.value}", {k} = "..."')
        if st is Status.SUBMITTED and details["url"] and not re.match(r"^https?://", details["url"]):
            f.problem("url", f"{details['url']!r} is not an http(s) URL")
            return None
        if missing:
            return None
        return cls(status=st, version=version, **details)

    def to_dict(self) -> dict[str, Any]:
        details = {name: str(value) for name in _STATUS_DETAILS if (value := getattr(self, name)) is not None}
        return {"status": self.status.value} | details

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
        measured = {k: v for k in ("before", "after", "change") if (v := getattr(self, k)) is not None}
        out = {"metric": self.metric} | measured | ({"conditions": dict(self.conditions)} if self.conditions else {})
        return out | {"source": self.source}


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
            f.problem("recommended", 'name at least one role, e.g. { decode = "0" }')
            return None
        if None in (name, typ, relation, recommended):
            return None
        assert name and typ and relation and recommended is not None
        return cls(
            name=name,
            type=KnobType(typ),
            relation=KnobRelation(relation),
            recommended=recommended,
            default=default,
            note=note,
        )

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return out | {"type": self.type.value, "relation": self.relation.value}


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
class Override:
    """A patch that deliberately re-introduces a rejected idea, and why."""

    entry: str
    justification: str

    @classmethod
    def read(cls, f: Fields) -> Override | None:
        entry = f.parsed("entry", PatchId)
        justification = f.string("justification")
        f.done()
        if entry is None or justification is None:
            return None
        return cls(entry=entry, justification=justification)

    def to_dict(self) -> dict[str, Any]:
        return {"entry": self.entry, "justification": self.justification}


QUILT_DIR = "patches/quilt"  # the quilt series an import came from, as it came: its series file and patches
_SHA = re.compile(r"^[0-9a-f]{7,40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _commit_id(text: str) -> str:
    if not _SHA.match(text):
        raise ValueError(f"{text!r} is not a commit id (7 to 40 lower-case hex digits)")
    return text


def _sha256(text: str) -> str:
    if not _SHA256.match(text):
        raise ValueError(f"{text!r} is not a sha256 (64 lower-case hex digits)")
    return text


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Imported:
    """Where an imported patch came from, as it came (``docs/manifest.md``): its name in the quilt
    series whose copy is under ``QUILT_DIR`` and the sha256 of the diff import stored for it (so
    ``export --quilt`` knows it unchanged), the commit its format-patch ``From`` line named, and
    the commits its message says it was cherry-picked from. Kept, not acted on."""

    name: str | None = None
    diff: str | None = None
    commit: str | None = None
    cherry_picked_from: tuple[str, ...] = ()

    @classmethod
    def read(cls, f: Fields) -> Imported | None:
        name = f.parsed("name", RepoPath, required=False)
        diff = f.parsed("diff", _sha256, required=False)
        commit = f.parsed("commit", _commit_id, required=False)
        picked = f.str_list("cherry_picked_from", required=False) or ()
        f.done()
        for i, sha in enumerate(picked):
            if not _SHA.match(sha):
                f.problem(f"cherry_picked_from[{i}]", f"{sha!r} is not a commit id (7 to 40 lower-case hex digits)")
                return None
        if (name is None) != (diff is None):
            f.problem("diff" if name else "name", "name and diff come together: the quilt patch and its diff")
            return None
        return cls(name=name, diff=diff, commit=commit, cherry_picked_from=picked)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: v for k in ("name", "diff", "commit") if (v := getattr(self, k)) is not None}
        return out | ({"cherry_picked_from": list(self.cherry_picked_from)} if self.cherry_picked_from else {})

"""The do-not-retread registry: rejected ideas, the knobs that would bring them back, and
the conditions under which the reason for rejecting them may no longer hold.

Parsing is pure (``Registry.from_dict``); guards are pure functions over text lines;
revisit conditions are evaluated against file contents handed in by the caller.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.version import Version

from patchtool.diff.model import Diff
from patchtool.errors import InvalidInput, Problem
from patchtool.names import PatchId
from patchtool.paths import read_inside
from patchtool.project.conditions import Revisit
from patchtool.project.fields import MAX_SCHEMA, Fields, KeyLines, complete, load_toml, raise_if
from patchtool.project.patterns import RepoPattern, multiline_pattern, value_pattern
from patchtool.registry.evidencescope import Scope
from patchtool.registry.knobs import find_use

SCHEMA = 1


class Verdict(enum.StrEnum):
    REJECTED = "rejected"
    SUPERSEDED = "superseded"
    DEPRIORITIZED = "deprioritized"


class GuardType(enum.StrEnum):
    FLAG = "flag"  # a server flag on a command line or in a launch argument list
    ENV = "env"  # an environment variable set to a value
    CONFIG = "config"  # a model-config override key (e.g. via --json-model-override-args)
    PATTERN = "pattern"  # any code or text pattern


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Measurement:
    metric: str
    source: str
    before: str | int | float | None = None
    after: str | int | float | None = None
    change: str | None = None
    hardware: str | None = None
    model: str | None = None
    upstream: str | None = None  # the upstream version measured on
    date: str | None = None
    conditions: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def read(cls, f: Fields) -> Measurement | None:
        metric = f.string("metric")
        source = f.string("source")
        values = {n: v for n in ("before", "after") if (v := f.scalar(n)) is not None}
        text = {n: f.string(n, required=False) for n in ("change", "hardware", "model", "upstream", "date")}
        conditions = f.str_map("conditions", required=False) or {}
        f.done()
        if not values and not text["change"]:
            f.problem(None, "evidence needs a measured value: 'before'/'after' or 'change'")
            return None
        if text["date"] and not re.fullmatch(r"[0-9]{4}-[0-9]{2}(-[0-9]{2})?", text["date"]):
            f.problem("date", f"{text['date']!r} is not a date (YYYY-MM or YYYY-MM-DD)")
            return None
        if metric is None or source is None:
            return None
        return cls(
            metric=metric,
            source=source,
            conditions=conditions,
            before=values.get("before"),
            after=values.get("after"),
            **text,
        )

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, {})}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Guard:
    """A knob whose use would re-introduce a rejected idea."""

    type: GuardType
    name: str  # flag ("--ep-size"), env var, config key, or a label for a pattern
    aliases: tuple[str, ...] = ()
    values: RepoPattern | None = None  # the values that re-introduce it, in full (None: any use)
    regex: RepoPattern | None = None  # for type = "pattern"
    roles: tuple[str, ...] = ()  # only where the deployment has one of these roles
    strict_roles: bool = False  # with roles: only where the role is known (else also where it is unknown)
    files: tuple[str, ...] = ()  # only in files matching these globs (patterns in code)
    missing: bool = False  # a flag whose ABSENCE from a launch re-introduces the idea

    @classmethod
    def read(cls, f: Fields) -> Guard | None:
        typ = f.choice("type", tuple(GuardType))
        name = f.string("name")
        aliases = f.str_list("aliases", required=False) or ()
        values = f.parsed("values", value_pattern, required=False)
        regex = f.parsed("regex", multiline_pattern, required=False)
        roles = f.str_list("roles", required=False) or ()
        strict_roles = f.boolean("strict_roles", required=False) or False
        files = f.str_list("files", required=False) or ()
        missing = f.boolean("missing", required=False) or False
        f.done()
        if strict_roles and not roles:
            f.problem("strict_roles", "strict_roles needs the 'roles' it is strict about")
            return None
        if missing and (typ != GuardType.FLAG or values is not None):
            f.problem("missing", "only a flag guard without 'values' can be 'missing'")
            return None
        if typ is None or name is None:
            return None
        gt = GuardType(typ)
        if gt is GuardType.PATTERN and regex is None:
            if "regex" not in f.data:
                f.problem("regex", "a pattern guard needs a 'regex'")
            return None
        if gt is not GuardType.PATTERN and regex is not None:
            f.problem("regex", f"only pattern guards take a 'regex'; a {gt.value} guard matches by name")
            return None
        if gt is GuardType.FLAG and not all(n.startswith("-") for n in (name, *aliases)):
            f.problem("name", f"a flag starts with '--', got {name!r}")
            return None
        if gt is GuardType.ENV and not re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
            f.problem("name", f"{name!r} is not an environment variable name")
            return None
        return cls(
            type=gt,
            name=name,
            aliases=tuple(aliases),
            values=values,
            regex=regex,
            roles=roles,
            strict_roles=strict_roles,
            files=files,
            missing=missing,
        )

    def applies_to(self, file: str, roles: frozenset[str]) -> bool:
        """Whether the guard looks at ``file`` serving ``roles`` (empty: the role is not known)."""
        if self.files and not any(fnmatch.fnmatch(file, g) for g in self.files):
            return False
        if not self.roles:
            return True
        if not roles:
            return not self.strict_roles
        return bool(roles & set(self.roles))

    def describe(self) -> str:
        vals = f" = /{self.values.pattern}/" if self.values is not None else ""
        roles = f" (on {', '.join(self.roles)}{' only' if self.strict_roles else ''})" if self.roles else ""
        if self.missing:
            return f"flag {self.name} missing from an sglang launch{roles}"
        if self.type is GuardType.PATTERN:
            return f"pattern {self.name} /{self.regex.pattern if self.regex else ''}/{roles}"
        return f"{self.type.value} {self.name}{vals}{roles}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type.value, "name": self.name}
        for key in ("aliases", "values", "regex", "roles", "strict_roles", "files", "missing"):
            if value := getattr(self, key):  # the patterns as their text, the tuples as lists
                out[key] = list(value) if isinstance(value, tuple) else getattr(value, "pattern", value)
        return out

    def match(self, line: str, *, python: bool = False, following: str = "") -> str | None:
        """The text in ``line`` that re-introduces the idea, or None (``knobs.find_use``)."""
        return find_use(self, line, python=python, following=following)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Rejection:
    id: str
    title: str
    tried: str
    verdict: Verdict
    reason: str
    evidence: tuple[Measurement, ...]
    knobs: tuple[Guard, ...]
    revisit: str
    revisit_when: tuple[Revisit, ...] = ()
    unguarded: str | None = None  # what no knob can express: the guard cannot see it there
    scope: Scope = dataclasses.field(default_factory=Scope)  # where the evidence holds (`retread scan`)

    @classmethod
    def read(cls, f: Fields) -> Rejection | None:
        ident = f.parsed("id", PatchId)
        f.patch = ident
        title = f.string("title")
        tried = f.string("tried")
        verdict = f.choice("verdict", tuple(Verdict))
        reason = f.string("reason")
        scope_table = f.table("scope", required=False)
        scope = Scope.read(scope_table) if scope_table is not None else Scope()
        evidence = [Measurement.read(x) for x in f.tables("evidence")]
        knobs = [Guard.read(x) for x in f.tables("knobs")]
        revisit = f.string("revisit")
        revisit_when = [Revisit.read(x) for x in f.tables("revisit_when")]
        unguarded = f.string("unguarded", required=False)
        f.done()
        if not knobs and not unguarded:
            f.problem(
                "knobs",
                "no knob: neither `check` nor `retread scan` could ever see this idea come back",
                hint="add [[rejected.knobs]] with what would re-introduce it, or unguarded = "
                '"why no knob can" to say the guard cannot see it',
            )
        if "evidence" in f.data and not evidence:
            f.problem("evidence", "an entry needs at least one evidence row")
        elif "evidence" not in f.data:
            f.problem("evidence", "missing required key", hint="add [[rejected.evidence]] with what was measured")
        rows, guards, revisits = complete(evidence), complete(knobs), complete(revisit_when)
        if ident is None or title is None or tried is None or verdict is None or reason is None or revisit is None:
            return None
        if not rows or guards is None or revisits is None or scope is None:
            return None
        return cls(
            id=ident,
            title=title,
            tried=tried,
            verdict=Verdict(verdict),
            reason=reason,
            evidence=rows,
            knobs=guards,
            revisit=revisit,
            revisit_when=revisits,
            unguarded=unguarded,
            scope=scope,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "title": self.title,
            "tried": self.tried,
            "verdict": self.verdict.value,
            "reason": self.reason,
            "evidence": [e.to_dict() for e in self.evidence],
            "knobs": [k.to_dict() for k in self.knobs],
            "revisit": self.revisit,
            "revisit_when": [r.to_dict() for r in self.revisit_when],
        }
        out |= {"unguarded": self.unguarded} if self.unguarded else {}
        return out | ({} if self.scope.everywhere else {"scope": self.scope.to_dict()})


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Registry:
    entries: tuple[Rejection, ...]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str) -> Registry:
        problems: list[Problem] = []
        f = Fields(data, "", problems)
        schema = f.integer("schema", maximum=MAX_SCHEMA)
        if schema is not None and schema != SCHEMA:
            f.problem("schema", f"unsupported registry schema {schema}")
        entries = [Rejection.read(x) for x in f.tables("rejected", required=True)]
        f.done()
        seen: dict[str, int] = {}
        for i, e in enumerate(entries):
            if e is None:
                continue
            if e.id in seen:
                problems.append(
                    Problem(
                        key=f"rejected[{i}].id",
                        entry=e.id,
                        message=f"duplicate entry id {e.id!r} (also rejected[{seen[e.id]}])",
                        hint="every rejected idea needs its own id",
                    )
                )
            seen.setdefault(e.id, i)
        # the reader names the table's owner as a patch; in the registry it is an entry
        problems = [dataclasses.replace(p, patch=None, entry=p.patch) if p.patch else p for p in problems]
        raise_if(problems, f"{file} is not a valid registry", file=file)
        return cls(entries=tuple(e for e in entries if e is not None))

    def get(self, ident: str) -> Rejection:
        for e in self.entries:
            if e.id == ident:
                return e
        raise KeyError(f"no rejected idea {ident!r}; known: {', '.join(e.id for e in self.entries)}")

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(e.id for e in self.entries)


def parse_text(text: str, *, file: str) -> Registry:
    data = load_toml(text, file=file)
    try:
        return Registry.from_dict(data, file=file)
    except InvalidInput as exc:
        lines = KeyLines(text)
        raise InvalidInput(
            exc.message, file=file, problems=[p.located(line=lines.line(p.key)) for p in exc.problems]
        ) from None


def load(root: Path, name: str) -> Registry:
    return parse_text(read(root, name), file=name)


def read(root: Path, name: str) -> str:
    """The text of the registry file ``name``; the one place that reads it."""
    try:
        return read_inside(root, name).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{name} is not UTF-8: {exc}", file=name) from None
    except FileNotFoundError:
        raise InvalidInput(
            f"{name} not found",
            file="patchset.toml",
            problems=[
                Problem(
                    file="patchset.toml",
                    key="registry",
                    message=f"names {name}, which does not exist",
                    hint="restore the registry file or fix the 'registry' key",
                )
            ],
        ) from None


# -- guards ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    file: str
    line: int
    entry: str
    knob: str
    text: str
    reason: str
    patch: str | None = None
    target: str | None = None  # the upstream file a patch's line changes
    override: str | None = None  # the justification, when a patch overrides the entry on purpose
    scope: Scope | None = None  # the entry's scope, where a deployment scan applied it

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in _FINDING_FIELDS if getattr(self, k) is not None}
        return out | ({"scope": self.scope.to_dict()} if self.scope is not None else {})

    def render(self) -> str:
        where = f"{self.file}:{self.line}" + (f" ({self.target})" if self.target else "")
        head = f"{where}: {self.text!r} re-introduces rejected idea {self.entry!r} ({self.knob})"
        if self.override:
            return f"{head}; overridden by patch {self.patch}: {self.override}"
        return f"{head}: {self.reason}"


_FINDING_FIELDS = ("file", "line", "entry", "knob", "text", "reason", "patch", "target", "override")


def scan_lines(
    registry: Registry,
    lines: Iterable[tuple[int, str]],
    *,
    file: str,
    roles: frozenset[str] = frozenset(),
    patch: str | None = None,
    overrides: Mapping[str, str] | None = None,
    target: str | None = None,
) -> list[Finding]:
    """Pure: every (line number, text) that uses a rejected knob.

    ``roles`` are the PD roles the lines serve (empty: not known). ``target`` is the upstream
    path the lines belong to when ``file`` is a patch file. A line's value may sit on the next
    line (one list item per line), so each line is read with the one numbered after it.
    """
    path = target or file
    python = path.endswith(".py")
    guards = [
        (entry, g) for entry in registry.entries for g in entry.knobs if not g.missing and g.applies_to(path, roles)
    ]
    findings: list[Finding] = []
    numbered = list(lines)
    for i, (number, line) in enumerate(numbered):
        nxt = numbered[i + 1] if i + 1 < len(numbered) else None
        following = nxt[1] if nxt is not None and nxt[0] == number + 1 else ""
        for entry, guard in guards:
            if (text := guard.match(line, python=python, following=following)) is None:
                continue
            if findings and (findings[-1].line, findings[-1].entry) == (number, entry.id):
                continue  # one finding per entry and line
            findings.append(
                Finding(
                    file=file,
                    line=number,
                    entry=entry.id,
                    knob=guard.describe(),
                    text=text,
                    reason=entry.reason,
                    patch=patch,
                    target=target,
                    override=(overrides or {}).get(entry.id),
                )
            )
    return findings


def added_lines(diff: Diff, offset: int) -> dict[str, list[tuple[int, str]]]:
    """Every line a diff adds, by upstream path, with its line number in the patch file (``offset``:
    the lines before the diff)."""
    out: dict[str, list[tuple[int, str]]] = {}
    for path, line in diff.added_lines():
        out.setdefault(path, []).append((offset + line.at, line.content))
    return out


# -- revisit -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RevisitResult:
    entry: str
    condition: str
    holds: bool
    why: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def revisit_paths(registry: Registry) -> list[str]:
    return sorted({c.file for e in registry.entries for c in e.revisit_when if c.file})


def evaluate_all(
    registry: Registry, *, version: Version, files: Mapping[str, bytes | None], field_files: Mapping[str, bytes | None]
) -> list[RevisitResult]:
    """Pure: whether each revisit condition holds for an upstream at ``version`` with these file contents."""
    results = []
    for e in registry.entries:
        for c in e.revisit_when:
            holds, detail = c.evaluate(version=version, files=files, field_files=field_files)
            results.append(RevisitResult(entry=e.id, condition=c.describe(), holds=holds, why=c.why, detail=detail))
    return results


def unknown_overrides(registry: Registry, overrides: Sequence[tuple[str, int, str]]) -> list[Problem]:
    """Overrides (patch id, index, entry id) that name no registry entry."""
    return [
        Problem(
            file="patchset.toml",
            patch=patch,
            key=f"overrides[{i}].entry",
            message=f"overrides {entry!r}, which is not in the registry",
            hint=f"known entries: {', '.join(sorted(registry.ids))}",
        )
        for patch, i, entry in overrides
        if entry not in registry.ids
    ]


@dataclasses.dataclass(frozen=True, slots=True)
class Listing:
    """``retread list``'s result: each entry's id, verdict, title and knobs."""

    registry: Registry

    def to_dict(self) -> dict[str, Any]:
        return {
            "entries": [
                {"id": e.id, "verdict": e.verdict.value, "title": e.title, "knobs": [k.to_dict() for k in e.knobs]}
                for e in self.registry.entries
            ]
        }

"""Workflows over the do-not-retread registry: guard the series, revisit, add."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from patchtool.errors import InvalidInput, Problem, UsageError
from patchtool.project import journal, tomlio
from patchtool.project.conditions import ARG_FIELDS_DIR
from patchtool.project.fields import load_toml
from patchtool.project.repository import LoadedPatch, Project
from patchtool.registry import entries as reg
from patchtool.upstream.cache import Cache

if TYPE_CHECKING:
    from packaging.version import Version

    from patchtool import git


def load(project: Project) -> reg.Registry:
    if not project.manifest.registry:
        raise UsageError("patchset.toml names no registry", hint='add registry = "retread.toml" to patchset.toml')
    return reg.load(project.root, project.manifest.registry)


def guard_series(registry: reg.Registry, loaded: Sequence[LoadedPatch]) -> list[reg.Finding]:
    """Every line the series adds that re-introduces a rejected idea (overrides marked, not dropped)."""
    findings: list[reg.Finding] = []
    for lp in loaded:
        overrides = {o.entry: o.justification for o in lp.entry.overrides}
        for target, lines in reg.added_lines(lp.patch.model, lp.patch.diff_offset).items():
            findings += reg.scan_lines(
                registry, lines, file=lp.entry.file, patch=lp.id, overrides=overrides, target=target
            )
    return findings


def override_problems(project: Project, registry: reg.Registry) -> list[Problem]:
    refs = [(e.id, i, o.entry) for e in project.manifest.patches for i, o in enumerate(e.overrides)]
    problems = reg.unknown_overrides(registry, refs)
    index = {e.id: n for n, e in enumerate(project.manifest.patches)}
    return [dataclasses.replace(p, key=f"patch[{index[p.patch or '']}].{p.key}") for p in problems]


def finding_problem(f: reg.Finding) -> Problem:
    return Problem(
        file=f.file,
        line=f.line,
        patch=f.patch,
        code="retread",
        message=f"{f.text!r}{' in ' + f.target if f.target else ''} re-introduces rejected idea "
        f"{f.entry!r} ({f.knob}): {f.reason}",
        hint=f"drop it, or record a deliberate override in the patch's metadata: "
        f'[[patch.overrides]] entry = "{f.entry}", justification = "..."',
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RevisitReport:
    pin: str
    version: str
    results: tuple[reg.RevisitResult, ...]

    @property
    def due(self) -> list[reg.RevisitResult]:
        return [r for r in self.results if r.holds]

    def to_dict(self) -> dict[str, Any]:
        return {
            "pin": self.pin,
            "version": self.version,
            "due": sorted({r.entry for r in self.due}),
            "conditions": [r.to_dict() for r in self.results],
        }


def revisit(project: Project, registry: reg.Registry, cache: Cache, pin_name: str | None) -> RevisitReport:
    pin = project.pin(pin_name)
    results = revisit_at(registry, cache.repo, cache.ensure(pin).tree, pin.version)
    return RevisitReport(pin=pin.name, version=str(pin.version), results=tuple(results))


def revisit_at(registry: reg.Registry, repo: git.Repo, tree: str, version: Version) -> list[reg.RevisitResult]:
    """Every revisit condition of ``registry`` evaluated against the upstream ``tree`` of ``version``."""
    files = repo.cat_files(tree, reg.revisit_paths(registry))
    field_files = repo.cat_files(tree, repo.ls_files(tree, ARG_FIELDS_DIR))
    return reg.evaluate_all(registry, version=version, files=files, field_files=field_files)


TEMPLATE = """# A rejected idea for the do-not-retread registry. Fill in every value; lines starting
# with '#' are ignored. Save and quit to add it; an empty file aborts.
[[rejected]]
id = ""            # stable id: lower-case letters, digits, - _ .
title = ""
tried = ""         # what was tried
verdict = "rejected"   # rejected | superseded | deprioritized
reason = ""        # why it was rejected
revisit = ""       # when to look again (prose)
# unguarded = ""   # what no knob can express (the guard cannot see it); needed when there is no knob

# [rejected.scope]   # where the evidence holds; `retread scan` applies the entry only there
# models = ["*DeepSeek-V4*"]
# hardware = ["sm_120"]
# modes = ["pd"]     # pd | single
# roles = ["decode"] # prefill | decode

[[rejected.evidence]]
metric = ""
change = ""        # or before = ... / after = ...
hardware = ""
model = ""
upstream = ""      # upstream version measured on
source = ""

[[rejected.knobs]]     # what would re-introduce it; repeat as needed
type = "flag"      # flag | env | config | pattern
name = ""

# [[rejected.revisit_when]]   # optional, machine-checkable
# version = ">=0.6"
# why = ""
"""


def entry_from_text(text: str, source: str) -> dict[str, Any]:
    data = load_toml(text, file=source)
    rejected = data.get("rejected")
    if not isinstance(rejected, list) or len(rejected) != 1 or set(data) != {"rejected"}:
        raise InvalidInput(f"{source} must hold exactly one [[rejected]] table", file=source)
    entry: dict[str, Any] = rejected[0]
    return entry


def add(project: Project, entry: dict[str, Any]) -> reg.Rejection:
    """Append ``entry`` to the registry file, keeping its comments and order; write only if valid."""
    rejection, name, text = added(project, entry)
    journal.commit(project.root, {name: text})
    return rejection


def added(project: Project, entry: dict[str, Any]) -> tuple[reg.Rejection, str, str]:
    """The registry with ``entry`` appended, validated, not written: (the entry, the registry's
    path, its new text)."""
    if not project.manifest.registry:
        raise UsageError("patchset.toml names no registry", hint='add registry = "retread.toml" to patchset.toml')
    name = project.manifest.registry
    text = reg.read(project.root, name)
    reg.parse_text(text, file=name)  # the file as it is must be valid before we touch it
    doc = tomlio.parse(text, file=name)
    tomlio.append_table(doc, "rejected", tomlio.table(entry, literal=("regex", "values")))
    new_text = tomlio.dumps(doc, file=name)
    try:
        registry = reg.parse_text(new_text, file=name)
    except InvalidInput as exc:
        n = len(reg.parse_text(text, file=name).entries)
        here = f"rejected[{n}]"
        raise InvalidInput(
            f"the new entry is not valid; {name} was not changed",
            file=name,
            problems=[
                dataclasses.replace(p, line=None)
                for p in exc.problems
                if (p.key or "").startswith(here) or p.entry == entry.get("id")
            ]
            or exc.problems,
        ) from None
    return registry.entries[-1], name, new_text

"""Assumption checks and ``patchtool check``: every problem found, reported at once."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from pathlib import Path

from patchtool import git
from patchtool.diff.patchfile import PatchFile
from patchtool.errors import InvalidInput, PatchtoolError, Problem
from patchtool.paths import read_inside
from patchtool.project.manifest import MANIFEST_NAME, PLACEHOLDER, PatchEntry
from patchtool.project.pins import PINS_DIR, Pin
from patchtool.project.repository import PATCHES_DIR, LoadedPatch, Project, manifest_document
from patchtool.project.verification import Assumption
from patchtool.registry import workflows as retread
from patchtool.registry.entries import Finding
from patchtool.series.apply import SeriesResult, apply_series
from patchtool.series.metadata import placeholder_subject, unfilled_defaults
from patchtool.series.standalone import Standalone, check_standalone, standalone_problems
from patchtool.upstream.cache import Base, Cache
from patchtool.upstream.history import tag_differs


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AssumptionResult:
    patch: str
    id: str
    ok: bool
    expects: str
    found: str
    why: str

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def evaluate(assumption: Assumption, content: bytes | None) -> tuple[bool, str]:
    """Pure: does ``content`` (None: the file is absent) satisfy ``assumption``?"""
    if content is None:
        return (not assumption.exists), "file absent"
    if not assumption.exists:
        return False, "file present"
    if assumption.pattern is None:
        return True, "file present"
    n = assumption.pattern.count(content.decode("utf-8", "replace"))
    ok = n == assumption.count if assumption.count is not None else n >= (assumption.min_count or 1)
    return ok, f"{n} match(es)"


def check_assumptions(repo: git.Repo, tree: str, entries: Sequence[PatchEntry]) -> list[AssumptionResult]:
    contents = repo.cat_files(tree, sorted({a.file for e in entries for a in e.assumptions}))
    return [
        AssumptionResult(patch=entry.id, id=a.id, ok=ok, expects=a.describe(), found=found, why=a.why)
        for entry in entries
        for a in entry.assumptions
        for ok, found in [evaluate(a, contents[a.file])]
    ]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CheckReport:
    pin: str | None
    patches: int
    problems: tuple[Problem, ...]
    warnings: tuple[Problem, ...] = ()  # the skeleton's placeholders nobody filled in yet
    strict: bool = False  # the warnings count as problems
    series: SeriesResult | None = None
    assumptions: tuple[AssumptionResult, ...] = ()
    registry_entries: int | None = None
    retread: tuple[Finding, ...] = ()  # every guard finding, overridden ones included
    standalone: tuple[Standalone, ...] = ()  # the patches applied alone (--standalone, or marked so)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def errors(self) -> tuple[Problem, ...]:
        """What fails the check: the problems, and under ``strict`` the warnings too."""
        return self.problems + self.warnings if self.strict else self.problems

    def to_dict(self) -> dict[str, object]:
        return {
            "pin": self.pin,
            "patches": self.patches,
            "applies": None if self.series is None else [r.to_dict() for r in self.series.results],
            "assumptions": [a.to_dict() for a in self.assumptions],
            "registry": None
            if self.registry_entries is None
            else {
                "entries": self.registry_entries,
                "findings": [f.to_dict() for f in self.retread if not f.override],
                "overrides": [f.to_dict() for f in self.retread if f.override],
            },
            "standalone": [s.to_dict() for s in self.standalone],
            "problems": [p.to_dict() for p in self.problems],
            "warnings": [p.to_dict() for p in self.warnings],
            "strict": self.strict,
        }


def outside_pin(pin: Pin, entry: PatchEntry, index: int) -> Problem | None:
    """The problem of an entry (``patch[index]``) whose ``applies_to`` leaves out the pin's version."""
    if pin.version in entry.applies_to:
        return None
    return Problem(
        file=MANIFEST_NAME,
        patch=entry.id,
        key=f"patch[{index}].applies_to",
        code="version",
        message=f"pin {pin.name} is version {pin.version}, outside '{entry.applies_to}'",
        hint="widen applies_to once the patch is verified on this version",
    )


GpuProblems = Callable[[Path, Sequence[PatchEntry]], list[Problem]]  # what a fork's GPU evidence says is wrong


def run_check(
    root: Path,
    *,
    cache: Cache,
    gpu_problems: GpuProblems,
    pin_name: str | None = None,
    strict: bool = False,
    standalone: bool = False,
) -> CheckReport:
    """Validate everything the series rests on; collect every problem rather than stopping. The
    skeleton's placeholders (what a fresh import or export scaffolded) are warnings, so they do not
    bury the real problems; ``strict`` makes them fail the check too. ``gpu_problems``: what is
    wrong with the fork's GPU checks and results (the CLI passes this fork's). ``standalone``:
    every patch also applies alone at the pin onto what it requires (an entry's ``standalone =
    true`` asks it for that entry alone)."""
    try:
        project = Project.load(root)
    except InvalidInput as exc:
        # the manifest is broken: still report every patch file that does not parse
        return CheckReport(
            pin=pin_name, patches=0, strict=strict, problems=tuple(exc.as_problems()) + tuple(_parse_all(root))
        )
    report = functools.partial(CheckReport, patches=len(project.manifest.patches), strict=strict)
    loaded, file_problems = project.try_series()
    orphans = project.orphans()
    registry_entries, findings, registry_problems = _registry_guard(project, loaded)
    problems = [*file_problems, *orphans, *registry_problems, *gpu_problems(root, project.manifest.patches)]
    try:
        pin = project.pin(pin_name)
    except PatchtoolError as exc:
        problems += exc.as_problems()
        return report(pin=pin_name or project.manifest.pin, problems=tuple(problems))
    warnings = [p for per_patch in _skeleton_problems(root, project.manifest.patches) for p in per_patch]
    warnings += _placeholder_subjects(loaded)
    problems += [p for i, entry in enumerate(project.manifest.patches) if (p := outside_pin(pin, entry, i))]
    try:
        base: Base = cache.ensure(pin)
    except PatchtoolError as exc:
        problems += exc.as_problems()
        return report(pin=pin.name, problems=tuple(problems), warnings=tuple(warnings))
    try:
        differs = tag_differs(cache, pin, base.tree, {path for lp in loaded for path in lp.patch.paths})
    except PatchtoolError as exc:
        differs = f"tag {pin.git.tag if pin.git else ''} not compared with the artifact: {exc.message}"
    if differs:
        warnings.append(Problem(file=f"{PINS_DIR}/{pin.name}.toml", key="git.tag", code="tag-tree", message=differs))
    series = None
    alone: tuple[Standalone, ...] = ()
    if not file_problems:
        series = apply_series(cache.repo, base.commit, loaded, commit=False)
        problems += _apply_problems(series, pin.name)
        wanted = [e.id for e in project.manifest.patches if standalone or e.standalone]
        alone = check_standalone(cache.repo, base.commit, project.manifest, loaded, wanted)
        problems += standalone_problems(alone, project.manifest, pin.name)
    assumptions = check_assumptions(cache.repo, base.tree, project.manifest.patches)
    problems += [
        Problem(
            file=MANIFEST_NAME,
            patch=a.patch,
            key=f"assumptions.{a.id}",
            code="assumption",
            message=f"assumption failed at {pin.name}: expected {a.expects}, found {a.found}",
            hint=f"the patch relies on it: {a.why}",
        )
        for a in assumptions
        if not a.ok
    ]
    return report(
        pin=pin.name,
        problems=tuple(problems),
        warnings=tuple(warnings),
        series=series,
        assumptions=tuple(assumptions),
        registry_entries=registry_entries,
        retread=tuple(findings),
        standalone=alone,
    )


def _registry_guard(project: Project, loaded: Sequence[LoadedPatch]) -> tuple[int | None, list[Finding], list[Problem]]:
    """The series against the project's registry of rejected ideas: how many entries it has (None
    without a registry, or with one that does not load), what the series re-introduces, and the
    problems: the registry's own, overrides that name no entry, and findings not overridden."""
    if not project.manifest.registry:
        return None, [], []
    try:
        registry = retread.load(project)
    except InvalidInput as exc:
        return None, [], list(exc.as_problems())
    problems = retread.override_problems(project, registry)
    findings = retread.guard_series(registry, loaded)
    problems += [retread.finding_problem(f) for f in findings if not f.override]
    return len(registry.entries), findings, problems


def _skeleton_problems(root: Path, entries: Sequence[PatchEntry]) -> list[list[Problem]]:
    """What export/import scaffolded and nobody filled in, per patch: TODO text, and the defaults
    the skeleton marked as not chosen (``metadata.unfilled_defaults``)."""

    def problem(i: int, key: str, message: str, hint: str) -> Problem:
        at = f"patch[{i}].{key}"
        return Problem(file=MANIFEST_NAME, patch=entries[i].id, key=at, code="skeleton", message=message, hint=hint)

    scaffolded = "fill in the metadata that export/import scaffolded"
    out = [
        [problem(i, k, f"still the skeleton's placeholder ({v!r})", scaffolded) for k, v in _placeholders(e.to_dict())]
        for i, e in enumerate(entries)
    ]
    for i, key, value in unfilled_defaults(manifest_document(root)):
        hint = f"set {key}; to keep this value, delete the TODO comment on its line"
        out[i].append(problem(i, key, f"still the skeleton's default ({value!r}), never chosen", hint))
    return out


def _placeholder_subjects(loaded: Sequence[LoadedPatch]) -> list[Problem]:
    """The patches whose subject is still the one ``new`` wrote, at their ``Subject:`` line."""
    return [
        Problem(
            file=lp.entry.file,
            line=next(
                (n for n, text in enumerate(lp.text.split("\n"), 1) if text.lower().startswith("subject:")), None
            ),
            patch=lp.id,
            code="skeleton",
            message=f"the subject is still the placeholder {subject!r} that `patchtool new` wrote",
            hint="reword the commit in the checkout (`git commit --amend`), then `patchtool export`",
        )
        for lp in loaded
        if lp.patch.subject == (subject := placeholder_subject(lp.id))
    ]


def _placeholders(data: object, prefix: str = "") -> list[tuple[str, str]]:
    """Every string value that still starts with the skeleton's TODO marker, by dotted key."""
    if isinstance(data, str):
        return [(prefix, data)] if data.startswith(PLACEHOLDER) else []
    if isinstance(data, dict):
        return [hit for k, v in data.items() for hit in _placeholders(v, f"{prefix}.{k}" if prefix else k)]
    if isinstance(data, list):
        return [hit for i, v in enumerate(data) for hit in _placeholders(v, f"{prefix}[{i}]")]
    return []


def _apply_problems(series: SeriesResult, pin: str) -> list[Problem]:
    return [
        Problem(
            file=r.file,
            patch=r.id,
            code="apply",
            message=f"does not apply at {pin}: {f.file} {where}: {f.reason}" + (f": {f.detail}" if f.detail else ""),
            hint="rebase the patch onto the pin",
        )
        for r in series.results
        for f in r.failures
        for where in [f"hunk {f.hunk} ({f.header})" if f.hunk else "patch"]
    ]


def _parse_all(root: Path) -> list[Problem]:
    problems: list[Problem] = []
    for path in sorted((root / PATCHES_DIR).glob("*.patch")):
        rel = f"{PATCHES_DIR}/{path.name}"
        try:
            PatchFile.parse(read_inside(root, rel).decode("utf-8", errors="replace"), name=rel)
        except FileNotFoundError:
            continue  # gone since the listing
        except InvalidInput as exc:
            problems.extend(exc.as_problems())
    return problems

"""``patchtool scan``: the series against many upstream versions, without any checkout."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from patchtool import progress
from patchtool.errors import InvalidInput, UpstreamError, UsageError
from patchtool.project.pins import Pin
from patchtool.project.repository import Project
from patchtool.rebase import fromhistory
from patchtool.rebase.replay import Drift, PatchOutcome, Replay, ReplayOptions, Step, old_chain, replay
from patchtool.upstream.cache import Base, Cache
from patchtool.upstream.releases import release_pin, release_version
from patchtool.versions import parse_version

NOT_SCANNED = "not scanned"  # a cell of a version whose upstream could not be had

if TYPE_CHECKING:
    from patchtool.registry.entries import RevisitResult
    from patchtool.series.checks import AssumptionResult


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ScanReport:
    pin: str
    versions: tuple[str, ...]
    patches: tuple[str, ...]
    steps: dict[str, dict[str, Step]]  # patch id -> version -> its replay there
    # version -> what a dry-run rebase to it would report: drift under applied patches, the
    # assumption checks that fail there, and every revisit condition of the registry (holds or not)
    drift: dict[str, tuple[Drift, ...]] = dataclasses.field(default_factory=dict)
    failed_assumptions: dict[str, tuple[AssumptionResult, ...]] = dataclasses.field(default_factory=dict)
    revisit: dict[str, tuple[RevisitResult, ...]] = dataclasses.field(default_factory=dict)
    # version -> why its upstream could not be had (a release that cannot be downloaded or
    # imported): its cells are not scanned, the others are
    unavailable: dict[str, str] = dataclasses.field(default_factory=dict)
    # version -> what upstream's history was asked between the pin and it (``--history``), or why not
    history: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    @property
    def matrix(self) -> dict[str, dict[str, PatchOutcome]]:
        """Patch id -> version -> outcome."""
        return {pid: {v: s.outcome for v, s in row.items()} for pid, row in self.steps.items()}

    @property
    def predicted_conflicts(self) -> dict[str, tuple[str, ...]]:
        """Patch id -> the versions at which it would not apply (a conflict, or its target gone)."""
        found = {pid: tuple(v for v, s in row.items() if s.outcome.stops) for pid, row in self.steps.items()}
        return {pid: versions for pid, versions in found.items() if versions}

    def to_dict(self) -> dict[str, Any]:
        details = {
            pid: {
                v: s.detail or ", ".join(s.conflicted)
                for v, s in row.items()
                if s.outcome is not PatchOutcome.UNCHANGED and (s.detail or s.conflicted)
            }
            for pid, row in self.steps.items()
        }
        shifted = {
            pid: {v: [m.to_dict() for m in s.shifted] for v, s in row.items() if s.shifted}
            for pid, row in self.steps.items()
        }
        return {
            "pin": self.pin,
            "versions": list(self.versions),
            "patches": list(self.patches),
            "matrix": {
                pid: {v: str(row[v]) if v in row else NOT_SCANNED for v in self.versions}
                for pid, row in self.matrix.items()
            },
            "unavailable": dict(self.unavailable),
            "details": details,
            "shifted": {pid: row for pid, row in shifted.items() if row},
            "assumes": {
                pid: {v: list(s.assumes) for v, s in row.items() if s.assumes}
                for pid, row in self.steps.items()
                if any(s.assumes for s in row.values())
            },
            "drift": {v: [d.to_dict() for d in items] for v, items in self.drift.items()},
            "failed_assumptions": {v: [a.to_dict() for a in items] for v, items in self.failed_assumptions.items()},
            "revisit": {v: [r.to_dict() for r in items] for v, items in self.revisit.items()},
            "history": {v: list(lines) for v, lines in self.history.items() if lines},
        }


def parse_versions(spec: str, available: list[Version]) -> list[Version]:
    """'0.5.20..0.5.23' (inclusive, among the available releases) or '0.5.20,0.5.22'."""
    if (bounds := version_range(spec)) is not None:
        low, high = bounds
        if not (chosen := [v for v in available if low <= v <= high and not v.is_prerelease]):
            raise UpstreamError(f"no release between {low} and {high} on the index", hint=_listed(available))
        return sorted(chosen)
    if not (listed := sorted(_parsed(v for v in spec.split(",") if v.strip()))):
        raise UsageError(f"--versions {spec!r} names no version", hint=_VERSIONS_HINT)
    return listed


_VERSIONS_HINT = "e.g. --versions 0.5.20..0.5.23 or 0.5.20,0.5.22"


def _parsed(texts: Iterable[str]) -> list[Version]:
    """Each version of ``texts`` (a leading ``v`` allowed); UsageError where one is none."""
    try:
        return [parse_version(v.strip().lstrip("v")) for v in texts]
    except InvalidVersion as exc:
        raise UsageError(f"--versions: {exc}", hint=_VERSIONS_HINT) from None


def _listed(available: list[Version]) -> str:
    """What the index does list, for a hint: its newest final releases."""
    finals = [str(v) for v in available if not v.is_prerelease][-5:]
    return (
        f"the newest the index lists: {', '.join(finals)}"
        if finals
        else "the index lists no final release with the pin's wheel tags; check the pin's 'index' and 'distribution'"
    )


def version_range(spec: str) -> tuple[Version, Version] | None:
    """(low, high) of a range 'LOW..HIGH', None for a list; UsageError for a bad or reversed one."""
    if ".." not in spec:
        return None
    low, high = _parsed(spec.split("..", 1))
    if low > high:
        raise UsageError(
            f"--versions {spec}: the range is reversed ({low} is newer than {high})",
            hint=f"write the oldest first: --versions {high}..{low}",
        )
    return low, high


def available_versions(pin: Pin, cache: Cache) -> list[Version]:
    """Every release on the index of the pin's kind: wheels with its tags, or sdists."""
    if (art := pin.artifact) is None:
        return []
    found = (release_version(art, entry.filename) for entry in cache.index.files(art))
    return sorted({v for v in found if v is not None})


def newest(pin: Pin, cache: Cache, count: int) -> list[Version]:
    """The ``count`` newest final releases on the index (of the pin's kind: same wheel tags, or sdists)."""
    available = available_versions(pin, cache)
    if not (released := [v for v in available if not v.is_prerelease]):
        kind = "the pin's wheel tags" if pin.artifact is None or pin.artifact.is_wheel else "an sdist"
        raise UpstreamError(f"no release of {pin.upstream} with {kind} on the index", hint=_listed(available))
    return released[-count:]


def scan(
    project: Project, cache: Cache, spec: str | None, *, count: int | None = None, history: bool = False
) -> ScanReport:
    pin = project.pin()
    loaded = project.series()
    if spec is None:
        versions = newest(pin, cache, count or 4)
    else:
        version_range(spec)  # a bad or reversed range is refused before the index is asked
        versions = parse_versions(spec, available_versions(pin, cache) if ".." in spec else [])
    old_base = cache.ensure(pin)
    chain = old_chain(cache.repo, old_base, loaded)
    steps: dict[str, dict[str, Step]] = {lp.id: {} for lp in loaded}
    # downloads and imports one at a time (the cache is locked); the replays side by side
    unavailable: dict[str, str] = {}
    got: list[tuple[Version, Base]] = []
    asked: dict[str, tuple[fromhistory.Verdicts | None, tuple[str, ...]]] = {}
    for v in versions:
        try:
            new_pin = pin if v == pin.version else release_pin(project.root, pin, v, cache=cache)
            got.append((v, cache.ensure(new_pin)))
        except (UpstreamError, InvalidInput) as exc:  # that release alone: the others are still scanned
            unavailable[str(v)] = exc.message + (f" (hint: {exc.hint})" if exc.hint else "")
            continue
        # history is asked here, one version at a time, as the rebase to it asks; the replays below
        # only read the answers (``Verdicts.of`` keeps each)
        verdicts, said = (
            fromhistory.ask(cache, pin, new_pin, loaded, asked=True) if history and v != pin.version else (None, ())
        )
        if verdicts is not None:
            for lp in loaded:
                verdicts.of(lp)
        asked[str(v)] = (verdicts, fromhistory.told(said, verdicts))

    def one(got_one: tuple[Version, Base]) -> Replay:
        version, base = got_one
        options = ReplayOptions(keep_going=True, drift=True, chain=chain, history=asked[str(version)][0])
        return replay(cache.repo, old_base, base, loaded, options)

    with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        title = f"scan {len(loaded)} patch(es) x {len(got)} version(s)"
        results = list(progress.track(pool.map(one, got), title, total=len(got), unit="versions"))
    for (version, _), result in zip(got, results, strict=True):
        for step in result.steps:
            steps[step.id][str(version)] = step
    found = {str(v): _at(project, cache, base, v, result) for (v, base), result in zip(got, results, strict=True)}
    return ScanReport(
        pin=pin.name,
        versions=tuple(str(v) for v in versions),
        patches=tuple(lp.id for lp in loaded),
        steps=steps,
        drift={v: f[0] for v, f in found.items()},
        failed_assumptions={v: f[1] for v, f in found.items()},
        revisit={v: f[2] for v, f in found.items()} if project.manifest.registry else {},
        unavailable=unavailable,
        history={v: said for v, (_, said) in asked.items()},
    )


def _at(
    project: Project, cache: Cache, base: Base, version: Version, result: Replay
) -> tuple[tuple[Drift, ...], tuple[AssumptionResult, ...], tuple[RevisitResult, ...]]:
    """At one version: the drift under the patches that applied, the failed assumption checks, and
    the registry's revisit conditions, as a dry-run rebase to that version reports them."""
    from patchtool.registry import entries as reg
    from patchtool.registry.workflows import revisit_at
    from patchtool.series.checks import check_assumptions

    failed = tuple(a for a in check_assumptions(cache.repo, base.tree, project.manifest.patches) if not a.ok)
    registry = project.manifest.registry
    revisit = tuple(revisit_at(reg.load(project.root, registry), cache.repo, base.tree, version)) if registry else ()
    return result.drift, failed, revisit

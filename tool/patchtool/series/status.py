"""``patchtool status``: the pin and the series at a glance."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import TYPE_CHECKING

from patchtool.errors import Problem
from patchtool.paths import read_inside
from patchtool.project import statedir
from patchtool.project.metadata import Evidence as Measured
from patchtool.project.repository import Project
from patchtool.project.verification import GpuCheck, GpuEvidence, ReadGpuResults
from patchtool.series.apply import SeriesResult, apply_series
from patchtool.series.unexported import Unexported, unexported
from patchtool.upstream.cache import Cache
from patchtool.upstream.namespaces import project_key

if TYPE_CHECKING:
    from patchtool.project.stopped import InProgress


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PatchStatus:
    id: str
    kind: str
    upstream: str
    why: str = ""
    owner: str = ""
    evidence: tuple[Measured, ...] = ()  # what was measured (the entry's evidence rows)
    files: tuple[str, ...]
    added: int
    removed: int
    applies: str
    gpu_verification: tuple[GpuCheck, ...]
    gpu_evidence: tuple[tuple[GpuEvidence, ...], ...]  # per gpu_verification entry: the newest run on each machine

    def to_dict(self) -> dict[str, object]:
        return {key: getattr(self, key) for key in ("id", "kind", "upstream", "why", "owner")} | {
            "evidence": [e.to_dict() for e in self.evidence],
            "files": list(self.files),
            "added": self.added,
            "removed": self.removed,
            "applies": self.applies,
            "gpu_verification": [
                {**g.to_dict(), "evidence": [e.to_dict() for e in ev]}
                for g, ev in zip(self.gpu_verification, self.gpu_evidence, strict=True)
            ],
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StatusReport:
    pin: str
    upstream: str
    version: str
    base: str
    source: str
    patches: tuple[PatchStatus, ...]
    series: SeriesResult
    rebase: InProgress | None = None  # a rebase that stopped and waits
    gpu_results: tuple[str, ...] = ()  # the results files read
    gpu_results_problems: tuple[Problem, ...] = ()  # results files that could not be read
    unexported: tuple[Unexported, ...] = ()  # this repository's checkouts with commits no export wrote

    def to_dict(self) -> dict[str, object]:
        return {key: getattr(self, key) for key in ("pin", "upstream", "version", "base", "source")} | {
            "patches": [p.to_dict() for p in self.patches],
            "rebase": self.rebase.to_dict() if self.rebase else None,
            "unexported": [u.to_dict() for u in self.unexported],
            "gpu_results": {
                "files": list(self.gpu_results),
                "problems": [p.to_dict() for p in self.gpu_results_problems],
            },
        }


def status(project: Project, cache: Cache, pin_name: str | None = None, *, gpu_results: ReadGpuResults) -> StatusReport:
    """The pin, each patch as it applies there, and its GPU checks with what ``gpu_results`` (the
    fork's runs, read from the repository's root: the CLI passes this fork's) says of each."""
    pin = project.pin(pin_name)
    loaded = project.series()
    base = cache.ensure(pin)
    series = apply_series(cache.repo, base.commit, loaded, commit=False)
    runs = gpu_results(project.root)
    rows = [
        PatchStatus(
            id=lp.id,
            kind=lp.entry.kind.value,
            upstream=str(lp.entry.upstream),
            why=lp.entry.why,
            owner=lp.entry.owner,
            evidence=lp.entry.evidence,
            files=lp.patch.paths,
            added=lp.patch.added,
            removed=lp.patch.removed,
            applies=str(result.outcome),
            gpu_verification=lp.entry.gpu_verification,
            gpu_evidence=tuple(runs.evidence(g, sha) for g in lp.entry.gpu_verification),
        )
        for lp, result in zip(loaded, series.results, strict=True)
        for sha in [hashlib.sha256(read_inside(project.root, lp.entry.file)).hexdigest()]
    ]
    return StatusReport(
        pin=pin.name,
        upstream=pin.upstream,
        version=str(pin.version),
        base=base.commit,
        source=base.source,
        patches=tuple(rows),
        series=series,
        rebase=_rebase_in_progress(project),
        unexported=tuple(unexported(cache.repo, project_key(project.root))),
        gpu_results=runs.files,
        gpu_results_problems=runs.problems,
    )


def _rebase_in_progress(project: Project) -> InProgress | None:
    if not (project.root / statedir.REBASE_DIR).exists():  # the rebase modules only when there is one
        return None
    from patchtool.project.stopped import in_progress

    return in_progress(project.root)

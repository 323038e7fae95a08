"""``patchtool status``: the pin and the series at a glance."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .manifest import GpuCheck
from .project import Project
from .series import SeriesResult, apply_series
from .upstream import Cache

if TYPE_CHECKING:
    from .rebasing import InProgress


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PatchStatus:
    id: str
    kind: str
    upstream: str
    files: tuple[str, ...]
    added: int
    removed: int
    applies: str
    gpu_verification: tuple[GpuCheck, ...]

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "kind": self.kind, "upstream": self.upstream, "files": list(self.files),
                "added": self.added, "removed": self.removed, "applies": self.applies,
                "gpu_verification": [g.to_dict() for g in self.gpu_verification]}


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

    def to_dict(self) -> dict[str, object]:
        return {"pin": self.pin, "upstream": self.upstream, "version": self.version,
                "base": self.base, "source": self.source,
                "patches": [p.to_dict() for p in self.patches],
                "rebase": self.rebase.to_dict() if self.rebase else None}


def status(project: Project, cache: Cache, pin_name: str | None = None) -> StatusReport:
    pin = project.pin(pin_name)
    loaded = project.series()
    base = cache.ensure(pin)
    series = apply_series(cache.repo, base.commit, loaded, commit=False)
    rows = []
    for lp, result in zip(loaded, series.results, strict=True):
        rows.append(PatchStatus(
            id=lp.id, kind=lp.entry.kind.value, upstream=str(lp.entry.upstream),
            files=lp.patch.paths, added=lp.patch.added, removed=lp.patch.removed,
            applies=str(result.outcome), gpu_verification=lp.entry.gpu_verification))
    return StatusReport(pin=pin.name, upstream=pin.upstream, version=str(pin.version),
                        base=base.commit, source=base.source, patches=tuple(rows), series=series,
                        rebase=_rebase_in_progress(project))


def _rebase_in_progress(project: Project) -> InProgress | None:
    from .rebasing import STATE_DIR, in_progress

    if not (project.root / STATE_DIR).exists():  # the rebase modules only when there is one
        return None
    return in_progress(project.root)

"""``patchtool show ID``: one patch, all of it: its entry's metadata, where it stands at the pin
(the row ``status`` gives it), whether each of its assumptions holds there (``check``'s results)
and, when asked, its diff."""

from __future__ import annotations

import dataclasses

from patchtool.project.manifest import PatchEntry
from patchtool.project.repository import Project
from patchtool.project.verification import ReadGpuResults
from patchtool.series.checks import AssumptionResult, check_assumptions
from patchtool.series.ids import in_series
from patchtool.series.status import PatchStatus, status
from patchtool.upstream.cache import Cache


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PatchShown:
    pin: str
    position: int  # 1-based, in the series
    of: int  # how many patches the series has
    entry: PatchEntry
    subject: str
    author: str
    row: PatchStatus  # the patch as `status` shows it at the pin
    assumptions: tuple[AssumptionResult, ...]  # one per entry.assumptions, at the pin's upstream
    diff: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            **self.entry.to_dict(),
            **{key: getattr(self, key) for key in ("pin", "position", "subject", "author")},
            "applies": self.row.applies,
            "files": list(self.row.files),
            "added": self.row.added,
            "removed": self.row.removed,
            "assumptions": [
                {**a.to_dict(), "holds": r.ok, "found": r.found}
                for a, r in zip(self.entry.assumptions, self.assumptions, strict=True)
            ],
            "gpu_verification": self.row.to_dict()["gpu_verification"],
            "diff": self.diff,
        }


def show(
    project: Project,
    cache: Cache,
    ident: str,
    *,
    gpu_results: ReadGpuResults,
    pin_name: str | None = None,
    diff: bool = False,
) -> PatchShown:
    entry = in_series(project, ident)
    report = status(project, cache, pin_name, gpu_results=gpu_results)
    position = next(i for i, p in enumerate(report.patches) if p.id == ident)
    loaded = next(lp for lp in project.series() if lp.id == ident)
    base = cache.ensure(project.pin(report.pin))  # the one `status` used: the cache remembers it
    return PatchShown(
        pin=report.pin,
        position=position + 1,
        of=len(report.patches),
        entry=entry,
        subject=loaded.patch.subject,
        author=f"{loaded.patch.author_name} <{loaded.patch.author_email}>",
        row=report.patches[position],
        assumptions=tuple(check_assumptions(cache.repo, base.tree, [entry])),
        diff=loaded.patch.diff if diff else None,
    )

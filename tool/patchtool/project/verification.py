"""What a patch assumes about upstream, and how it is verified on a GPU: the checks ``check``
runs against the pinned tree (``Assumption``), the GPU checks (``GpuCheck``) and what a fork's runs
say of each (``GpuResults``: one ``GpuEvidence`` a machine). Where a fork keeps its runs, and which
of a run's checks a ``GpuCheck`` selects, is the fork's own (``patchtool.sglang`` for this one).
Pure: each entry's record reads itself from a ``fields.Fields`` view.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from patchtool.errors import Problem
from patchtool.names import PatchId, RepoPath
from patchtool.paths import MAX_INPUT_BYTES
from patchtool.project.fields import Fields
from patchtool.project.patterns import RepoPattern, multiline_pattern


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Assumption:
    """What a patch assumes about upstream: a file exists, a regex matches N times."""

    id: str
    file: str
    why: str
    exists: bool = True
    pattern: RepoPattern | None = None
    count: int | None = None  # exactly
    min_count: int | None = None  # at least

    @classmethod
    def read(cls, f: Fields) -> Assumption | None:
        ident = f.parsed("id", PatchId)
        file = f.parsed("file", RepoPath)
        why = f.string("why")
        exists = f.boolean("exists", required=False)
        pattern = f.parsed("regex", multiline_pattern, required=False)
        count = f.integer("count", required=False, minimum=0, maximum=MAX_COUNT)
        min_count = f.integer("min_count", required=False, minimum=1, maximum=MAX_COUNT)
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
        return cls(
            id=ident,
            file=file,
            why=why,
            exists=exists if exists is not None else True,
            pattern=pattern,
            count=count,
            min_count=min_count,
        )

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
        out: dict[str, Any] = {"id": self.id, "file": self.file} | ({} if self.exists else {"exists": False})
        out |= {"regex": self.pattern.pattern} if self.pattern is not None else {}
        if self.count is not None:
            out["count"] = self.count
        elif self.min_count is not None:
            out["min_count"] = self.min_count
        return out | {"why": self.why}


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
        return {"run": self.run, "expect": self.expect} | ({"hardware": self.hardware} if self.hardware else {})


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CheckResult:
    """One GPU check's outcome in one run."""

    check: str  # the check's id: this fork's are pytest node ids, e.g. tests/gpu/test_0002_mma.py::test_split
    outcome: str  # pass | fail | not-run
    reason: str | None = None
    patch_sha256: str | None = None
    figures: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "outcome": self.outcome, "reason": self.reason, "figures": dict(self.figures)}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GpuEvidence:
    """What one run on one machine says about one gpu_verification entry."""

    file: str
    started: str
    device: str | None
    capability: str | None
    outcome: str  # pass | fail | not-run | partly run
    checks: tuple[CheckResult, ...]
    current: bool | None  # False: the run tested an older version of the patch; None: unknown

    @property
    def hardware(self) -> str:
        return f"{self.device} ({self.capability})" if self.device else "no CUDA GPU"

    def to_dict(self) -> dict[str, Any]:
        said = ("file", "started", "device", "capability", "outcome", "current")
        return {**{k: getattr(self, k) for k in said}, "checks": [c.to_dict() for c in self.checks]}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GpuResults:
    """A fork's GPU runs as ``status`` reads them: the files read, the problems of those that could
    not be (each skipped), and the newest run on each machine of a check (given the patch's sha256)."""

    files: tuple[str, ...]
    problems: tuple[Problem, ...]
    evidence: Callable[[GpuCheck, str], tuple[GpuEvidence, ...]]


ReadGpuResults = Callable[[Path], GpuResults]  # a fork's runs, read from the repository's root


MAX_COUNT = MAX_INPUT_BYTES + 1  # a regex's matches in a file patchtool reads: one a byte, one at its end

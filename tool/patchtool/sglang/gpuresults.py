"""This fork's GPU evidence: the results files ``tests/gpu/run.py`` writes, matched to each
patch's ``[[patch.gpu_verification]]`` by the checks its ``run`` command selects (``gpuruns``).

Parsing is pure (``ResultsFile.from_dict``); ``read`` is the one place that reads
``gpu-results/*.json``. The CLI hands ``read`` to ``status`` and ``show``, and ``check_problems``
to ``check`` and ``init``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from patchtool.errors import InvalidInput, Problem
from patchtool.inputs import loads_json
from patchtool.paths import read_inside
from patchtool.project.fields import MAX_SCHEMA, Fields, raise_if
from patchtool.project.manifest import PatchEntry
from patchtool.project.verification import CheckResult, GpuCheck, GpuEvidence, GpuResults
from patchtool.sglang.gpuruns import gpu_run_problems, gpu_run_selectors

RESULTS_DIR = "gpu-results"
KIND = "patchtool-gpu-results"
SCHEMA = 1
OUTCOMES = ("pass", "fail", "not-run")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ResultsFile:
    """One run of the GPU checks on one machine."""

    file: str  # gpu-results/<name>.json
    started: str
    device: str | None  # None: the run found no CUDA GPU
    capability: str | None  # sm_90, sm_120
    checks: tuple[CheckResult, ...]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, file: str) -> ResultsFile:
        problems: list[Problem] = []
        f = Fields(data, "", problems)
        kind = f.string("kind")
        schema = f.integer("schema", maximum=MAX_SCHEMA)
        if kind is not None and kind != KIND:
            f.problem("kind", f"{kind!r} is not {KIND!r}: not a file tests/gpu/run.py wrote")
        if schema is not None and schema != SCHEMA:
            f.problem("schema", f"unsupported schema {schema}; this patchtool reads schema {SCHEMA}")
        started = f.string("started")
        device_fields = f.table("device")
        name = capability = None
        if device_fields is not None:
            name, capability = _nullable(device_fields, "name"), _nullable(device_fields, "capability")
        checks = [_check_result(x) for x in f.tables("checks", required=True)]
        raise_if(problems, f"{file} is not a GPU results file", file=file)
        assert started is not None
        return cls(
            file=file,
            started=started,
            device=name,
            capability=capability,
            checks=tuple(c for c in checks if c is not None),
        )


def _check_result(f: Fields) -> CheckResult | None:
    check = f.string("check")
    outcome = f.choice("outcome", OUTCOMES)
    reason, _, sha = (_nullable(f, name) for name in ("reason", "patch", "patch_sha256"))
    figures = f.data.get("figures") or {}
    if not isinstance(figures, Mapping):
        f.problem("figures", "expected a table of figures")
        return None
    if check is None or outcome is None:
        return None
    return CheckResult(check=check, outcome=outcome, reason=reason, patch_sha256=sha, figures=figures)


def _nullable(f: Fields, name: str) -> str | None:
    """A string the writer may leave null (JSON has no absent-but-typed value)."""
    return None if f.data.get(name) is None else f.string(name, nonempty=False)


def read(root: Path) -> GpuResults:
    """Every results file under ``gpu-results/``, oldest run first, and the problems of those that
    cannot be read (each is skipped, never guessed at)."""
    results: list[ResultsFile] = []
    problems: list[Problem] = []
    folder = root / RESULTS_DIR
    if folder.is_symlink():  # listed, it would name files outside the repository
        problem = Problem(
            file=RESULTS_DIR,
            code="gpu-results",
            message="is a symbolic link; patchtool reads results only from a real directory inside the repository",
            hint=f"make {RESULTS_DIR}/ a directory of the results files",
        )
        return GpuResults(files=(), problems=(problem,), evidence=lambda _g, _sha: ())
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        rel = f"{RESULTS_DIR}/{path.name}"
        try:
            data = loads_json(read_inside(root, rel).decode("utf-8"))
        except FileNotFoundError:
            continue  # gone since the listing
        except (UnicodeDecodeError, ValueError) as exc:
            problems.append(Problem(file=rel, code="gpu-results", message=f"not JSON: {exc}"))
            continue
        except InvalidInput as exc:
            problems += exc.as_problems()
            continue
        if not isinstance(data, Mapping):
            problems.append(Problem(file=rel, code="gpu-results", message="not a JSON object"))
            continue
        try:
            results.append(ResultsFile.from_dict(data, file=rel))
        except InvalidInput as exc:
            problems += [dataclasses.replace(p, code="gpu-results") for p in exc.problems]
    runs = sorted(results, key=lambda r: (r.started, r.file))
    return GpuResults(
        files=tuple(r.file for r in runs), problems=tuple(problems), evidence=lambda g, sha: evidence_for(g, runs, sha)
    )


def selects(selector: str, check: str) -> bool:
    """Pure: does the selector (a node id or path, as pytest takes it) select the check ``check``?"""
    selector = selector.rstrip("/")
    if check == selector or check.startswith((selector + "::", selector + "[")):
        return True
    if "::" in selector:
        return False
    file = check.split("::", 1)[0]
    return file == selector or file.startswith(selector + "/")


def evidence_for(gpu: GpuCheck, runs: Sequence[ResultsFile], patch_sha256: str | None) -> tuple[GpuEvidence, ...]:
    """The newest run on each machine that ran (or tried) a check ``gpu.run`` selects, newest first.
    A ``run`` that is not a command has no evidence (``check`` reports it)."""
    try:
        selectors = gpu_run_selectors(gpu.run)
    except ValueError:
        return ()
    newest: dict[tuple[str | None, str | None], GpuEvidence] = {}
    for run in runs:  # oldest first, so a later run on the same machine replaces an earlier one
        if not (matched := tuple(c for c in run.checks if any(selects(s, c.check) for s in selectors))):
            continue
        shas = {c.patch_sha256 for c in matched if c.patch_sha256}
        current = None if not shas or patch_sha256 is None else shas == {patch_sha256}
        newest[(run.device, run.capability)] = GpuEvidence(
            file=run.file,
            started=run.started,
            device=run.device,
            capability=run.capability,
            outcome=_overall(matched),
            checks=matched,
            current=current,
        )
    return tuple(sorted(newest.values(), key=lambda e: e.started, reverse=True))


def _overall(checks: Sequence[CheckResult]) -> str:
    """fail if one failed; pass or not-run if all did; else partly run."""
    outcomes = {c.outcome for c in checks}
    if "fail" in outcomes:
        return "fail"
    return outcomes.pop() if len(outcomes) == 1 else "partly run"


def check_problems(root: Path, entries: Sequence[PatchEntry]) -> list[Problem]:
    """What ``check`` says of this fork's GPU evidence: the ``run`` commands, then the results files."""
    return gpu_run_problems(root, entries) + list(read(root).problems)


def no_evidence(gpu: GpuCheck) -> str:
    """Why a check has no evidence, as ``status --long`` and ``show`` say it."""
    try:
        gpu_run_selectors(gpu.run)
    except ValueError:
        return "'run' is not a command that runs checks under tests/gpu (`patchtool check` says why)"
    return "no results file in gpu-results/ has a check this runs"

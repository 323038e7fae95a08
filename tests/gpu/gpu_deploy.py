"""What the deployment-scale checks share: sglang's own serving benchmark run against the deployment,
the figures it reports, and the figures of a baseline run to compare with.

A check gates on ``gpu_support.require_deployment()`` and ``require_benchmark()``, then runs
``python -m sglang.benchmark.serving --backend sglang --base-url ROUTER ...`` with the arguments its
manifest entry used to spell out as a shell loop, and records what the benchmark wrote to its
``--output-file`` (the figures it prints). An A/B whose arms need the PD pair and router co-restarted
(another kernel, another switch) is one run per arm: a later arm's run names an earlier one's results
file in ``$PATCHTOOL_GPU_BASELINE`` and is compared with it. Only the standard library and pytest
are imported: the benchmark runs in its own process.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

BENCHMARK = "sglang.benchmark.serving"
NO_BENCHMARK = "needs sglang's serving benchmark, not run"
BASELINE_ENV = "PATCHTOOL_GPU_BASELINE"
# figure name -> the key sglang 0.5.23's benchmark writes to --output-file (benchmark/serving.py)
RESULT_KEYS = {
    "completed": "completed",
    "output_tok_s": "output_throughput",
    "mean_ttft_ms": "mean_ttft_ms",
    "median_ttft_ms": "median_ttft_ms",
    "mean_tpot_ms": "mean_tpot_ms",
    "duration_s": "duration",
}
_TAIL_LINES = 12
_runs = itertools.count()


def benchmark_skip_reason() -> str | None:
    """Why sglang's serving benchmark cannot run in this interpreter, or None when it can. Finds the
    module without importing sglang, whose import is heavy."""
    spec = importlib.util.find_spec("sglang")
    if spec is None:
        return f"{NO_BENCHMARK}: sglang is not installed for {sys.executable}"
    if not any(Path(p, "benchmark", "serving.py").is_file() for p in spec.submodule_search_locations or ()):
        return f"{NO_BENCHMARK}: the sglang installed for {sys.executable} has no {BENCHMARK}"
    return None


def require_benchmark() -> None:
    """Skip the calling check unless ``python -m sglang.benchmark.serving`` can run here."""
    reason = benchmark_skip_reason()
    if reason is not None:
        pytest.skip(reason)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BenchmarkRun:
    """One run of the benchmark: how it ended and the result line it wrote."""

    argv: tuple[str, ...]
    returncode: int | None  # None: still running at the timeout, and killed
    elapsed_s: float
    result: dict[str, Any] | None
    output_tail: str

    @property
    def hung(self) -> bool:
        return self.returncode is None

    def figures(self, suffix: str = "") -> dict[str, int | float]:
        """What the run measured, named for the results file (``output_tok_s_c64``); a figure the
        benchmark did not report (or reported as NaN) is left out."""
        end = f"_{suffix}" if suffix else ""
        found = {name: (self.result or {}).get(key) for name, key in RESULT_KEYS.items()}
        return {
            name + end: value
            for name, value in found.items()
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        }

    def problem(self, prompts: int) -> str | None:
        """Why the run does not count as ``prompts`` requests served, or None when it does."""
        if self.hung:
            return f"still running after {self.elapsed_s:.0f} s, killed"
        if self.returncode != 0 or self.result is None:
            return f"the benchmark exited {self.returncode} without a result: {self.output_tail}"
        completed = self.result.get("completed")
        if completed != prompts:
            return f"{completed} of {prompts} requests completed"
        return None


def serving_benchmark(url: str, args: Sequence[str], *, workdir: Path, timeout_s: float) -> BenchmarkRun:
    """``python -m sglang.benchmark.serving --backend sglang --base-url URL ARGS --output-file ...``,
    killed after ``timeout_s``. It stays in the check's process group, so a runner that stops the
    check stops it too."""
    n = next(_runs)
    out, log = workdir / f"benchmark-{n}.jsonl", workdir / f"benchmark-{n}.log"
    argv = (sys.executable, "-m", BENCHMARK, "--backend", "sglang", "--base-url", url, *args, "--output-file", str(out))
    start = time.monotonic()
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            returncode: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    elapsed = time.monotonic() - start
    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-_TAIL_LINES:]
    return BenchmarkRun(
        argv=argv,
        returncode=returncode,
        elapsed_s=round(elapsed, 1),
        result=_last_result(out),
        output_tail="\n".join(tail),
    )


def _last_result(path: Path) -> dict[str, Any] | None:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    try:
        result = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return result if isinstance(result, dict) else None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Baseline:
    """The figures an earlier run of the same check recorded, from its results file."""

    path: str
    figures: dict[str, Any]

    @classmethod
    def from_results(cls, path: str, data: Any, nodeid: str) -> Baseline:
        """Pure: the newest row of ``nodeid``'s check (matched by file name and test) in a results
        file's data; ValueError when the file holds none."""
        own = nodeid.rsplit("/", 1)[-1]
        rows = [
            row
            for row in (data.get("checks") if isinstance(data, dict) else None) or []
            if isinstance(row, dict) and str(row.get("check", "")).rsplit("/", 1)[-1] == own
        ]
        if not rows or not isinstance(rows[-1].get("figures"), dict):
            raise ValueError(f"{path} holds no figures of {own}")
        return cls(path=path, figures=rows[-1]["figures"])

    def ratios(self, figures: dict[str, Any], names: Sequence[str]) -> dict[str, float]:
        """Pure: each figure over the baseline's (``output_tok_s_c64_vs_baseline``), where both have it."""
        out = {}
        for name in names:
            now, then = figures.get(name), self.figures.get(name)
            if isinstance(now, int | float) and isinstance(then, int | float) and then:
                out[f"{name}_vs_baseline"] = round(now / then, 4)
        return out

    def worse(self, figures: dict[str, Any], *, higher: Sequence[str] = (), lower: Sequence[str] = ()) -> list[str]:
        """Pure: each figure worse than the baseline's, said as a sentence: those in ``higher`` must
        not be below it, those in ``lower`` not above it; a figure either side lacks is worse too."""
        worse = []
        for name, sign in [*((n, 1) for n in higher), *((n, -1) for n in lower)]:
            now, then = figures.get(name), self.figures.get(name)
            if not isinstance(now, int | float) or not isinstance(then, int | float):
                worse.append(f"{name}: {now} now, {then} in the baseline")
            elif sign * (now - then) < 0:
                worse.append(f"{name} {now:g} is {'below' if sign > 0 else 'above'} the baseline's {then:g}")
        return worse


def baseline_for(nodeid: str) -> Baseline | None:
    """The run named by ``$PATCHTOOL_GPU_BASELINE`` (a results file of another arm of the A/B), or
    None when it is not set; a file that is unreadable or holds no run of this check fails it."""
    path = os.environ.get(BASELINE_ENV)
    if not path:
        return None
    try:
        return Baseline.from_results(path, json.loads(Path(path).read_text(encoding="utf-8")), nodeid)
    except (OSError, ValueError) as exc:
        pytest.fail(f"${BASELINE_ENV}: {exc}", pytrace=False)

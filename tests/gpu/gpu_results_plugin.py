"""The pytest plugin `run.py` loads (``-p gpu_results_plugin``): a live record of the run, rewritten
after every check, so a run killed at its time budget or at a hung check still says what ran.

The state file (``$PATCHTOOL_GPU_STATE``) holds the device, the checks collected in order, each
finished check's outcome, and the check running now with its start time, which the runner reads
to stop a hung one. After ``$PATCHTOOL_GPU_DEADLINE`` (epoch seconds) no further check starts.

The runner and this plugin read one clock, `now()`: the wall clock, plus the seconds held in the
file ``$PATCHTOOL_GPU_CLOCK`` names, when it names one. The runner's own tests move that clock
forward from inside a check, so a hang or a spent budget is what the test says it is, on any load.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import gpu_support
import pytest

STATE_ENV = "PATCHTOOL_GPU_STATE"
DEADLINE_ENV = "PATCHTOOL_GPU_DEADLINE"
CLOCK_ENV = "PATCHTOOL_GPU_CLOCK"
BUDGET_SPENT = "not run: the time budget ran out before it started"
_REASON_LIMIT = 600


def now() -> float:
    """Epoch seconds: the wall clock, moved on by the offset in ``$PATCHTOOL_GPU_CLOCK``'s file."""
    offset = 0.0
    if clock := os.environ.get(CLOCK_ENV):
        try:
            offset = float(Path(clock).read_text(encoding="utf-8") or 0)
        except (OSError, ValueError):
            offset = 0.0
    return time.time() + offset


class LiveState:
    def __init__(self, path: Path, deadline: float | None) -> None:
        self.path = path
        self.deadline = deadline
        self.data: dict[str, Any] = {
            "device": gpu_support.device_info(),
            "collected": [],
            "checks": {},
            "running": None,
        }
        self.broken: list[str] = []  # check files that did not import
        self.write()

    def write(self) -> None:
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text(json.dumps(self.data, indent=1), encoding="utf-8")
        os.replace(partial, self.path)

    def check(self, nodeid: str) -> dict[str, Any]:
        entry: dict[str, Any] = self.data["checks"].setdefault(
            nodeid, {"outcome": "pass", "reason": None, "duration_s": 0.0, "figures": {}}
        )
        return entry

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.data["collected"] = self.broken + [item.nodeid for item in session.items]
        self.write()

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:  # a check file that does not import is a failed check, not a silent gap
            entry = self.check(report.nodeid)
            entry.update(outcome="fail", reason=f"collection error: {_reason(report)}")
            self.broken.append(report.nodeid)
            self.write()

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.data["running"] = {"check": nodeid, "since": now()}
        self.write()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if self.deadline is not None and now() > self.deadline:
            pytest.skip(BUDGET_SPENT)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.check(report.nodeid)
        entry["duration_s"] = round(entry["duration_s"] + report.duration, 3)
        for name, value in report.user_properties:
            if name == gpu_support.FIGURES_PROPERTY:
                entry["figures"].update(value)
        if report.failed and entry["outcome"] != "fail":
            where = "" if report.when == "call" else f"error in {report.when}: "
            entry.update(outcome="fail", reason=where + _reason(report))
        elif report.skipped and entry["outcome"] == "pass":
            entry.update(outcome="not-run", reason=_reason(report))

    @pytest.hookimpl
    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self.data["running"] = None
        self.write()


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The one line that says why: the skip reason, or the failure's crash message."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (file, line, "Skipped: reason")
        text = str(longrepr[2]).removeprefix("Skipped: ")
    elif (crash := getattr(longrepr, "reprcrash", None)) is not None:
        text = str(crash.message)
    else:
        lines = [line for line in str(longrepr).splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("E ")]
        text = (errors or lines or ["(no message)"])[-1].removeprefix("E ").strip()
    return text if len(text) <= _REASON_LIMIT else text[:_REASON_LIMIT] + "..."


def pytest_configure(config: pytest.Config) -> None:
    state = os.environ.get(STATE_ENV)
    if state:
        deadline = os.environ.get(DEADLINE_ENV)
        config.pluginmanager.register(LiveState(Path(state), float(deadline) if deadline else None), "gpu-live-state")

"""Results rendered at the edge: human text and the versioned JSON envelope."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from . import __version__
from .checks import CheckReport
from .errors import ExitCode, Problem
from .registry import Finding, Registry, Rejection
from .retread import RevisitReport
from .series import Outcome, SeriesResult
from .status import StatusReport

JSON_SCHEMA = 1
_STATUS_WORD = {ExitCode.OK: "ok", ExitCode.PROBLEMS: "problems", ExitCode.USAGE: "usage-error",
                ExitCode.CONFLICT: "conflict", ExitCode.UPSTREAM: "upstream-error",
                ExitCode.INTERNAL: "error"}


def envelope(command: str, code: ExitCode, data: Any, errors: Sequence[Problem] = ()) -> str:
    """The ``--json`` contract: every command prints exactly one such object."""
    return json.dumps({
        "schema": JSON_SCHEMA,
        "tool": "patchtool",
        "version": __version__,
        "command": command,
        "status": _STATUS_WORD[code],
        "exit_code": int(code),
        "data": data,
        "errors": [p.to_dict() for p in errors],
    }, indent=2, sort_keys=False)


class Style:
    """Colour only on a terminal."""

    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def _c(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour else text

    def ok(self, text: str) -> str:
        return self._c("32", text)

    def bad(self, text: str) -> str:
        return self._c("31;1", text)

    def dim(self, text: str) -> str:
        return self._c("2", text)

    def bold(self, text: str) -> str:
        return self._c("1", text)


def problems_text(problems: Sequence[Problem], style: Style) -> str:
    lines = [f"{style.bad('error')}: {p.render()}" for p in problems]
    return "\n".join(lines)


def outcome_word(outcome: Outcome, style: Style) -> str:
    word = str(outcome)
    if outcome is Outcome.APPLIED:
        return style.ok(word)
    if outcome is Outcome.FAILED:
        return style.bad(word)
    return style.dim(word)


def series_text(series: SeriesResult, style: Style) -> str:
    lines = []
    for r in series.results:
        commit = f" {r.commit[:12]}" if r.commit else ""
        lines.append(f"  {outcome_word(r.outcome, style):<8} {r.id}{style.dim(commit)}")
        for f in r.failures:
            where = f"hunk {f.hunk} {f.header}" if f.hunk else "whole patch"
            lines.append(f"      {f.file}: {where}")
            lines.append(f"        why: {f.reason}" + (f" - {f.detail}" if f.detail else ""))
    return "\n".join(lines)


def check_text(report: CheckReport, style: Style) -> str:
    lines = [f"pin {report.pin}: {report.patches} patch(es)"]
    if report.series is not None:
        applied = sum(r.outcome is Outcome.APPLIED for r in report.series.results)
        lines.append(f"applies at the pin: {applied}/{len(report.series.results)}")
    if report.assumptions:
        good = sum(a.ok for a in report.assumptions)
        lines.append(f"assumption checks: {good}/{len(report.assumptions)} hold")
    if report.registry_entries is not None:
        lines.append(f"do-not-retread registry: {report.registry_entries} entries, "
                     f"{sum(not f.override for f in report.retread)} finding(s) in the series")
        for f in report.retread:
            if f.override:
                lines.append(f"  {style.dim('override')}: {f.render()}")
    if report.problems:
        lines.append(problems_text(report.problems, style))
        lines.append(style.bad(f"{len(report.problems)} problem(s) found"))
    else:
        lines.append(style.ok("check: clean"))
    return "\n".join(lines)


def findings_text(findings: Sequence[Finding], style: Style) -> str:
    if not findings:
        return style.ok("no rejected knobs found")
    lines = []
    for f in findings:
        tag = style.dim("override") if f.override else style.bad("retread")
        lines.append(f"{tag}: {f.render()}")
    live = sum(not f.override for f in findings)
    lines.append(style.bad(f"{live} finding(s)") if live else style.ok("only deliberate overrides"))
    return "\n".join(lines)


def registry_list_text(registry: Registry, style: Style) -> str:
    lines = [f"{len(registry.entries)} rejected idea(s):"]
    for e in registry.entries:
        knobs = ", ".join(k.name for k in e.knobs)
        lines.append(f"  {style.bold(e.id)} [{e.verdict.value}] {e.title}")
        lines.append(f"      {style.dim('knobs: ' + (knobs or 'none'))}")
    return "\n".join(lines)


def registry_show_text(e: Rejection, style: Style) -> str:
    lines = [f"{style.bold(e.id)}: {e.title} [{e.verdict.value}]", f"tried:   {e.tried}",
             f"reason:  {e.reason}", "evidence:"]
    for m in e.evidence:
        value = " -> ".join(str(v) for v in (m.before, m.after) if v is not None)
        parts = [p for p in (value, m.change) if p]
        lines.append(f"  - {m.metric}: {'; '.join(parts)}")
        ctx = [f"{k}: {v}" for k, v in (("hardware", m.hardware), ("model", m.model),
                                        ("upstream", m.upstream), ("date", m.date)) if v]
        ctx += [f"{k}: {v}" for k, v in m.conditions.items()]
        lines.append(f"      {style.dim('; '.join(ctx))}")
        lines.append(f"      {style.dim('source: ' + m.source)}")
    lines.append("would be re-introduced by:")
    lines += [f"  - {k.describe()}" for k in e.knobs] or ["  - (no knob)"]
    lines.append(f"revisit: {e.revisit}")
    lines += [f"  - when {c.describe()}: {c.why}" for c in e.revisit_when]
    return "\n".join(lines)


def revisit_text(report: RevisitReport, style: Style) -> str:
    lines = [f"revisit conditions at {report.pin} ({report.version}):"]
    for r in report.results:
        mark = style.bad("HOLDS") if r.holds else style.ok("no")
        lines.append(f"  {mark:<5} {r.entry}: {r.condition} ({r.detail})")
        if r.holds:
            lines.append(f"        {r.why}")
    due = sorted({r.entry for r in report.due})
    lines.append(f"entries to revisit: {', '.join(due)}" if due else style.ok("no entry is due for a revisit"))
    return "\n".join(lines)


def status_text(report: StatusReport, style: Style) -> str:
    lines = [f"pin {style.bold(report.pin)}: {report.upstream} {report.version} "
             f"({report.source}, base {report.base[:12]})",
             f"series: {len(report.patches)} patch(es)"]
    for i, p in enumerate(report.patches, 1):
        applies = style.ok(p.applies) if p.applies == "applied" else style.bad(p.applies)
        lines.append(f"{i:>3}. {style.bold(p.id)}  [{p.kind}]  upstream: {p.upstream}  "
                     f"+{p.added}/-{p.removed}  at pin: {applies}")
        for path in p.files:
            lines.append(f"       {style.dim(path)}")
        for g in p.gpu_verification:
            lines.append(f"       GPU verification (not run here){' on ' + g.hardware if g.hardware else ''}: "
                         f"{g.run}")
            lines.append(f"         expect: {g.expect}")
    return "\n".join(lines)

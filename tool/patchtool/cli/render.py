"""Results rendered at the edge: human text and the versioned JSON envelope."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from patchtool import __version__
from patchtool.errors import ExitCode, Problem

if TYPE_CHECKING:  # the renderers read these; importing them all would slow every command's start
    from patchtool.project.verification import GpuCheck, GpuEvidence
    from patchtool.rebase.transaction import RebaseReport
    from patchtool.registry.entries import Finding, Registry, Rejection
    from patchtool.registry.workflows import RevisitReport
    from patchtool.series.apply import SeriesResult
    from patchtool.series.checks import CheckReport
    from patchtool.series.status import StatusReport
    from patchtool.series.unexported import Unexported
    from patchtool.sglang.deploy import Scanned
    from patchtool.wheel.build import BuildResult
    from patchtool.wheel.provenance import ProvenanceReport, ProvenanceReports

JSON_SCHEMA = 1
_STATUS_WORD = MappingProxyType(
    {
        ExitCode.OK: "ok",
        ExitCode.PROBLEMS: "problems",
        ExitCode.USAGE: "usage-error",
        ExitCode.CONFLICT: "conflict",
        ExitCode.UPSTREAM: "upstream-error",
        ExitCode.PREDICTED: "conflicts-predicted",
        ExitCode.INTERNAL: "error",
        ExitCode.BUSY: "busy",
    }
)


def envelope(command: str, code: ExitCode, data: Any, errors: Sequence[Problem] = ()) -> str:
    """The ``--json`` contract: every command prints exactly one such object."""
    return json.dumps(
        {
            "schema": JSON_SCHEMA,
            "tool": "patchtool",
            "version": __version__,
            "command": command,
            "status": _STATUS_WORD[code],
            "exit_code": int(code),
            "data": data,
            "errors": [p.to_dict() for p in errors],
        },
        indent=2,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Style:
    """The human text's colours, rendered by rich, and only on a terminal (``colour``)."""

    colour: bool

    def _c(self, style: str, text: str) -> str:
        if not self.colour:
            return text
        from rich.color import ColorSystem  # rich: only a terminal's text loads it
        from rich.style import Style as Ansi

        return Ansi.parse(style).render(text, color_system=ColorSystem.STANDARD)

    def ok(self, text: str) -> str:
        return self._c("green", text)

    def bad(self, text: str) -> str:
        return self._c("bold red", text)

    def dim(self, text: str) -> str:
        return self._c("dim", text)

    def bold(self, text: str) -> str:
        return self._c("bold", text)


def printable(text: str) -> str:
    """``text`` as it may reach a terminal: a character that is not printable (ESC, CR, the other
    control characters, a bidi override) written as a Python string escape (``\\x1b``), as a
    message shows a value with ``!r``; newlines and tabs stay. What ``show``, ``status`` and ``check``
    print of a file's strings (the rebase report, the registry's texts too) passes through here, so no
    manifest or registry can recolour, overwrite or hide a line."""
    return text if text.isprintable() else "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in text)


def problems_text(problems: Sequence[Problem], style: Style) -> str:
    return "\n".join(f"{style.bad('error')}: {printable(p.render())}" for p in problems)


def series_text(series: SeriesResult, style: Style) -> str:
    from patchtool.series.apply import Outcome

    lines = []
    for r in series.results:
        word = {Outcome.APPLIED: style.ok, Outcome.FAILED: style.bad}.get(r.outcome, style.dim)(str(r.outcome))
        lines.append(f"  {word:<8} {r.id}{style.dim(f' {r.commit[:12]}' if r.commit else '')}")
        for f in r.failures:
            where = f"hunk {f.hunk} {f.header}" if f.hunk else "whole patch"
            lines += [f"      {f.file}: {where}", f"        why: {f.reason}" + (f" - {f.detail}" if f.detail else "")]
    return "\n".join(lines)


def check_text(report: CheckReport, style: Style) -> str:
    from patchtool.series.apply import Outcome

    lines = [f"pin {report.pin}: {report.patches} patch(es)"]
    if report.series is not None:
        applied = sum(r.outcome is Outcome.APPLIED for r in report.series.results)
        lines.append(f"applies at the pin: {applied}/{len(report.series.results)}")
    if report.standalone:
        alone = sum(s.ok for s in report.standalone)
        lines.append(f"apply alone onto what they require: {alone}/{len(report.standalone)}")
    if report.assumptions:
        lines.append(f"assumption checks: {sum(a.ok for a in report.assumptions)}/{len(report.assumptions)} hold")
    if report.registry_entries is not None:
        lines.append(
            f"do-not-retread registry: {report.registry_entries} entries, "
            f"{sum(not f.override for f in report.retread)} finding(s) in the series"
        )
        lines += [f"  {style.dim('override')}: {printable(f.render())}" for f in report.retread if f.override]
    if report.problems:
        lines.append(problems_text(report.problems, style))
    lines += [f"{style.bad('error') if report.strict else 'warning'}: {printable(w.render())}" for w in report.warnings]
    tail = f"{len(report.warnings)} metadata placeholder(s) to fill in" if report.warnings else ""
    if report.ok:
        lines.append(style.ok("check: clean") + (f", but {tail} (`check --strict` fails on them)" if tail else ""))
    else:
        lines.append(style.bad(f"{len(report.problems)} problem(s) found" + (f", {tail}" if tail else "")))
    return "\n".join(lines)


def findings_text(findings: Sequence[Finding], style: Style) -> str:
    if not findings:
        return style.ok("no rejected knobs found")
    lines = [
        f"{style.dim('override') if f.override else style.bad('retread')}: {printable(f.render())}" for f in findings
    ]
    live = sum(not f.override for f in findings)
    lines.append(style.bad(f"{live} finding(s)") if live else style.ok("only deliberate overrides"))
    return "\n".join(lines)


def scan_text(found: Scanned, style: Style) -> str:
    """`retread scan`: its findings, then the uses whose scope the launch does not say."""
    lines = [f"{style.dim('note')}: {printable(n.render())}" for n in found.notes]
    if lines:
        lines.append(style.dim(f"{len(found.notes)} note(s): scope unknown, not findings"))
    return "\n".join([findings_text(found.findings, style), *lines])


def registry_list_text(registry: Registry, style: Style) -> str:
    lines = [f"{len(registry.entries)} rejected idea(s):"]
    for e in registry.entries:
        knobs = ", ".join(k.name for k in e.knobs)
        lines.append(f"  {style.bold(e.id)} [{e.verdict.value}] {printable(e.title)}")
        lines.append(f"      {style.dim(printable('knobs: ' + (knobs or 'none')))}")
        if e.unguarded:
            lines.append(f"      {style.dim(printable('the guard cannot see: ' + e.unguarded))}")
    return "\n".join(lines)


def registry_show_text(e: Rejection, style: Style) -> str:
    lines = [
        f"{style.bold(e.id)}: {printable(e.title)} [{e.verdict.value}]",
        printable(f"tried:   {e.tried}"),
        printable(f"reason:  {e.reason}"),
        printable(f"scope:   {e.scope.describe()}"),
        "evidence:",
    ]
    for m in e.evidence:
        value = " -> ".join(str(v) for v in (m.before, m.after) if v is not None)
        lines.append(printable(f"  - {m.metric}: {'; '.join(p for p in (value, m.change) if p)}"))
        ctx = [f"{k}: {v}" for k in ("hardware", "model", "upstream", "date") if (v := getattr(m, k))]
        ctx += [f"{k}: {v}" for k, v in m.conditions.items()]
        lines.append(f"      {style.dim(printable('; '.join(ctx)))}")
        lines.append(f"      {style.dim(printable('source: ' + m.source))}")
    lines.append("would be re-introduced by:")
    lines += [printable(f"  - {k.describe()}") for k in e.knobs] or ["  - (no knob)"]
    if e.unguarded:
        lines.append(printable(f"the guard cannot see: {e.unguarded}"))
    lines.append(printable(f"revisit: {e.revisit}"))
    lines += [printable(f"  - when {c.describe()}: {c.why}") for c in e.revisit_when]
    return "\n".join(lines)


def revisit_text(report: RevisitReport, style: Style) -> str:
    lines = [f"revisit conditions at {report.pin} ({report.version}):"]
    for r in report.results:
        mark = style.bad("HOLDS") if r.holds else style.ok("no")
        lines.append(f"  {mark:<5} {printable(f'{r.entry}: {r.condition} ({r.detail})')}")
        if r.holds:
            lines.append(f"        {printable(r.why)}")
    due = sorted({r.entry for r in report.due})
    lines.append(f"entries to revisit: {', '.join(due)}" if due else style.ok("no entry is due for a revisit"))
    return "\n".join(lines)


def status_head(report: StatusReport, style: Style) -> list[str]:
    """What ``status`` says before the patches: a stopped or running rebase, where it is and what
    to do next; then the checkout commits no export has written."""
    if (r := report.rebase) is None:
        return unexported_lines(report.unexported, style)
    n = len(report.patches)
    where = f"{r.done} of {n} through"
    if r.stopped_at:
        where = f"stopped at {style.bold(r.stopped_at)} (patch {r.done + 1} of {n}); resolve it in {r.worktree}"
    return [
        f"{style.bad('rebase in progress')}: {r.old_pin} -> {r.new_pin}, {where}; then "
        "`patchtool rebase --continue` (or --skip --reason ..., --abort)",
        *unexported_lines(report.unexported, style),
    ]


def unexported_lines(work: Sequence[Unexported], style: Style) -> list[str]:
    """What ``status`` and ``rebase`` say of checkout commits no export has written: they live only
    in the cache's repository, which a cache cleared (or removed by hand) takes with it."""
    lines = []
    for u in work:
        lines.append(f"{style.bad('unexported')}: {printable(u.describe())}, kept only in the cache")
        lines += [f"  {c[:12]} {printable(subject)}" for c, subject in u.commits]
    if lines:
        lines.append("  `patchtool export` writes them into the series; clearing the cache would lose them")
    return lines


def status_text(report: StatusReport, style: Style) -> str:
    lines = [
        f"pin {style.bold(report.pin)}: {report.upstream} {report.version} ({report.source}, base {report.base[:12]})",
        f"series: {len(report.patches)} patch(es)",
    ]
    lines += status_head(report, style)
    for i, p in enumerate(report.patches, 1):
        applies = style.ok(p.applies) if p.applies == "applied" else style.bad(p.applies)
        lines.append(
            f"{i:>3}. {style.bold(p.id)}  [{p.kind}]  upstream: {printable(p.upstream)}  "
            f"+{p.added}/-{p.removed}  at pin: {applies}"
        )
        lines += [f"       {style.dim(path)}" for path in p.files]
        for g, evidence in zip(p.gpu_verification, p.gpu_evidence, strict=True):
            lines += gpu_lines(g, evidence, style, head="GPU verification", indent=7)
    lines += [f"{problems_text([p], style)} (skipped)" for p in report.gpu_results_problems]
    return "\n".join(lines)


def gpu_lines(g: GpuCheck, evidence: Sequence[GpuEvidence], style: Style, *, head: str, indent: int) -> list[str]:
    """A GPU check as ``status --long`` and ``show`` print it: the command and hardware, what it
    expects, then each machine's newest run of it (or that none was run)."""
    from patchtool.sglang.gpuresults import no_evidence

    pad = " " * indent
    hardware = f" on {g.hardware}" if g.hardware else ""
    lines = [printable(f"{pad}{head}{hardware}: {g.run}" if head else f"{pad}{g.run}{hardware}")]
    lines.append(f"{pad}  expect: {printable(g.expect)}")
    return lines + (
        [f"{pad}  {evidence_line(e, style)}" for e in evidence]
        or [f"{pad}  {style.bad('no evidence')}: {no_evidence(g)}"]
    )


def evidence_line(e: GpuEvidence, style: Style) -> str:
    """``pass on NVIDIA H200 (sm_90), 2 check(s), gpu-results/x.json``, with what did not pass."""
    word = {"pass": style.ok, "fail": style.bad}.get(e.outcome, style.dim)(e.outcome)
    line = f"{word} on {printable(e.hardware)}, {len(e.checks)} check(s), {printable(e.started)}, {e.file}"
    if e.current is False:
        line += f" ({style.bad('for an older version of the patch')})"
    shown = [c for c in e.checks if c.outcome != "pass"][:3]
    return "\n           ".join([line, *(printable(f"{c.outcome}: {c.check}: {c.reason}") for c in shown)])


PARTIAL = (
    "drift, failing assumption checks, registry revisits, drop conditions and the range-diff "
    "come with the finished rebase (`--dry-run` gives them now)"
)


def rebase_markdown(report: RebaseReport) -> str:
    """The report as a pull-request description."""
    from patchtool.rebase.transaction import RebaseStatus

    out = [
        f"## Rebase {report.old_pin} → {report.new_pin} ({report.status})",
        "",
        "| patch | outcome | detail |",
        "|---|---|---|",
    ]
    for s in report.steps:
        detail = f"{len(s.shifted)} hunk(s) at other lines, listed below" if s.shifted else s.detail
        detail = detail.replace("|", "\\|")
        extra = "; ".join(
            [
                *(f"conflict in `{f}`" for f in s.conflicted),
                *s.misplaced,
                *s.renamed,
                *(f"assumes `{pid}` skipped" for pid in s.assumes),
                *(f"upstream: {c}" for c in s.upstream_commits),
            ]
        )
        out.append(f"| `{s.id}` | {s.outcome} | {'; '.join(x for x in (detail, extra) if x)} |")
    if moved := [f"- `{s.id}`: `{m.file}` {m.describe()}" for s in report.steps for m in s.shifted]:
        out += ["", "### Hunks applied at other lines", "", *moved]
    sections: list[tuple[str, list[str]]] = [
        (
            "Code that changed under applied patches",
            [
                f"- `{d.patch}`: `{d.path}`: {d.detail}" + "".join(f"; upstream: {c}" for c in d.commits)
                for d in report.drift
            ],
        ),
        (
            "Assumption checks failing on the target",
            [
                f"- `{a.patch}` / `{a.id}`: expected {a.expects}, found {a.found} ({a.why})"
                for a in report.assumptions
                if not a.ok
            ],
        ),
        ("Rejected ideas to revisit", [f"- `{r.entry}`: {r.condition}: {r.why}" for r in report.revisit if r.holds]),
        (
            "Patches to drop",
            [f"- `{d.patch}`: {d.why}" + "".join(f"; evidence: {e}" for e in d.evidence) for d in report.drop],
        ),
        (
            "applies_to widened",
            [f"- `{w.patch}`: `{w.old}` → `{w.new}`" for w in report.widenings if report.widen and w.new],
        ),
        ("Follow-up", [f"- {f}" for f in report.follow_up]),
        ("Old pin", [f"- {report.old_pin_advice}"] if report.old_pin_advice else []),
    ]
    if report.status is RebaseStatus.CONFLICT:
        sections = [("Not yet", [PARTIAL[0].upper() + PARTIAL[1:] + "."])]
    for title, items in sections:
        if items or title not in ("applies_to widened", "Old pin"):  # those two only when they have something
            out += ["", f"### {title}", "", *(items or ["None."])]
    if report.range_diff:
        out += ["", "### Range-diff", "", "```", report.range_diff.rstrip(), "```"]
    return "\n".join(out) + "\n"


# -- patched wheels: `patchtool build` and `patchtool provenance` ----------------------------


def build_text(result: BuildResult, style: Style) -> str:
    prov, w = result.provenance, result.wheel
    how = "repacked from" if result.way == "repack" else "built from"
    lines = [f"{prov.upstream.name} {prov.upstream.version} ({how} {result.source})"]
    lines += [f"  {style.ok('applied')}  {p.id}{style.dim(' ' + p.commit[:12])}" for p in prov.patches]
    lines += [style.dim(f"  build backend warning: {w}") for w in result.warnings]
    shipped = sum(f.wheel_path is not None for f in prov.files)
    lines.append(f"files changed by the series: {len(prov.files)} ({shipped} in the wheel)")
    lines.append(f"{style.ok('wheel')}: {w.path}")
    lines.append(f"  version {style.bold(prov.version)}, sha256 {w.sha256}, {w.size} bytes")
    lines.append(style.dim(f"  {w.members} members: {w.copied} copied unchanged, {w.written} written"))
    return "\n".join(lines)


def provenances_text(found: ProvenanceReports, style: Style) -> str:
    """Several reports, one after the other; the targets that gave none are the errors."""
    shown = [provenance_text(r, style) for r in found.reports]
    return "\n\n".join(shown + ([problems_text(found.refused, style)] if found.refused else []))


def provenance_text(report: ProvenanceReport, style: Style) -> str:
    prov, up = report.provenance, report.provenance.upstream
    where = f"wheel {report.location}" if report.kind == "wheel" else f"installed in {report.location}"
    lines = [f"{style.bold(up.name + ' ' + prov.version)} ({where})"]
    origin = f"{up.filename} (sha256 {up.sha256})" if up.source == "artifact" else f"{up.url} at {up.tag} ({up.commit})"
    lines.append(f"upstream: {up.name} {up.version} from {origin}")
    lines.append(f"pin: {prov.pin}; series hash {prov.series_hash}; built by patchtool {prov.tool_version}")
    lines.append(f"patches ({len(prov.patches)}):")
    lines += [
        f"  {i}. {p.id}  {p.file}  sha256 {p.sha256[:16]}\n       {style.dim(p.subject)}"
        for i, p in enumerate(prov.patches, 1)
    ]
    lines.append(
        f"files changed by the series: {len(prov.files)}; in place as built: "
        f"{sum(c.state == 'ok' for c in report.checks)}/{len(report.checks)}"
    )
    lines.append(f"every file against RECORD: {report.record_matched}/{report.record_listed} as listed")
    lines.append(problems_text(report.problems, style) if report.problems else style.ok("provenance: consistent"))
    return "\n".join(lines)

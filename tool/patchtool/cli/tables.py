"""The results that read best as tables (``status``, the ``scan`` matrix), drawn by rich.

A table is as wide as the terminal up to 100 columns, and 100 columns where there is no terminal
(a pipe, a file, a CI log): no line is longer. Colour follows ``Style`` (a terminal, no NO_COLOR).
"""

from __future__ import annotations

import io
import shutil
import sys
from typing import TYPE_CHECKING, Any

from patchtool.cli.render import Style, problems_text, rebase_in_progress

if TYPE_CHECKING:
    from rich.table import Table

    from patchtool.rebase.scan import ScanReport
    from patchtool.series.status import PatchStatus, StatusReport

WIDTH = 100
_SHORT = {"applied unchanged": "unchanged", "applied with shifted context": "shifted",
          "merged by 3-way merge": "3-way", "already upstream": "upstream", "partly upstream": "partly",
          "target gone": "gone", "not reached": "-"}


def width() -> int:
    """Columns to draw in: the terminal's, at most ``WIDTH``; ``WIDTH`` when stdout is no terminal."""
    if not sys.stdout.isatty():
        return WIDTH
    return max(40, min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns))


def draw(*parts: Any, style: Style) -> str:
    """``parts`` (rich renderables or plain strings), one after the other, as text ``width()`` wide."""
    from rich.console import Console
    from rich.text import Text

    out = io.StringIO()
    console = Console(file=out, width=width(), force_terminal=style.colour, no_color=not style.colour,
                      color_system="standard" if style.colour else None, highlight=False, emoji=False,
                      soft_wrap=False, legacy_windows=False)
    for part in parts:
        console.print(Text.from_ansi(part) if isinstance(part, str) else part)
    return "\n".join(line.rstrip() for line in out.getvalue().rstrip("\n").split("\n"))


def _table(*headers: str) -> Table:
    from rich import box
    from rich.table import Table

    ascii_only = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "") != "utf8"
    table = Table(box=box.ASCII2 if ascii_only else box.SIMPLE_HEAD, pad_edge=False, header_style="bold",
                  show_edge=False)
    for header in headers:
        table.add_column(header, overflow="fold")
    return table


def gpu_summary(p: PatchStatus) -> tuple[str, str]:
    """(how the patch's GPU verifications stand, in a few words; the colour to say it in)."""
    if not p.gpu_verification:
        return "-", "dim"
    passed = failed = stale = 0
    for evidence in p.gpu_evidence:
        current = [e for e in evidence if e.current is not False]
        if any(e.outcome == "fail" for e in current):
            failed += 1
        elif any(e.outcome == "pass" for e in current):
            passed += 1
        elif evidence and not current:
            stale += 1
    words = [f"{passed}/{len(p.gpu_verification)} pass"]
    words += [f"{failed} fail"] * bool(failed) + [f"{stale} stale"] * bool(stale)
    colour = "red" if failed else "green" if passed == len(p.gpu_verification) else "yellow"
    return ", ".join(words), colour


def status_table(report: StatusReport, style: Style) -> str:
    """One row per patch; ``status --long`` has every file and GPU verification."""
    from rich.text import Text

    table = _table("#", "patch", "kind", "upstream", "at pin", "files", "+/-", "GPU checks")
    for i, p in enumerate(report.patches, 1):
        gpu, colour = gpu_summary(p)
        table.add_row(str(i), Text(p.id, style="bold"), p.kind, p.upstream,
                      Text(p.applies, style="green" if p.applies == "applied" else "red"),
                      str(len(p.files)), f"+{p.added}/-{p.removed}", Text(gpu, style=colour))
    head = (f"pin {style.bold(report.pin)}: {report.upstream} {report.version} "
            f"({report.source}, base {report.base[:12]}), {len(report.patches)} patch(es)")
    lines = [head]
    if report.rebase is not None:
        lines.append(rebase_in_progress(report, style))
    tail = [problems_text([p], style) + " (skipped)" for p in report.gpu_results_problems]
    tail.append(style.dim("files and GPU verifications of each patch: `patchtool status --long`"))
    return draw(*lines, table, *tail, style=style)


def scan_table(report: ScanReport, style: Style) -> str:
    """The patch x version matrix: each cell the outcome in a word, conflicts in red."""
    from rich.text import Text

    table = _table("patch", *report.versions)
    for p in report.patches:
        cells = []
        for v in report.versions:
            outcome = report.matrix[p].get(v, "-")
            word = _SHORT.get(outcome, outcome)
            cells.append(Text(word, style="red" if word in ("conflict", "gone") else ""))
        table.add_row(p, *cells)
    return draw(f"series of {report.pin} against {', '.join(report.versions)}", table, style=style)

"""The results that read best as tables (``status``, the ``scan`` matrix), drawn by rich.

A table is as wide as the terminal up to 100 columns, and 100 columns where there is no terminal
(a pipe, a file, a CI log): no line is longer. Colour follows ``Style`` (a terminal, no NO_COLOR).
"""

from __future__ import annotations

import io
import re
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

    table = Table(box=box.ASCII2 if _ascii_only() else box.SIMPLE_HEAD, pad_edge=False, header_style="bold",
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
    headers = ("#", "patch", "kind", "upstream", "at pin", "files", "+/-", "GPU checks")
    rows: list[tuple[Cell, ...]] = []
    for i, p in enumerate(report.patches, 1):
        gpu, colour = gpu_summary(p)
        rows.append((str(i), (p.id, "bold"), p.kind, p.upstream,
                     (p.applies, "green" if p.applies == "applied" else "red"),
                     str(len(p.files)), f"+{p.added}/-{p.removed}", (gpu, colour)))
    head = (f"pin {style.bold(report.pin)}: {report.upstream} {report.version} "
            f"({report.source}, base {report.base[:12]}), {len(report.patches)} patch(es)")
    lines = [head]
    if report.rebase is not None:
        lines.append(rebase_in_progress(report, style))
    tail = [problems_text([p], style) + " (skipped)" for p in report.gpu_results_problems]
    tail.append(style.dim("files and GPU verifications of each patch: `patchtool status --long`"))
    return draw_table(lines, headers, rows, tail, style=style)


Cell = str | tuple[str, str]  # plain text, or (text, rich style: one of ``_SGR``)


def draw_table(before: list[str], headers: tuple[str, ...], rows: list[tuple[Cell, ...]], after: list[str], *,
               style: Style) -> str:
    """``draw(*before, table, *after)`` of a ``_table(*headers)`` holding ``rows``: the same text,
    drawn without importing rich (about 30 ms of a `status`) when nothing needs rich's wrapping
    or folding (printable ASCII that fits the width); by rich otherwise."""
    fast = simple_draw(before, headers, rows, after, colour=style.colour, width=width(), ascii_only=_ascii_only())
    if fast is not None:
        return fast
    from rich.text import Text

    table = _table(*headers)
    for row in rows:
        table.add_row(*(c if isinstance(c, str) else Text(c[0], style=c[1]) for c in row))
    return draw(*before, table, *after, style=style)


_SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33"}  # as rich writes them
_FROM_ANSI = {"1": "1", "2": "2", "32": "32", "31;1": "1;31"}  # render.Style's codes, as rich rewrites them
_ANSI = re.compile(r"\x1b\[([0-9;]*)m([^\x1b]*)\x1b\[0m")


def _plain_line(line: str, colour: bool, width: int) -> str | None:
    """One line of a string part as rich prints it (``Text.from_ansi``), or None if rich might
    write it otherwise (another escape, a character that is not printable ASCII, too long)."""
    out, visible, at = [], 0, 0
    for m in [*_ANSI.finditer(line), None]:
        text = line[at:m.start() if m else len(line)]
        out.append(text)
        visible += len(text)
        if m is None:
            break
        if m.group(1) not in _FROM_ANSI or not m.group(2):
            return None
        visible += len(m.group(2))
        out.append(f"\x1b[{_FROM_ANSI[m.group(1)]}m{m.group(2)}\x1b[0m" if colour else m.group(2))
        at = m.end()
    if visible > width or not _printable(_ANSI.sub(r"\2", line)):
        return None
    return "".join(out)


def _printable(text: str) -> bool:
    return text.isascii() and text.isprintable()


def simple_draw(before: list[str], headers: tuple[str, ...], rows: list[tuple[Cell, ...]], after: list[str], *,
                colour: bool, width: int, ascii_only: bool) -> str | None:
    """What :func:`draw_table` draws, built by hand, or None where only rich can draw it."""
    cells = [[(c, "") if isinstance(c, str) else c for c in row] for row in rows]
    if any(len(row) != len(headers) or any(not t or not _printable(t) or (s and s not in _SGR) for t, s in row)
           for row in cells) or not all(h and _printable(h) for h in headers):
        return None
    widths = [max([len(h), *(len(row[j][0]) for row in cells)]) for j, h in enumerate(headers)]
    last = len(headers) - 1
    divider = "|" if ascii_only else " "
    if sum(widths) + 3 * last > width:
        return None

    def paint(text: str, sgr: str) -> str:
        return f"\x1b[{sgr}m{text}\x1b[0m" if colour and sgr else text

    def line(row: list[tuple[str, str]], pad_sgr: str) -> str:
        parts = []
        for j, (text, sgr) in enumerate(row):
            pad = paint(" ", pad_sgr)
            parts.append((pad if j else "") + paint(text.ljust(widths[j]), sgr) + (pad if j < last else ""))
        return divider.join(parts)

    rule = ("+" if ascii_only else "\u2500").join(("-" if ascii_only else "\u2500") * (w + (j > 0) + (j < last))
                                                   for j, w in enumerate(widths))
    out: list[str] = []
    for part in before:
        for text in part.split("\n"):
            if (drawn := _plain_line(text, colour, width)) is None:
                return None
            out.append(drawn)
    out += [line([(h, _SGR["bold"]) for h in headers], _SGR["bold"]), rule]
    out += [line([(t, _SGR.get(s, "")) for t, s in row], "") for row in cells]
    for part in after:
        for text in part.split("\n"):
            if (drawn := _plain_line(text, colour, width)) is None:
                return None
            out.append(drawn)
    return "\n".join(x.rstrip() for x in "\n".join(out).rstrip("\n").split("\n"))


def _ascii_only() -> bool:
    return (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "") != "utf8"


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

"""The results that read best as tables (``status``, the ``scan`` matrix), drawn by rich.

A table is as wide as the terminal (``COLUMNS`` where it is set) up to 100 columns, and 100 columns
where there is no terminal (a pipe, a file, a CI log): no line is longer. Colour follows ``Style``
(a terminal, no NO_COLOR).
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from patchtool.cli.outcomes import LOOKS, Look
from patchtool.cli.render import Style, printable, problems_text, status_head

if TYPE_CHECKING:
    from patchtool.rebase.scan import ScanReport
    from patchtool.series.status import PatchStatus, StatusReport

WIDTH = 100
_UNSCANNED = Look(word="-", code="-", colour="")  # a cell the scan has no step for
_UNAVAILABLE = Look(word="not scanned", code="!", colour="red")  # its release could not be had


def width() -> int:
    """Columns to draw in: ``COLUMNS``, else the terminal's, at most ``WIDTH``; ``WIDTH`` when
    stdout is no terminal and ``COLUMNS`` is not set."""
    if not sys.stdout.isatty() and not os.environ.get("COLUMNS", "").strip().isdigit():
        return WIDTH
    return max(40, min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns))


def draw(*parts: Any, style: Style, soft_wrap: bool = False) -> str:
    """``parts`` (rich renderables or plain strings), one after the other, as text ``width()`` wide
    (with ``soft_wrap``, lines broken already, none cut or broken again)."""
    out = io.StringIO()
    console = Console(
        file=out,
        width=width(),
        force_terminal=style.colour,
        no_color=not style.colour,
        color_system="standard" if style.colour else None,
        highlight=False,
        emoji=False,
        soft_wrap=soft_wrap,
        legacy_windows=False,
    )
    for part in parts:
        console.print(Text.from_ansi(part) if isinstance(part, str) else part)
    return "\n".join(line.rstrip() for line in out.getvalue().rstrip("\n").split("\n"))


def _table(*headers: str, padding: int = 1, wraps: dict[str, int] | None = None) -> Table:
    """A table of ``headers``; with ``wraps``, only those columns wrap (at spaces, each at most as
    wide as given there), the others never (an id or a word is never cut in two)."""
    table = Table(
        box=box.ASCII2 if _ascii_only() else box.SIMPLE_HEAD,
        pad_edge=False,
        header_style="bold",
        show_edge=False,
        padding=(0, padding),
    )
    for header in headers:
        table.add_column(
            header,
            overflow="fold",
            no_wrap=wraps is not None and header not in wraps,
            max_width=(wraps or {}).get(header),
        )
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
    return ", ".join(words), "red" if failed else "green" if passed == len(p.gpu_verification) else "yellow"


def status_table(report: StatusReport, style: Style) -> str:
    """One row per patch; ``status --long`` has every file and GPU verification. The GPU column
    is there only when some patch has GPU checks: a fork without any is not told about GPUs."""
    gpu_column = any(p.gpu_verification for p in report.patches)
    cells: dict[str, list[Text]] = {
        h: [] for h in ("#", "patch", "kind", "upstream", "at pin", "files", "+/-", *["GPU checks"] * gpu_column)
    }
    for i, p in enumerate(report.patches, 1):
        cells["#"].append(Text(str(i)))
        cells["patch"].append(Text(p.id, style="bold"))
        cells["kind"].append(Text(p.kind))
        cells["upstream"].append(Text(printable(p.upstream)))
        cells["at pin"].append(Text(p.applies, style="green" if p.applies == "applied" else "red"))
        cells["files"].append(Text(str(len(p.files))))
        cells["+/-"].append(Text(f"+{p.added}/-{p.removed}"))
        if gpu_column:
            gpu, colour = gpu_summary(p)
            cells["GPU checks"].append(Text(gpu, style=colour))
    wraps = {"upstream", "GPU checks"}
    folds: set[str] = set()
    shown = _columns(cells, wraps, folds)
    if not _fits_words(shown, cells, wraps, folds):  # an id nearly as long as the terminal is wide: folded
        folds = {"patch"}
        shown = _columns(cells, wraps, folds)
    table = _table(*shown, wraps=_wrap_widths(shown, cells, wraps, folds))
    for row in zip(*(cells[h] for h in shown), strict=True):
        table.add_row(*row)
    head = (
        f"pin {style.bold(report.pin)}: {report.upstream} {report.version} "
        f"({report.source}, base {report.base[:12]}), {len(report.patches)} patch(es)"
    )
    lines = [head, *status_head(report, style)]
    tail = [problems_text([p], style) + " (skipped)" for p in report.gpu_results_problems]
    if left_out := [h for h in cells if h not in shown]:
        tail.append(style.dim(f"left out to fit {width()} columns: {', '.join(left_out)}"))
    what = "files and GPU verifications" if gpu_column else "the files"
    tail.append(style.dim(f"{what} of each patch: `patchtool status --long`"))
    return draw(*lines, table, *tail, style=style)


def _ascii_only() -> bool:
    return (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "") != "utf8"


def _fits(columns: list[list[str]]) -> bool:
    """Whether columns of these cells (each column's header first) fit ``width()`` side by side,
    one space of padding either side of each divider, as ``_table`` draws them."""
    return _fits_widths([max(map(len, c)) for c in columns])


def _fits_widths(widths: list[int]) -> bool:
    return sum(widths) + 3 * (len(widths) - 1) <= width()


def _columns(cells: dict[str, list[Text]], wraps: set[str], folds: set[str]) -> list[str]:
    """The columns shown: every one that fits, the optional ones giving way first where the ids need the room."""
    shown = list(cells)
    for optional in ("+/-", "files", "upstream", "GPU checks"):
        if _fits_words(shown, cells, wraps, folds):
            break
        if optional in shown:
            shown.remove(optional)
    return shown


def _least(header: str, cells: list[Text], wraps: set[str], folds: set[str]) -> int:
    """The columns a column needs: its widest cell, or where it wraps at spaces its longest word, or
    where it folds (an id longer than the room) its header's; a header is never cut."""
    if header in folds:
        return len(header)
    texts = [str(c) for c in [Text(header), *cells]]
    return max(len(word) for t in texts for word in t.split() or [""]) if header in wraps else max(map(len, texts))


def _fits_words(headers: list[str], cells: dict[str, list[Text]], wraps: set[str], folds: set[str]) -> bool:
    """Whether these columns fit ``width()`` with every cell whole, those in ``wraps`` broken at
    spaces, those in ``folds`` cut anywhere."""
    return _fits_widths([_least(h, cells[h], wraps, folds) for h in headers])


def _wrap_widths(headers: list[str], cells: dict[str, list[Text]], wraps: set[str], folds: set[str]) -> dict[str, int]:
    """How wide each column in ``wraps`` and ``folds`` may be for the table to fit ``width()``:
    the widest gives way first, none below what ``_least`` says it needs. Left to rich, every
    such column shrinks alike, and a header ("upstream") is cut in two."""
    widths = {h: max(len(str(c)) for c in [Text(h), *cells[h]]) for h in headers}
    least = {h: _least(h, cells[h], wraps, folds) for h in headers if h in wraps | folds}
    excess = sum(widths.values()) + 3 * (len(headers) - 1) - width()
    while excess > 0 and (room := [h for h in least if widths[h] > least[h]]):
        widths[max(room, key=lambda h: widths[h])] -= 1
        excess -= 1
    return {h: widths[h] for h in least}


def scan_table(report: ScanReport, style: Style) -> str:
    """The patch x version matrix: each cell the outcome in a word, conflicts in red.

    One row per patch when the versions fit across; otherwise (a scan of many releases) one row
    per version and a column per patch, numbered, with the numbers spelled out below; and where
    even that is too wide, each outcome as one character, with its key."""
    looks = {
        p: [
            LOOKS[s.outcome]
            if (s := report.steps[p].get(v))
            else (_UNAVAILABLE if v in report.unavailable else _UNSCANNED)
            for v in report.versions
        ]
        for p in report.patches
    }
    words = {p: [look.word for look in row] for p, row in looks.items()}
    title = f"series of {report.pin} against {', '.join(report.versions)}"
    stops = {look for outcome, look in LOOKS.items() if outcome.stops} | {_UNAVAILABLE}

    def cell(look: Look, *, code: bool = False) -> Text:
        return Text(look.code if code else look.word, style="red" if look in stops else "")

    across = [["patch", *report.patches]] + [
        [v, *(words[p][j] for p in report.patches)] for j, v in enumerate(report.versions)
    ]
    if _fits(across):
        table = _table("patch", *report.versions)
        for p in report.patches:
            table.add_row(p, *map(cell, looks[p]))
        return draw(title, table, style=style)
    numbers = [str(i) for i in range(1, len(report.patches) + 1)]
    down = [["version", *report.versions]] + [[n, *words[p]] for n, p in zip(numbers, report.patches, strict=True)]
    key = [f"{n}: {p}" for n, p in zip(numbers, report.patches, strict=True)]
    if _fits(down):
        table = _table("version", *numbers)
        for j, v in enumerate(report.versions):
            table.add_row(v, *(cell(looks[p][j]) for p in report.patches))
        return draw(title, table, *key, style=style)
    # a character a cell, one space between columns, as many tables as it takes
    room = width() - max(map(len, down[0])) - 1
    groups: list[list[int]] = [[]]
    for i, n in enumerate(numbers):
        if groups[-1] and sum(len(numbers[k]) + 1 for k in groups[-1]) + len(n) + 1 > room:
            groups.append([])
        groups[-1].append(i)
    drawn: list[Table] = []
    for group in groups:
        table = _table("version", *(numbers[i] for i in group), padding=0)
        for j, v in enumerate(report.versions):
            table.add_row(v, *(cell(looks[report.patches[i]][j], code=True) for i in group))
        drawn.append(table)
    used = dict.fromkeys(look for p in report.patches for look in looks[p])
    key.append("  ".join(f"{look.code} {look.word}" for look in used))
    return draw(title, *drawn, *key, style=style)

"""Prose in the human text (a prediction, a hint, a patch's why and evidence), broken at spaces by
rich to the width the tables keep to (``tables.width``: the terminal's or ``COLUMNS``, at most 100
columns, 100 in a pipe). A line that fits is left as it is, so at 100 columns and more the text
reads as it did before it was wrapped; and the text of a rebase, whose notes are prose."""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from patchtool.cli.render import PARTIAL, Style, printable
from patchtool.cli.tables import draw, width

if TYPE_CHECKING:
    from patchtool.rebase.transaction import RebaseReport

# where a line of a person's prose starts a block of its own: a list item or an indented line
_BLOCK = re.compile(r"\s+|(?:[-*\u2022]|\d+[.)])\s+")


def fill(text: str, style: Style, *, prefix: str = "", indent: int = 0) -> str:
    """``text`` after ``prefix`` on its first line (either may be coloured by ``style``), the
    lines after it ``indent`` spaces in, none wider than ``width()`` but for a word longer than a
    line (a path, a url), which stays whole on a line of its own: cut, it could not be copied."""
    body = Text.from_ansi(text)
    body.expand_tabs()  # as rich's wrap would, so that each line is a slice of ``body``
    columns = width()
    console = Console(file=io.StringIO(), width=columns, legacy_windows=False)
    lines = [Text.from_ansi(prefix)]
    room = max(columns - lines[0].cell_len, 1)
    for n, part in enumerate(body.split("\n", allow_blank=True)):
        if n:  # a line break of the text's own
            lines.append(Text(" " * indent))
            room = columns - indent
        while part.plain:
            word = part.plain.split(" ", 1)[0]
            if cell_len(word) > room and len(lines) == 1 and lines[0].plain and cell_len(word) <= columns - indent:
                lines.append(Text(" " * indent))  # the first word starts on the next line, where it fits
                room = columns - indent
            line = part[: len(word)] if cell_len(word) > room else part.wrap(console, room)[0]
            line = line if line.plain else part  # no line without a character: the loop always ends
            part = part[len(line.plain) :]  # noqa: PLW2901 -- the loop consumes its line
            part = part[len(part.plain) - len(part.plain.lstrip(" ")) :]  # noqa: PLW2901
            line.rstrip()
            lines[-1].append_text(line)
            if part.plain:
                lines.append(Text(" " * indent))
                room = columns - indent
    return draw(Text("\n").join(lines), style=style, soft_wrap=True)


def reflow(text: str, style: Style, *, indent: int = 0) -> list[str]:
    """A person's prose (a patch's why), ``indent`` spaces in, as its lines: a paragraph, list item
    or indented line whose lines all fit ``width()`` is kept as written; one that does not is
    joined and wrapped, a list item's later lines under its text."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if not line.strip():
            blocks.append([])
        elif not blocks or not blocks[-1] or _BLOCK.match(line):
            blocks.append([line])
        else:
            blocks[-1].append(line)
    pad, columns = " " * indent, width()
    out: list[str] = []
    for block in blocks:
        if not block:
            out.append("")
        elif all(indent + len(line) <= columns for line in block):
            out += [(pad + line).rstrip() for line in block]
        else:
            out += _rejoined(block, style, indent)
    return out


def _rejoined(block: list[str], style: Style, indent: int) -> list[str]:
    """A block of prose joined into one and filled, a list item's later lines under its text."""
    marker = _BLOCK.match(block[0])
    head = marker.group(0) if marker else ""
    joined = " ".join([block[0][len(head) :].strip(), *(line.strip() for line in block[1:])])
    return fill(joined, style, prefix=" " * indent + head, indent=indent + len(head)).split("\n")


def rebase_text(report: RebaseReport, style: Style) -> str:
    from patchtool.rebase.transaction import RebaseStatus

    head = {
        RebaseStatus.DONE: style.ok("rebased"),
        RebaseStatus.CONFLICT: style.bad("stopped"),
        RebaseStatus.DRY_RUN: style.bold("dry run"),
    }
    lines = [f"{head[report.status]}: {report.old_pin} -> {report.new_pin}"]
    for s in report.steps:
        word = str(s.outcome)
        mark = style.bad(word) if s.outcome.stops else style.ok(word) if s.outcome.applied else style.dim(word)
        detail = "" if s.shifted else s.detail  # a shifted patch lists its hunks below instead
        lines.append(f"  {s.id}: {mark}" + (f" - {printable(detail)}" if detail else ""))
        lines += [printable(f"      {m.file}: {m.describe()}") for m in s.shifted]
        lines += [printable(f"      conflict in {f}") for f in s.conflicted]
        lines += [printable(f"      misplaced: {m}") for m in s.misplaced]
        lines += [printable(f"      {r}") for r in s.renamed]
        lines += [printable(f"      evidence: {e}") for e in s.evidence]
        lines += [printable(f"      assumes {pid} skipped") for pid in s.assumes]
        lines += [printable(f"      upstream: {c}") for c in s.upstream_commits]
    if report.drift:
        lines.append("upstream changed the code under these patches (they still applied):")
        for dr in report.drift:
            lines.append(printable(f"  {dr.patch}: {dr.path}: {dr.detail}"))
            lines += [printable(f"      upstream: {c}") for c in dr.commits]
    lines += [fill(printable(h), style, prefix="history: ", indent=2) for h in report.history]
    if failed := [a for a in report.assumptions if not a.ok]:
        lines.append("assumption checks that fail on the target:")
        lines += [printable(f"  {a.patch}/{a.id}: expected {a.expects}, found {a.found}") for a in failed]
    if due := [r for r in report.revisit if r.holds]:
        lines.append("rejected ideas whose reason may no longer hold:")
        lines += [printable(f"  {r.entry}: {r.condition} - {r.why}") for r in due]
    if report.drop:
        lines.append("patches whose drop condition holds:")
        for d in report.drop:
            lines += [printable(f"  {d.patch}: {d.why}"), *(printable(f"      evidence: {e}") for e in d.evidence)]
    if widened := [w for w in report.widenings if report.widen and w.new]:
        lines.append(
            f"applies_to {'widened' if report.status is RebaseStatus.DONE else 'to widen'} to admit the target:"
        )
        lines += [f"  {w.patch}: '{w.old}' -> '{w.new}'" for w in widened]
    lines += [fill(printable(f), style, prefix="follow-up: ", indent=2) for f in report.follow_up]
    if report.old_pin_advice:
        lines.append(fill(report.old_pin_advice, style, prefix="old pin: ", indent=2))
    if report.status is RebaseStatus.CONFLICT:
        lines.append(fill(style.dim(PARTIAL), style, indent=2))
    if report.worktree:
        lines.append(f"conflict left in: {report.worktree}")
    if report.written:
        lines.append("written: " + ", ".join(report.written))
    return "\n".join(lines)

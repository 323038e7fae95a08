"""``scan`` and ``rebase`` reports as one self-contained HTML page each, rendered by Jinja2.

The templates, the CSS and the script are package data (``templates/``), fed by the typed
reports. Autoescaping is on: every string of a report is text in the page. The CSS and the one
script are inline, allowed by hash in the page's Content-Security-Policy, which forbids every
fetch, so the page works offline and an injected script would not run even if a string escaped.
The page reads without JavaScript; the script only adds the scan grid's detail panel.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import functools
import hashlib
import re
from collections.abc import Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

import jinja2

from patchtool import __version__
from patchtool.cli.outcomes import LOOKS, css_class
from patchtool.rebase.replay import PatchOutcome, Step
from patchtool.rebase.transaction import RebaseStatus

if TYPE_CHECKING:
    from patchtool.rebase.scan import ScanReport
    from patchtool.rebase.transaction import RebaseReport

_STATUS = MappingProxyType(
    {
        RebaseStatus.DONE: "rebased",
        RebaseStatus.DRY_RUN: "dry run",
        RebaseStatus.CONFLICT: "stopped at a conflict",
    }
)
_RANGE_HEAD = re.compile(r"^\s*(?:\d+|-+):\s+(?:[0-9a-f]+|-+) ([=!<>]) ")
_RANGE_CLASS = MappingProxyType({"=": "rd-same", "!": "rd-changed", "<": "rd-gone", ">": "rd-new"})
_RANGE_SIGN = MappingProxyType({"    -": "rd-minus", "    +": "rd-plus"})  # an inner diff's line


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Section:
    key: str
    title: str
    items: Sequence[object]
    count: int


def scan_page(report: ScanReport) -> str:
    """The scan's patch x version grid, each cell opening its detail."""
    columns = [[s.outcome for p in report.patches if (s := report.steps[p].get(v))] for v in report.versions]
    totals = [(sum(o.applied for o in column), sum(o.stops for o in column)) for column in columns]
    return _page("scan.html.j2", script=_source("scan.js"), report=report, totals=totals)


def rebase_page(report: RebaseReport) -> str:
    """The rebase: outcome per patch, drift, failed assumptions, revisits, what to drop, follow-ups
    and the range-diff."""
    advice = [report.old_pin_advice] if report.old_pin_advice else []
    sections = [
        *(
            _Section(key=key, title=title, items=items, count=len(items))
            for key, title, items in (
                ("outcomes", "Outcome per patch", report.steps),
                ("drift", "Drift: upstream changed the code under applied patches", report.drift),
                ("assumptions", "Failed assumption checks", [a for a in report.assumptions if not a.ok]),
                ("drop", "Patches to drop", report.drop),
                ("revisit", "Rejected ideas to revisit", [r for r in report.revisit if r.holds]),
                ("widened", "applies_to widened (--widen)", [w for w in report.widenings if report.widen and w.new]),
                ("follow-up", "Follow-ups", [*report.follow_up, *advice]),
            )
        ),
        _Section(
            key="range-diff",
            title="Range-diff",
            items=_range_diff(report.range_diff),
            count=int(bool(report.range_diff)),
        ),
    ]
    return _page(
        "rebase.html.j2",
        report=report,
        sections=sections,
        partial=report.status is RebaseStatus.CONFLICT,
        counts=collections.Counter(s.outcome for s in report.steps),
        status_words=_STATUS,
    )


def step_detail(step: Step) -> str:
    """One step's detail as both pages show it (moved hunks, conflicted files, misplaced hunks)."""
    return str(_environment().get_template("parts.html.j2").module.step_detail(step))  # type: ignore[attr-defined]


def _range_diff(text: str) -> list[tuple[str | None, str]]:
    """``git range-diff``'s lines, each with its class: commit lines by their mark, inner diff lines
    by their sign."""
    lines: list[tuple[str | None, str]] = []
    for line in text.rstrip("\n").splitlines():
        m = _RANGE_HEAD.match(line)
        lines.append((_RANGE_CLASS[m.group(1)] if m else _RANGE_SIGN.get(line[:5]), line))
    return lines


def _page(name: str, *, script: str = "", **context: object) -> str:
    env = _environment()
    css = env.get_template("report.css.j2").render()
    return env.get_template(name).render(
        css=css, style_hash=_csp_hash(css), script=script, script_hash=_csp_hash(script), **context
    )


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("patchtool.cli", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.globals.update(looks=LOOKS, css_class=css_class, Outcome=PatchOutcome, version=__version__)
    return env


def _source(name: str) -> str:
    """A package file as it is (the script: no template syntax to read into it)."""
    env = _environment()
    assert env.loader is not None
    return env.loader.get_source(env, name)[0]


def _csp_hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")

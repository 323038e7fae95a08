"""``scan`` and ``rebase`` reports as one self-contained HTML page each.

Pure functions from a report's ``to_dict()`` (the ``--json`` envelope's ``data``) to the page's
text. Everything the page needs is inline: its CSS and its one script are allowed by hash in the
page's Content-Security-Policy, which forbids every fetch, so the page works offline and an
injected script would not run even if a string escaped. Every string from the data goes through
:func:`el`, which escapes whatever is not already :class:`Markup`. The page reads without
JavaScript; the script only adds the scan grid's detail panel.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import html
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from patchtool import __version__
from patchtool.rebase.replay import PatchOutcome


class Markup(str):
    """HTML that is safe as it is: made by :func:`el` or a constant of this module."""

    __slots__ = ()


def el(tag: str, *children: object, **attrs: object) -> Markup:
    """``<tag attrs>children</tag>``. Children that are not Markup are escaped; lists, tuples and
    generators are flattened; None and False are left out. ``class_`` is ``class``, and ``_`` in
    other names is ``-`` (``data_cell`` is ``data-cell``)."""
    parts = [tag]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        name = "class" if key == "class_" else key.replace("_", "-")
        parts.append(name if value is True else f'{name}="{html.escape(str(value), quote=True)}"')
    return Markup(f"<{' '.join(parts)}>{_join(children)}</{tag}>")


def cat(*children: object) -> Markup:
    """The children side by side, escaped as :func:`el` escapes them (``str + str`` would drop the
    Markup: the page would show tags as text, which is safe but useless)."""
    return Markup(_join(children))


def _join(children: Iterable[object]) -> str:
    out = []
    for child in children:
        if child is None or child is False:
            continue
        if isinstance(child, Markup):
            out.append(str(child))
        elif isinstance(child, list | tuple) or hasattr(child, "__next__"):
            out.append(_join(child))  # type: ignore[arg-type]
        else:
            out.append(html.escape(str(child), quote=True))
    return "".join(out)


# -- outcomes and their colours ----------------------------------------------------------------

# each outcome's short word and cell colour (light enough for dark text); the word is in every
# cell, so nothing rests on the colour alone
OUTCOME_STYLE: dict[PatchOutcome, tuple[str, str]] = {
    PatchOutcome.UNCHANGED: ("unchanged", "#a8dcaa"),
    PatchOutcome.SHIFTED: ("shifted", "#d9eeb0"),
    PatchOutcome.MERGED: ("3-way", "#ffe08a"),
    PatchOutcome.PARTLY_UPSTREAM: ("partly upstream", "#c5e3f6"),
    PatchOutcome.UPSTREAM: ("upstream", "#8cc8ee"),
    PatchOutcome.CONFLICT: ("conflict", "#f29b9b"),
    PatchOutcome.TARGET_GONE: ("target gone", "#d6b0e6"),
    PatchOutcome.DROPPED: ("dropped", "#d4d4d4"),
    PatchOutcome.NOT_REACHED: ("not reached", "#f0f0f0"),
}
UNKNOWN_COLOUR = "#ffffff"


def outcome_class(outcome: object) -> str:
    """The CSS class of an outcome string: ``o-conflict``, ``o-target-gone``; ``o-unknown`` else."""
    try:
        return "o-" + PatchOutcome(str(outcome)).name.lower().replace("_", "-")
    except ValueError:
        return "o-unknown"


def _outcome_word(outcome: object) -> str:
    try:
        return OUTCOME_STYLE[PatchOutcome(str(outcome))][0]
    except ValueError:
        return str(outcome)


def _applies(outcome: object) -> bool:
    try:
        return PatchOutcome(str(outcome)).applied
    except ValueError:
        return False


def _badge(outcome: object) -> Markup:
    return el("span", str(outcome), class_=f"badge {outcome_class(outcome)}")


# -- shared parts ------------------------------------------------------------------------------

_CONFLICT = re.compile(r"CONFLICT \(([^)]*)\): Merge conflict in (.+)")


def detail_items(detail: str, *, conflicted: Sequence[str] = (),
                 shifted: Sequence[Mapping[str, Any]] = ()) -> Markup:
    """A step's detail: its moved hunks (``shifted``: file, hunk, old and new line, offset) as a
    table, the merge's conflicts and any other message as a list; then the ``conflicted`` files no
    message named. With ``shifted`` the ``detail`` text is only its summary, so it is not repeated."""
    lines: list[Markup] = []
    named: set[str] = set()
    for part in (p.strip() for p in re.split(r";\s+(?=CONFLICT)", detail) if p.strip() and not shifted):
        if c := _CONFLICT.fullmatch(part):
            named.add(c.group(2))
            lines.append(el("li", "conflict (", c.group(1), ") in ", el("code", c.group(2))))
        else:
            lines.append(el("li", part))
    lines += [el("li", "conflict in ", el("code", f)) for f in conflicted if f not in named]
    table = _table(("file", "hunk", "patch put it at", "now at line", "offset"),
                   ((el("code", m.get("file")), f"#{m.get('hunk')}", m.get("old_line"), m.get("new_line"),
                     f"{int(m.get('offset') or 0):+d}") for m in shifted), class_="hunks") if shifted else None
    return cat(table, el("ul", lines, class_="plain") if lines else None)


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]], **attrs: object) -> Markup:
    return el("table", el("thead", el("tr", (el("th", h) for h in headers))),
              el("tbody", (el("tr", (el("td", c) for c in row)) for row in rows)), **attrs)


def _value(value: object) -> Markup:
    """A field this page has no special rendering for, shown as nested lists."""
    if isinstance(value, Mapping):
        return el("dl", ((el("dt", k), el("dd", _value(v))) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return el("ul", (el("li", _value(v)) for v in value), class_="plain")
    return el("span", value)


def _page(title: str, body: Markup, *, script: str = "") -> str:
    """The document: the CSP allows the inline style and script by hash and nothing else."""
    style_hash = _csp_hash(_CSS)
    policy = f"default-src 'none'; style-src '{style_hash}'; img-src data:; base-uri 'none'; form-action 'none'"
    if script:
        policy += f"; script-src '{_csp_hash(script)}'"
    head = el("head", Markup('<meta charset="utf-8">'),
              Markup(f'<meta http-equiv="Content-Security-Policy" content="{html.escape(policy)}">'),
              Markup('<meta name="viewport" content="width=device-width, initial-scale=1">'),
              Markup('<link rel="icon" href="data:,">'),
              el("title", title), Markup(f"<style>{_CSS}</style>"))
    tail = Markup(f"<script>{script}</script>") if script else None
    return "<!DOCTYPE html>\n" + el("html", head, el("body", body, tail), lang="en") + "\n"


def _csp_hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def _footer() -> Markup:
    return el("footer", f"patchtool {__version__}; one self-contained file: it fetches nothing.")


def _legend() -> Markup:
    return el("ul", (el("li", el("span", word, class_=f"badge {outcome_class(o)}"), word != o and f" {o}")
                     for o, (word, _) in OUTCOME_STYLE.items()), class_="legend")


# -- the scan ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Scan:
    """``ScanReport.to_dict()`` as the page reads it, with the optional per-version keys a scan may
    add: ``drift``, ``failed_assumptions`` and ``revisit``, each ``{version: [items]}`` holding the
    items a rebase report holds (drift and assumptions with a ``patch`` field)."""

    pin: str
    versions: list[str]
    patches: list[str]
    matrix: Mapping[str, Mapping[str, str]]
    details: Mapping[str, Mapping[str, str]]
    shifted: Mapping[str, Mapping[str, list[Mapping[str, Any]]]]
    extras: Mapping[str, Mapping[str, list[Mapping[str, Any]]]]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> _Scan:
        return cls(pin=str(data.get("pin", "")), versions=[str(v) for v in data.get("versions", [])],
                   patches=[str(p) for p in data.get("patches", [])], matrix=data.get("matrix") or {},
                   details=data.get("details") or {}, shifted=data.get("shifted") or {},
                   extras={k: data.get(k) or {} for k in ("drift", "failed_assumptions", "revisit")})

    def outcome(self, patch: str, version: str) -> str:
        return str(self.matrix.get(patch, {}).get(version, "not scanned"))

    def items(self, key: str, patch: str, version: str) -> list[Mapping[str, Any]]:
        return [x for x in self.extras[key].get(version) or [] if x.get("patch") == patch]


def scan_page(data: Mapping[str, Any]) -> str:
    """The page for ``ScanReport.to_dict()``: a patch x version grid whose cells open their detail
    (with JavaScript in a panel beside the grid, without it further down the page)."""
    scan = _Scan.from_dict(data)
    cells = [_scan_detail(scan, i, j) for i in range(len(scan.patches)) for j in range(len(scan.versions))]
    revisits = [_revisit_detail(j, v, scan.extras["revisit"].get(v)) for j, v in enumerate(scan.versions)
                if scan.extras["revisit"]]
    body = cat(
        el("header", el("h1", "Scan: the series of ", el("code", scan.pin), " against ", str(len(scan.versions)),
                        " upstream versions"),
           el("p", f"{len(scan.patches)} patch(es); versions {', '.join(scan.versions)}.", class_="meta")),
        el("main", el("div", _scan_grid(scan), _legend(), _missing_note(scan), class_="grid-wrap"),
           el("aside", el("p", "Hover over or click a cell for its detail.", class_="hint"), id="panel",
              class_="panel", aria_live="polite"),
           class_="scan"),
        el("section", el("h2", "Every cell"), cells, revisits, id="details"),
        _footer())
    return _page(f"patchtool scan: {scan.pin}", body, script=_SCAN_JS)


def _scan_grid(scan: _Scan) -> Markup:
    head = el("tr", el("th", "patch", scope="col"), (el("th", v, scope="col") for v in scan.versions))
    rows = [el("tr", el("th", p, scope="row"),
               (_scan_cell(i, j, scan.outcome(p, v)) for j, v in enumerate(scan.versions)))
            for i, p in enumerate(scan.patches)]
    totals = el("tr", el("th", "apply", scope="row"),
                (el("td", _version_total(scan, v)) for v in scan.versions), class_="totals")
    revisit = el("tr", el("th", "registry revisits", scope="row"),
                 (_revisit_cell(j, scan.extras["revisit"].get(v)) for j, v in enumerate(scan.versions)),
                 class_="revisits") if scan.extras["revisit"] else None
    return el("table", el("thead", head), el("tbody", rows, totals, revisit), class_="grid", id="grid")


def _scan_cell(i: int, j: int, outcome: str) -> Markup:
    return el("td", el("a", _outcome_word(outcome), href=f"#c-{i}-{j}", class_="cell-link", title=outcome),
              class_=f"cell {outcome_class(outcome)}")


def _version_total(scan: _Scan, version: str) -> Markup:
    outcomes = [scan.outcome(p, version) for p in scan.patches]
    stops = sum(o in (PatchOutcome.CONFLICT, PatchOutcome.TARGET_GONE) for o in outcomes)
    return cat(f"{sum(_applies(o) for o in outcomes)}/{len(outcomes)}",
               el("span", f" {stops} stop(s)", class_="stops") if stops else None)


def _scan_detail(scan: _Scan, i: int, j: int) -> Markup:
    patch, version = scan.patches[i], scan.versions[j]
    outcome, detail = scan.outcome(patch, version), str(scan.details.get(patch, {}).get(version, ""))
    drift, failed = scan.items("drift", patch, version), scan.items("failed_assumptions", patch, version)
    ask = outcome != PatchOutcome.UNCHANGED and not scan.extras["drift"]
    return el("section",
              el("h3", el("code", patch), " at ", version, " ", _badge(outcome)),
              detail and detail_items(detail, shifted=scan.shifted.get(patch, {}).get(version, [])),
              drift and _table(("file", "scope", "change", "detail"),
                               ((el("code", d.get("path")), el("code", d.get("scope")), d.get("change"),
                                 d.get("detail")) for d in drift), class_="drift"),
              failed and el("ul", (el("li", "assumption ", el("code", a.get("id")), ": expected ", a.get("expects"),
                                      ", found ", a.get("found"), a.get("why") and f" ({a.get('why')})")
                                   for a in failed), class_="plain failed"),
              ask and el("p", "Drift and assumption checks at this version: ",
                         el("code", f"patchtool rebase --to {version} --dry-run"), ".", class_="muted"),
              id=f"c-{i}-{j}", class_="cell-detail")


def _revisit_cell(j: int, results: Sequence[Mapping[str, Any]] | None) -> Markup:
    if results is None:
        return el("td", "not checked", class_="cell r-none")
    due = sum(bool(r.get("holds")) for r in results)
    return el("td", el("a", f"{due} due" if due else "none due", href=f"#r-{j}", class_="cell-link",
                       title=f"{due} of {len(results)} revisit condition(s) hold"),
              class_=f"cell {'r-due' if due else 'r-none'}")


def _revisit_detail(j: int, version: str, results: Sequence[Mapping[str, Any]] | None) -> Markup:
    due = [r for r in results or () if r.get("holds")]
    return el("section", el("h3", "Registry revisits at ", version),
              _table(("entry", "condition", "why", "found"),
                     ((el("code", r.get("entry")), r.get("condition"), r.get("why"), r.get("detail")) for r in due),
                     class_="revisit") if due else el("p", "No rejected idea is due for a revisit.", class_="muted"),
              id=f"r-{j}", class_="cell-detail")


def _missing_note(scan: _Scan) -> Markup | None:
    """What the data lacks: a scan made before scans computed drift and assumptions, or a
    project without a do-not-retread registry (no revisits to show)."""
    missing = [what for key, what in (("drift", "drift"), ("failed_assumptions", "assumption checks"))
               if not scan.extras[key]]
    notes = [el("p", "This scan's data has no ", " or ".join(missing), " per version; a dry-run rebase to one "
                "version reports them.", class_="muted") if missing else None]
    if not scan.extras["revisit"]:
        notes.append(el("p", "No registry revisits: this project has no do-not-retread registry "
                         "(`registry` in patchset.toml).", class_="muted"))
    return cat(*notes)


# -- the rebase report -------------------------------------------------------------------------

_STATUS = {"done": "rebased", "dry-run": "dry run", "conflict": "stopped at a conflict"}
_NOT_YET = "Not computed at a conflict stop: it comes with the finished rebase (`--dry-run` gives it now)."


def rebase_page(data: Mapping[str, Any]) -> str:
    """The page for ``RebaseReport.to_dict()``: outcome per patch, drift per file and scope,
    failed assumptions, revisits, what to drop, follow-ups and the range-diff."""
    steps = list(data.get("patches", []))
    partial = bool(data.get("partial"))
    sections = [
        ("outcomes", "Outcome per patch", len(steps), _outcomes_table(steps)),
        ("drift", "Drift: upstream changed the code under applied patches", len(data.get("drift", [])),
         _drift(data.get("drift", []))),
        ("assumptions", "Failed assumption checks", len(data.get("failed_assumptions", [])),
         _assumptions(data.get("failed_assumptions", []))),
        ("drop", "Patches to drop", len(data.get("drop", [])),
         _table(("patch", "why"), ((el("code", d.get("patch")), d.get("why")) for d in data.get("drop", [])))),
        ("revisit", "Rejected ideas to revisit", len(data.get("revisit", [])),
         _table(("entry", "condition", "why", "found"),
                ((el("code", r.get("entry")), r.get("condition"), r.get("why"), r.get("detail"))
                 for r in data.get("revisit", [])))),
        ("widened", "applies_to widened (--widen)", len(data.get("widened", [])),
         _table(("patch", "was", "now"), ((el("code", w.get("patch")), el("code", w.get("old")),
                                           el("code", w.get("new"))) for w in data.get("widened", [])))),
        ("follow-up", "Follow-ups", len(data.get("follow_up", [])) + bool(_advice(data)),
         el("ul", (el("li", f) for f in [*data.get("follow_up", []), *_advice(data)]))),
        ("range-diff", "Range-diff", int(bool(data.get("range_diff"))), _range_diff(str(data.get("range_diff", "")))),
    ]
    nav = el("nav", el("ul", (el("li", el("a", title, href=f"#{key}"), " ", el("span", count, class_="count"))
                              for key, title, count, _ in sections)))
    body = [el("section", el("h2", title),
               el("p", _NOT_YET, class_="muted") if partial and key not in ("outcomes",)
               else content if count else el("p", "None.", class_="muted"), id=key)
            for key, title, count, content in sections]
    return _page(f"patchtool rebase: {data.get('old_pin', '')} -> {data.get('new_pin', '')}",
                 cat(_rebase_header(data, steps), nav, el("main", body, class_="rebase"), _footer()))


def _advice(data: Mapping[str, Any]) -> list[str]:
    """What to do with the old pin, as the report says it (when it says anything)."""
    text = (data.get("old_pin_advice") or {}).get("text")
    return [str(text)] if text else []


def _rebase_header(data: Mapping[str, Any], steps: Sequence[Mapping[str, Any]]) -> Markup:
    status = str(data.get("status", ""))
    counts: dict[str, int] = {}
    for s in steps:
        counts[str(s.get("outcome"))] = counts.get(str(s.get("outcome")), 0) + 1
    chips = el("ul", (el("li", el("span", f"{n} {_outcome_word(o)}", class_=f"badge {outcome_class(o)}"))
                      for o, n in counts.items()), class_="legend")
    where = el("p", "The conflict is left in ", el("code", data.get("worktree")),
               ": resolve it there, then ", el("code", "patchtool rebase --continue"), ".") \
        if data.get("worktree") else None
    written = el("p", "Written: ", (el("code", w) for w in data.get("written", [])), class_="written") \
        if data.get("written") else None
    return el("header", el("h1", "Rebase ", el("code", data.get("old_pin")), " → ", el("code", data.get("new_pin")),
                           " ", el("span", _STATUS.get(status, status), class_=f"status s-{status}")),
              el("p", f"upstream {data.get('old_version')} → {data.get('new_version')}; {len(steps)} patch(es)",
                 class_="meta"),
              chips, where, written)


def _outcomes_table(steps: Sequence[Mapping[str, Any]]) -> Markup:
    known = {"id", "file", "outcome", "commit", "detail", "conflicted", "misplaced", "renamed", "shifted"}
    rows = []
    for n, s in enumerate(steps, 1):
        listed = [el("li", "misplaced: ", m) for m in s.get("misplaced", [])]
        listed += [el("li", r) for r in s.get("renamed", [])]
        other = [(el("dt", k), el("dd", _value(v))) for k, v in s.items() if k not in known]
        rows.append(el("tr", el("td", n), el("th", el("code", s.get("id")), scope="row"),
                       el("td", _outcome_word(s.get("outcome")), title=str(s.get("outcome")),
                          class_=f"cell {outcome_class(s.get('outcome'))}"),
                       el("td", detail_items(str(s.get("detail", "")), conflicted=s.get("conflicted", []),
                                             shifted=s.get("shifted", [])),
                          el("ul", listed, class_="plain") if listed else None, el("dl", other) if other else None),
                       el("td", el("code", s.get("file")), el("br"),
                          el("code", str(s.get("commit", ""))[:12], class_="muted") if s.get("commit") else None)))
    return el("table", el("thead", el("tr", (el("th", h) for h in ("#", "patch", "outcome", "detail",
                                                                    "file, commit")))),
              el("tbody", rows), class_="outcomes")


def _drift(items: Sequence[Mapping[str, Any]]) -> Markup:
    """Drift grouped per file, then per scope within the file."""
    by_file: dict[str, list[Mapping[str, Any]]] = {}
    for d in items:
        by_file.setdefault(str(d.get("path")), []).append(d)
    return cat(
        el("div", el("h3", el("code", path)),
           _table(("scope", "change", "patch", "detail"),
                  ((el("code", d.get("scope")), el("span", d.get("change"), class_=f"change c-{d.get('change')}"),
                    el("code", d.get("patch")), d.get("detail"))
                   for d in sorted(group, key=lambda d: (str(d.get("scope")), str(d.get("patch")))))),
           class_="drift-file")
        for path, group in sorted(by_file.items()))


def _assumptions(items: Sequence[Mapping[str, Any]]) -> Markup:
    return _table(("patch", "check", "expected", "found", "why"),
                  ((el("code", a.get("patch")), el("code", a.get("id")), a.get("expects"), a.get("found"), a.get("why"))
                   for a in items), class_="assumptions")


_RANGE_HEAD = re.compile(r"^\s*(?:\d+|-+):\s+(?:[0-9a-f]+|-+) ([=!<>]) ")
_RANGE_CLASS = {"=": "rd-same", "!": "rd-changed", "<": "rd-gone", ">": "rd-new"}


def _range_diff(text: str) -> Markup:
    """``git range-diff`` with its commit lines and its inner diff coloured."""
    lines = []
    for line in text.rstrip("\n").splitlines():
        m = _RANGE_HEAD.match(line)
        cls = _RANGE_CLASS[m.group(1)] if m else ("rd-minus" if line.startswith("    -") else
                                                  "rd-plus" if line.startswith("    +") else None)
        lines.append(cat(el("span", line, class_=cls), "\n"))
    return el("pre", lines, class_="range-diff")


# -- the inline CSS and script -------------------------------------------------------------------

_CSS = """
:root{--fg:#1d1d1f;--muted:#5f6368;--line:#d0d4d9;--bg:#fff;--soft:#f6f8fa;
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
body{margin:0 auto;padding:1rem 1.5rem 2rem;max-width:1400px}
h1{font-size:1.45rem;margin:.2rem 0}h2{font-size:1.15rem;margin:1.6rem 0 .5rem;border-bottom:1px solid var(--line)}
h3{font-size:1rem;margin:.9rem 0 .3rem}
code,pre{font:12.5px/1.4 ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace}
.meta,.muted,footer{color:var(--muted)}footer{margin-top:2rem;font-size:12px}
table{border-collapse:collapse;margin:.3rem 0}th,td{border:1px solid var(--line);padding:.25rem .5rem;
text-align:left;vertical-align:top}thead th{background:var(--soft)}
ul.plain{margin:.1rem 0;padding-left:1.1rem}dl{margin:.2rem 0}dt{font-weight:600}dd{margin:0 0 .2rem 1rem}
.badge{display:inline-block;padding:0 .45rem;border-radius:.6rem;border:1px solid rgba(0,0,0,.15);font-size:12px}
.legend{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:.35rem .9rem;font-size:12px}
.scan{display:grid;grid-template-columns:minmax(0,auto) minmax(18rem,1fr);gap:1.2rem;align-items:start}
@media (max-width:900px){.scan{grid-template-columns:1fr}}
.grid th,.grid td{vertical-align:middle}
.grid th[scope=row]{font:12.5px ui-monospace,Menlo,Consolas,monospace;white-space:nowrap}
.grid td.cell{padding:0;text-align:center;min-width:6.5rem}
.grid a.cell-link{display:block;padding:.35rem .5rem;color:inherit;text-decoration:none}
.grid td.cell:hover,.grid td.cell.selected{outline:2px solid #1a73e8;outline-offset:-2px}
.grid .totals td{text-align:center;color:var(--muted)}.r-due{background:#ffd7a8}.r-none{background:var(--soft)}
.panel{display:none;position:sticky;top:1rem;border:1px solid var(--line);border-radius:6px;padding:.2rem .9rem .8rem;
background:var(--soft);max-height:calc(100vh - 2rem);overflow:auto}
.js .panel{display:block}.panel code{overflow-wrap:anywhere}
.hunks tr.next-file td{border-top:2px solid var(--muted)}.panel .hint{color:var(--muted)}
.cell-detail{border-top:1px solid var(--line);padding:.1rem 0 .4rem}.cell-detail:target{background:#fff8d6}
.js #details{display:none}
.status{font-size:.85rem;padding:.1rem .5rem;border-radius:.6rem;vertical-align:middle;background:var(--soft)}
.s-done{background:#a8dcaa}.s-conflict{background:#f29b9b}.s-dry-run{background:#e3e8ff}
nav ul{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:.4rem 1.2rem}
nav .count{margin-left:.3rem;padding:0 .4rem;border-radius:.6rem;background:var(--soft);font-size:12px}
.outcomes td.cell,.outcomes th[scope=row]{white-space:nowrap}.written code{margin-right:.6rem}
.c-gone{color:#a50e0e;font-weight:600}.stops{color:#a50e0e}
pre.range-diff{background:var(--soft);border:1px solid var(--line);padding:.6rem;overflow:auto}
.rd-same{color:var(--muted)}.rd-changed{font-weight:600;color:#8a5a00}.rd-gone{font-weight:600;color:#a50e0e}
.rd-new{font-weight:600;color:#0b6b1f}.rd-minus{color:#a50e0e}.rd-plus{color:#0b6b1f}
""" + "".join(f".{outcome_class(o)}{{background:{colour}}}" for o, (_, colour) in OUTCOME_STYLE.items()) + \
    f".o-unknown{{background:{UNKNOWN_COLOUR}}}\n"

# the detail panel: a cell's section is cloned into it on hover, focus and click (click pins it)
_SCAN_JS = """
(() => {
  document.documentElement.classList.add("js");
  const grid = document.getElementById("grid"), panel = document.getElementById("panel");
  const hint = [...panel.childNodes];
  let pinned = null;
  const show = (link) => {
    const section = link && document.getElementById(link.hash.slice(1));
    panel.replaceChildren(...(section ? [...section.childNodes].map((n) => n.cloneNode(true)) : hint));
  };
  const linkOf = (event) => event.target.closest && event.target.closest("a.cell-link");
  grid.addEventListener("mouseover", (e) => { const a = linkOf(e); if (a) show(a); });
  grid.addEventListener("focusin", (e) => { const a = linkOf(e); if (a) show(a); });
  grid.addEventListener("mouseleave", () => show(pinned));
  grid.addEventListener("click", (e) => {
    const a = linkOf(e);
    if (!a) return;
    e.preventDefault();
    if (pinned) pinned.parentElement.classList.remove("selected");
    pinned = a;
    a.parentElement.classList.add("selected");
    show(a);
  });
  const start = [...grid.querySelectorAll("a.cell-link")].find((a) => location.hash && a.hash === location.hash);
  if (start) start.click();
})();
"""

__all__ = ["OUTCOME_STYLE", "Markup", "el", "outcome_class", "rebase_page", "scan_page"]

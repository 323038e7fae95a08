"""The scan and rebase reports as one self-contained HTML page, checked in a real browser.

The browser tests drive Debian's Chromium (``/usr/bin/chromium``, or ``$PATCHTOOL_CHROMIUM``)
through Playwright, which cannot download its own browsers here; they skip with a reason where
either is missing, and `.ci/run` installs Chromium. Each page is loaded from a file URL, as a
user opens an artifact. ``PATCHTOOL_SCREENSHOTS=docs pytest tests/test_html_report.py -m upstream``
regenerates docs/scan-grid.png and docs/rebase-report.png from the real test series.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from conftest import Demo
from helpers import git, make_wheel, sha256, write_tree
from patchtool.cli.htmlpage import rebase_page, scan_page, step_detail
from patchtool.cli.outcomes import LOOKS, css_class
from patchtool.project.repository import Project
from patchtool.rebase import scan as scanning
from patchtool.rebase import transaction
from patchtool.rebase.replay import Drift, DriftChange, PatchOutcome, Step
from patchtool.rebase.scan import ScanReport
from patchtool.rebase.textapply import MovedHunk
from patchtool.rebase.transaction import DropDue, RebaseReport, RebaseStatus, Widening
from patchtool.registry.entries import RevisitResult
from patchtool.series.checks import AssumptionResult
from patchtool.upstream.cache import Cache
from test_rebase import V10, release_11, series

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

REPO = Path(__file__).resolve().parent.parent
REAL_DATA = REPO / "tests" / "data" / "rebase-real"
HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'


def rgb(colour: str) -> str:
    """``#a8dcaa`` as the browser computes it: ``rgb(168, 220, 170)``."""
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def colour_of(outcome: PatchOutcome) -> str:
    return rgb(LOOKS[outcome].colour)


def step(pid: str, outcome: PatchOutcome, **fields: Any) -> Step:
    return Step(id=pid, file=f"patches/{pid}.patch", outcome=outcome, **fields)


def reports(root: Path, cache: Path, versions: str, target: str) -> tuple[ScanReport, RebaseReport]:
    """`scan --versions VERSIONS` and `rebase --to TARGET --dry-run` of the series at ``root``."""
    project, upstream = Project.load(root), Cache(cache)
    return (scanning.scan(project, upstream, versions), transaction.start(project, upstream, target, dry_run=True))


# -- the browser -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    from helpers import require_tool

    sync_api = pytest.importorskip(
        "playwright.sync_api",
        reason="playwright is not installed (the `test` extra installs it); it drives the HTML report's browser tests",
    )
    chromium = require_tool(
        "chromium", env="PATCHTOOL_CHROMIUM", enables="the HTML report's browser tests (Playwright drives it)"
    )
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium)
        yield launched
        launched.close()


class Loaded:
    """A page opened from its file, with every request and every console error it made."""

    def __init__(self, browser: Browser, path: Path, *, javascript: bool = True) -> None:
        self.url = path.resolve().as_uri()
        self.context = browser.new_context(java_script_enabled=javascript, viewport={"width": 1280, "height": 900})
        self.page: Page = self.context.new_page()
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.goto(self.url)

    def self_contained(self) -> None:
        """Nothing but the page's own file was fetched, and nothing was refused (a refusal by the
        page's Content-Security-Policy is a console error)."""
        assert self.requests == [self.url]
        assert self.errors == []

    def background(self, selector: str) -> list[str]:
        return self.page.eval_on_selector_all(selector, "els => els.map(e => getComputedStyle(e).backgroundColor)")


@pytest.fixture
def open_page(browser: Browser, tmp_path: Path) -> Iterator[Any]:
    opened: list[Loaded] = []

    def open_(text: str, name: str = "page.html", *, javascript: bool = True) -> Loaded:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        opened.append(Loaded(browser, path, javascript=javascript))
        return opened[-1]

    yield open_
    for loaded in opened:
        loaded.context.close()


# -- real reports of the demo series ----------------------------------------------------------------


@pytest.fixture
def demo_series(demo: Demo) -> Demo:
    """The demo at 1.0 with 1.1 on the index and a series with every outcome between them
    (test_rebase's releases and patches: unchanged, shifted, 3-way, conflict, upstream, gone)."""
    for version, files in (("1.0", V10), ("1.1", release_11())):
        demo.index.add(make_wheel(demo.wheel.parent / f"demo-{version}-py3-none-any.whl", "demo", version, files))
    pin = demo.root / "upstream-pins" / "demo-1.0.toml"
    pin.write_text(
        re.sub(r'sha256 = "[0-9a-f]+"', f'sha256 = "{sha256(demo.index.files[demo.wheel.name])}"', pin.read_text())
    )
    write_tree(
        demo.work, {"python/demo/siblings.py": V10["demo/siblings.py"], "python/demo/extra.py": V10["demo/extra.py"]}
    )
    git(demo.work, "add", "-A")
    git(demo.work, "commit", "-q", "-m", "upstream 1.0 (complete)")
    series(demo, "0001-extra", "0002-greet", "0003-sibling", "0004-bye", "0005-cap", "0006-util")
    return demo


@pytest.fixture
def demo_reports(demo_series: Demo) -> tuple[ScanReport, RebaseReport]:
    """`scan --versions 1.0..1.1` and `rebase --to 1.1 --dry-run` of the demo series."""
    scan, rebase = reports(demo_series.root, demo_series.cache, "1.0..1.1", "1.1")
    assert set(scan.matrix["bye"].values()) == {PatchOutcome.UNCHANGED, PatchOutcome.CONFLICT}
    return scan, rebase


# -- without a browser -------------------------------------------------------------------------------


def test_every_outcome_has_its_own_word_code_class_and_colour() -> None:
    assert set(LOOKS) == set(PatchOutcome)
    for part in (css_class, lambda o: LOOKS[o].word, lambda o: LOOKS[o].code, lambda o: LOOKS[o].colour):
        assert len({part(o) for o in PatchOutcome}) == len(PatchOutcome)


def test_hostile_strings_are_text_in_the_markup() -> None:
    h = HOSTILE
    conflict = step(
        h, PatchOutcome.CONFLICT, commit=h, detail=h, conflicted=(h,), misplaced=(h,), renamed=(h,), upstream_has=(h,)
    )
    shifted = step(h, PatchOutcome.SHIFTED, detail=h, shifted=(MovedHunk(file=h, hunk=1, old_line=1, new_line=2),))
    drift = Drift(patch=h, path=h, scope=h, change=h, detail=h)
    failed = AssumptionResult(patch=h, id=h, ok=False, expects=h, found=h, why=h)
    revisit = RevisitResult(entry=h, condition=h, holds=True, why=h, detail=h)
    page = scan_page(
        ScanReport(
            pin=h,
            versions=(h,),
            patches=(h,),
            steps={h: {h: conflict}},
            drift={h: (drift,)},
            failed_assumptions={h: (failed,)},
            revisit={h: (revisit,)},
        )
    )
    page += rebase_page(
        RebaseReport(
            old_pin=h,
            new_pin="p",
            old_version=h,
            new_version=h,
            status=h,
            steps=(conflict, shifted),
            drift=(drift,),
            assumptions=(failed,),
            revisit=(revisit,),
            drop=(DropDue(patch=h, why=h),),
            range_diff=h,
            worktree=h,
            written=(h,),
            follow_up=(h,),
            widen=True,
            widenings=(Widening(patch=h, old=h, new=h),),
            old_pin_admitted_by=(h,),
        )
    )
    assert "pwned" in page and "<img" not in page and "onerror=" not in page.replace("onerror=&#34;", "")
    assert page.count("<script>") == 1  # the scan page's own


class _Head(HTMLParser):
    """The page's policy and the text of its style and script, as a browser reads them."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.policy, self.inline, self._in = "", {"style": "", "script": ""}, ""
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "meta" and ("http-equiv", "Content-Security-Policy") in attrs:
            self.policy = dict(attrs)["content"] or ""
        self._in = tag if tag in self.inline else ""

    def handle_endtag(self, tag: str) -> None:
        self._in = ""

    def handle_data(self, data: str) -> None:
        if self._in:
            self.inline[self._in] += data


def test_the_policy_allows_the_own_style_and_script_by_hash_and_nothing_else() -> None:
    def digest(text: str) -> str:
        return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()

    report = ScanReport(pin="p", versions=("1",), patches=("a",), steps={"a": {"1": step("a", PatchOutcome.UNCHANGED)}})
    scan = _Head(scan_page(report))
    assert scan.policy == (
        f"default-src 'none'; style-src '{digest(scan.inline['style'])}'; img-src data:; "
        f"base-uri 'none'; form-action 'none'; script-src '{digest(scan.inline['script'])}'"
    )
    rebase = _Head(
        rebase_page(
            RebaseReport(
                old_pin="p", new_pin="q", old_version="1", new_version="2", status=RebaseStatus.DRY_RUN, steps=()
            )
        )
    )
    assert (
        rebase.policy
        == (
            f"default-src 'none'; style-src '{digest(rebase.inline['style'])}'; img-src data:; "
            "base-uri 'none'; form-action 'none'"
        )
        and rebase.inline["script"] == ""
    )


def test_the_pages_name_nothing_outside_themselves(demo_reports: tuple[ScanReport, RebaseReport]) -> None:
    for page in (scan_page(demo_reports[0]), rebase_page(demo_reports[1])):
        links = re.findall(r"""\b(?:src|href|action|srcset|poster)\s*=\s*("[^"]*"|'[^']*'|[^\s>]*)""", page)
        assert links and [u for u in links if not re.match(r"""["']?(#|data:)""", u)] == []
        assert "url(" not in page and "@import" not in page and "http://" not in page
        assert "default-src 'none'" in page.replace("&#x27;", "'")


def test_git_apply_offsets_and_merge_conflicts_are_listed() -> None:
    moved = (
        MovedHunk(file="a.py", hunk=1, old_line=440, new_line=378),
        MovedHunk(file="a.py", hunk=2, old_line=446, new_line=447),
        MovedHunk(file="b.py", hunk=1, old_line=9, new_line=12),
    )
    shifted = step_detail(
        step("p", PatchOutcome.SHIFTED, detail="a.py: hunks 1, 2 moved; b.py: hunk 1 moved", shifted=moved)
    )
    assert shifted.count("<tr") == 4 and "<td>-62</td>" in shifted and "<td>+3</td>" in shifted
    assert re.findall(r"<code>(.*?)</code>", shifted) == ["a.py", "a.py", "b.py"] and "<li>" not in shifted
    conflict = step_detail(
        step(
            "p",
            PatchOutcome.CONFLICT,
            conflicted=("a.py", "b.py", "c.py"),
            detail="CONFLICT (content): Merge conflict in a.py; CONFLICT (content): Merge conflict in b.py",
        )
    )
    assert re.findall(r"<code>(.*?)</code>", conflict) == ["a.py", "b.py", "c.py"]
    merged = step("p", PatchOutcome.MERGED, detail="the context changed; the 3-way merge resolved it")
    assert step_detail(merged).count("<li>") == 1


# -- in the browser ----------------------------------------------------------------------------------


def test_scan_grid_in_the_browser(open_page: Any, demo_reports: tuple[ScanReport, RebaseReport]) -> None:
    scan = demo_reports[0]
    loaded = open_page(scan_page(scan), "scan.html")
    page = loaded.page
    cells = page.locator("#grid td.cell")
    assert cells.count() == len(scan.patches) * len(scan.versions) == 12
    want = [colour_of(scan.matrix[p][v]) for p in scan.patches for v in scan.versions]
    assert loaded.background("#grid td.cell") == want
    assert cells.all_inner_texts() == [LOOKS[scan.matrix[p][v]].word for p in scan.patches for v in scan.versions]
    assert len(set(want)) == 6  # every outcome but dropped and not reached, each its own colour
    assert page.locator("#details").is_hidden() and page.locator("#panel").is_visible()

    bye = scan.patches.index("bye")
    conflict = page.locator(f'#grid a[href="#c-{bye}-1"]')
    conflict.hover()
    assert "bye at 1.1" in page.locator("#panel h3").inner_text()
    assert "python/demo/core.py" in page.locator("#panel").inner_text()
    conflict.click()  # pins it: moving over the header and out of the grid leaves it shown
    page.locator("h1").hover()
    assert "bye at 1.1" in page.locator("#panel h3").inner_text()
    assert page.locator("#grid td.selected a").get_attribute("href") == f"#c-{bye}-1"
    greet = scan.patches.index("greet")
    page.locator(f'#grid a[href="#c-{greet}-1"]').hover()
    assert page.locator("#panel table.hunks td").first.inner_text() == "python/demo/core.py"
    assert page.locator("#panel table.hunks td").nth(1).inner_text() == "#1"
    assert page.url == loaded.url  # a click shows the detail in place of following the link
    loaded.self_contained()


LINES_OF = """code => {
  const chars = [];
  const walk = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    for (let i = 0; i < n.length; i++) {
      const r = document.createRange();
      r.setStart(n, i);
      r.setEnd(n, i + 1);
      chars.push([n.data[i], r.getBoundingClientRect().top]);
    }
  }
  const lines = [];
  chars.forEach(([c, top], i) => {
    if (i === 0 || top > chars[i - 1][1] + 1) lines.push("");
    lines[lines.length - 1] += c;
  });
  return lines;
}"""


@pytest.mark.parametrize("width", [1280, 800])
def test_the_detail_panel_keeps_paths_whole_and_every_column_in_view(open_page: Any, width: int) -> None:
    """A real series' long paths beside a six-version grid: a path wraps only after a '/', and the
    hunk table's last column (the offset) lies inside the panel."""
    paths = (
        "python/sglang/srt/layers/quantization/marlin_utils.py",
        "python/sglang/srt/managers/scheduler_output_processor_mixin.py",
    )
    moved = tuple(MovedHunk(file=f, hunk=h, old_line=440 + h, new_line=1378 + 7 * h) for f in paths for h in (1, 2))
    versions = ("0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
    patches = ("dsv4-bf16-indexer-keys", "sm120-mma-sparse-decode", "pd-max-queued-requests")
    steps = {p: {v: step(p, PatchOutcome.SHIFTED, detail="moved", shifted=moved) for v in versions} for p in patches}
    loaded = open_page(scan_page(ScanReport(pin="sglang-0.5.18", versions=versions, patches=patches, steps=steps)))
    page = loaded.page
    page.set_viewport_size({"width": width, "height": 900})
    page.locator('#grid a[href="#c-0-5"]').click()
    cells = page.locator("#panel table.hunks td:first-child code")
    assert cells.count() == 4
    for n, want in enumerate(p for p in paths for _ in (1, 2)):
        lines = cells.nth(n).evaluate(LINES_OF)
        assert "".join(lines) == want and all(line.endswith("/") for line in lines[:-1]), (width, lines)
    panel = page.locator("#panel").bounding_box()
    assert panel is not None
    for cell in page.locator("#panel table.hunks tr > :last-child").all():
        box = cell.bounding_box()
        assert box is not None and box["x"] + box["width"] <= panel["x"] + panel["width"], (width, box, panel)
    assert page.locator("#panel").evaluate("p => p.scrollWidth <= p.clientWidth")
    loaded.self_contained()


def test_scan_page_reads_without_javascript(open_page: Any, demo_reports: tuple[ScanReport, RebaseReport]) -> None:
    scan = demo_reports[0]
    loaded = open_page(scan_page(scan), "scan.html", javascript=False)
    page = loaded.page
    assert page.locator("#panel").is_hidden() and page.locator("#details").is_visible()
    util = scan.patches.index("util")
    page.locator(f'#grid a[href="#c-{util}-1"]').click()
    assert page.url.endswith(f"#c-{util}-1")
    target = page.locator(".cell-detail:target")
    assert "util at 1.1" in target.locator("h3").inner_text() and "target gone" in target.inner_text()
    assert loaded.requests == [loaded.url]


def test_rebase_report_in_the_browser(open_page: Any, demo_reports: tuple[ScanReport, RebaseReport]) -> None:
    rebase = demo_reports[1]
    loaded = open_page(rebase_page(rebase), "rebase.html")
    page = loaded.page
    rows = page.locator("table.outcomes > tbody > tr")
    assert rows.count() == 6
    assert loaded.background("table.outcomes td.cell") == [colour_of(s.outcome) for s in rebase.steps]
    assert page.locator("table.outcomes > tbody > tr > th").all_inner_texts() == [s.id for s in rebase.steps]
    bye = rows.nth([s.id for s in rebase.steps].index("bye"))
    assert "python/demo/core.py" in bye.inner_text()
    assert page.locator("#drop").inner_text().count("already upstream in 1.1") == 1
    assert page.locator("#range-diff pre span.rd-changed").count() >= 1
    assert page.locator("#range-diff pre").inner_text().rstrip("\n") == rebase.range_diff.rstrip("\n")
    counts = page.locator("nav li").all_inner_texts()
    assert counts[0].split() == ["Outcome", "per", "patch", "6"]
    loaded.self_contained()


def test_a_stopped_rebase_says_what_is_not_computed_yet(
    open_page: Any, demo_reports: tuple[ScanReport, RebaseReport]
) -> None:
    rebase = dataclasses.replace(
        demo_reports[1],
        status=RebaseStatus.CONFLICT,
        worktree="/x/.patchtool/rebase/worktree",
        drift=(),
        drop=(),
        range_diff="",
    )
    page = open_page(rebase_page(rebase)).page
    assert "Not computed at a conflict stop" in page.locator("#drift").inner_text()
    assert "/x/.patchtool/rebase/worktree" in page.locator("header").inner_text()


def test_hostile_data_is_shown_and_never_run(open_page: Any) -> None:
    detail = f"Hunk #1 succeeded at 3 (offset 1 line).; {HOSTILE}"
    loaded = open_page(
        scan_page(
            ScanReport(
                pin=HOSTILE,
                versions=("1.0",),
                patches=(HOSTILE,),
                steps={HOSTILE: {"1.0": step(HOSTILE, PatchOutcome.SHIFTED, detail=detail)}},
            )
        )
    )
    page = loaded.page
    page.locator('#grid a[href="#c-0-0"]').click()
    assert page.locator("#grid tbody th").first.inner_text() == HOSTILE
    assert HOSTILE in page.locator("#panel").inner_text()
    assert page.evaluate("window.pwned") is None and loaded.dialogs == []
    assert page.locator("img").count() == 0
    loaded.self_contained()


def test_scan_shows_drift_assumptions_and_revisits_where_its_data_has_them(open_page: Any) -> None:
    """The keys a scan may add, each {version: [items as a rebase report holds them]}."""
    unchanged = PatchOutcome.UNCHANGED
    loaded = open_page(
        scan_page(
            ScanReport(
                pin="p-1",
                versions=("1", "2"),
                patches=("a", "b"),
                steps={
                    "a": {
                        "1": step("a", unchanged),
                        "2": step("a", PatchOutcome.MERGED, detail="the context changed; the 3-way merge resolved it"),
                    },
                    "b": {"1": step("b", unchanged), "2": step("b", PatchOutcome.CONFLICT)},
                },
                drift={
                    "2": (Drift(patch="a", path="x.py", scope="C.f", change=DriftChange.CHANGED, detail="C.f changed"),)
                },
                failed_assumptions={
                    "2": (
                        AssumptionResult(
                            patch="a", id="has-f", ok=False, expects="x.py has f", found="0 match(es)", why="a calls f"
                        ),
                    )
                },
                revisit={
                    "1": (),
                    "2": (
                        RevisitResult(
                            entry="idea-9",
                            condition="/g/ appears in y.py",
                            holds=True,
                            why="g is back",
                            detail="found in y.py",
                        ),
                    ),
                },
            )
        )
    )
    page = loaded.page
    assert page.locator("#grid tr.revisits td").all_inner_texts() == ["none due", "1 due"]
    page.locator('#grid a[href="#r-1"]').click()
    assert "idea-9" in page.locator("#panel").inner_text() and "g is back" in page.locator("#panel").inner_text()
    page.locator('#grid a[href="#c-0-1"]').click()
    panel = page.locator("#panel").inner_text()
    assert "C.f changed" in panel and "has-f" in panel and "a calls f" in panel and "--dry-run" not in panel
    assert "has no" not in page.locator(".grid-wrap").inner_text()
    page.locator('#grid a[href="#c-1-1"]').click()
    assert "has-f" not in page.locator("#panel").inner_text()  # b's cell: a's findings stay in a's
    loaded.self_contained()


def test_the_cli_writes_the_pages(
    demo_series: Demo, demo_reports: tuple[ScanReport, RebaseReport], tmp_path: Path
) -> None:
    scan = demo_series.run("scan", "--versions", "1.0..1.1", "--html", str(tmp_path / "scan.html"))
    assert scan.returncode == 5, scan.stderr  # bye conflicts at 1.1
    assert (tmp_path / "scan.html").read_text(encoding="utf-8") == scan_page(demo_reports[0])
    rebase = demo_series.run("rebase", "--to", "1.1", "--dry-run", "--report", str(tmp_path / "r.html"))
    assert rebase.returncode == 5, rebase.stderr
    assert (tmp_path / "r.html").read_text(encoding="utf-8") == rebase_page(demo_reports[1])
    demo_series.run("rebase", "--to", "1.1", "--dry-run", "--report", str(tmp_path / "r.md"))
    assert (tmp_path / "r.md").read_text(encoding="utf-8").startswith("## Rebase demo-1.0 → demo-1.1 (dry-run)")


# -- the real test series: and the screenshots in docs/ -----------------------------------------------


@pytest.mark.upstream
def test_real_series_pages(open_page: Any, real_cache: Path, tmp_path: Path) -> None:
    """The test series of real sglang (tests/data/rebase-real) scanned over 0.5.20..0.5.23 and
    rebased (dry run) to 0.5.23. With $PATCHTOOL_SCREENSHOTS=DIR, the two screenshots go there."""
    root = tmp_path / "series"
    shutil.copytree(REAL_DATA, root, ignore=shutil.ignore_patterns("*.py", "*.md", "__pycache__"))
    scan, rebase = reports(root, real_cache, "0.5.20..0.5.23", "0.5.23")
    shots = os.environ.get("PATCHTOOL_SCREENSHOTS")

    loaded = open_page(scan_page(scan), "scan.html")
    assert loaded.background("#grid td.cell") == [
        colour_of(scan.matrix[p][v]) for p in scan.patches for v in scan.versions
    ]
    marlin = scan.patches.index("marlin-no-capability")
    loaded.page.locator(f'#grid a[href="#c-{marlin}-3"]').click()
    loaded.page.mouse.move(0, 0)
    assert "marlin_utils.py" in loaded.page.locator("#panel").inner_text()
    loaded.self_contained()
    if shots:
        loaded.page.set_viewport_size({"width": 1180, "height": 400})
        loaded.page.screenshot(path=str(Path(shots) / "scan-grid.png"), full_page=True)

    loaded = open_page(rebase_page(rebase), "rebase.html")
    assert loaded.background("table.outcomes td.cell") == [colour_of(s.outcome) for s in rebase.steps]
    assert "Scheduler.flush_cache" in loaded.page.locator("#drift").inner_text()
    loaded.self_contained()
    if shots:
        loaded.page.set_viewport_size({"width": 1180, "height": 900})
        loaded.page.screenshot(path=str(Path(shots) / "rebase-report.png"), full_page=True)


def test_the_widenings_and_the_old_pin_advice_are_shown(demo_reports: tuple[ScanReport, RebaseReport]) -> None:
    rebase = dataclasses.replace(
        demo_reports[1],
        widen=True,
        old_pin_admitted_by=(),
        widenings=(Widening(patch="greet", old=">=1.0,<1.1", new=">=1.0,<=1.1"),),
    )
    page = rebase_page(rebase)
    widened = page[page.index('id="widened"') : page.index("</section>", page.index('id="widened"'))]
    assert "<code>greet</code>" in widened and "&gt;=1.0,&lt;=1.1" in widened
    follow = page[page.index('id="follow-up"') : page.index("</section>", page.index('id="follow-up"'))]
    assert "patchtool pin remove demo-1.0" in follow


def test_the_wheel_ships_the_templates(tmp_path: Path) -> None:
    """The pages render from package data: a wheel of patchtool holds every file of cli/templates/."""
    source = tmp_path / "src"
    shutil.copytree(REPO / "tool", source / "tool", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    # the build backend pyproject.toml names, called as a frontend calls it (without pip's own start-up)
    build = f"from setuptools import build_meta; build_meta.build_wheel({str(tmp_path / 'dist')!r})"
    res = subprocess.run([sys.executable, "-c", build], cwd=source, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    [wheel] = (tmp_path / "dist").glob("patchtool-*.whl")
    templates = REPO / "tool" / "patchtool" / "cli" / "templates"
    wanted = {f"patchtool/cli/templates/{p.name}" for p in templates.iterdir()}
    assert len(wanted) >= 5 and wanted <= set(zipfile.ZipFile(wheel).namelist())

"""The scan and rebase reports as one self-contained HTML page, checked in a real browser.

The browser tests drive Debian's Chromium (``/usr/bin/chromium``, or ``$PATCHTOOL_CHROMIUM``)
through Playwright, which cannot download its own browsers here; they skip with a reason where
either is missing, and `.ci/run` installs Chromium. Each page is loaded from a file URL, as a
user opens an artifact. ``PATCHTOOL_SCREENSHOTS=docs pytest tests/test_html_report.py -m upstream``
regenerates docs/scan-grid.png and docs/rebase-report.png from the real test series.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from conftest import Demo
from patchtool.cli.htmlpage import OUTCOME_STYLE, detail_items, outcome_class, rebase_page, scan_page
from patchtool.rebase.replay import PatchOutcome
from patchtool.testing import git, make_wheel, sha256, write_tree
from test_rebase import V10, release_11, series

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

REAL_DATA = Path(__file__).resolve().parent / "data" / "rebase-real"
HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'


def rgb(colour: str) -> str:
    """``#a8dcaa`` as the browser computes it: ``rgb(168, 220, 170)``."""
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def colour_of(outcome: str) -> str:
    return rgb(OUTCOME_STYLE[PatchOutcome(outcome)][1])


def data_of(res: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        return json.loads(res.stdout)["data"]  # type: ignore[no-any-return]
    except (json.JSONDecodeError, KeyError):
        raise AssertionError(f"not an envelope (exit {res.returncode}):\n{res.stdout}\n{res.stderr}") from None


# -- the browser -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    from patchtool.testing import require_tool

    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the `test` extra "
                                                                 "installs it); it drives the HTML report's browser tests")
    chromium = require_tool("chromium", env="PATCHTOOL_CHROMIUM",
                            enables="the HTML report's browser tests (Playwright drives it)")
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
    pin.write_text(re.sub(r'sha256 = "[0-9a-f]+"', f'sha256 = "{sha256(demo.index.files[demo.wheel.name])}"',
                          pin.read_text()))
    write_tree(demo.work, {"python/demo/siblings.py": V10["demo/siblings.py"], "python/demo/extra.py": V10["demo/extra.py"]})
    git(demo.work, "add", "-A")
    git(demo.work, "commit", "-q", "-m", "upstream 1.0 (complete)")
    series(demo, "0001-extra", "0002-greet", "0003-sibling", "0004-bye", "0005-cap", "0006-util")
    return demo


@pytest.fixture
def demo_reports(demo_series: Demo) -> tuple[dict[str, Any], dict[str, Any]]:
    """`scan --versions 1.0..1.1` and `rebase --to 1.1 --dry-run` of the demo series, as --json gives them."""
    scan = data_of(demo_series.run("scan", "--versions", "1.0..1.1", "--json"))
    rebase = data_of(demo_series.run("rebase", "--to", "1.1", "--dry-run", "--json"))
    assert set(scan["matrix"]["bye"].values()) == {"applied unchanged", "conflict"}
    return scan, rebase


# -- without a browser -------------------------------------------------------------------------------

def test_every_outcome_has_its_own_class_and_colour() -> None:
    assert set(OUTCOME_STYLE) == set(PatchOutcome)
    assert len({outcome_class(o) for o in PatchOutcome}) == len({c for _, c in OUTCOME_STYLE.values()}) == len(PatchOutcome)
    assert outcome_class("no such outcome") == "o-unknown"


def test_hostile_strings_are_text_in_the_markup() -> None:
    page = scan_page({"pin": HOSTILE, "versions": [HOSTILE], "patches": [HOSTILE],
                      "matrix": {HOSTILE: {HOSTILE: HOSTILE}}, "details": {HOSTILE: {HOSTILE: HOSTILE}}})
    page += rebase_page({"old_pin": HOSTILE, "new_pin": "p", "status": HOSTILE, "range_diff": HOSTILE,
                         "patches": [{"id": HOSTILE, "file": HOSTILE, "outcome": HOSTILE, "detail": HOSTILE,
                                      "conflicted": [HOSTILE], HOSTILE: [HOSTILE]}],
                         "drift": [{"patch": HOSTILE, "path": HOSTILE, "scope": HOSTILE, "change": HOSTILE,
                                    "detail": HOSTILE}],
                         "failed_assumptions": [dict.fromkeys(("patch", "id", "expects", "found", "why"), HOSTILE)],
                         "drop": [{"patch": HOSTILE, "why": HOSTILE}], "follow_up": [HOSTILE],
                         "revisit": [dict.fromkeys(("entry", "condition", "why", "detail"), HOSTILE)]})
    assert "pwned" in page and "<img" not in page and "onerror=" not in page.replace("onerror=&quot;", "")
    assert page.count("<script>") == 1  # the scan page's own


def test_the_pages_name_nothing_outside_themselves(demo_reports: tuple[dict[str, Any], dict[str, Any]]) -> None:
    for page in (scan_page(demo_reports[0]), rebase_page(demo_reports[1])):
        links = re.findall(r"""\b(?:src|href|action|srcset|poster)\s*=\s*("[^"]*"|'[^']*'|[^\s>]*)""", page)
        assert links and [u for u in links if not re.match(r"""["']?(#|data:)""", u)] == []
        assert "url(" not in page and "@import" not in page and "http://" not in page
        assert "default-src 'none'" in page.replace("&#x27;", "'")


def test_git_apply_offsets_and_merge_conflicts_are_listed() -> None:
    moved = [{"file": "a.py", "hunk": 1, "old_line": 440, "new_line": 378, "offset": -62},
             {"file": "a.py", "hunk": 2, "old_line": 446, "new_line": 447, "offset": 1},
             {"file": "b.py", "hunk": 1, "old_line": 9, "new_line": 12, "offset": 3}]
    shifted = detail_items("a.py: hunks 1, 2 moved; b.py: hunk 1 moved", shifted=moved)
    assert shifted.count("<tr") == 4 and "<td>-62</td>" in shifted and "<td>+3</td>" in shifted
    assert re.findall(r"<code>(.*?)</code>", shifted) == ["a.py", "a.py", "b.py"] and "<li>" not in shifted
    conflict = detail_items("CONFLICT (content): Merge conflict in a.py; CONFLICT (content): Merge conflict in b.py",
                            conflicted=["a.py", "b.py", "c.py"])
    assert re.findall(r"<code>(.*?)</code>", conflict) == ["a.py", "b.py", "c.py"]
    assert detail_items("the context changed; the 3-way merge resolved it").count("<li>") == 1


# -- in the browser ----------------------------------------------------------------------------------

def test_scan_grid_in_the_browser(open_page: Any, demo_reports: tuple[dict[str, Any], dict[str, Any]]) -> None:
    scan = demo_reports[0]
    loaded = open_page(scan_page(scan), "scan.html")
    page = loaded.page
    cells = page.locator("#grid td.cell")
    assert cells.count() == len(scan["patches"]) * len(scan["versions"]) == 12
    want = [colour_of(scan["matrix"][p][v]) for p in scan["patches"] for v in scan["versions"]]
    assert loaded.background("#grid td.cell") == want
    assert len(set(want)) == 6  # every outcome but dropped and not reached, each its own colour
    assert page.locator("#details").is_hidden() and page.locator("#panel").is_visible()

    bye = scan["patches"].index("bye")
    conflict = page.locator(f'#grid a[href="#c-{bye}-1"]')
    conflict.hover()
    assert "bye at 1.1" in page.locator("#panel h3").inner_text()
    assert "python/demo/core.py" in page.locator("#panel").inner_text()
    conflict.click()  # pins it: moving over the header and out of the grid leaves it shown
    page.locator("h1").hover()
    assert "bye at 1.1" in page.locator("#panel h3").inner_text()
    assert page.locator("#grid td.selected a").get_attribute("href") == f"#c-{bye}-1"
    greet = scan["patches"].index("greet")
    page.locator(f'#grid a[href="#c-{greet}-1"]').hover()
    assert page.locator("#panel table.hunks td").first.inner_text() == "python/demo/core.py"
    assert page.locator("#panel table.hunks td").nth(1).inner_text() == "#1"
    assert page.url == loaded.url  # a click shows the detail in place of following the link
    loaded.self_contained()


def test_scan_page_reads_without_javascript(open_page: Any, demo_reports: tuple[dict[str, Any], dict[str, Any]]) -> None:
    scan = demo_reports[0]
    loaded = open_page(scan_page(scan), "scan.html", javascript=False)
    page = loaded.page
    assert page.locator("#panel").is_hidden() and page.locator("#details").is_visible()
    util = scan["patches"].index("util")
    page.locator(f'#grid a[href="#c-{util}-1"]').click()
    assert page.url.endswith(f"#c-{util}-1")
    target = page.locator(".cell-detail:target")
    assert "util at 1.1" in target.locator("h3").inner_text() and "target gone" in target.inner_text()
    assert loaded.requests == [loaded.url]


def test_rebase_report_in_the_browser(open_page: Any, demo_reports: tuple[dict[str, Any], dict[str, Any]]) -> None:
    rebase = demo_reports[1]
    loaded = open_page(rebase_page(rebase), "rebase.html")
    page = loaded.page
    rows = page.locator("table.outcomes > tbody > tr")
    assert rows.count() == 6
    assert loaded.background("table.outcomes td.cell") == [colour_of(s["outcome"]) for s in rebase["patches"]]
    assert page.locator("table.outcomes > tbody > tr > th").all_inner_texts() == [s["id"] for s in rebase["patches"]]
    bye = rows.nth([s["id"] for s in rebase["patches"]].index("bye"))
    assert "python/demo/core.py" in bye.inner_text()
    assert page.locator("#drop").inner_text().count("already upstream in 1.1") == 1
    assert page.locator("#range-diff pre span.rd-changed").count() >= 1
    assert page.locator("#range-diff pre").inner_text().rstrip("\n") == rebase["range_diff"].rstrip("\n")
    counts = page.locator("nav li").all_inner_texts()
    assert counts[0].split() == ["Outcome", "per", "patch", "6"]
    loaded.self_contained()


def test_a_stopped_rebase_says_what_is_not_computed_yet(open_page: Any,
                                                         demo_reports: tuple[dict[str, Any], dict[str, Any]]) -> None:
    rebase = {**demo_reports[1], "status": "conflict", "partial": True, "worktree": "/x/.patchtool/rebase/worktree",
              "drift": [], "drop": [], "range_diff": ""}
    page = open_page(rebase_page(rebase)).page
    assert "Not computed at a conflict stop" in page.locator("#drift").inner_text()
    assert "/x/.patchtool/rebase/worktree" in page.locator("header").inner_text()


def test_hostile_data_is_shown_and_never_run(open_page: Any) -> None:
    detail = f"Hunk #1 succeeded at 3 (offset 1 line).; {HOSTILE}"
    loaded = open_page(scan_page({"pin": HOSTILE, "versions": ["1.0"], "patches": [HOSTILE],
                                  "matrix": {HOSTILE: {"1.0": "applied with shifted context"}},
                                  "details": {HOSTILE: {"1.0": detail}}}))
    page = loaded.page
    page.locator('#grid a[href="#c-0-0"]').click()
    assert page.locator("#grid tbody th").first.inner_text() == HOSTILE
    assert HOSTILE in page.locator("#panel").inner_text()
    assert page.evaluate("window.pwned") is None and loaded.dialogs == []
    assert page.locator("img").count() == 0
    loaded.self_contained()


def test_scan_shows_drift_assumptions_and_revisits_where_its_data_has_them(open_page: Any) -> None:
    """The keys a scan may add, each {version: [items as a rebase report holds them]}."""
    merged = "merged by 3-way merge"
    loaded = open_page(scan_page({
        "pin": "p-1", "versions": ["1", "2"], "patches": ["a", "b"],
        "matrix": {"a": {"1": "applied unchanged", "2": merged}, "b": {"1": "applied unchanged", "2": "conflict"}},
        "details": {"a": {"2": "the context changed; the 3-way merge resolved it"}},
        "drift": {"2": [{"patch": "a", "path": "x.py", "scope": "C.f", "change": "changed", "detail": "C.f changed"}]},
        "failed_assumptions": {"2": [{"patch": "a", "id": "has-f", "ok": False, "expects": "x.py has f",
                                      "found": "0 match(es)", "why": "a calls f"}]},
        "revisit": {"1": [], "2": [{"entry": "idea-9", "condition": "/g/ appears in y.py", "holds": True,
                                    "why": "g is back", "detail": "found in y.py"}]}}))
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


def test_the_cli_writes_the_pages(demo_series: Demo, tmp_path: Path) -> None:
    scan = demo_series.run("scan", "--versions", "1.0..1.1", "--json", "--html", str(tmp_path / "scan.html"))
    assert (tmp_path / "scan.html").read_text(encoding="utf-8") == scan_page(data_of(scan))
    rebase = demo_series.run("rebase", "--to", "1.1", "--dry-run", "--json", "--report", str(tmp_path / "r.html"))
    assert (tmp_path / "r.html").read_text(encoding="utf-8") == rebase_page(data_of(rebase))
    demo_series.run("rebase", "--to", "1.1", "--dry-run", "--report", str(tmp_path / "r.md"))
    assert (tmp_path / "r.md").read_text(encoding="utf-8").startswith("## Rebase demo-1.0 → demo-1.1 (dry-run)")


# -- the real test series: and the screenshots in docs/ -----------------------------------------------

@pytest.mark.upstream
def test_real_series_pages(open_page: Any, real_cache: Path, tmp_path: Path) -> None:
    """The test series of real sglang (tests/data/rebase-real) scanned over 0.5.20..0.5.23 and
    rebased (dry run) to 0.5.23. With $PATCHTOOL_SCREENSHOTS=DIR, the two screenshots go there."""
    root = tmp_path / "series"
    shutil.copytree(REAL_DATA, root, ignore=shutil.ignore_patterns("*.py", "*.md", "__pycache__"))
    env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(real_cache)}

    def run(*args: str) -> dict[str, Any]:
        return data_of(subprocess.run([sys.executable, "-m", "patchtool", *args, "--json"], cwd=root, env=env,
                                      capture_output=True, text=True, check=False))

    scan = run("scan", "--versions", "0.5.20..0.5.23")
    rebase = run("rebase", "--to", "0.5.23", "--dry-run")
    shots = os.environ.get("PATCHTOOL_SCREENSHOTS")

    loaded = open_page(scan_page(scan), "scan.html")
    assert loaded.background("#grid td.cell") == [colour_of(scan["matrix"][p][v]) for p in scan["patches"]
                                                  for v in scan["versions"]]
    marlin = scan["patches"].index("marlin-no-capability")
    loaded.page.locator(f'#grid a[href="#c-{marlin}-3"]').click()
    loaded.page.mouse.move(0, 0)
    assert "marlin_utils.py" in loaded.page.locator("#panel").inner_text()
    loaded.self_contained()
    if shots:
        loaded.page.set_viewport_size({"width": 1180, "height": 400})
        loaded.page.screenshot(path=str(Path(shots) / "scan-grid.png"), full_page=True)

    loaded = open_page(rebase_page(rebase), "rebase.html")
    assert loaded.background("table.outcomes td.cell") == [colour_of(s["outcome"]) for s in rebase["patches"]]
    assert "Scheduler.flush_cache" in loaded.page.locator("#drift").inner_text()
    loaded.self_contained()
    if shots:
        loaded.page.set_viewport_size({"width": 1180, "height": 900})
        loaded.page.screenshot(path=str(Path(shots) / "rebase-report.png"), full_page=True)


def test_the_widenings_and_the_old_pin_advice_are_shown(demo_reports: tuple[dict[str, Any], dict[str, Any]]) -> None:
    rebase = {**demo_reports[1], "widened": [{"patch": "greet", "old": ">=1.0,<1.1", "new": ">=1.0,<=1.1"}],
              "old_pin_advice": {"admitted_by": [], "text": "no patch admits demo-1.0: `patchtool pin remove demo-1.0`"}}
    page = rebase_page(rebase)
    widened = page[page.index('id="widened"'):page.index("</section>", page.index('id="widened"'))]
    assert "<code>greet</code>" in widened and "&gt;=1.0,&lt;=1.1" in widened
    follow = page[page.index('id="follow-up"'):page.index("</section>", page.index('id="follow-up"'))]
    assert "patchtool pin remove demo-1.0" in follow

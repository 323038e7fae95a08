"""Hostile PEP 503 project pages: read in one pass, in work linear in the page's size.

``html.parser`` is super-linear on unclosed tags: a 90 KB page of ``<a `` was still parsing after
120 s. The anchor scanner's ``steps`` (each a pattern match or search that starts where the last
ended) are counted here, never timed: a page four times as long takes at most four times the steps.
"""

from __future__ import annotations

import html.parser
import json
from collections.abc import Callable
from typing import Any

import pytest
from test_artifacts import assert_nothing_imported

from conftest import Demo
from helpers import snapshot
from patchtool.upstream.anchors import AnchorScan
from patchtool.upstream.index import Fetcher
from patchtool.urls import SourceUrl

LINK = '<a href="../../files/demo-1.0-py3-none-any.whl#sha256=ab">demo-1.0-py3-none-any.whl</a>\n'
FOUND = [
    {
        "filename": "demo-1.0-py3-none-any.whl",
        "url": "../../files/demo-1.0-py3-none-any.whl",
        "hashes": {"sha256": "ab"},
    }
]

# each shape: n repetitions of a hostile pattern, after one good link, and the links the scan finds
SHAPES: dict[str, tuple[Callable[[int], str], list[dict[str, Any]]]] = {
    "unclosed <a": (lambda n: LINK + "<a " * n, FOUND),
    "unclosed <a with attributes": (lambda n: LINK + '<a href="x" ' * n, FOUND),
    "deep nesting": (lambda n: LINK + "<div><span>" * n, FOUND),
    "open anchors": (lambda n: LINK + "<a href=x>t" * n, FOUND),
    "huge attribute value": (
        lambda n: LINK + '<a href="' + "x" * n + '">big</a>',
        [*FOUND, {"filename": "big", "url": "x", "hashes": {}}],  # a url of n bytes, compared by its start
    ),
    "unterminated quote": (lambda n: LINK + '<a href="' + "<a " * n, FOUND),
    "comment without end": (lambda n: LINK + "<!--" + "<a href=x>y</a>" * n, FOUND),
    "bare <": (lambda n: LINK + "<" * n, FOUND),
    "end tags without names": (lambda n: LINK + "</ " * n, FOUND),
    "declarations without end": (lambda n: LINK + "<!" + "<a " * n, FOUND),
    "script without end": (lambda n: LINK + "<script>" + "<a href=x>y</a>" * n, FOUND),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_hostile_page_is_read_in_linear_work(shape: str) -> None:
    make, expected = SHAPES[shape]
    counts = []
    for n in (25_000, 100_000):
        text = make(n)
        scan = AnchorScan(text)
        files = [{**f, "url": f["url"][:1]} for f in scan.files]
        assert files == [{**f, "url": f["url"][:1]} for f in expected]
        assert scan.steps <= len(text) + 8  # each step consumes the page from where the last ended
        counts.append(scan.steps)
    assert counts[1] <= 4 * counts[0] + 8, counts


def test_one_megabyte_of_lt_is_one_search() -> None:
    scan = AnchorScan("<" * (1 << 20))
    assert scan.files == [] and scan.steps == 1


class _Reference(html.parser.HTMLParser):
    """html.parser's reading, as index.py read pages before: what the scanner must agree with."""

    def __init__(self) -> None:
        super().__init__()
        self.files: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            found = dict(attrs)
            url, _, fragment = (found.get("href") or "").partition("#")
            name, _, value = fragment.partition("=")
            self.open = {"filename": "", "url": url, "hashes": {name: value} if name and value else {}}
            if "data-yanked" in found:
                self.open["yanked"] = found["data-yanked"] or True

    def handle_data(self, data: str) -> None:
        if self.open is not None:
            self.open["filename"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self.open is not None:
            self.files.append({**self.open, "filename": self.open["filename"].strip()})
            self.open = None


WELL_FORMED = [
    "<!DOCTYPE html>\n<html><head><title>Links for demo</title></head><body><h1>Links for demo</h1>\n"
    + LINK
    + '<a href="demo-1.1.tar.gz#sha256=cd" data-requires-python="&gt;=3.8">demo-1.1.tar.gz</a><br/>\n'
    + "</body></html>\n",
    "<A HREF='x-1.0.whl#sha256=1' data-yanked>x &amp; y</A><a href=plain-2.whl data-yanked=\"bad\">plain</a>",
    '<!-- <a href="no">commented</a> --><script>s = "<a href=s>s</a>"</script><a href="z">z<br>z</a>',
    '<a\nhref = "spaced#md5=00"\n>spaced</a><a href="/abs/f.whl#sha256=ff">abs</a >',
]


@pytest.mark.parametrize("page", WELL_FORMED)
def test_a_well_formed_page_reads_as_html_parser_read_it(page: str) -> None:
    reference = _Reference()
    reference.feed(page)
    reference.close()
    assert AnchorScan(page).files == reference.files != []


def test_a_hostile_page_from_the_index_is_read_and_its_link_found(demo: Demo) -> None:
    demo.index.page = (LINK + "<a " * 300_000).encode()  # 900 KB: ten times what held html.parser for minutes
    page = Fetcher(attempts=1, timeout=600).json(SourceUrl.parse(f"{demo.index.url}/demo/", user=True))
    assert page["files"] == FOUND


def test_a_hostile_page_without_the_file_is_refused_and_nothing_changes(one_patch: Demo) -> None:
    one_patch.index.page = ("<a " * 300_000).encode()
    before = snapshot(one_patch.root)
    res = one_patch.run("apply", "--json")
    assert res.returncode == 4, res.stdout
    assert "Traceback" not in res.stderr
    [error] = json.loads(res.stdout)["errors"]
    assert error["message"] == f"{one_patch.wheel.name} is not on the index {one_patch.index.url}"
    assert snapshot(one_patch.root) == before
    assert_nothing_imported(one_patch)


def test_the_scan_stops_after_the_anchor_past_its_bound() -> None:
    scan = AnchorScan(LINK * 1000, most=10)
    assert scan.files == FOUND * 11
    assert scan.steps < 11 * 20  # the 989 anchors after the eleventh were never read


def _entries(n: int) -> str:
    return json.dumps({"meta": {"api-version": "1.0"}, "files": [{"filename": "x", "url": "x"}] * n})


TOO_MANY = "lists more than the 100000 files patchtool reads from one project page; refusing it"
NESTS = "JSON objects and arrays, more than the 800000 a page of 100000 files needs; refusing it"
# each page lists one file more than a page may (or holds more JSON than such a page needs): the end
# of what the attack found, 16 MiB pages of millions of entries, each joined and checked in turn
CROWDED: dict[str, tuple[str, bytes, str]] = {
    "PEP 503 anchors": ("text/html", b'<a href="x">y</a>\n' * 100_001, TOO_MANY),
    "PEP 691 entries": ("application/vnd.pypi.simple.v1+json", _entries(100_001).encode(), TOO_MANY),
    "PEP 691 empty objects": (
        "application/vnd.pypi.simple.v1+json",
        b'{"files": [' + b",".join([b"{}"] * 800_000) + b"]}",
        "holds 800002 " + NESTS,
    ),
    "PEP 691 empty arrays": (
        "application/vnd.pypi.simple.v1+json",
        b'{"files": [' + b",".join([b"[]"] * 800_000) + b"]}",
        "holds 800002 " + NESTS,
    ),
}


@pytest.mark.parametrize("crowd", CROWDED)
def test_a_page_listing_more_files_than_any_project_is_refused(one_patch: Demo, crowd: str) -> None:
    one_patch.index.page_type, one_patch.index.page, expected = CROWDED[crowd]
    before = snapshot(one_patch.root)
    res = one_patch.run("apply", "--json")
    assert res.returncode == 4, res.stdout
    assert "Traceback" not in res.stderr
    [error] = json.loads(res.stdout)["errors"]
    assert error["message"] == f"the package index page {one_patch.index.url}/demo/ {expected}"
    assert snapshot(one_patch.root) == before
    assert_nothing_imported(one_patch)


def test_a_page_of_as_many_files_as_a_page_may_list_is_read(demo: Demo) -> None:
    from patchtool.upstream.index import MAX_PAGE_FILES, PackageIndex

    demo.index.page_type = "application/vnd.pypi.simple.v1+json"
    demo.index.page = _entries(MAX_PAGE_FILES).encode()
    index = SourceUrl.parse(demo.index.url, user=True)
    assert len(PackageIndex(Fetcher(attempts=1, timeout=600)).files_of(index, "demo")) == MAX_PAGE_FILES

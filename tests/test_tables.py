"""The tables ``status`` and ``scan`` draw (with rich): columns a fork needs, and a matrix that
stays whole in 100 columns however many releases a scan covers."""

from __future__ import annotations

import dataclasses
import re

import pytest

from conftest import Demo
from patchtool.cli import tables
from patchtool.cli.outcomes import LOOKS
from patchtool.cli.render import Style
from patchtool.project.verification import GpuCheck
from patchtool.rebase.replay import PatchOutcome, Step
from patchtool.rebase.scan import ScanReport
from patchtool.series.apply import SeriesResult
from patchtool.series.status import PatchStatus, StatusReport

PLAIN = Style(False)


def patch(pid: str, *, gpu: bool = False) -> PatchStatus:
    checks = (GpuCheck(run="pytest tests/gpu/test_x.py", expect="passes"),) if gpu else ()
    return PatchStatus(
        id=pid,
        kind="bugfix",
        upstream="pending",
        files=("pkg/a.py",),
        added=2,
        removed=1,
        applies="applied",
        gpu_verification=checks,
        gpu_evidence=((),) * len(checks),
    )


def status(*patches: PatchStatus) -> StatusReport:
    return StatusReport(
        pin="pkg-1.0",
        upstream="pkg",
        version="1.0",
        base="0" * 40,
        source="artifact",
        patches=patches,
        series=SeriesResult(base="0" * 40, results=()),
    )


def header(text: str) -> str:
    return next(line for line in text.splitlines() if line.lstrip().startswith("#"))


def test_the_gpu_column_is_there_only_when_a_patch_has_gpu_checks() -> None:
    without = tables.status_table(status(patch("0001-fix"), patch("0002-speed")), PLAIN)
    assert "GPU" not in without
    assert header(without).split() == ["#", "patch", "kind", "upstream", "at", "pin", "files", "+/-"]
    assert without.splitlines()[-1] == "the files of each patch: `patchtool status --long`"
    with_gpu = tables.status_table(status(patch("0001-fix"), patch("0002-speed", gpu=True)), PLAIN)
    assert header(with_gpu).split()[-2:] == ["GPU", "checks"]
    assert re.search(r"0002-speed .* 0/1 pass$", with_gpu, re.MULTILINE)
    assert re.search(r"0001-fix .* -$", with_gpu, re.MULTILINE)


def table_lines(text: str) -> tuple[list[str], list[str]]:
    """The table's header (one line or two) and its rows, of ``status_table``'s text."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.strip() and set(line) <= {"\u2500", "-"})
    rows = [line for line in lines[rule + 1 :] if line[:1].isdigit() or line[:1] == " "]
    return [line for line in lines[1:rule] if line.startswith((" ", "#"))], rows


def test_status_at_80_columns_cuts_no_header_and_no_word(monkeypatch: pytest.MonkeyPatch) -> None:
    """COLUMNS=80, a GPU column and a short upstream: the columns that wrap shrink the widest first,
    never below a word, so "upstream" stays one word where rich alone would cut it."""
    monkeypatch.setenv("COLUMNS", "80")
    rows = [
        dataclasses.replace(patch("0001-short-id-x", gpu=True), kind="performance"),
        dataclasses.replace(patch("0002-y"), kind="correctness"),
    ]
    text = tables.status_table(status(*rows), PLAIN)
    header, lines = table_lines(text)
    assert max(map(len, text.splitlines())) <= 80, text
    assert " ".join(header).split() == ["GPU", "#", "patch", "kind", "upstream", "at", "pin", "files", "+/-", "checks"]
    assert lines[0].split() == ["1", "0001-short-id-x", "performance", "pending", "applied", "1", "+2/-1", "0/1"]
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal: 100 columns, as without one
    assert text != tables.status_table(status(*rows), PLAIN)
    monkeypatch.delenv("COLUMNS")
    assert tables.status_table(status(*rows), PLAIN) == tables.status_table(status(*rows), PLAIN)
    assert max(map(len, tables.status_table(status(*rows), PLAIN).splitlines())) <= 100


@pytest.mark.parametrize("columns", [40, 60, 80, 100])
def test_an_id_wider_than_the_room_is_folded_with_no_traceback(monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    """An id too long to share a line with the columns that must stay: the optional ones give way,
    then the id folds; every line still fits (this was a ValueError with no GPU column)."""
    monkeypatch.setenv("COLUMNS", str(columns))
    long_id = "a-patch-id-" + "x" * (columns - 20)
    text = tables.status_table(status(patch(long_id), patch("0002-y")), PLAIN)
    assert max(map(len, text.splitlines())) <= columns, text
    header, lines = table_lines(text)
    assert header[0].split()[:3] == ["#", "patch", "kind"], text
    folded = [line[4:].split(" ")[0] for line in lines if line[:1] != "2"]
    assert len(folded) > 1 and "".join(folded) == long_id, text


def scan(versions: int, patches: int, pid: str = "0001-a-patch-with-a-long-descriptive-name") -> ScanReport:
    vs = tuple(f"0.5.{13 + i}" for i in range(versions))
    ids = tuple(f"{pid}-{n}" for n in range(patches))
    outcomes = [PatchOutcome.UNCHANGED, PatchOutcome.SHIFTED, PatchOutcome.MERGED, PatchOutcome.CONFLICT]
    steps = {
        p: {v: Step(id=p, file=f"patches/{p}.patch", outcome=outcomes[(i + j) % 4]) for j, v in enumerate(vs)}
        for i, p in enumerate(ids)
    }
    return ScanReport(pin="sglang-0.5.12", versions=vs, patches=ids, steps=steps)


def cells(text: str, row_head: str) -> list[str]:
    return next(line for line in text.splitlines() if line.startswith(row_head)).split()


@pytest.mark.parametrize(("versions", "patches"), [(2, 3), (11, 5), (11, 23), (11, 60)])
def test_the_scan_matrix_fits_100_columns_and_every_cell_is_whole(versions: int, patches: int) -> None:
    report = scan(versions, patches)
    text = tables.scan_table(report, PLAIN)
    assert max(map(len, text.splitlines())) <= tables.WIDTH
    if versions == 2:  # a row per patch, a word per release
        assert cells(text, report.patches[1]) == [report.patches[1], "shifted", "3-way"]
        return
    # a row per release; a column per patch, numbered, its id spelled out below
    assert "1: 0001-a-patch-with-a-long-descriptive-name-0" in text.splitlines()
    row = cells(text, "0.5.14")  # the first table's row, when the patches take more than one
    assert len(row) == 1 + min(patches, 33)
    if patches == 5:
        assert row[1:3] == ["shifted", "3-way"]
    else:  # too many patches for words: a character each, with the key
        assert row[1:5] == ["~", "3", "X", "="]
        assert text.splitlines()[-1] == "= unchanged  ~ shifted  3 3-way  X conflict"


def test_the_status_of_a_fork_without_gpu_checks_shows_no_gpu_column(one_patch: Demo) -> None:
    out = one_patch.run("status")
    assert out.returncode == 0, out.stderr
    assert "GPU" not in out.stdout


def test_the_scan_table_says_each_outcome_in_the_word_the_html_page_uses() -> None:
    versions = tuple(f"0.5.{13 + i}" for i in range(len(PatchOutcome)))
    steps = {
        "p": {v: Step(id="p", file="patches/p.patch", outcome=o) for v, o in zip(versions, PatchOutcome, strict=True)}
    }
    text = tables.scan_table(ScanReport(pin="sglang-0.5.12", versions=versions, patches=("p",), steps=steps), PLAIN)
    assert " ".join(cells(text, "p ")) == " ".join(["p", *(LOOKS[o].word for o in PatchOutcome)])

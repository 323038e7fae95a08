"""The status table drawn without rich is, byte for byte, what rich draws (or left to rich)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from patchtool.cli import tables
from patchtool.cli.render import Style

HEADERS = ("#", "patch", "kind", "upstream", "at pin", "files", "+/-", "GPU checks")
text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=9)
odd = st.sampled_from(["", "é", "x\ty", "日本", "a" * 60])
cell = st.one_of(text, st.tuples(text, st.sampled_from(["bold", "dim", "red", "green", "yellow"])))
row = st.lists(cell, min_size=8, max_size=8).map(tuple)


def line(style: Style) -> st.SearchStrategy[str]:
    word = st.one_of(text, text.map(style.bold), text.map(style.dim), text.map(style.bad), text.map(style.ok))
    return st.lists(word, min_size=0, max_size=6).map(" ".join)


def by_rich(monkeypatch: pytest.MonkeyPatch, before: list[str], rows: list[tuple[tables.Cell, ...]],
            after: list[str], style: Style, width: int, ascii_only: bool) -> str:
    monkeypatch.setattr(tables, "simple_draw", lambda *a, **k: None)
    monkeypatch.setattr(tables, "width", lambda: width)
    monkeypatch.setattr(tables, "_ascii_only", lambda: ascii_only)
    return tables.draw_table(before, HEADERS, rows, after, style=style)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), colour=st.booleans(), ascii_only=st.booleans(), width=st.integers(40, 100),
       rows=st.lists(row, max_size=5))
def test_the_table_without_rich_is_what_rich_draws(data: st.DataObject, colour: bool, ascii_only: bool, width: int,
                                                    rows: list[tuple[tables.Cell, ...]]) -> None:
    style = Style(colour)
    before = data.draw(st.lists(line(style), min_size=1, max_size=2))
    after = data.draw(st.lists(line(style), max_size=2))
    if rows and data.draw(st.booleans()):  # now and then a cell or a line only rich can draw
        where, what = data.draw(st.integers(0, len(rows) * 8 - 1)), data.draw(st.one_of(odd, st.tuples(odd, st.just("bold"))))
        rows[where // 8] = (*rows[where // 8][:where % 8], what, *rows[where // 8][where % 8 + 1:])
    if data.draw(st.booleans()):
        after.append(data.draw(odd))
    fast = tables.simple_draw(before, HEADERS, rows, after, colour=colour, width=width, ascii_only=ascii_only)
    with pytest.MonkeyPatch.context() as mp:
        expected = by_rich(mp, before, rows, after, style, width, ascii_only)
    if fast is not None:
        assert fast == expected


def test_a_usual_status_takes_the_fast_path() -> None:
    style = Style(True)
    rows: list[tuple[tables.Cell, ...]] = [("1", ("bench-0001", "bold"), "performance", "pending",
                                            ("applied", "green"), "1", "+2/-1", ("-", "dim"))]
    before = [f"pin {style.bold('sglang-0.5.23')}: sglang 0.5.23 (artifact, base 859910d02ce0), 1 patch(es)"]
    after = [style.dim("files and GPU verifications of each patch: `patchtool status --long`")]
    fast = tables.simple_draw(before, HEADERS, rows, after, colour=True, width=100, ascii_only=False)
    assert fast is not None and "\x1b[1mbench-0001\x1b[0m" in fast

"""Prose in the human text wraps to the terminal's width (``COLUMNS`` here: no terminal needed), at
most 100 columns as the tables, and 100 in a pipe; a line that fits stays as it was, and ``--json``
is the same bytes whatever the width."""

from __future__ import annotations

import pytest

from conftest import Demo
from test_rebase import releases, series  # noqa: F401 - the fixture, used by name
from test_show_edit import ENTRY, HEAD

LONG = "a-patch-whose-id-runs-on-for-a-while"
AT_60 = {"COLUMNS": "60"}


def stuck(demo: Demo) -> None:
    """extra applies, LONG (bye's change) conflicts at 1.1; both admit only 1.0."""
    series(demo, "0001-extra", "0004-bye")
    manifest = demo.root / "patchset.toml"
    text = manifest.read_text().replace('id = "bye"', f'id = "{LONG}"')
    manifest.write_text(text.replace('applies_to = ">=1.0"', 'applies_to = "==1.0"'))


def after(text: str, start: str) -> str:
    """The lines of ``text`` from the one that starts with ``start`` to the end."""
    lines = text.splitlines()
    return "\n".join(lines[next(i for i, line in enumerate(lines) if line.startswith(start)) :])


def test_a_prediction_wraps_to_the_terminal_and_stays_one_line_at_100(releases: Demo) -> None:  # noqa: F811
    stuck(releases)
    narrow = releases.run("scan", "--versions", "1.0,1.1", env=AT_60)
    assert narrow.returncode == 5, narrow.stdout + narrow.stderr
    assert max(map(len, narrow.stdout.splitlines())) <= 60, narrow.stdout
    assert after(narrow.stdout, "predicted") == (
        f"predicted: a rebase would stop for\n  {LONG} at 1.1 (conflict)\n  (exit 5)"
    )
    wide = releases.run("scan", "--versions", "1.0,1.1")
    assert after(wide.stdout, "predicted") == f"predicted: a rebase would stop for {LONG} at 1.1 (conflict) (exit 5)"
    assert releases.run("scan", "--versions", "1.0,1.1", env={"COLUMNS": "200"}).stdout == wide.stdout


def test_the_rebase_reports_advice_and_hints_wrap_to_the_terminal(releases: Demo) -> None:  # noqa: F811
    stuck(releases)
    res = releases.run("rebase", "--to", "1.1", "--dry-run", env=AT_60)
    assert res.returncode == 5, res.stdout + res.stderr
    assert after(res.stdout, "follow-up") == (
        "follow-up: widen applies_to of extra ('==1.0') once verified\n"
        "  on 1.1: '>=1.0,<=1.1' admits it (`rebase --widen` writes\n"
        "  that)\n"
        "old pin: keep pin demo-1.0: extra and\n"
        f"  {LONG} (which would stop the\n"
        "  rebase) still admit 1.0; narrow their applies_to before\n"
        "  `patchtool pin remove demo-1.0`\n"
        "predicted: 1 patch(es) would stop the rebase:\n"
        f"  {LONG} (exit 5)"
    )
    wide = releases.run("rebase", "--to", "1.1", "--dry-run")
    assert after(wide.stdout, "follow-up") == (
        "follow-up: widen applies_to of extra ('==1.0') once verified on 1.1: '>=1.0,<=1.1' admits it\n"
        "  (`rebase --widen` writes that)\n"
        f"old pin: keep pin demo-1.0: extra and {LONG} (which would stop the\n"
        "  rebase) still admit 1.0; narrow their applies_to before `patchtool pin remove demo-1.0`\n"
        f"predicted: 1 patch(es) would stop the rebase: {LONG} (exit 5)"
    )

    res = releases.run("rebase", "--to", "1.1", env={"COLUMNS": "70"})
    assert res.returncode == 3, res.stdout + res.stderr
    worktree = releases.root / ".patchtool/rebase/worktree"
    assert after(res.stdout, "error") == (
        f"error: patch {LONG} stopped the rebase\n"
        "  (conflict): python/demo/core.py\n"
        "  hint: resolve it in\n"
        f"    {worktree}\n"  # a path longer than a line stays whole, to be copied
        "    (edit, or `git mergetool` there; `git add` and commit are not\n"
        "    needed; it holds just the patch's files, `git sparse-checkout\n"
        "    disable` there for the whole tree), then `patchtool rebase\n"
        "    --continue`; or `patchtool rebase --skip --reason '...'` to drop\n"
        "    it, or `--abort`"
    )
    partial = after(res.stdout, "drift, failing").splitlines()[:3]
    assert partial == [
        "drift, failing assumption checks, registry revisits, drop conditions",
        "  and the range-diff come with the finished rebase (`--dry-run` gives",
        "  them now)",
    ]
    assert all(
        len(line) <= 70 for line in res.stdout.splitlines() if str(worktree) not in line and "CONFLICT" not in line
    )


WHY = '''why = """
The greeting was long. This paragraph is as its author wrapped it, each line within ninety
columns, so it stays as written wherever it fits.

A paragraph with a line longer than the terminal is wide is joined and wrapped again, all of it, the short line too:
its second line.
- a list item long enough to need wrapping at sixty columns, its later lines under its text
"""'''
SOURCE = 'source = "bench/greet.md, the run of the long benchmark on eight GPUs with every setting listed"'


def test_show_wraps_the_why_and_the_evidence_to_the_terminal(one_patch: Demo) -> None:
    entry = ENTRY.replace('why = "Shorter greeting."', WHY).replace('source = "bench/greet.md"', SOURCE)
    (one_patch.root / "patchset.toml").write_text(HEAD + entry)
    res = one_patch.run("show", "greet", env=AT_60)
    assert res.returncode == 0, res.stdout + res.stderr
    shown = res.stdout.split("why:\n", 1)[1].split("knobs:", 1)[0]
    assert shown == (
        "  The greeting was long. This paragraph is as its author\n"
        "  wrapped it, each line within ninety columns, so it stays\n"
        "  as written wherever it fits.\n"
        "\n"
        "  A paragraph with a line longer than the terminal is wide\n"
        "  is joined and wrapped again, all of it, the short line\n"
        "  too: its second line.\n"
        "  - a list item long enough to need wrapping at sixty\n"
        "    columns, its later lines under its text\n"
        "at pin demo-1.0: applied, +1/-1 in 1 file(s)\n"
        "  python/demo/core.py\n"
        "evidence: 1\n"
        "  throughput: +12%, hardware H200 (bench/greet.md, the run\n"
        "    of the long benchmark on eight GPUs with every setting\n"
        "    listed)\n"
    )
    wide = one_patch.run("show", "greet").stdout
    shown = wide.split("why:\n", 1)[1].split("knobs:", 1)[0]
    assert shown == (
        "  The greeting was long. This paragraph is as its author wrapped it, each line within ninety\n"
        "  columns, so it stays as written wherever it fits.\n"
        "\n"
        "  A paragraph with a line longer than the terminal is wide is joined and wrapped again, all of it,\n"
        "  the short line too: its second line.\n"
        "  - a list item long enough to need wrapping at sixty columns, its later lines under its text\n"
        "at pin demo-1.0: applied, +1/-1 in 1 file(s)\n"
        "  python/demo/core.py\n"
        "evidence: 1\n"
        "  throughput: +12%, hardware H200 (bench/greet.md, the run of the long benchmark on eight GPUs with\n"
        "    every setting listed)\n"
    )


def test_status_at_80_columns_keeps_its_upstream_header_whole(one_patch: Demo) -> None:
    text = (one_patch.root / "patchset.toml").read_text()
    text += '\n[[patch.gpu_verification]]\nrun = "python -m pytest tests/gpu/test_greet.py"\nexpect = "short"\n'
    (one_patch.root / "patchset.toml").write_text(text.replace('kind = "correctness"', 'kind = "performance"'))
    res = one_patch.run("status", env={"COLUMNS": "58"})
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert max(map(len, lines)) <= 58, res.stdout
    header = " ".join(lines[: next(i for i, line in enumerate(lines) if line.startswith("\u2500"))]).split()
    assert "upstream" in header and not [w for w in header if w.startswith("upstr") and w != "upstream"], res.stdout


def test_json_is_the_same_bytes_at_any_width(releases: Demo) -> None:  # noqa: F811
    stuck(releases)
    for args in (
        ("scan", "--versions", "1.0,1.1", "--json"),
        ("rebase", "--to", "1.1", "--dry-run", "--json"),
        ("show", "extra", "--json"),
        ("status", "--json"),
    ):
        wide = releases.run(*args)
        assert wide.stdout.startswith("{"), wide.stdout + wide.stderr
        for columns in ("40", "60", "200"):
            assert releases.run(*args, env={"COLUMNS": columns}).stdout == wide.stdout, (args, columns)


def test_fill_keeps_the_texts_own_breaks_and_a_word_longer_than_a_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from patchtool.cli.prose import fill
    from patchtool.cli.render import Style

    monkeypatch.setenv("COLUMNS", "40")
    path = "/a/path/that/is/longer/than/forty/columns/x.py"
    text = f"first line\n\nthe path {path} stays whole, the words around it wrap"
    assert fill(text, Style(False), prefix="note: ", indent=2) == (
        f"note: first line\n\n  the path\n  {path}\n  stays whole, the words around it wrap"
    )
    coloured = fill("a b", Style(True), prefix=Style(True).bad("predicted") + ": ", indent=2)
    assert coloured == "\x1b[1;31mpredicted\x1b[0m: a b"
    assert fill("", Style(False), prefix="x: ") == "x:"

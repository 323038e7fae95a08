"""Round trips that keep what they carry: the manifest's layout after import and export, DEP-3 and
Yocto headers read into upstream statuses, and a quilt export that imports back to the same
manifest."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import Demo, edit
from helpers import git
from test_editing import checked_out, three
from test_importing import CIAO


def blank_runs(text: str) -> list[int]:
    """The number of blank lines before each ``[[patch]]`` header after the first."""
    return [len(m.group(1)) - 1 for m in re.finditer(r"(\n+)\[\[patch\]\]", text)][1:]


def test_one_blank_line_between_entries_after_import_and_export(demo: Demo, tmp_path: Path) -> None:
    three(demo)
    diff = tmp_path / "ciao.diff"
    diff.write_text(CIAO)
    res = demo.run("import", str(diff), "--subject", "core: ciao", "--author", "A B <a@b.org>")
    assert res.returncode == 0, res.stdout + res.stderr
    text = (demo.root / "patchset.toml").read_text()
    assert blank_runs(text) == [1, 1, 1] and text.endswith("}\n") and not text.endswith("\n\n")
    wt = checked_out(demo)
    edit("python/demo/util.py", "return 2", "return 3")(wt)
    git(wt, "commit", "-qam", "util: three")
    res = demo.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    text = (demo.root / "patchset.toml").read_text()
    assert blank_runs(text) == [1, 1, 1, 1] and not text.endswith("\n\n")
    again = demo.run("export")
    assert again.returncode == 0 and (demo.root / "patchset.toml").read_text() == text

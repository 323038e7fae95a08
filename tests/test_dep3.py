"""Round trips that keep what they carry: the manifest's layout after import and export, DEP-3 and
Yocto headers read into upstream statuses, and a quilt export that imports back to the same
manifest."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import Demo, edit
from helpers import git, snapshot
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


# -- diff -u with -p0 names --------------------------------------------------------------------

P0 = (
    CIAO.replace("Index: demo/python/demo/core.py\n" + "=" * 67 + "\n", "")
    .replace("demo.orig/python/demo/core.py", "python/demo/core.py.orig\t2024-05-01 10:00:00.000000000 +0200")
    .replace("+++ demo/python/demo/core.py", "+++ python/demo/core.py\t2024-05-01 10:01:00.000000000 +0200")
)


def test_a_p0_diff_imports_with_p0_and_is_refused_naming_the_option_without(demo: Demo, tmp_path: Path) -> None:
    demo.write_manifest()
    diff = tmp_path / "ciao.diff"
    diff.write_text(P0)
    before = snapshot(demo.root)
    res = demo.run("import", str(diff), "--subject", "core: ciao", "--author", "A B <a@b.org>")
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr == (
        f"error: {diff}: its names are -p0 names (python/demo/core.py is in the tree, demo/core.py is not) "
        "(hint: import it with -p0)\n"
    )
    assert snapshot(demo.root) == before
    res = demo.run("import", "-p0", str(diff), "--subject", "core: ciao", "--author", "A B <a@b.org>", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    (row,) = json.loads(res.stdout)["data"]["added"]
    text = (demo.root / row["file"]).read_text()
    assert "diff --git a/python/demo/core.py b/python/demo/core.py\n" in text and '+    word = "ciao"' in text
    res = demo.run("import", "--strip", "2", str(diff), "--subject", "x", "--author", "A B <a@b.org>")
    assert res.returncode != 0 and "demo/core.py" not in (demo.root / "patchset.toml").read_text()

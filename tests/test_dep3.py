"""Round trips that keep what they carry: the manifest's layout after import and export, DEP-3 and
Yocto headers read into upstream statuses, and a quilt export that imports back to the same
manifest."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import Demo, edit
from helpers import git, require_tool, snapshot
from patchtool.project.repository import Project
from patchtool.series import dep3
from test_editing import checked_out, three
from test_importing import CIAO, empty_project


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


# -- DEP-3 and Yocto headers read into upstream statuses ---------------------------------------


@pytest.mark.parametrize(
    ("header", "status", "not_kept"),
    [
        # the three the issue found
        (
            "Origin: backport, https://github.com/o/r/commit/abc1234\n",
            {"status": "backport", "ref": "abc1234", "url": "https://github.com/o/r/commit/abc1234"},
            [],
        ),
        ("Origin: upstream, commit:abc123\n", {"status": "backport", "ref": "abc123"}, []),
        (
            "Forwarded: not-needed\n",
            {"status": "inappropriate", "reason": "not needed upstream (Forwarded: not-needed)"},
            [],
        ),
        ("Forwarded: no\n", {"status": "pending"}, []),
        (
            "Forwarded: https://github.com/o/r/pull/7\n",
            {"status": "submitted", "url": "https://github.com/o/r/pull/7"},
            [],
        ),
        ("Bug: https://bugs.example.org/1\n", {"status": "submitted", "url": "https://bugs.example.org/1"}, []),
        ("Forwarded: yes\n", {"status": "pending"}, ["Forwarded: yes (submitted needs a URL)"]),
        ("Applied-Upstream: 1.2, commit:abc123\n", {"status": "merged", "version": "1.2", "ref": "abc123"}, []),
        ("Applied-Upstream: commit:abc123\n", {"status": "backport", "ref": "abc123"}, []),
        (
            "Origin: other, https://bugs.example.org/1.patch\nLast-Update: 2024-01-01\nBug-Debian: https://b.d/1\n",
            {"status": "pending"},
            [
                "Origin: other, https://bugs.example.org/1.patch (the manifest keeps where upstream stands, "
                "not where a patch came from)",
                "Bug-Debian: https://b.d/1",
                "Last-Update: 2024-01-01",
            ],
        ),
        ("Upstream-Status: Pending\n", {"status": "pending"}, []),
        (
            "Upstream-Status: Submitted [https://l.example.org/m/1]\n",
            {"status": "submitted", "url": "https://l.example.org/m/1"},
            [],
        ),
        ("Upstream-Status: Backport [v1.2]\nOrigin: upstream, commit:abc\n", {"status": "backport", "ref": "abc"}, []),
        ("Upstream-Status: Backport [1.2]\nApplied-Upstream: 1.2\n", {"status": "merged", "version": "1.2"}, []),
        ("Upstream-Status: Denied [maintainer said no]\n", {"status": "denied", "reason": "maintainer said no"}, []),
        ("Upstream-Status: Inappropriate [oe specific]\n", {"status": "inappropriate", "reason": "oe specific"}, []),
        ("Upstream-Status: Inactive-Upstream\n", {"status": "inappropriate", "reason": "upstream is inactive"}, []),
        (
            "Upstream-Status: Submitted [oe-core@lists]\n",
            {"status": "pending"},
            ["Upstream-Status: Submitted [oe-core@lists] (no status of the manifest says it; read DEP-3's fields)"],
        ),
    ],
)
def test_dep3_and_yocto_fields_mean_what_their_specs_say(
    header: str, status: dict[str, str], not_kept: list[str]
) -> None:
    got, notes = dep3.upstream(dep3.fields(header))
    assert got == status
    assert notes == not_kept


# -- export --quilt and import --series: the same manifest -----------------------------------------

FULL = {
    "greet": 'why = "Shorter greeting.\\n\\nOur users asked."\nupstream = { status = "pending" }\n',
    "util": 'upstream = { status = "submitted", url = "https://github.com/demo/demo/pull/7" }\n'
    '[[patch.evidence]]\nmetric = "latency"\nbefore = 3\nafter = 2\nsource = "bench.md"\n',
    "cap": 'kind = "performance"\nowner = "perf team"\napplies_to = ">=1.0,<2"\n'
    'upstream = { status = "backport", ref = "0123456789abcdef0123456789abcdef01234567" }\n',
}


def full(demo: Demo) -> None:
    three(demo)
    entries = []
    for ident, file in (("greet", "0001-greet.patch"), ("util", "0002-util.patch"), ("cap", "0003-cap.patch")):
        text = demo.entry(ident, file).replace('upstream = { status = "pending" }\n', "")
        for line in FULL[ident].splitlines():
            key = line.split(" = ", 1)[0]
            text = re.sub(rf"^{re.escape(key)} = .*\n", "", text, flags=re.MULTILINE)
        entries.append(text + FULL[ident])
    demo.write_manifest(*entries)


def test_a_quilt_export_imports_back_to_the_same_manifest(demo: Demo, tmp_path: Path) -> None:
    full(demo)
    before = Project.load(demo.root).manifest.patches
    assert before[1].evidence and "\n\n" in before[0].why and before[2].upstream.ref
    res = demo.run("export", "--quilt", str(tmp_path / "debian"))
    assert res.returncode == 0, res.stdout + res.stderr
    cap = (tmp_path / "debian/patches/0003-cap.patch").read_text()
    assert "Origin: upstream, commit:0123456789abcdef0123456789abcdef01234567\nForwarded: yes\n" in cap
    assert "Upstream-Status: Backport [0123456789abcdef0123456789abcdef01234567]\n" in cap
    fork = empty_project(tmp_path / "fork", demo.root)
    res = demo.run("--root", str(fork.root), "import", "--series", str(tmp_path / "debian/patches/series"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "TODO" not in (fork.root / "patchset.toml").read_text()
    assert Project.load(fork.root).manifest.patches == before
    for p in (demo.root / "patches").glob("*.patch"):
        assert (fork.root / "patches" / p.name).read_text() == p.read_text()


def test_export_quilt_force_refreshes_in_place(demo: Demo, tmp_path: Path) -> None:
    full(demo)
    out = tmp_path / "debian"
    (out / "patches").mkdir(parents=True)
    (out / "patches/series").write_text("old.patch\n0001-greet.patch\n")
    (out / "patches/old.patch").write_text("gone\n")
    (out / "patches/README").write_text("kept\n")
    res = demo.run("export", "--quilt", str(out))
    assert res.returncode == 2 and "--force" in res.stdout + res.stderr
    res = demo.run("export", "--quilt", str(out), "--force")
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(p.name for p in (out / "patches").iterdir()) == [
        "0001-greet.patch",
        "0002-util.patch",
        "0003-cap.patch",
        "README",
        "series",
    ]


def test_the_exported_quilt_series_pushes_and_git_am_keeps_the_message(demo: Demo, tmp_path: Path) -> None:
    quilt = require_tool("quilt", enables="`quilt push -a` on an exported series with DEP-3 headers")
    full(demo)
    out = tmp_path / "q"
    assert demo.run("export", "--quilt", str(out)).returncode == 0
    git(demo.work, "checkout", "-q", "upstream")
    tree = tmp_path / "tree"
    shutil.copytree(demo.work, tree, ignore=shutil.ignore_patterns(".git"))
    shutil.copytree(out / "patches", tree / "patches")
    push = subprocess.run(
        [quilt, "push", "-a"],
        cwd=tree,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "QUILT_PATCHES": "patches", "HOME": str(tmp_path)},
    )
    assert push.returncode == 0, push.stdout + push.stderr
    assert "Now at patch patches/0003-cap.patch" in push.stdout
    git(demo.work, "checkout", "-q", "-b", "am", "upstream")
    git(demo.work, "am", "-q", *sorted(str(p) for p in (out / "patches").glob("*.patch")))
    assert git(demo.work, "log", "--format=%B", "-1", "HEAD~2").strip() == "core: say hi\n\nShorter greeting."


def test_what_has_no_place_is_reported() -> None:
    found = dep3.fields("Origin: upstream, https://example.org/list/42\nApplied-Upstream: https://example.org/x\n")
    assert dep3.upstream(found) == (
        {"status": "pending"},
        [
            "Applied-Upstream: https://example.org/x (names no version or commit)",
            "Origin: upstream, https://example.org/list/42 (the manifest keeps where upstream stands, "
            "not where a patch came from)",
        ],
    )

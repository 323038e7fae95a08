"""`import`'s guesses: upstream status, DEP-3 descriptions, quilt directories both ways, plain
diffs, and whose name a patch without an author gets. Core level, on real repositories."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import textwrap
from pathlib import Path

import pytest

from conftest import UPSTREAM_FILES, Demo, edit
from helpers import git, snapshot, write_tree
from patchtool.edit import import_
from patchtool.edit.checkout import checkout
from patchtool.edit.quilt import export_quilt
from patchtool.errors import UsageError
from patchtool.project.pins import load_pin
from patchtool.project.repository import Project
from patchtool.series.apply import apply_series
from patchtool.series.dep3 import fields as dep3_fields
from patchtool.upstream.cache import Cache

ME = {
    "GIT_AUTHOR_NAME": "Dana Fork",
    "GIT_AUTHOR_EMAIL": "dana@example.org",
    "GIT_COMMITTER_NAME": "Dana Fork",
    "GIT_COMMITTER_EMAIL": "dana@example.org",
}
CIAO = textwrap.dedent("""\
    Index: demo/python/demo/core.py
    ===================================================================
    --- demo.orig/python/demo/core.py
    +++ demo/python/demo/core.py
    @@ -9,7 +9,7 @@ def greet(name):
     
     
     def farewell(name):
    -    word = "bye"
    +    word = "ciao"
         return f"{word} {name}"
     
     
    """)


@pytest.fixture
def me(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in ME.items():
        monkeypatch.setenv(key, value)


def empty_project(root: Path, pin_from: Path, pin: str = "demo-1.0") -> Project:
    """A fork with no patch yet, on the pins of ``pin_from``."""
    (root / "patches").mkdir(parents=True)
    (root / "upstream-pins").mkdir()
    for p in (pin_from / "upstream-pins").glob("*.toml"):
        (root / "upstream-pins" / p.name).write_text(p.read_text())
    (root / "patchset.toml").write_text(f'schema = 1\npin = "{pin}"\n')
    return Project.load(root)


def added_text(project_root: Path, added: dict[str, str]) -> str:
    return (project_root / added["file"]).read_text()


# -- backport: only a commit upstream has ------------------------------------------------------


@pytest.fixture
def git_upstream(tmp_path: Path) -> tuple[Path, str, str]:
    """An upstream git repository: v1.0, then a fix, tagged v1.1; a fork pinned to v1.0."""
    up = tmp_path / "upstream"
    up.mkdir()
    git(up, "init", "-q", "-b", "main")
    write_tree(up, {f"python/{k}": v for k, v in UPSTREAM_FILES.items()})
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "demo 1.0")
    git(up, "tag", "v1.0")
    v10 = git(up, "rev-parse", "HEAD").strip()
    edit("python/demo/util.py", "return 1", "return 2")(up)
    git(up, "commit", "-qam", "util: two")
    fix = git(up, "rev-parse", "HEAD").strip()
    git(up, "tag", "v1.1")
    pins = tmp_path / "pins"
    (pins / "upstream-pins").mkdir(parents=True)
    for version, commit in (("1.0", v10), ("1.1", fix)):
        (pins / "upstream-pins" / f"demo-{version}.toml").write_text(
            f'schema = 1\nname = "demo"\nversion = "{version}"\nuse = "git"\n\n[git]\nurl = "{up}"\n'
            f'tag = "v{version}"\ncommit = "{commit}"\n'
        )
    return up, fix, str(pins)


def test_a_format_patch_is_a_backport_only_when_upstream_has_its_commit(
    tmp_path: Path, git_upstream: tuple[Path, str, str], me: None
) -> None:
    up, fix, pins = git_upstream
    patch = tmp_path / "fix.patch"
    patch.write_text(git(up, "format-patch", "-1", fix, "--stdout"))
    # the cache knows upstream up to 1.0 only: nothing says the commit is upstream's
    alone = empty_project(tmp_path / "alone", Path(pins))
    (row,) = import_.import_patches(alone, Cache(tmp_path / "cache-a"), [patch]).added
    assert row["upstream_status"] == "pending"
    # a cache that holds 1.1 has the commit in upstream's history
    cache = Cache(tmp_path / "cache-b")
    fork = empty_project(tmp_path / "fork", Path(pins))
    cache.ensure(load_pin(fork.root, "demo-1.1"))
    (row,) = import_.import_patches(fork, cache, [patch]).added
    assert (row["upstream_status"], row["upstream_ref"]) == ("backport", fix)
    assert f'upstream = {{ status = "backport", ref = "{fix}" }}' in (fork.root / "patchset.toml").read_text()


def test_your_own_commit_is_not_a_backport_even_in_the_cache(
    tmp_path: Path, git_upstream: tuple[Path, str, str], me: None
) -> None:
    """The bug: a commit made in a checkout lives in the cache repository too, but not in upstream."""
    _, _, pins = git_upstream
    cache = Cache(tmp_path / "cache")
    fork = empty_project(tmp_path / "fork", Path(pins))
    wt = Path(checkout(fork, cache, pin_name=None, branch="series", path=None).worktree)
    edit("python/demo/core.py", '"hello"', '"hi"')(wt)
    git(wt, "commit", "-qam", "core: say hi")
    mine = git(wt, "rev-parse", "HEAD").strip()
    patch = tmp_path / "mine.patch"
    patch.write_text(git(wt, "format-patch", "-1", "--stdout"))
    assert patch.read_text().startswith(f"From {mine} ")
    git(wt, "reset", "-q", "--hard", "HEAD~1")
    (row,) = import_.import_patches(Project.load(fork.root), cache, [patch]).added
    assert row["upstream_status"] == "pending" and "upstream_ref" not in row


# -- DEP-3 ----------------------------------------------------------------------------------------


def test_dep3_continuation_lines_are_kept() -> None:
    fields = dep3_fields(
        "Description: farewell says ciao\n The Italian deployment wants it.\n .\n"
        "  Indented, as written.\nAuthor: Maria Rossi <maria@example.org>\n"
        " not a continuation of Author? it is one.\nOrigin: vendor\nDescription: ignored\n"
    )
    assert fields["description"] == "farewell says ciao\nThe Italian deployment wants it.\n\n Indented, as written."
    assert fields["author"] == "Maria Rossi <maria@example.org>\nnot a continuation of Author? it is one."
    assert fields["origin"] == "vendor"


def test_quilt_description_keeps_every_line(demo: Demo, tmp_path: Path) -> None:
    quilt = tmp_path / "debian-patches"
    quilt.mkdir()
    (quilt / "series").write_text("ciao.patch\n")
    (quilt / "ciao.patch").write_text(
        "Description: farewell says ciao\n The Italian deployment wants it.\n .\n"
        " Second paragraph.\nAuthor: Maria Rossi <maria@example.org>\n---\n" + CIAO
    )
    demo.write_manifest()
    (row,) = import_.import_patches(Project.load(demo.root), Cache(demo.cache), [quilt]).added
    text = added_text(demo.root, row)
    assert "Subject: [PATCH] farewell says ciao\n\nThe Italian deployment wants it.\n\nSecond paragraph.\n" in text
    (lp,) = Project.load(demo.root).series()
    assert lp.patch.body.strip() == "The Italian deployment wants it.\n\nSecond paragraph."


# -- quilt directories, both ways ----------------------------------------------------------------


def three(demo: Demo) -> None:
    demo.commit_patch(
        "0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi", "Shorter greeting."
    )
    demo.commit_patch(
        "0002-util.patch", edit("python/demo/util.py", "return 1", "return 2"), "util: two", on="p-0001-greet.patch"
    )
    demo.commit_patch(
        "0003-cap.patch",
        edit("python/demo/core.py", "len(queue) > cap", "len(queue) >= cap"),
        "core: inclusive cap",
        on="p-0002-util.patch",
    )
    demo.write_manifest(
        demo.entry("greet", "0001-greet.patch"),
        demo.entry("util", "0002-util.patch"),
        demo.entry("cap", "0003-cap.patch"),
    )


@pytest.mark.parametrize("where", ["DIR", "DIR/patches"])
def test_an_exported_quilt_series_imports_back_unchanged(demo: Demo, tmp_path: Path, where: str) -> None:
    three(demo)
    out = tmp_path / "q"
    export_quilt(Project.load(demo.root), out)
    fork = empty_project(tmp_path / "fork", demo.root)
    source = out if where == "DIR" else out / "patches"
    result = import_.import_patches(fork, Cache(demo.cache), [source])
    assert [(r["id"], r["upstream_status"]) for r in result.added] == [
        ("greet", "pending"),  # the ids the DEP-3 header's Patchtool-Id carries, not new ones from subjects
        ("util", "pending"),
        ("cap", "pending"),
    ]
    for row, original in zip(result.added, sorted((demo.root / "patches").glob("*.patch")), strict=True):
        assert added_text(fork.root, row) == original.read_text()


def test_a_directory_without_a_series_names_both_places(demo: Demo, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match=r"has no quilt 'series' file \(nor patches/series\)"):
        import_.read_sources([tmp_path / "empty"], None)


# -- plain diffs and authors -----------------------------------------------------------------------


def test_a_plain_diff_is_named_by_its_file_and_is_yours_unless_an_author_is_given(
    demo: Demo, tmp_path: Path, me: None
) -> None:
    demo.write_manifest()
    git(demo.work, "checkout", "-q", "upstream")
    edit("python/demo/core.py", 'word = "bye"', 'word = "ciao"')(demo.work)
    diff = tmp_path / "ciao.diff"
    diff.write_text(git(demo.work, "diff"))
    git(demo.work, "checkout", "-q", "--", ".")
    project, cache = Project.load(demo.root), Cache(demo.cache)
    with pytest.raises(UsageError, match="author 'maria' is not 'Name <email>'"):
        import_.import_patches(project, cache, [diff], author="maria", subject="core: ciao")
    (row,) = import_.import_patches(
        project, cache, [diff], author="Maria Rossi <maria@example.org>", subject="core: ciao"
    ).added
    text = added_text(demo.root, row)
    assert row["id"] == "core-ciao" and "From: Maria Rossi <maria@example.org>\n" in text
    assert "Subject: [PATCH] core: ciao\n" in text and '+    word = "ciao"' in text
    # `diff -u` output, without git's headers, is yours by default
    edit("python/demo/util.py", "return 1", "return 2")(demo.work)
    unified = tmp_path / "util.diff"
    unified.write_text(
        git(demo.work, "diff", "--no-prefix", "--src-prefix=a/", "--dst-prefix=b/").split("\n", 2)[2]
    )  # drop the 'diff --git' and 'index' lines
    git(demo.work, "checkout", "-q", "--", ".")
    assert unified.read_text().startswith("--- a/python/demo/util.py")
    (row,) = import_.import_patches(Project.load(demo.root), cache, [unified], subject="util: two").added
    assert "From: Dana Fork <dana@example.org>\n" in added_text(demo.root, row)


def test_a_quilt_patch_without_a_header_is_yours_unless_an_author_is_given(
    demo: Demo, tmp_path: Path, me: None
) -> None:
    quilt = tmp_path / "quilt"
    (quilt / "patches").mkdir(parents=True)
    (quilt / "patches" / "series").write_text("ciao.patch\n")
    (quilt / "patches" / "ciao.patch").write_text(CIAO)
    demo.write_manifest()
    (row,) = import_.import_patches(Project.load(demo.root), Cache(demo.cache), [quilt]).added
    text = added_text(demo.root, row)
    assert "From: Dana Fork <dana@example.org>\n" in text and "unknown@localhost" not in text
    assert "Subject: [PATCH] ciao\n" in text
    other = tmp_path / "other"
    demo.write_manifest()
    fork = empty_project(other, demo.root)
    (row,) = import_.import_patches(fork, Cache(demo.cache), [quilt], author="Quilt Person <q@example.org>").added
    assert "From: Quilt Person <q@example.org>\n" in added_text(other, row)


# -- a whole series at once: a quilt series file, its order, comments and strip levels -------------


def test_a_series_file_imports_in_its_order_with_each_patchs_own_names(demo: Demo, tmp_path: Path) -> None:
    """A series file as real ones are (here: one like a conda-forge feedstock's): comments, a -p0
    patch, a plain diff with no header (named by its file), a DEP-3 header and a mail header."""
    demo.write_manifest()
    series = tmp_path / "recipe" / "patches"
    series.mkdir(parents=True)
    (series / "series").write_text(
        "# carried since 1.0\n"
        "0001-util-returns-two.patch -p0   # made with diff -u in the tree\n"
        "\n"
        "0002-farewell_ciao.diff\n"
        "dep3.patch -p1\n"
        "mail.patch -pab\n"
    )
    (series / "0001-util-returns-two.patch").write_text(
        "--- python/demo/util.py.orig\t2021-08-14 01:44:55.000000000 -0700\n"
        "+++ python/demo/util.py\t2021-08-14 01:45:10.000000000 -0700\n"
        "@@ -1,2 +1,2 @@\n def helper():\n-    return 1\n+    return 2\n"
    )
    (series / "0002-farewell_ciao.diff").write_text(CIAO)
    (series / "dep3.patch").write_text(
        "Description: core: inclusive cap\n Queues at the cap are full.\nAuthor: Maria Rossi <maria@example.org>\n"
        "Forwarded: https://github.com/demo/demo/pull/7\n---\n"
        "--- a/python/demo/core.py\n+++ b/python/demo/core.py\n@@ -14,3 +14,3 @@\n def limit(queue, cap):\n"
        "-    if len(queue) > cap:\n+    if len(queue) >= cap:\n         return False\n"
    )
    (series / "mail.patch").write_text(
        "From: Ada Mail <ada@example.org>\nSubject: [PATCH 2/2] core: hi\n\nShorter.\n---\n"
        "--- a/python/demo/core.py\n+++ b/python/demo/core.py\n@@ -3,4 +3,4 @@\n \n def greet(name):\n"
        '-    greeting = "hello"\n+    greeting = "hi"\n     return f"{greeting} {name}"\n'
    )
    res = demo.run("import", "--series", str(series / "series"), "--author", "Pat Series <pat@example.org>", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    added = json.loads(res.stdout)["data"]["added"]
    assert [(r["id"], r["upstream_status"]) for r in added] == [
        ("util-returns-two", "pending"),
        ("farewell-ciao", "pending"),
        ("core-inclusive-cap", "submitted"),
        ("core-hi", "pending"),
    ]
    texts = [added_text(demo.root, r) for r in added]
    assert "From: Pat Series <pat@example.org>\nSubject: [PATCH] util returns two\n" in texts[0]
    assert "diff --git a/python/demo/util.py b/python/demo/util.py\n" in texts[0]
    assert "Subject: [PATCH] farewell ciao\n" in texts[1]
    assert "From: Maria Rossi <maria@example.org>\nSubject: [PATCH] core: inclusive cap\n" in texts[2]
    assert "From: Ada Mail <ada@example.org>\nSubject: [PATCH] core: hi\n" in texts[3]
    assert [lp.patch.subject for lp in Project.load(demo.root).series()] == [
        "util returns two",
        "farewell ciao",
        "core: inclusive cap",
        "core: hi",
    ]
    assert demo.run("check").returncode == 0


@pytest.mark.parametrize("given", ["DIR", "--series"])
def test_p_given_is_the_strip_level_of_a_quilt_directorys_entries_that_name_none(
    demo: Demo, tmp_path: Path, given: str
) -> None:
    """`import -p0 DIR` (or `--series DIR/series`): -p0 for each entry without a -pN word (here made
    by diff -u in the tree, as `quilt import -p0` leaves them), an entry's own -p1 still wins; each
    patch stored as `git apply` at that level applies it."""
    demo.write_manifest()
    quilt = tmp_path / "debian" / "patches"
    quilt.mkdir(parents=True)
    (quilt / "series").write_text("util.diff\nciao.diff -p1\n")
    (quilt / "util.diff").write_text(
        "--- python/demo/util.py.orig\n+++ python/demo/util.py\n"
        "@@ -1,2 +1,2 @@\n def helper():\n-    return 1\n+    return 2\n"
    )
    (quilt / "ciao.diff").write_text(CIAO)
    source = [str(tmp_path / "debian")] if given == "DIR" else ["--series", str(quilt / "series")]
    res = demo.run("import", "-p0", *source, "--author", "Pat Series <pat@example.org>", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    added = json.loads(res.stdout)["data"]["added"]
    assert [r["id"] for r in added] == ["util", "ciao"]
    texts = [added_text(demo.root, r) for r in added]
    assert "diff --git a/python/demo/util.py b/python/demo/util.py\n" in texts[0]
    assert "diff --git a/python/demo/core.py b/python/demo/core.py\n" in texts[1]
    for name, level, path, text in (
        ("util.diff", "-p0", "python/demo/util.py", texts[0]),
        ("ciao.diff", "-p1", "python/demo/core.py", texts[1]),
    ):  # each stored as the change git apply makes of it at its level
        git(demo.work, "apply", level, str(quilt / name))
        assert "\n@@" + git(demo.work, "diff", "--", path).split("\n@@", 1)[1] in text
    assert demo.run("check").returncode == 0


def test_a_series_line_with_an_unknown_option_or_missing_patch_is_refused_and_nothing_written(
    demo: Demo, tmp_path: Path
) -> None:
    demo.write_manifest()
    (tmp_path / "series").write_text("ciao.patch -R\n")
    (tmp_path / "ciao.patch").write_text(CIAO)
    before = snapshot(demo.root, tmp_path)
    res = demo.run("import", "--series", str(tmp_path / "series"))
    assert res.returncode == 2
    assert f"error: {tmp_path}/series:1: ciao.patch: option '-R' is not supported" in res.stderr
    assert "Traceback" not in res.stderr
    (tmp_path / "series").write_text("# two\nciao.patch\ngone.patch\n")
    res = demo.run("import", "--series", str(tmp_path / "series"), "--author", "Pat Series <pat@example.org>")
    assert res.returncode == 2 and f"{tmp_path}/series:3: gone.patch does not exist" in res.stderr
    (tmp_path / "series").write_text("ciao.patch -R\n")
    assert snapshot(demo.root, tmp_path) == before


def test_a_series_listing_a_patch_twice_is_refused_before_any_patch_is_read(demo: Demo, tmp_path: Path) -> None:
    """Found by an attack: a series naming one 3 MB patch 600 times read and kept it 600 times
    (2 GB) before refusing anything. Quilt refuses a patch listed twice; so does import, naming both
    lines, before it reads a patch (this one is not even UTF-8)."""
    demo.write_manifest()
    (tmp_path / "series").write_text("# two\nciao.patch\nother.patch\nciao.patch -p1\n")
    (tmp_path / "ciao.patch").write_bytes(b"\xff" + CIAO.encode())
    (tmp_path / "other.patch").write_text(CIAO)
    before = snapshot(demo.root, tmp_path)
    res = demo.run("import", "--series", str(tmp_path / "series"), "--author", "Pat Series <pat@example.org>")
    assert (res.returncode, res.stdout, res.stderr) == (
        2,
        "",
        f"error: {tmp_path}/series:4: ciao.patch is listed again (first at line 2); refusing the series (hint: "
        "a series lists each patch once, as quilt requires: delete the second line)\n",
    )
    assert snapshot(demo.root, tmp_path) == before


# -- --fuzz: what GNU patch applies and git apply does not ---------------------------------------


def fuzzy_patch(tmp_path: Path) -> Path:
    """A patch made on an older farewell(): its first context line no longer matches the pin."""
    path = tmp_path / "older.patch"
    path.write_text(
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: Maria Rossi <maria@example.org>\nSubject: [PATCH] core: ciao\n\n---\n"
        "diff --git a/python/demo/core.py b/python/demo/core.py\n"
        "--- a/python/demo/core.py\n+++ b/python/demo/core.py\n"
        "@@ -5,8 +5,8 @@ def greet(name):\n"
        '     return f"{salutation} {name}"\n \n \n def farewell(name):\n'
        '-    word = "bye"\n+    word = "ciao"\n     return f"{word} {name}"\n \n \n'
    )
    return path


def test_import_fuzz_applies_what_git_refuses_and_stores_it_refreshed(demo: Demo, tmp_path: Path) -> None:
    demo.write_manifest()
    patch = fuzzy_patch(tmp_path)
    before = snapshot(demo.root)
    res = demo.run("import", str(patch))
    assert res.returncode == 3
    assert f"error: {patch}: does not apply at demo-1.0 after the series" in res.stdout
    assert "let it apply with fuzz as GNU patch would (--fuzz 2) and store it refreshed" in res.stdout
    assert snapshot(demo.root) == before
    res = demo.run("import", str(patch), "--fuzz", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (
        "  added core-ciao (patches/0001-core-ciao.patch, upstream pending)\n"
        "    refreshed: python/demo/core.py hunk 1 fuzz 1 offset +1" in res.stdout
    )
    stored = (demo.root / "patches/0001-core-ciao.patch").read_text()
    assert "salutation" not in stored and "@@ -7,7 +7,7 @@ def greet(name):" in stored  # regenerated, zero fuzz
    check = demo.run("check", "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["data"]["applies"][0]["outcome"] == "applied"


def test_import_fuzz_reports_in_json_and_refuses_beyond_its_limit(demo: Demo, tmp_path: Path) -> None:
    demo.write_manifest()
    patch = fuzzy_patch(tmp_path)
    # a line the patch removes is not upstream's: no fuzz places it
    patch.write_text(
        patch.read_text()
        .replace("@@ -5,8 +5,8 @@", "@@ -5,7 +5,8 @@")
        .replace(" \n \n def farewell", " \n+\n def farewell", 1)
        .replace('-    word = "bye"', '-    word = "adieu"')
    )
    before = snapshot(demo.root)
    res = demo.run("import", str(patch), "--fuzz", "3", "--json")
    envelope = json.loads(res.stdout)
    assert res.returncode == 3 and envelope["exit_code"] == 3
    assert "or allow more fuzz than 3" in envelope["errors"][0]["hint"]
    assert snapshot(demo.root) == before
    res = demo.run("import", str(fuzzy_patch(tmp_path)), "--fuzz", "2", "--json")
    (row,) = json.loads(res.stdout)["data"]["added"]
    assert row["refreshed"] == [{"file": "python/demo/core.py", "hunk": 1, "fuzz": 1, "offset": 1}]
    assert demo.run("import", str(patch), "--fuzz", "-1").returncode == 2


def stored_headers(demo: Demo, name: str) -> list[str]:
    text = (demo.root / "patches" / name).read_text()
    return [
        ln
        for ln in text.splitlines()
        if ln.startswith(("diff --git", "old mode", "new mode", "new file", "deleted file", "rename ", "copy "))
    ]


def test_import_fuzz_keeps_a_copys_source_as_git_and_patch_do(demo: Demo, tmp_path: Path) -> None:
    demo.write_manifest()
    patch = fuzzy_patch(tmp_path)
    patch.write_text(
        patch.read_text()
        .replace(
            "diff --git a/python/demo/core.py b/python/demo/core.py\n",
            "diff --git a/python/demo/core.py b/python/demo/ciao.py\nsimilarity index 90%\n"
            "copy from python/demo/core.py\ncopy to python/demo/ciao.py\n",
        )
        .replace("+++ b/python/demo/core.py", "+++ b/python/demo/ciao.py")
    )
    res = demo.run("import", str(patch), "--fuzz", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "    refreshed: python/demo/ciao.py hunk 1 fuzz 1 offset +1" in res.stdout
    # the copy's source stays (a rename would delete it): the copy is stored as the new file it is
    assert stored_headers(demo, "0001-core-ciao.patch") == [
        "diff --git a/python/demo/ciao.py b/python/demo/ciao.py",
        "new file mode 100644",
    ]
    check = demo.run("check", "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["data"]["applies"][0]["outcome"] == "applied"


def test_import_fuzz_keeps_the_headers_modes(demo: Demo, tmp_path: Path) -> None:
    demo.write_manifest()
    patch = fuzzy_patch(tmp_path)
    patch.write_text(
        patch.read_text().replace(
            "diff --git a/python/demo/core.py b/python/demo/core.py\n",
            "diff --git a/python/demo/core.py b/python/demo/core.py\nold mode 100644\nnew mode 100755\n",
        )
        + "diff --git a/tools/run.sh b/tools/run.sh\nnew file mode 100755\n"
        "--- /dev/null\n+++ b/tools/run.sh\n@@ -0,0 +1 @@\n+#!/bin/sh\n"
    )
    res = demo.run("import", str(patch), "--fuzz", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert stored_headers(demo, "0001-core-ciao.patch") == [
        "diff --git a/python/demo/core.py b/python/demo/core.py",
        "old mode 100644",
        "new mode 100755",
        "diff --git a/tools/run.sh b/tools/run.sh",
        "new file mode 100755",
    ]


def test_import_of_an_absolute_name_strips_its_slash_as_git_apply_does(demo: Demo, tmp_path: Path) -> None:
    """'+++ /tmp/evil-abs.txt' at -p1 (the guess) is tmp/evil-abs.txt for git apply and GNU patch
    both; at -p0 it names a path outside the tree: refused, nothing written."""
    demo.write_manifest()
    (tmp_path / "abs.diff").write_text("--- /dev/null\n+++ /tmp/evil-abs.txt\n@@ -0,0 +1 @@\n+x\n")
    (tmp_path / "series").write_text("abs.diff -p0\n")
    before = snapshot(demo.root)
    res = demo.run("import", "--series", str(tmp_path / "series"), "--author", "Pat Series <pat@example.org>")
    assert res.returncode == 1, res.stdout + res.stderr  # a patch file that may not be applied
    assert (
        f"error: {tmp_path}/abs.diff:1: unsafe diff: absolute path '/tmp/evil-abs.txt' (line 1) "
        "(hint: a patch may only touch files inside the upstream tree)"
    ) in res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert snapshot(demo.root) == before and not Path("/tmp/evil-abs.txt").exists()
    res = demo.run("import", str(tmp_path / "abs.diff"), "--author", "Pat Series <pat@example.org>")
    assert res.returncode == 0, res.stdout + res.stderr
    assert stored_headers(demo, "0001-abs.patch") == [
        "diff --git a/tmp/evil-abs.txt b/tmp/evil-abs.txt",
        "new file mode 100644",
    ]


# -- how many git processes a quilt import starts (counted by a git on PATH, never timed) ----------


def counting_git(where: Path, log: Path) -> dict[str, str]:
    """PATH with a ``git`` first on it that appends its arguments to ``log``, then runs the real git.
    A shell script, not Python: it runs for every git the command starts. Each argument is written
    NUL-terminated, each run ends with an RS (0x1e) of its own."""
    real = shutil.which("git")
    assert real is not None
    where.mkdir()
    (where / "git").write_text(
        f"#!/bin/sh\n{{ printf '%s\\0' \"$@\"; printf '\\036\\0'; }} >> {shlex.quote(str(log))}\n"
        f'exec {shlex.quote(real)} "$@"\n'
    )
    (where / "git").chmod(0o755)
    return {"PATH": f"{where}{os.pathsep}{os.environ['PATH']}"}


def git_runs(log: Path) -> list[list[str]]:
    runs: list[list[str]] = [[]]
    for word in log.read_bytes().split(b"\0")[:-1] if log.exists() else []:
        if word == b"\036":
            runs.append([])
        else:
            runs[-1].append(os.fsdecode(word))
    return [r for r in runs[:-1] if r != ["version"]]  # GitPython asks git's version as it is imported


def test_a_quilt_import_reads_your_identity_once_and_the_series_file_before_any_git(
    demo: Demo, tmp_path: Path, me: None
) -> None:
    """Found by an attack: each series line started two `git var` before anything applied, and a
    bad last line was found only after every patch before it was read."""
    demo.write_manifest()
    quilt = tmp_path / "quilt"
    quilt.mkdir()
    (quilt / "series").write_text("".join(f"p{n}.patch\n" for n in range(5)) + "p4.patch -R\n")
    previous = "bye"
    for n in range(5):
        word = f"w{n}"
        hunk = f' def farewell(name):\n-    word = "{previous}"\n+    word = "{word}"\n'
        (quilt / f"p{n}.patch").write_text(
            CIAO.replace(' def farewell(name):\n-    word = "bye"\n+    word = "ciao"\n', hunk)
        )
        previous = word
    log = demo.cache / "git-runs.jsonl"  # the cache: where a confined import's children may write
    env = counting_git(tmp_path / "bin", log)
    before = snapshot(demo.root)
    res = demo.spawn("import", str(quilt), env=env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{quilt}/series:6: p4.patch: option '-R' is not supported" in res.stderr
    assert git_runs(log) == [] and snapshot(demo.root) == before
    (quilt / "series").write_text("".join(f"p{n}.patch\n" for n in range(5)))
    res = demo.spawn("import", str(quilt), env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    asked = [r[r.index("var") :] for r in git_runs(log) if "var" in r]
    assert asked == [["var", "GIT_AUTHOR_IDENT"], ["var", "GIT_COMMITTER_IDENT"]], asked
    assert [lp.patch.author_name for lp in Project.load(demo.root).series()] == ["Dana Fork"] * 5


def test_a_format_patch_envelope_around_a_plain_diff_imports_as_its_header_says(
    demo: Demo, tmp_path: Path, me: None
) -> None:
    """Debian's tornado 6.2.0-3+deb12u4 carries ``case-insensitive-http-headers.patch``: git
    format-patch's ``From <sha>`` envelope and mail header around a plain ``diff -u`` body
    (``--- python-tornado-6.2.0.orig/...``). It was refused as "no 'diff --git' section"."""
    demo.write_manifest()
    git(demo.work, "checkout", "-q", "upstream")
    edit("python/demo/core.py", 'word = "bye"', 'word = "ciao"')(demo.work)
    body = git(demo.work, "diff", "--no-prefix", "--src-prefix=pkg-1.0.orig/", "--dst-prefix=pkg-1.0/")
    git(demo.work, "checkout", "-q", "--", ".")
    mail = tmp_path / "ciao.patch"
    mail.write_text(
        "From 87a85bb4de18ab17c360f7cb530274202fd05d4c Mon Sep 17 00:00:00 2001\n"
        "From: Arnaud Example <arnaud@example.org>\n"
        "Date: Mon, 15 Dec 2025 12:12:18 +0100\n"
        "Subject: [PATCH] Make sure that the in-operator is case\n insensitive\n\n"
        + body.split("\n", 2)[2]  # from the '--- pkg-1.0.orig/...' line on
    )
    (row,) = import_.import_patches(Project.load(demo.root), Cache(demo.cache), [mail]).added
    text = added_text(demo.root, row)
    assert "From: Arnaud Example <arnaud@example.org>\n" in text
    assert "Subject: [PATCH] Make sure that the in-operator is case insensitive\n" in text
    assert '+    word = "ciao"' in text and "--- a/python/demo/core.py" in text
    (entry,) = [p for p in Project.load(demo.root).manifest.patches if p.id == row["id"]]
    assert entry.imported is not None and entry.imported.commit == "87a85bb4de18ab17c360f7cb530274202fd05d4c"


def test_a_quilt_import_applies_on_one_index_and_exports_every_patch_at_once(
    demo: Demo, tmp_path: Path, me: None
) -> None:
    """Per patch only `git apply`, `write-tree` and `commit-tree`: the index is read once and
    carried from patch to patch, and the patch files come from one `format-patch`; what they
    hold is each commit's own export."""
    demo.write_manifest()
    quilt = tmp_path / "quilt"
    quilt.mkdir()
    (quilt / "series").write_text("".join(f"p{n}.patch\n" for n in range(5)))
    previous = "bye"
    for n in range(5):
        hunk = f' def farewell(name):\n-    word = "{previous}"\n+    word = "w{n}"\n'
        (quilt / f"p{n}.patch").write_text(
            CIAO.replace(' def farewell(name):\n-    word = "bye"\n+    word = "ciao"\n', hunk)
        )
        previous = f"w{n}"
    log = demo.cache / "git-runs.jsonl"
    res = demo.spawn("import", str(quilt), env=counting_git(tmp_path / "bin", log))
    assert res.returncode == 0, res.stdout + res.stderr
    commands = [next(w for w in r if not w.startswith("-")) for r in git_runs(log)]
    assert {c: commands.count(c) for c in ("read-tree", "apply", "write-tree", "commit-tree", "format-patch")} == {
        "read-tree": 1,
        "apply": 5,
        "write-tree": 5,
        "commit-tree": 5,
        "format-patch": 1,
    }
    series = Project.load(demo.root).series()
    cache = Cache(demo.cache)
    chain = apply_series(cache.repo, cache.ensure(load_pin(demo.root, "demo-1.0")).commit, series, commit=True)
    assert [lp.path.read_text() for lp in series] == [cache.repo.format_patch(r.commit or "") for r in chain.results]


def test_a_header_refused_before_a_later_patch_that_does_not_apply_is_said_first(
    demo: Demo, tmp_path: Path, me: None
) -> None:
    """The patches are recorded after all applied: the refusal is still the first patch's header,
    as when each was recorded before the next applied."""
    demo.write_manifest()
    quilt = tmp_path / "quilt"
    quilt.mkdir()
    (quilt / "series").write_text("bad-header.patch\nstale.patch\n")
    (quilt / "bad-header.patch").write_text("Patchtool-Entry: { assumptions = 3 }\n" + CIAO)
    (quilt / "stale.patch").write_text(CIAO)  # applies only before bad-header.patch
    before = snapshot(demo.root)
    res = demo.run("import", str(quilt))
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"{quilt / 'bad-header.patch'}: assumptions: unexpected type integer" in res.stderr
    assert snapshot(demo.root) == before
    (quilt / "bad-header.patch").write_text(CIAO)
    res = demo.run("import", str(quilt))
    assert res.returncode == 3 and f"{quilt / 'stale.patch'}: does not apply" in res.stdout, res.stdout
    assert snapshot(demo.root) == before

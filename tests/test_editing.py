"""checkout / export / import / new / drop / quilt export on real temporary repositories."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import Demo, edit
from helpers import git, quilt_push_all, require_tool, snapshot


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


def checked_out(demo: Demo) -> Path:
    res = demo.run("checkout", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    return Path(json.loads(res.stdout)["data"]["worktree"])


def wt_git(wt: Path, *args: str) -> str:
    return git(wt, *args)


def test_round_trip_without_edits_is_byte_identical(demo: Demo) -> None:
    three(demo)
    before = snapshot(demo.root / "patches") | snapshot(demo.root / "patchset.toml")
    wt = checked_out(demo)
    assert "Patchtool-Id: greet" in wt_git(wt, "log", "--format=%B", "-3")
    res = demo.run("export")
    assert res.returncode == 0, res.stderr
    assert "unchanged greet" in res.stdout
    assert snapshot(demo.root / "patches") | snapshot(demo.root / "patchset.toml") == before


def test_round_trip_keeps_a_message_that_quotes_a_trailer(demo: Demo) -> None:
    """A message quoting another patch's `Patchtool-Id: ...` line in its text lost that line on a
    checkout and export with no edit (found by issue 29): patchtool reads and writes its own keys
    only in the trailer block, as `git interpret-trailers` reads it."""
    body = "Like the fix that carried\nPatchtool-Id: other\nbut shorter.\n\nPatchtool-Id: quoted-last\nmore text."
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi", body)
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"))
    series = (demo.root / "patches", demo.root / "upstream-pins")
    before, manifest = snapshot(*series), (demo.root / "patchset.toml").read_bytes()
    wt = checked_out(demo)
    assert wt_git(wt, "log", "-1", "--format=%(trailers:key=Patchtool-Id,valueonly)").strip() == "greet"
    res = demo.run("export", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["data"]["trailers"] == []
    assert snapshot(*series) == before and (demo.root / "patchset.toml").read_bytes() == manifest


UNREADABLE = [
    (
        "core: quote a diff\n\n---\nlooks like a diff separator\ndiff --git a/x b/x\n",
        "line 3 of its message, '---', is where a patch file's message ends (`git am` and patchtool read what "
        "follows as the diff), so the rest of the message would be lost",
    ),
    (
        "core: quote a diff\n\nas this shows:\ndiff -u a b\n",
        "line 4 of its message, 'diff -u a b', is where a patch file's message ends",
    ),
    ("core: quote\n\nIndex: python/demo/core.py\n", "line 3 of its message, 'Index: python/demo/core.py', is where"),
    ("core: quote\n\nsee\n--- a/python/demo/core.py\n", "line 4 of its message, '--- a/python/demo/core.py', is"),
    (
        "[PATCH 1/2] Re: demo: [4.2.x] subject\n\nbody\n",
        "its subject '[PATCH 1/2] Re: demo: [4.2.x] subject' would read back as 'demo: [4.2.x] subject': a patch "
        "file's reader drops a leading 'Re:', bracketed tags naming PATCH and colons, and makes each run of spaces "
        "one, as `git am` does",
    ),
    (  # found by a second attack: the check compared the subject with its spaces already made one
        "demo:  two  spaces\n\nbody\n",
        "its subject 'demo:  two  spaces' would read back as 'demo: two spaces'",
    ),
    (
        "core: for someone\n\nFrom: Some One <one@example.com>\n\nbody\n",
        "line 3 of its message, 'From: Some One <one@example.com>', starts the body as an in-body mail header does",
    ),
]


@pytest.mark.parametrize(("message", "why"), UNREADABLE)
def test_export_refuses_a_message_its_patch_file_would_not_read_back(
    demo: Demo, tmp_path: Path, message: str, why: str
) -> None:
    """A commit body holding a `---` line then `diff --git a/x b/x` was exported into a patch file
    whose message parsed as a diff (`check`: "x: file missing", a fresh checkout failed), and a
    subject `[PATCH 1/2] Re: demo: ...` lost its prefix on the next round trip (found by an attack,
    issue 29). git format-patch writes such a message as it is and `git am` truncates it: export
    refuses it, naming the commit and the line, and changes nothing."""
    three(demo)
    wt = checked_out(demo)
    (wt / "python/demo/util.py").write_text("def helper():\n    return 1\n\n\ndef other():\n    return 5\n")
    (tmp_path / "msg").write_text(message)
    wt_git(wt, "commit", "-qa", "--cleanup=verbatim", "-F", str(tmp_path / "msg"))
    head = wt_git(wt, "rev-parse", "HEAD").strip()
    before = snapshot(demo.root)
    res = demo.run("export", "--json")
    assert res.returncode == 2, res.stdout + res.stderr
    error = json.loads(res.stdout)["errors"][0]
    subject = message.partition("\n")[0]
    assert error["message"].startswith(f"commit {head[:12]} ({subject}) cannot be written as a patch file as it is: ")
    assert why in error["message"] and error["message"].endswith("; nothing was changed")
    assert "`git commit --amend`" in error["hint"]
    assert snapshot(demo.root) == before and wt_git(wt, "rev-parse", "HEAD").strip() == head


def test_a_message_that_reads_back_round_trips_byte_identical(demo: Demo, tmp_path: Path) -> None:
    """What export writes reads back as written: a branch tag kept in the subject, and lines that
    only look like a separator, give the same patch file on a fresh checkout and export."""
    three(demo)
    wt = checked_out(demo)
    (wt / "python/demo/util.py").write_text("def helper():\n    return 1\n\n\ndef other():\n    return 5\n")
    message = "demo: [4.2.x] keep the tag\n\n---- four dashes\n---not a break\n diff --git a/x b/x\n"
    (tmp_path / "msg").write_text(message)
    wt_git(wt, "commit", "-qa", "--cleanup=verbatim", "-F", str(tmp_path / "msg"))
    res = demo.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    before = snapshot(demo.root / "patches") | snapshot(demo.root / "patchset.toml")
    assert demo.run("checkout", "--branch", "rt").returncode == 0
    res = demo.run("export", "--branch", "rt", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert {p["change"] for p in json.loads(res.stdout)["data"]["patches"]} == {"unchanged"}
    assert snapshot(demo.root / "patches") | snapshot(demo.root / "patchset.toml") == before
    assert demo.run("check").returncode == 0


def test_amend_refreshes_only_that_patch(demo: Demo) -> None:
    three(demo)
    before = {p.name: p.read_text() for p in (demo.root / "patches").glob("*.patch")}
    wt = checked_out(demo)
    wt_git(wt, "rebase", "-q", "--exec", "true", "HEAD~3")  # a no-op history rewrite is still no change
    # amend the middle commit (util): edit, commit --fixup, autosquash
    (wt / "python/demo/util.py").write_text("def helper():\n    return 22\n")
    wt_git(wt, "commit", "-qam", "fixup! util: two")
    subprocess.run(
        ["git", "-c", "sequence.editor=true", "rebase", "-q", "-i", "--autosquash", "HEAD~4"],
        cwd=wt,
        check=True,
        capture_output=True,
        env={
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "PATH": "/usr/bin:/bin",
            "HOME": str(wt),
            "GIT_AUTHOR_NAME": "a",
            "GIT_AUTHOR_EMAIL": "a@b",
            "GIT_COMMITTER_NAME": "a",
            "GIT_COMMITTER_EMAIL": "a@b",
        },
    )
    res = demo.run("export")
    assert res.returncode == 0, res.stderr
    after = {p.name: p.read_text() for p in (demo.root / "patches").glob("*.patch")}
    assert after["0001-greet.patch"] == before["0001-greet.patch"]
    assert after["0003-cap.patch"] == before["0003-cap.patch"]
    assert after["0002-util.patch"] != before["0002-util.patch"] and "+    return 22" in after["0002-util.patch"]
    assert "Patchtool-Id" not in after["0002-util.patch"]


def test_reorder_follows_in_the_manifest(demo: Demo) -> None:
    three(demo)
    contents = {p.read_text() for p in (demo.root / "patches").glob("*.patch")}
    wt = checked_out(demo)
    commits = wt_git(wt, "rev-list", "--reverse", "HEAD~3..HEAD").split()
    wt_git(wt, "reset", "-q", "--hard", "HEAD~3")
    for c in (commits[1], commits[0], commits[2]):  # util, greet, cap
        wt_git(wt, "cherry-pick", c)
    res = demo.run("export", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)["data"]
    assert [p["id"] for p in data["patches"]] == ["util", "greet", "cap"]
    manifest = (demo.root / "patchset.toml").read_text()
    assert manifest.index('id = "util"') < manifest.index('id = "greet"')
    assert {p.read_text() for p in (demo.root / "patches").glob("*.patch")} == contents
    assert sorted(p.name for p in (demo.root / "patches").glob("*.patch")) == [
        "0001-util.patch",
        "0002-greet.patch",
        "0003-cap.patch",
    ]
    assert demo.run("check").returncode == 0


def test_new_commit_becomes_a_skeleton_that_check_warns_of(demo: Demo) -> None:
    three(demo)
    wt = checked_out(demo)
    (wt / "python/demo/util.py").write_text("def helper():\n    return 1\n\n\ndef other():\n    return 5\n")
    wt_git(wt, "commit", "-qam", "util: add other()")
    res = demo.run("export")
    assert res.returncode == 0, res.stderr
    assert "new       util-add-other" in res.stdout
    check = demo.run("check")
    assert check.returncode == 0
    assert (
        "warning: patchset.toml: patch util-add-other: patch[3].owner: still the skeleton's placeholder" in check.stdout
    )
    assert "patch[3].why" in check.stdout and "patch[3].drop_when" in check.stdout
    assert demo.run("check", "--strict").returncode == 1


def test_trailer_keeps_metadata_whatever_the_subject(demo: Demo) -> None:
    three(demo)
    manifest = demo.root / "patchset.toml"
    manifest.write_text(manifest.read_text().replace('why = "because"', 'why = "the real reason"', 1))
    wt = checked_out(demo)
    subprocess.run(["git", "rebase", "-q", "-x", "true", "HEAD~1"], cwd=wt, check=True, capture_output=True)
    wt_git(wt, "commit", "-q", "--amend", "-m", "core: a new subject\n\nPatchtool-Id: cap")
    res = demo.run("export")
    assert res.returncode == 0, res.stderr
    assert "refreshed cap" in res.stdout
    text = manifest.read_text()
    assert text.count('id = "cap"') == 1 and 'why = "the real reason"' in text
    assert "Subject: [PATCH] core: a new subject" in (demo.root / "patches/0003-cap.patch").read_text()


def test_deleted_commit_is_refused_then_recorded(demo: Demo) -> None:
    three(demo)
    wt = checked_out(demo)
    commits = wt_git(wt, "rev-list", "--reverse", "HEAD~3..HEAD").split()
    wt_git(wt, "reset", "-q", "--hard", "HEAD~3")
    for c in (commits[0], commits[2]):
        wt_git(wt, "cherry-pick", c)
    before = snapshot(demo.root)
    res = demo.run("export")
    assert res.returncode == 2
    assert "patch(es) util have no commit on 'series' any more; refusing to delete them silently" in res.stderr
    assert snapshot(demo.root) == before
    res = demo.run("export", "--allow-drop")
    assert res.returncode == 0, res.stderr
    manifest = (demo.root / "patchset.toml").read_text()
    assert "[[dropped]]" in manifest and "its commit was removed from checkout branch 'series'" in manifest
    assert (demo.root / "patches/dropped/0002-util.patch").is_file()


def test_drop_records_the_reason(demo: Demo) -> None:
    three(demo)
    res = demo.run("drop", "util", "--reason", "upstream fixed it differently")
    assert res.returncode == 0, res.stderr
    manifest = (demo.root / "patchset.toml").read_text()
    assert 'reason = "upstream fixed it differently"' in manifest and 'dropped_at = "demo-1.0"' in manifest
    assert not (demo.root / "patches/0002-util.patch").exists()
    assert demo.run("drop", "nope", "--reason", "x").returncode == 2


def test_merge_commit_and_dirty_worktree_are_refused(demo: Demo) -> None:
    three(demo)
    wt = checked_out(demo)
    (wt / "python/demo/util.py").write_text("dirty\n")
    res = demo.run("export")
    assert res.returncode == 2 and "has uncommitted changes" in res.stderr
    wt_git(wt, "checkout", "-q", "--", ".")
    branch = wt_git(wt, "symbolic-ref", "--short", "HEAD").strip()  # namespaced in the shared cache
    wt_git(wt, "checkout", "-q", "-b", "side", "HEAD~1")
    (wt / "python/demo/extra_side.py").write_text("x = 1\n")
    wt_git(wt, "add", "-A")
    wt_git(wt, "commit", "-qm", "side work")
    wt_git(wt, "checkout", "-q", branch)
    wt_git(wt, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    res = demo.run("export")
    assert res.returncode == 2 and "is a merge commit; a series is linear" in res.stderr


def test_import_format_patch_and_refuse_what_does_not_apply(demo: Demo, tmp_path: Path) -> None:
    three(demo)
    git(demo.work, "checkout", "-q", "-B", "x", "upstream")
    edit("python/demo/util.py", "return 1", "return 3")(demo.work)
    git(demo.work, "commit", "-qam", "util: three")
    bad = tmp_path / "bad.patch"
    bad.write_text(git(demo.work, "format-patch", "-1", "--stdout"))
    before = snapshot(demo.root)
    res = demo.run("import", str(bad))
    assert res.returncode == 3
    assert "does not apply at demo-1.0 after the series: python/demo/util.py hunk 1" in res.stdout
    assert snapshot(demo.root) == before
    git(demo.work, "checkout", "-q", "-B", "y", "upstream")
    edit("python/demo/core.py", 'word = "bye"', 'word = "ciao"')(demo.work)
    git(demo.work, "commit", "-qam", "core: ciao", "-m", "Italian farewell.")
    good = tmp_path / "good.patch"
    good.write_text(git(demo.work, "format-patch", "-1", "--stdout"))
    res = demo.run("import", str(good), "--url", "https://github.com/sgl-project/sglang/pull/12345", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    added = json.loads(res.stdout)["data"]["added"][0]
    assert added["file"] == "patches/0004-core-ciao.patch" and added["upstream_status"] == "submitted"
    text = (demo.root / "patches/0004-core-ciao.patch").read_text()
    assert "Date:" not in text and text.startswith("From 0000000000000000000000000000000000000000")
    manifest = (demo.root / "patchset.toml").read_text()
    assert 'upstream = { status = "submitted", url = "https://github.com/sgl-project/sglang/pull/12345" }' in manifest


def test_import_a_quilt_series(demo: Demo, tmp_path: Path) -> None:
    three(demo)
    quilt = tmp_path / "debian-patches"
    quilt.mkdir()
    (quilt / "series").write_text("# from the distro\nfix-extra.patch\n")
    (quilt / "fix-extra.patch").write_text(
        textwrap.dedent("""\
        Description: farewell says ciao
         The Italian deployment wants it.
        Author: Maria Rossi <maria@example.org>
        Origin: upstream, https://github.com/sgl-project/sglang/commit/0123456789abcdef0123456789abcdef01234567
        Last-Update: 2026-10-01
        ---
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
    )
    res = demo.run("import", str(quilt), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    added = json.loads(res.stdout)["data"]["added"][0]
    assert (
        added["upstream_status"] == "backport" and added["upstream_ref"] == "0123456789abcdef0123456789abcdef01234567"
    )
    text = (demo.root / added["file"]).read_text()
    assert "From: Maria Rossi <maria@example.org>" in text and "Subject: [PATCH] farewell says ciao" in text


def test_quilt_export_pushes_on_the_pinned_tree(demo: Demo, tmp_path: Path) -> None:
    quilt = require_tool("quilt", enables="the quilt-export round trip (`quilt push -a`)")
    three(demo)
    out = tmp_path / "q"
    res = demo.run("export", "--quilt", str(out))
    assert res.returncode == 0, res.stderr
    assert (out / "patches/series").read_text().splitlines() == [
        "0001-greet.patch",
        "0002-util.patch",
        "0003-cap.patch",
    ]
    git(demo.work, "checkout", "-q", "upstream")
    tree, push = quilt_push_all(quilt, demo.work, out / "patches", tmp_path)
    assert push.returncode == 0, push.stdout + push.stderr
    assert "Now at patch patches/0003-cap.patch" in push.stdout
    assert '"hi"' in (tree / "python/demo/core.py").read_text()

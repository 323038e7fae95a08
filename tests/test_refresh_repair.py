"""`patchtool refresh ID` (the worktree's changes into one patch) and the repair loop of a patch
that does not apply at its own pin, on real temporary repositories."""

from __future__ import annotations

from pathlib import Path

from conftest import Demo
from helpers import git, snapshot
from test_editing import checked_out, three


def state(demo: Demo, wt: Path | None = None) -> tuple[dict[str, bytes], str, str]:
    """Every file of the repository (its worktree included), the branch tip and git's status."""
    if wt is None:
        return snapshot(demo.root), "", ""
    return snapshot(demo.root), git(wt, "rev-parse", "HEAD"), git(wt, "status", "--porcelain")


def patches(demo: Demo) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (demo.root / "patches").glob("*.patch")}


def test_refresh_a_middle_patch_writes_only_that_patch(demo: Demo) -> None:
    three(demo)
    before, manifest = patches(demo), (demo.root / "patchset.toml").read_bytes()
    wt = checked_out(demo)
    (wt / "python/demo/util.py").write_text("def helper():\n    return 22\n")
    res = demo.run("refresh", "util")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "refreshed util (patches/0002-util.patch) with python/demo/util.py\n"
    after = patches(demo)
    assert after["0001-greet.patch"] == before["0001-greet.patch"]
    assert after["0003-cap.patch"] == before["0003-cap.patch"]
    assert b"+    return 22" in after["0002-util.patch"] and b"Patchtool-Id" not in after["0002-util.patch"]
    assert (demo.root / "patchset.toml").read_bytes() == manifest
    # the worktree is the branch, the branch is the series: nothing left to export
    assert git(wt, "status", "--porcelain") == ""
    assert git(wt, "log", "--format=%(trailers:key=Patchtool-Id,valueonly)", "-3").split() == ["cap", "util", "greet"]
    res = demo.run("export")
    assert res.returncode == 0 and "refreshed" not in res.stdout, res.stdout + res.stderr
    assert patches(demo) == after
    assert demo.run("check").returncode == 0


def test_refresh_an_early_patch_rewrites_a_later_one_whose_lines_moved(demo: Demo) -> None:
    three(demo)
    before = patches(demo)
    wt = checked_out(demo)
    core = wt / "python/demo/core.py"
    core.write_text(core.read_text().replace('    greeting = "hi"\n', '    greeting = "hi"\n    greeting += "!"\n'))
    res = demo.run("refresh", "greet")
    assert res.returncode == 0, res.stderr
    assert "rewritten cap (patches/0003-cap.patch): its line numbers moved" in res.stdout
    after = patches(demo)
    assert after["0002-util.patch"] == before["0002-util.patch"]
    assert b'+    greeting += "!"' in after["0001-greet.patch"]
    assert after["0003-cap.patch"] != before["0003-cap.patch"]
    assert demo.run("check").returncode == 0
    assert git(wt, "status", "--porcelain") == ""


def test_refresh_index_takes_only_what_is_staged(demo: Demo) -> None:
    three(demo)
    wt = checked_out(demo)
    (wt / "python/demo/util.py").write_text("def helper():\n    return 22\n")
    git(wt, "add", "python/demo/util.py")
    (wt / "python/demo/util.py").write_text("def helper():\n    return 23\n")
    res = demo.run("refresh", "--index", "util")
    assert res.returncode == 0, res.stderr
    assert b"+    return 22" in patches(demo)["0002-util.patch"]
    assert git(wt, "status", "--porcelain") == " M python/demo/util.py\n"


def test_refresh_takes_a_new_file(one_patch: Demo) -> None:
    wt = checked_out(one_patch)
    (wt / "python/demo/extra.py").write_text("X = 1\n")
    res = one_patch.run("refresh", "greet")
    assert res.returncode == 0, res.stderr
    assert b"+++ b/python/demo/extra.py" in patches(one_patch)["0001-greet.patch"]
    assert one_patch.run("check").returncode == 0


def test_refresh_refusals_change_nothing(demo: Demo) -> None:
    three(demo)
    res = demo.run("refresh", "util")
    assert res.returncode == 2
    assert "no checkout branch 'series' for this repository" in res.stderr
    wt = checked_out(demo)

    def refused(code: int, message: str, *args: str) -> None:
        before = state(demo, wt)
        res = demo.run("refresh", *args)
        assert (res.returncode, res.stdout) == (code, ""), res.stdout + res.stderr
        assert message in res.stderr, res.stderr
        assert state(demo, wt) == before

    refused(2, f"nothing to refresh util with: the worktree {wt} holds the branch as it is committed", "util")
    (wt / "python/demo/util.py").write_text("def helper():\n    return 22\n")
    refused(2, "no patch 'nosuch' on branch 'series'", "nosuch")
    refused(2, f"nothing to refresh util with: the worktree {wt} has nothing staged", "--index", "util")
    git(wt, "checkout", "-q", "--", ".")
    # a line cap changed, put into greet (before cap): cap would no longer apply
    core = wt / "python/demo/core.py"
    core.write_text(core.read_text().replace("len(queue) >= cap", "len(queue) >= cap + 1"))
    refused(
        3, "your change to python/demo/core.py cannot go into greet: cap, after it, changes the same lines", "greet"
    )
    git(wt, "checkout", "-q", "--", ".")
    # a commit of the user's own, not exported yet
    (wt / "python/demo/util.py").write_text("def helper():\n    return 3\n")
    git(wt, "commit", "-qam", "util: three")
    (wt / "python/demo/util.py").write_text("def helper():\n    return 4\n")
    refused(2, "branch 'series' holds commits that are not exported yet", "util")


# -- the repair loop: checkout stops at a patch that does not apply, refresh writes it back ----


def test_a_patch_that_does_not_apply_at_its_pin_is_repaired_in_the_checkout(demo: Demo) -> None:
    three(demo)
    greet = demo.root / "patches/0001-greet.patch"
    good = greet.read_text()
    greet.write_text(good.replace(" def greet(name):", " def greet(nom):"))  # a context line upstream lacks
    others = {k: v for k, v in patches(demo).items() if k != "0001-greet.patch"}
    manifest = (demo.root / "patchset.toml").read_bytes()
    res = demo.run("checkout")
    assert res.returncode == 3, res.stdout + res.stderr
    wt = demo.root / "work/series"
    assert "stopped at patch greet (patches/0001-greet.patch): it does not apply at the pin" in res.stdout
    assert "  python/demo/core.py:2: hunk 1, conflict markers" in res.stdout
    assert "not applied yet: util, cap" in res.stdout
    assert f"next: fix the files in {wt} (no <<<<<<< left), then `patchtool refresh greet`" in res.stdout
    core = wt / "python/demo/core.py"
    marked = core.read_text()
    assert "<<<<<<< upstream\n\n\ndef greet(name):\n" in marked and ">>>>>>> patch greet hunk 1\n" in marked
    assert git(wt, "rev-list", "--count", "HEAD") == "1\n"  # upstream alone: greet is the first patch
    # the branch lacks the patches from greet on: neither export nor another patch may go first
    res = demo.run("export")
    assert res.returncode == 2 and "checkout branch 'series' stopped at patch greet" in res.stderr, res.stderr
    res = demo.run("refresh", "util")
    assert res.returncode == 2 and "the checkout stopped at patch greet" in res.stderr, res.stderr
    before = state(demo, wt)
    res = demo.run("refresh", "greet")
    assert res.returncode == 2 and "conflict markers remain in python/demo/core.py" in res.stderr, res.stderr
    assert state(demo, wt) == before
    # the fix: the hunk as meant
    start, end = (
        marked.index("<<<<<<<"),
        marked.index(">>>>>>> patch greet hunk 1\n") + len(">>>>>>> patch greet hunk 1\n"),
    )
    core.write_text(
        marked[:start]
        + '\n\ndef greet(name):\n    greeting = "hi"\n    return f"{greeting} {name}"\n\n\n'
        + marked[end:]
    )
    res = demo.run("refresh", "greet")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (
        "refreshed greet (patches/0001-greet.patch) with python/demo/core.py\napplied after it: util, cap\n"
        == res.stdout
    )
    assert greet.read_text() == good  # the patch as it was before the damage, its metadata kept
    assert (demo.root / "patchset.toml").read_bytes() == manifest
    assert {k: v for k, v in patches(demo).items() if k != "0001-greet.patch"} == others
    assert git(wt, "status", "--porcelain") == ""
    assert git(wt, "log", "--format=%(trailers:key=Patchtool-Id,valueonly)", "-3").split() == ["cap", "util", "greet"]
    assert demo.run("check").returncode == 0
    res = demo.run("export")
    assert res.returncode == 0 and "refreshed" not in res.stdout, res.stdout + res.stderr

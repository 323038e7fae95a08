"""`patchtool refresh ID` (the worktree's changes into one patch) and the repair loop of a patch
that does not apply at its own pin, on real temporary repositories."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
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
        res.stdout
        == "refreshed greet (patches/0001-greet.patch) with python/demo/core.py\napplied after it: util, cap\n"
    )
    assert greet.read_text() == good  # the patch as it was before the damage, its metadata kept
    assert (demo.root / "patchset.toml").read_bytes() == manifest
    assert {k: v for k, v in patches(demo).items() if k != "0001-greet.patch"} == others
    assert git(wt, "status", "--porcelain") == ""
    assert git(wt, "log", "--format=%(trailers:key=Patchtool-Id,valueonly)", "-3").split() == ["cap", "util", "greet"]
    assert demo.run("check").returncode == 0
    res = demo.run("export")
    assert res.returncode == 0 and "refreshed" not in res.stdout, res.stdout + res.stderr


# -- refusals come before anything moves; what no patch can carry; the way on from a lost worktree


def history(demo: Demo, wt: Path) -> tuple[dict[str, bytes], str, str, str]:
    """``state`` and the worktree's reflog: a branch moved and moved back still shows."""
    return (*state(demo, wt), git(wt, "reflog", "--format=%H %gs"))


def error(message: str, hint: str) -> str:
    return f"error: {message} (hint: {hint})\n"


def refused(demo: Demo, wt: Path, code: int, stderr: str, *args: str) -> None:
    before = history(demo, wt)
    res = demo.run("refresh", *args)
    assert (res.returncode, res.stdout, res.stderr) == (code, "", stderr)
    assert history(demo, wt) == before


def test_a_patch_file_refresh_cannot_write_refuses_before_the_branch_moves(demo: Demo, tmp_path: Path) -> None:
    three(demo)
    wt = checked_out(demo)
    util = demo.root / "patches/0002-util.patch"
    (tmp_path / "elsewhere.patch").write_bytes(util.read_bytes())
    util.unlink()
    util.symlink_to(tmp_path / "elsewhere.patch")
    (wt / "python/demo/util.py").write_text("def helper():\n    return 22\n")
    unsafe = error(
        "patches/0002-util.patch: is a symbolic link (it could lead outside the repository; patchtool follows none)",
        "patchtool reads only regular files inside the repository; put the file itself there",
    )
    refused(demo, wt, 1, unsafe, "util")
    # a patch new started: its export's refusals come before the amend too
    git(wt, "checkout", "-q", "--", ".")
    me = {"GIT_AUTHOR_NAME": "Dana", "GIT_AUTHOR_EMAIL": "d@example.org"}
    assert (
        demo.run("new", "extra", env={**me, "GIT_COMMITTER_NAME": "Dana", "GIT_COMMITTER_EMAIL": "d@x.org"}).returncode
        == 0
    )
    (wt / "python/demo/extra.py").write_text("X = 1\n")
    refused(demo, wt, 1, unsafe, "extra")


def test_what_no_patch_can_carry_is_refused_by_name(one_patch: Demo) -> None:
    wt = checked_out(one_patch)
    cannot = (
        "a patch carries regular text files (no symbolic link, no nested repository, UTF-8 names, at most "
        f"67108864 bytes of patch): take what it cannot carry out of {wt} (your change: {{}}), then run it again"
    )
    link = wt / "python/demo/link.py"
    link.symlink_to("core.py")
    refused(
        one_patch,
        wt,
        2,
        error(
            "patch greet would be written as a file the series cannot read (patches/0001-greet.patch): "
            "unsafe diff: 'new file mode 120000' makes 'python/demo/link.py' a symbolic link; nothing was changed",
            cannot.format("python/demo/link.py"),
        ),
        "greet",
    )
    link.unlink()
    nested = wt / "python/sub"
    nested.mkdir()
    git(nested, "init", "-q")
    (nested / "f").write_text("f\n")
    git(nested, "add", "f")
    git(nested, "commit", "-qm", "f")
    refused(
        one_patch,
        wt,
        2,
        error(
            "patch greet would be written as a file the series cannot read (patches/0001-greet.patch): unsafe "
            "diff: 'new file mode 160000' makes 'python/sub' a gitlink (a submodule commit); nothing was changed",
            cannot.format("python/sub"),
        ),
        "greet",
    )
    shutil.rmtree(nested)
    for name, why in (
        (os.fsdecode(b"python/\xff.py"), r"'python/\xff.py', which no patch can carry: its name is not UTF-8"),
        ("x/.GIT/config", "'x/.GIT/config', which no patch can carry: path 'x/.GIT/config' touches .git/"),
        ("a\nb", r"'a\nb', which no patch can carry: path 'a\nb' contains a control character"),
    ):
        (wt / name).parent.mkdir(parents=True, exist_ok=True)
        (wt / name).write_text("x\n")
        hint = f"rename it or take it out of {wt}, then run it again"
        refused(one_patch, wt, 2, error(f"the worktree {wt} holds {why}", hint), "greet")
        (wt / name).unlink()
    shutil.rmtree(wt / "x")


def test_a_patch_over_the_read_bound_is_refused_before_it_is_written(one_patch: Demo) -> None:
    wt = checked_out(one_patch)
    (wt / "python/demo/big.txt").write_bytes(b"0123456789abcdef\n" * 4_000_000)  # 68 MB: its patch is more
    res = one_patch.run("refresh", "greet")
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(
        "error: patch greet would be written as a file the series cannot read (patches/0001-greet.patch): is "
    )
    assert "bytes, more than the 67108864 patchtool reads; nothing was changed (hint: " in res.stderr
    assert "(your change: python/demo/big.txt)" in res.stderr


def stopped_at_greet(demo: Demo) -> tuple[Path, str]:
    """The demo's three patches, greet damaged so that checkout stops at it: the worktree, and
    core.py as fixed."""
    three(demo)
    greet = demo.root / "patches/0001-greet.patch"
    greet.write_text(greet.read_text().replace(" def greet(name):", " def greet(nom):"))
    assert demo.run("checkout").returncode == 3
    wt = demo.root / "work/series"
    marked = (wt / "python/demo/core.py").read_text()
    end = ">>>>>>> patch greet hunk 1\n"
    fixed = (
        marked[: marked.index("<<<<<<<")]
        + '\n\ndef greet(name):\n    greeting = "hi"\n    return f"{greeting} {name}"\n\n\n'
        + marked[marked.index(end) + len(end) :]
    )
    return wt, fixed


def test_only_the_repairs_own_markers_count(demo: Demo, tmp_path: Path) -> None:
    wt, fixed = stopped_at_greet(demo)
    (wt / "python/demo/core.py").write_text(fixed)
    # a marker outside, behind a link: not read through it; the link itself is what no patch carries
    (tmp_path / "marked.txt").write_text("<<<<<<< upstream\n")
    (wt / "python/demo/marked.txt").symlink_to(tmp_path / "marked.txt")
    res = demo.run("refresh", "greet")
    assert res.returncode == 2 and "makes 'python/demo/marked.txt' a symbolic link" in res.stderr, res.stderr
    (wt / "python/demo/marked.txt").unlink()
    # a file of the patch's own that holds merge-marker-like lines is content, not a leftover
    (wt / "python/demo/notes.txt").write_text("<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> other\n")
    res = demo.run("refresh", "greet")
    assert res.returncode == 0, res.stdout + res.stderr
    assert b"+<<<<<<< HEAD" in (demo.root / "patches/0001-greet.patch").read_bytes()


def test_a_stopped_checkout_whose_worktree_is_gone_is_made_again(demo: Demo) -> None:
    wt, fixed = stopped_at_greet(demo)
    shutil.rmtree(wt)
    res = demo.run("refresh", "greet")
    assert (res.returncode, res.stderr) == (
        2,
        error(
            "branch 'series' is checked out in no worktree, so there is no change to take",
            "refresh takes the changes of the worktree `patchtool checkout` made; if it was removed, "
            "`patchtool checkout` makes it again at the branch's tip",
        ),
    )
    res = demo.run("export")
    assert res.returncode == 2 and "if it was removed, `patchtool checkout` makes it again" in res.stderr
    res = demo.run("checkout")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "stopped at patch greet (patches/0001-greet.patch): it does not apply at the pin" in res.stdout
    assert ">>>>>>> patch greet hunk 1\n" in (wt / "python/demo/core.py").read_text()
    (wt / "python/demo/core.py").write_text(fixed)
    res = demo.run("refresh", "greet")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.endswith("applied after it: util, cap\n")
    assert demo.run("export").returncode == 0


def test_a_fix_committed_with_git_at_a_stop_is_taken_by_refresh(demo: Demo) -> None:
    """Found by an attack: ``git commit -am fix`` at a stop left each command naming another
    (refresh: export first; export: refresh first; checkout --refresh: refresh first), and a
    removed worktree made again had the patch applied once more on the fix. The one commit on
    where it stopped is the fix; a worktree made again says so instead of applying the patch."""
    wt, fixed = stopped_at_greet(demo)
    greet = demo.root / "patches/0001-greet.patch"
    (wt / "python/demo/core.py").write_text(fixed)
    git(wt, "commit", "-qam", "fix")
    shutil.rmtree(wt)
    res = demo.run("checkout")
    assert res.returncode == 3, res.stdout + res.stderr
    assert res.stdout.endswith(
        "stopped at patch greet, and the branch holds a commit on where it stopped: `patchtool refresh greet` "
        "takes it (with the worktree's changes) as the repaired greet\n"
    ), res.stdout
    assert git(wt, "status", "--porcelain") == "" and (wt / "python/demo/core.py").read_text() == fixed
    res = demo.run("refresh", "greet")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (
        res.stdout
        == "refreshed greet (patches/0001-greet.patch) with python/demo/core.py\napplied after it: util, cap\n"
    )
    assert "def greet(nom)" not in greet.read_text() and "Patchtool-Id" not in greet.read_text()
    assert git(wt, "status", "--porcelain") == ""
    assert git(wt, "log", "--format=%s", "-4").split("\n")[:4] == [
        "core: inclusive cap",
        "util: two",
        "core: say hi",
        "demo 1.0",
    ]
    assert demo.run("check").returncode == 0
    res = demo.run("export")
    assert res.returncode == 0 and "refreshed" not in res.stdout, res.stdout + res.stderr


def test_a_fix_committed_in_two_commits_at_a_stop_is_refused_with_the_way_to_one(demo: Demo) -> None:
    """Two commits on where a checkout stopped: refresh says how to make them one, changes nothing,
    and takes the fix once they are (an attack found each command naming another)."""
    wt, fixed = stopped_at_greet(demo)
    stop = git(wt, "rev-parse", "HEAD")
    (wt / "python/demo/core.py").write_text(fixed)
    git(wt, "commit", "-qam", "fix")
    (wt / "python/demo/note.txt").write_text("noted\n")
    git(wt, "add", "python/demo/note.txt")
    git(wt, "commit", "-qm", "note")
    before = (snapshot(demo.root), git(wt, "rev-parse", "HEAD"), git(wt, "status", "--porcelain"))
    res = demo.run("refresh", "greet")
    assert res.returncode == 2
    assert res.stderr == (
        "error: the checkout stopped at patch greet, and the branch holds 2 commits on where it stopped; "
        f"refresh takes one as the repaired greet (hint: make them one (`git -C {wt} reset --soft {stop[:12]}` "
        "keeps their changes, uncommitted), then `patchtool refresh greet`)\n"
    )
    assert (snapshot(demo.root), git(wt, "rev-parse", "HEAD"), git(wt, "status", "--porcelain")) == before
    git(wt, "reset", "-q", "--soft", stop[:12])
    res = demo.run("refresh", "greet")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "note.txt" in (demo.root / "patches/0001-greet.patch").read_text()


def test_a_checkout_stopped_at_a_patch_dropped_since_is_brought_up_to_the_series(demo: Demo) -> None:
    """Found by an attack: ``drop`` of the patch a checkout stopped at left the branch stuck
    (refresh and export: checkout --refresh first; checkout --refresh: refresh first)."""
    wt, _ = stopped_at_greet(demo)
    assert demo.run("drop", "greet", "--reason", "upstream has it").returncode == 0
    before = snapshot(demo.root)
    res = demo.run("checkout", "--refresh")  # greet's repair is still in the worktree: said, not lost
    assert res.returncode == 2
    assert res.stderr == (
        f"error: the worktree {wt} still holds the repair of patch greet, which the series dropped since "
        f"(hint: put it aside (`git -C {wt} stash -u`, or `git -C {wt} checkout -- .` to discard it), "
        "then run this again)\n"
    )
    assert snapshot(demo.root) == before and git(wt, "status", "--porcelain") != ""
    git(wt, "checkout", "-q", "--", ".")  # greet's repair, left in the worktree, goes with it
    res = demo.run("checkout", "--refresh")
    assert res.returncode == 0, res.stdout + res.stderr
    assert git(wt, "log", "--format=%(trailers:key=Patchtool-Id,valueonly)", "-2").split() == ["cap", "util"]
    assert git(wt, "status", "--porcelain") == ""
    res = demo.run("export")  # cap's lines moved with greet gone
    assert res.returncode == 0 and "greet" not in res.stdout, res.stdout + res.stderr
    assert demo.run("check").returncode == 0


def test_refresh_says_what_is_wrong(demo: Demo) -> None:
    three(demo)
    wt = checked_out(demo)
    # a mode changed by the refresh of greet: cap's file says so, not that its lines moved
    (wt / "python/demo/core.py").chmod(0o755)
    res = demo.run("refresh", "greet")
    assert res.returncode == 0, res.stderr
    assert res.stdout == (
        "refreshed greet (patches/0001-greet.patch) with python/demo/core.py\n"
        "  rewritten cap (patches/0003-cap.patch): a file's mode changed\n"
    )
    # a git rebase stopped in the worktree: the branch is not checked out there until it ends
    (wt / "python/demo/util.py").write_text("def helper():\n    return 22\n")
    git(wt, "commit", "-qam", "mine")
    with contextlib.suppress(RuntimeError):  # the exec fails: the rebase stops there
        git(wt, "rebase", "-q", "--exec", "false", "HEAD~1")
    assert (wt / ".git").is_file() and git(wt, "status").startswith("interactive rebase in progress")
    refused(
        demo,
        wt,
        2,
        error(
            f"a git rebase is in progress in the worktree {wt}; refresh takes the changes of a worktree at the "
            "branch's tip",
            "finish it (`git rebase --continue`) or abort it (`git rebase --abort`), then run it again",
        ),
        "util",
    )
    git(wt, "rebase", "--abort")
    # an interrupted refresh (the branch moved, no file written) looks like commits not exported
    refused(
        demo,
        wt,
        2,
        error(
            "branch 'series' holds commits that are not exported yet; refresh writes one patch and would leave "
            "them behind",
            "`patchtool export` them first (`patchtool export` finishes a refresh that was interrupted too), or "
            "take them out with git, then refresh",
        ),
        "util",
    )
    # a patch's commit taken out of the branch
    git(wt, "reset", "-q", "--hard", "HEAD~2")
    (wt / "python/demo/util.py").write_text("def helper():\n    return 23\n")
    refused(
        demo,
        wt,
        2,
        error(
            "branch 'series' has no commit of patch(es) cap any more; refresh writes one patch and would leave "
            "the series with them",
            "bring the commit back (`git reflog` in the worktree shows where the branch was), or take the patch "
            "out of the series (`patchtool drop ID --reason ...`, or `patchtool export --allow-drop`)",
        ),
        "util",
    )


def test_a_file_that_is_not_utf8_is_refused_by_name(demo: Demo) -> None:
    """Found by an attack: ``printf 'caf\\xe9\\n' > work/series/x.txt`` gave exit 70 (a
    UnicodeDecodeError decoding git's format-patch) in refresh, a new patch's refresh and export."""
    three(demo)
    wt = checked_out(demo)

    def not_utf8(commit: str) -> str:
        return error(
            f"python/demo/x.txt, in commit {commit[:12]}, is not UTF-8 (invalid continuation byte at byte 3): a patch file is UTF-8 text, so no patch can "
            "carry its lines; nothing was changed",
            "save it as UTF-8 (or take it out of the change), then run it again",
        )

    (wt / "python/demo/x.txt").write_bytes(b"caf\xe9\n")
    before = history(demo, wt)
    res = demo.run("refresh", "util")
    assert (res.returncode, res.stdout) == (2, ""), res.stderr
    assert res.stderr.startswith("error: python/demo/x.txt, in commit "), res.stderr
    assert res.stderr == not_utf8(res.stderr.split("in commit ")[1][:12])
    assert history(demo, wt) == before
    me = {"GIT_AUTHOR_NAME": "Dana", "GIT_AUTHOR_EMAIL": "d@example.org"}
    assert demo.run("new", "extra", env={**me, "GIT_COMMITTER_NAME": "D", "GIT_COMMITTER_EMAIL": "d@x"}).returncode == 0
    before = history(demo, wt)
    res = demo.run("refresh", "extra")
    assert (res.returncode, res.stdout) == (2, ""), res.stderr
    assert res.stderr == not_utf8(res.stderr.split("in commit ")[1][:12])
    assert history(demo, wt) == before
    git(wt, "add", "python/demo/x.txt")
    git(wt, "commit", "-q", "--amend", "--no-edit")
    before = history(demo, wt)
    res = demo.run("export")
    assert (res.returncode, res.stdout) == (2, ""), res.stderr
    assert res.stderr == not_utf8(git(wt, "rev-parse", "HEAD"))
    assert history(demo, wt) == before


# -- kill -9 at each step of a refresh: the next command finishes it -----------------------------

# A patchtool process that SIGKILLs itself right before or after the Nth call of a function
# (``module:attr[.attr]:N:before|after``): the kill lands at the same step every run, no timing.
KILL_AT = """\
import importlib, os, signal, sys
module, name, nth, when = sys.argv.pop(1).split(":")
owner = importlib.import_module(module)
*outer, last = name.split(".")
for part in outer:
    owner = getattr(owner, part)
real, calls = getattr(owner, last), [0]
def step(*args, **kwargs):
    calls[0] += 1
    if calls[0] == int(nth) and when == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    out = real(*args, **kwargs)
    if calls[0] == int(nth):
        os.kill(os.getpid(), signal.SIGKILL)
    return out
setattr(owner, last, step)
from patchtool.cli import main
sys.exit(main())
"""


def killed_at(demo: Demo, step: str, *args: str) -> None:
    res = subprocess.run(
        [sys.executable, "-c", KILL_AT, step, *args],
        cwd=demo.root,
        capture_output=True,
        text=True,
        env=demo.environment(),
        check=False,
    )
    assert res.returncode == -signal.SIGKILL, res.stdout + res.stderr


SAVE = "patchtool.upstream.namespaces:CheckoutBranch.save_record"
FOLD = "patchtool.edit.refresh"


def outcome(demo: Demo, wt: Path) -> tuple[dict[str, bytes], bytes, str, str, dict[str, bytes]]:
    """What a refresh leaves: the patch files, the manifest, the branch, the worktree."""
    files = {Path(p).relative_to(wt).as_posix(): data for p, data in snapshot(wt / "python").items()}
    manifest = (demo.root / "patchset.toml").read_bytes()
    return patches(demo), manifest, git(wt, "rev-parse", "HEAD"), git(wt, "status", "--porcelain"), files


def two_stops(demo: Demo) -> Callable[[str], Path]:
    """The demo's three patches, greet and cap damaged: a function that checks out ``branch``
    (stopped at greet) and fixes greet's markers in its worktree, which it returns; a refresh of
    greet then stops at cap."""
    three(demo)
    for name, old, new in (
        ("0001-greet.patch", " def greet(name):", " def greet(nom):"),
        ("0003-cap.patch", " def limit(queue, cap):", " def limit(q, cap):"),
    ):
        path = demo.root / "patches" / name
        path.write_text(path.read_text().replace(old, new))
    damaged = patches(demo)

    def stopped(branch: str) -> Path:
        for name, data in damaged.items():
            (demo.root / "patches" / name).write_bytes(data)
        assert demo.run("checkout", "--branch", branch).returncode == 3
        wt = demo.root / "work" / branch
        core = wt / "python/demo/core.py"
        marked = core.read_text()
        end = ">>>>>>> patch greet hunk 1\n"
        core.write_text(
            marked[: marked.index("<<<<<<<")]
            + '\n\ndef greet(name):\n    greeting = "hi"\n    return f"{greeting} {name}"\n\n\n'
            + marked[marked.index(end) + len(end) :]
        )
        return wt

    return stopped


def test_a_repair_refresh_killed_at_any_step_is_finished_by_the_next_refresh(demo: Demo) -> None:
    """Found by an attack: a kill between the branch's first move and the record's save wedged the
    checkout (refresh, export, checkout --refresh each named another; a new worktree got the patch
    applied twice). The record now notes the repaired commit before the branch moves."""
    stopped = two_stops(demo)
    wt = stopped("clean")
    res = demo.run("refresh", "--branch", "clean", "greet")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "applied after it: util\nstopped at patch cap" in res.stdout
    expected = outcome(demo, wt)
    for n, point in enumerate(
        (
            f"{SAVE}:1:before",
            f"{SAVE}:1:after",
            f"{FOLD}:move_branch:1:after",
            f"{FOLD}:move_branch:2:after",
            "patchtool.edit.repair:stop:1:after",
            f"{FOLD}:write_series:1:after",
        )
    ):
        branch = f"k{n}"
        wt = stopped(branch)
        killed_at(demo, point, "refresh", "--branch", branch, "greet")
        res = demo.run("export", "--branch", branch)
        assert res.returncode == 2 and f"`patchtool refresh --branch {branch} greet`" in res.stderr, (point, res.stderr)
        if "move_branch:2" in point:  # the worktree removed meanwhile: made again, greet not applied twice
            assert res.stderr.startswith(
                f"error: a refresh of patch greet on checkout branch '{branch}' was interrupted"
            )
            shutil.rmtree(wt)
            res = demo.run("checkout", "--branch", branch)
            assert res.returncode == 3, res.stdout + res.stderr
            assert (
                f"a refresh of patch greet was interrupted: `patchtool refresh --branch {branch} greet`" in res.stdout
            )
            assert git(wt, "status", "--porcelain") == ""
        res = demo.run("refresh", "--branch", branch, "greet")
        assert res.returncode == 3, (point, res.stdout + res.stderr)
        assert "stopped at patch cap" in res.stdout, (point, res.stdout)
        assert outcome(demo, wt) == expected, point


def test_an_edit_made_after_a_repair_refresh_was_killed_is_not_lost(demo: Demo) -> None:
    """Found by an attack: killed once the branch moved, then the worktree edited again, the next
    ``refresh greet`` finished from the noted commit without the edit, and took the edit for cap's
    repair already written: cap's repair was never written, and ``refresh cap`` then put the edit
    into cap instead of cap's own change. A worktree other than the interrupted run left is refused."""
    stopped = two_stops(demo)
    wt = stopped("clean")
    assert demo.run("refresh", "--branch", "clean", "greet").returncode == 3
    expected = outcome(demo, wt)
    for n, point in enumerate(
        (f"{FOLD}:move_branch:1:after", f"{FOLD}:move_branch:2:after", "patchtool.edit.repair:stop:1:after")
    ):
        branch = f"e{n}"
        wt = stopped(branch)
        killed_at(demo, point, "refresh", "--branch", branch, "greet")
        init = wt / "python/demo/__init__.py"  # a file no patch touches
        init.write_text(init.read_text() + "# mine\n")
        (wt / "python/demo/new.py").write_text("NEW = 1\n")
        before = history(demo, wt)
        res = demo.run("refresh", "--branch", branch, "greet")
        assert (res.returncode, res.stdout) == (2, ""), (point, res.stdout + res.stderr)
        assert res.stderr == error(
            f"the worktree {wt} holds changes the interrupted refresh of patch greet did not leave there: "
            "python/demo/__init__.py, python/demo/new.py; nothing was changed",
            f"put them aside (`git stash -u` in {wt}), run `patchtool refresh --branch {branch} greet` again to "
            "finish that refresh, then bring them back (`git stash pop`) and refresh the patch they belong to",
        ), point
        assert history(demo, wt) == before, point
        # the way the hint names: the edit aside, the refresh finished, cap's repair written
        git(wt, "checkout", "-q", "--", "python/demo/__init__.py")
        (wt / "python/demo/new.py").unlink()
        res = demo.run("refresh", "--branch", branch, "greet")
        assert res.returncode == 3, (point, res.stdout + res.stderr)
        assert outcome(demo, wt) == expected, point
        assert ">>>>>>> patch cap hunk 1\n" in (wt / "python/demo/core.py").read_text()


def test_a_refresh_killed_before_its_record_is_saved_leaves_a_series_in_sync(demo: Demo) -> None:
    """Found by an attack: killed after writing the patch files, before saving the record, refresh
    and export refused "the series changed since branch 'series' was checked out: edited ..."
    (edits nobody made). A series that is byte for byte what the branch exports is in sync."""
    three(demo)
    wt = checked_out(demo)
    (wt / "python/demo/util.py").write_text("def helper():\n    return 22\n")
    killed_at(demo, f"{FOLD}:write_series:1:after", "refresh", "util")
    written = patches(demo)
    assert b"+    return 22" in written["0002-util.patch"]
    res = demo.run("refresh", "util")
    assert res.returncode == 2 and "nothing to refresh util with" in res.stderr, res.stderr
    res = demo.run("export")
    assert res.returncode == 0 and "refreshed" not in res.stdout, res.stdout + res.stderr
    assert patches(demo) == written
    # a new patch's refresh, killed inside export's write: the entry is there, the record not
    me = {"GIT_AUTHOR_NAME": "Dana", "GIT_AUTHOR_EMAIL": "d@example.org"}
    assert demo.run("new", "extra", env={**me, "GIT_COMMITTER_NAME": "D", "GIT_COMMITTER_EMAIL": "d@x"}).returncode == 0
    (wt / "python/demo/extra.py").write_text("X = 1\n")
    killed_at(demo, "patchtool.edit.export:write_series:1:after", "refresh", "extra")
    manifest = (demo.root / "patchset.toml").read_text()
    assert 'id = "extra"' in manifest
    res = demo.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (demo.root / "patchset.toml").read_text() == manifest
    (wt / "python/demo/extra.py").write_text("X = 2\n")
    res = demo.run("refresh", "extra")
    assert res.returncode == 0, res.stdout + res.stderr
    assert demo.run("check").returncode == 0


def test_a_repository_made_again_at_the_same_path_is_told_of_the_old_branch(demo: Demo, tmp_path: Path) -> None:
    """Found by an attack: ``rm -rf R; cp -a base R; patchtool checkout`` silently took the old
    repository's refreshed branch (the cache knows a repository by its path)."""
    three(demo)
    shutil.copytree(demo.root, tmp_path / "base", symlinks=True)
    wt = checked_out(demo)
    (wt / "python/demo/util.py").write_text("def helper():\n    return 22\n")
    assert demo.run("refresh", "util").returncode == 0
    shutil.rmtree(demo.root)
    shutil.copytree(tmp_path / "base", demo.root, symlinks=True)
    res = demo.run("checkout")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (
        "warning: the branch was made from another series than this repository's (edited util "
        "(patches/0002-util.patch)): `patchtool checkout --refresh` brings it up to the series, or "
        "`patchtool checkout --branch NEW` starts a new one\n"
    ) in res.stdout
    res = demo.run("checkout", "--json", "--branch", "other")
    assert res.returncode == 0 and '"changed_since": []' in res.stdout, res.stdout + res.stderr


def test_a_hunk_that_applies_with_fuzz_is_said_and_refresh_stores_it_without(demo: Demo) -> None:
    three(demo)
    greet = demo.root / "patches/0001-greet.patch"
    good = greet.read_text()
    # the hunk's first context line is one upstream lacks: git apply refuses it, fuzz 1 places it
    damaged, n = re.subn(r"(\n@@ -\d+,\d+ \+\d+,\d+ @@[^\n]*\n) \n", r"\1 # not upstream's\n", good, count=1)
    assert n == 1
    greet.write_text(damaged)
    res = demo.run("checkout")
    assert res.returncode == 3, res.stdout + res.stderr
    wt = demo.root / "work/series"
    assert "stopped at patch greet (patches/0001-greet.patch): it does not apply at the pin\n" in res.stdout
    assert "  python/demo/core.py:2: hunk 1, applied with fuzz 1: check it\n" in res.stdout
    assert "<<<<<<<" not in (wt / "python/demo/core.py").read_text()
    res = demo.run("refresh", "greet")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.endswith("applied after it: util, cap\n")
    assert greet.read_text() == good  # the patch as git apply takes it: no fuzz
    assert demo.run("check").returncode == 0


def test_checkout_refresh_of_a_series_with_no_patch_yet(demo: Demo) -> None:
    """Found by an attack: a fork just made (`init`, `checkout`, no patch yet) failed `checkout
    --refresh` with exit 70 (a ValueError of the parents of no patch)."""
    demo.write_manifest()
    res = demo.run("checkout")
    assert res.returncode == 0, res.stdout + res.stderr
    res = demo.run("checkout", "--refresh")
    assert res.returncode == 0, res.stdout + res.stderr

"""checkout / export / new and the rebase under hostile conditions: clones sharing a cache,
branch names that are not names.

Each test is a bug that was found: it fails on the code before the fix, asserts the message the
user gets, and that a refused command changed nothing on disk.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from conftest import Demo, edit
from patchtool.testing import git, snapshot


def three(demo: Demo) -> None:
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi",
                      "Shorter greeting.")
    demo.commit_patch("0002-util.patch", edit("python/demo/util.py", "return 1", "return 2"), "util: two",
                      on="p-0001-greet.patch")
    demo.commit_patch("0003-cap.patch", edit("python/demo/core.py", "len(queue) > cap", "len(queue) >= cap"),
                      "core: inclusive cap", on="p-0002-util.patch")
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"), demo.entry("util", "0002-util.patch"),
                        demo.entry("cap", "0003-cap.patch"))


def checked_out(demo: Demo) -> Path:
    res = demo.run("checkout", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    return Path(json.loads(res.stdout)["data"]["worktree"])


def clone(demo: Demo, name: str) -> Demo:
    """Another clone of the patch repository on the same machine, sharing the demo's cache."""
    root = demo.root.parent / name
    shutil.copytree(demo.root, root, ignore=shutil.ignore_patterns("work"))
    return dataclasses.replace(demo, root=root)


def head(wt: Path) -> str:
    return git(wt, "rev-parse", "HEAD").strip()


def patches(demo: Demo) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((demo.root / "patches").glob("*.patch"))}


# -- 1. clones sharing a cache ------------------------------------------------------------------

def test_two_clones_on_one_cache_never_see_each_others_checkout(demo: Demo) -> None:
    three(demo)
    other = clone(demo, "clone-b")
    series = patches(demo)
    wt = checked_out(demo)
    edit("python/demo/util.py", "return 2", "return 3")(wt)
    git(wt, "commit", "-qam", "util: three")
    mine, theirs = snapshot(demo.root), snapshot(other.root)
    tip = head(wt)

    res = other.run("export")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "no checkout branch 'series' for this repository" in res.stderr
    res = other.run("new", "extra")
    assert res.returncode == 2
    assert "no worktree for branch 'series' of this repository" in res.stderr
    assert snapshot(other.root) == theirs and snapshot(demo.root) == mine and head(wt) == tip

    res = other.run("checkout")
    assert res.returncode == 0, res.stderr
    res = other.run("export")
    assert res.returncode == 0, res.stderr
    assert patches(other) == series and "unchanged util" in res.stdout
    res = demo.run("export")
    assert res.returncode == 0, res.stderr
    assert "new       util-three" in res.stdout


def test_a_rebase_replays_under_its_own_projects_ref(demo: Demo) -> None:
    three(demo)
    other = clone(demo, "clone-b")
    for project in (demo, other):
        res = project.run("rebase", "--to", "1.0")
        assert res.returncode == 0, res.stdout + res.stderr
    refs = git(demo.cache / "upstream.git", "for-each-ref", "--format=%(refname)", "refs/patchtool").split()
    assert "refs/patchtool/replay" not in refs
    assert len([r for r in refs if r.endswith("/replay")]) == 2


def test_the_checkout_branch_keeps_a_reflog(demo: Demo) -> None:
    three(demo)
    wt = checked_out(demo)
    lost = head(wt)
    git(wt, "reset", "-q", "--hard", "HEAD~1")
    branch = git(wt, "symbolic-ref", "HEAD").strip()
    assert lost in git(wt, "reflog", "show", "--format=%H", branch).split()


# -- 2. branch names ----------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["checkout"], ["export"], ["new", "extra"]])
@pytest.mark.parametrize("name", ["a..b", "a\nb", "a/.git", "../x", "x/", "a b", "x.lock", "a/../../b"])
def test_a_branch_name_that_is_not_one_is_refused(demo: Demo, command: list[str], name: str) -> None:
    three(demo)
    before = snapshot(demo.root, demo.cache)
    res = demo.run(*command, f"--branch={name}")
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{name!r} is not a usable branch name:" in res.stderr
    assert snapshot(demo.root, demo.cache) == before

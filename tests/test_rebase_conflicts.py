"""A rebase's conflict as git's own tools see it: unmerged index stages, and the user's conflict style."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import Demo
from helpers import git, snapshot
from patchtool import git as gitmod
from test_rebase import releases, series

__all__ = ["releases"]  # the fixture, used by name

CORE = "python/demo/core.py"


def stop(demo: Demo, env: dict[str, str] | None = None) -> Path:
    """The greet, bye, extra series rebased onto 1.1: bye conflicts in core.py; its worktree."""
    series(demo, "0002-greet", "0004-bye", "0001-extra")
    res = demo.run("rebase", "--to", "1.1", "--json", env=env)
    assert res.returncode == 3, res.stdout + res.stderr
    return Path(json.loads(res.stdout)["data"]["worktree"])


def unmerged(worktree: Path) -> dict[int, str]:
    """``git ls-files -u``: stage -> blob, for core.py (the only path it may name)."""
    out = {}
    for line in git(worktree, "ls-files", "-u").splitlines():
        info, path = line.split("\t")
        assert path == CORE, line
        _mode, blob, stage = info.split()
        out[int(stage)] = blob
    return out


def test_a_conflict_is_recorded_in_the_index_as_git_records_one(releases: Demo) -> None:
    worktree = stop(releases)
    stages = unmerged(worktree)
    assert sorted(stages) == [1, 2, 3]
    side = {n: git(worktree, "cat-file", "blob", stages[n]) for n in stages}
    # base: the old pin with the series before bye; ours: the new pin with it; theirs: the patch
    assert 'word = "bye"' in side[1] and '"hi"' in side[1]
    assert 'word = "goodbye"' in side[2] and '"hi"' in side[2] and side[2] == git(worktree, "show", f"HEAD:{CORE}")
    assert 'word = "ciao"' in side[3] and "DEMO_DEBUG" not in side[3]
    assert f"UU {CORE}" in git(worktree, "status", "--porcelain").splitlines()
    # what a merge view does: take a side, then ask git for the markers back
    git(worktree, "checkout", "--theirs", "--", CORE)
    assert "<<<<<<<" not in (worktree / CORE).read_text()
    git(worktree, "checkout", "--conflict=merge", "--", CORE)
    text = (worktree / CORE).read_text()
    assert '<<<<<<< ours\n    word = "goodbye"\n=======\n    word = "ciao"\n>>>>>>> theirs' in text
    # a --continue refused for the markers leaves the conflict where git's tools find it
    res = releases.run("rebase", "--continue")
    assert res.returncode == 2 and f"conflict markers remain in {CORE}" in res.stderr
    assert sorted(unmerged(worktree)) == [1, 2, 3]


def test_continue_takes_a_resolution_the_user_git_added(releases: Demo) -> None:
    worktree = stop(releases)
    git(worktree, "checkout", "--theirs", "--", CORE)
    text = (worktree / CORE).read_text()
    (worktree / CORE).write_text(
        text.replace(
            '"""Core of the demo upstream."""\n',
            '"""Core of the demo upstream."""\n\nimport os\n\nDEBUG = os.environ.get("DEMO_DEBUG")\n',
            1,
        )
    )
    git(worktree, "add", CORE)
    assert unmerged(worktree) == {} and git(worktree, "status", "--porcelain").startswith(f"M  {CORE}")
    res = releases.run("rebase", "--continue")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "bye: merged by 3-way merge - resolved by hand" in res.stdout
    patch = (releases.root / "patches/0004-bye.patch").read_text()
    assert '-    word = "goodbye"\n+    word = "ciao"' in patch


def test_merge_conflict_style_from_the_users_configuration(releases: Demo, tmp_path: Path) -> None:
    config = tmp_path / "gitconfig"
    config.write_text("[merge]\n\tconflictStyle = diff3\n")
    worktree = stop(releases, env={"GIT_CONFIG_GLOBAL": str(config)})
    text = (worktree / CORE).read_text()
    assert (
        '<<<<<<< demo 1.1 + series\n    word = "goodbye"\n'
        '||||||| demo 1.0 + series\n    word = "bye"\n'
        '=======\n    word = "ciao"\n>>>>>>> patch bye\n'
    ) in text
    assert sorted(unmerged(worktree)) == [1, 2, 3]


def test_merge_conflict_style_from_the_repositorys_configuration(releases: Demo, tmp_path: Path) -> None:
    git(releases.root, "init", "-q")
    git(releases.root, "config", "merge.conflictStyle", "zdiff3")
    assert gitmod.conflict_style(releases.root) == "zdiff3"
    text = (stop(releases) / CORE).read_text()
    assert "||||||| demo 1.0 + series\n" in text and ">>>>>>> patch bye\n" in text
    git(releases.root, "config", "merge.conflictStyle", "no-such-style")
    assert gitmod.conflict_style(releases.root) == "merge"
    assert gitmod.conflict_style(tmp_path) == "merge"  # no repository, no global setting


def test_git_mergetool_resolves_it_and_continue_takes_the_result(releases: Demo) -> None:
    """A merge tool sees the conflict; the backup it leaves (core.py.orig) is not part of the patch."""
    worktree = stop(releases)
    tool = [
        "-c",
        'mergetool.keep-ours.cmd=cp "$LOCAL" "$MERGED" && sed -i \'s/goodbye/ciao/\' "$MERGED"',
        "-c",
        "mergetool.keep-ours.trustExitCode=true",
    ]
    git(worktree, *tool, "mergetool", "--tool=keep-ours", "--no-prompt")
    assert unmerged(worktree) == {} and (worktree / f"{CORE}.orig").is_file()
    res = releases.run("rebase", "--continue")
    assert res.returncode == 0, res.stdout + res.stderr
    patch = (releases.root / "patches/0004-bye.patch").read_text()
    assert '-    word = "goodbye"\n+    word = "ciao"' in patch and ".orig" not in patch


def _resolve_bye(worktree: Path) -> None:
    """Take the patch's side of the bye conflict: word = "ciao"."""
    git(worktree, "checkout", "--theirs", "--", CORE)
    git(worktree, "add", CORE)


def test_continue_after_running_the_tests_in_the_stop_leaves_byte_code_alone(releases: Demo) -> None:
    """Python run in the stop's worktree leaves __pycache__/ there, outside the sparse checkout's
    paths: `git add -A` refused it with git's raw sparse-checkout advice, exit 70. Byte-code is
    ignored there, as in a checkout; a file the user adds is carried, sparse or not."""
    worktree = stop(releases)
    _resolve_bye(worktree)
    subprocess.run(  # what running the tests there leaves behind
        [sys.executable, "-c", "import demo.core"],
        cwd=worktree / "python",
        check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": ""},
    )
    assert list((worktree / "python/demo/__pycache__").glob("core.*.pyc"))
    (worktree / "python/demo/farewells.py").write_text('WORDS = ("ciao", "bye")\n')
    res = releases.run("rebase", "--continue")
    assert res.returncode == 0, res.stdout + res.stderr
    patch = (releases.root / "patches/0004-bye.patch").read_text()
    assert "diff --git a/python/demo/farewells.py b/python/demo/farewells.py\nnew file mode 100644\n" in patch
    assert "__pycache__" not in patch and ".pyc" not in patch


def test_continue_names_a_binary_file_no_patch_could_carry(releases: Demo) -> None:
    """A binary file left in the stop's worktree (a built extension) cannot be part of a patch
    file: --continue names it and changes nothing; removed, the --continue goes on."""
    worktree = stop(releases)
    _resolve_bye(worktree)
    (worktree / "python/demo/_speedups.so").write_bytes(b"\x7fELF\0\0\1")
    before = snapshot(releases.root / "patches", releases.root / "patchset.toml")
    res = releases.run("rebase", "--continue")
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr == (
        "error: python/demo/_speedups.so in the stopped patch's worktree is binary: a patch file carries text "
        f"only (hint: remove it from {worktree}, then run --continue again)\n"
    )
    assert snapshot(releases.root / "patches", releases.root / "patchset.toml") == before
    (worktree / "python/demo/_speedups.so").unlink()
    res = releases.run("rebase", "--continue")
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_file_upstream_deleted_is_deleted_by_us(releases: Demo) -> None:
    series(releases, "0006-util")
    res = releases.run("rebase", "--to", "1.1", "--json")
    assert res.returncode == 3, res.stdout + res.stderr
    worktree = Path(json.loads(res.stdout)["data"]["worktree"])
    util = "python/demo/util.py"
    assert f"DU {util}" in git(worktree, "status", "--porcelain").splitlines()
    stages = [line.split()[2] for line in git(worktree, "ls-files", "-u", "--", util).splitlines()]
    assert stages == ["1", "3"] and "return 2" in (worktree / util).read_text()


def test_the_next_stop_gets_a_worktree_as_fresh_as_the_first(releases: Demo) -> None:
    """The stops share one worktree: what the last stop left there (a stray file, a backup, its
    conflict in the index) is gone, and only the next patch's files are checked out."""
    series(releases, "0002-greet", "0004-bye", "0006-util")
    res = releases.run("rebase", "--to", "1.1", "--json")
    assert res.returncode == 3, res.stdout + res.stderr
    worktree = Path(json.loads(res.stdout)["data"]["worktree"])
    (worktree / "stray.txt").write_text("left by hand\n")
    (worktree / f"{CORE}.orig").write_text("a merge tool's backup\n")
    res = releases.run("rebase", "--skip", "--reason", "later", "--json")
    assert res.returncode == 3, res.stdout + res.stderr
    data = json.loads(res.stdout)["data"]
    assert Path(data["worktree"]) == worktree
    util = "python/demo/util.py"
    assert git(worktree, "status", "--porcelain", "--untracked-files=all").splitlines() == [f"DU {util}"]
    assert sorted(p.name for p in worktree.iterdir()) == [".git", "python"]
    assert not (worktree / CORE).exists() and "return 2" in (worktree / util).read_text()
    res = releases.run("rebase", "--skip", "--reason", "gone upstream")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not worktree.exists()
    cache_repo = str(releases.cache / "upstream.git")
    assert str(worktree) not in git(releases.cache, "--git-dir", cache_repo, "worktree", "list")


def test_a_state_changed_between_stops_is_refused_when_git_tracks_it(releases: Demo) -> None:
    """A stop trusts the state it wrote itself (its digest is kept in the user's cache) and asks
    git nothing; a state that changed since, say brought by a checkout of a commit that tracks
    one, is checked as anything under .patchtool/ is: refused while git tracks it, nothing touched."""
    stop(releases)
    root = releases.root
    state = root / ".patchtool" / "rebase" / "state.json"
    ours = state.read_bytes()
    forged = json.loads(ours)
    forged["new_pin_toml"] += "# a stranger's pin\n"
    state.write_text(json.dumps(forged, indent=2, sort_keys=True))
    git(root, "init", "-q")
    git(root, "add", "-f", ".patchtool/rebase/state.json")
    git(root, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "a state")
    before = snapshot(root, releases.cache)
    for args in (("--continue",), ("--skip", "--reason", "x")):
        res = releases.run("rebase", *args)
        assert res.returncode == 1, res.stdout + res.stderr
        assert res.stderr.startswith(
            "error: .patchtool/rebase/state.json: .patchtool/ is patchtool's private state, but git tracks "
            ".patchtool/rebase/state.json; refusing to act on it"
        ), res.stderr
        assert "Traceback" not in res.stderr
    assert snapshot(root, releases.cache) == before
    git(root, "rm", "-q", "--cached", ".patchtool/rebase/state.json")
    state.write_bytes(ours)
    res = releases.run("rebase", "--skip", "--reason", "x")
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda d: d.update(tip=f"{int(d['tip'], 16) ^ 1:040x}"), id="tip"),
        pytest.param(lambda d: (d["steps"][0].update(outcome="dropped"), d.update(worktree=None)), id="outcome"),
        pytest.param(lambda d: d["steps"][0].update(file="patches/0001-extra.patch"), id="file"),
    ],
)
def test_a_state_edited_between_stops_is_refused_and_nothing_changes(
    releases: Demo, forge: Callable[[dict[str, Any]], object]
) -> None:
    """Only a state patchtool wrote (its digest is in the user's cache) is resumed: one edited by
    hand, even untracked, would steer what --continue writes (found by an attack: a forged tip
    rebased a patch onto the old release, a forged outcome dropped the stopped patch with no
    --skip, a forged file finished the rebase rewriting nothing)."""
    stop(releases)
    root = releases.root
    state = root / ".patchtool" / "rebase" / "state.json"
    forged = json.loads(state.read_bytes())
    forge(forged)
    state.write_text(json.dumps(forged, indent=2, sort_keys=True))
    before = snapshot(root, releases.cache)
    for args in (("--continue",), ("--skip", "--reason", "x")):
        res = releases.run("rebase", *args)
        assert res.returncode == 1, res.stdout + res.stderr
        assert res.stderr.startswith(
            "error: .patchtool/rebase/state.json: the rebase state is not one patchtool wrote "
            "(it changed since patchtool wrote it, or another cache wrote it)"
        ), res.stderr
        assert "rebase --abort" in res.stderr and "Traceback" not in res.stderr
    assert snapshot(root, releases.cache) == before
    res = releases.run("rebase", "--abort")
    assert res.returncode == 0, res.stdout + res.stderr


def test_an_aborted_rebase_s_state_put_back_is_refused(releases: Demo) -> None:
    """--abort takes back the vouchers of its state: the same bytes put back are not resumed
    (found by an attack: --continue then failed inside git with exit 70)."""
    stop(releases)
    state = releases.root / ".patchtool" / "rebase" / "state.json"
    ours = state.read_bytes()
    vouchers = releases.cache / "upstream.git" / "patchtool" / "rebase-state"
    assert [p.name for p in vouchers.iterdir()] == [hashlib.sha256(ours).hexdigest()]
    assert releases.run("rebase", "--abort").returncode == 0
    assert list(vouchers.iterdir()) == []
    state.parent.mkdir(parents=True)
    state.write_bytes(ours)
    res = releases.run("rebase", "--continue")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "the rebase state is not one patchtool wrote" in res.stderr and "Traceback" not in res.stderr
    assert releases.run("rebase", "--abort").returncode == 0

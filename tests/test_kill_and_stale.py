"""Nothing lost under kill -9 and stale state (issue 19, item 4): a real process killed at a named
step, a lock a killed git left, an empty commit exported, a repository moved during a stopped
rebase, a cache lock held by another clone."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Demo
from helpers import git, snapshot
from patchtool.upstream.namespaces import replay_ref
from test_rebase import releases, series

__all__ = ["releases"]  # the fixture, used by name

# A patchtool process that SIGKILLs itself when it reaches ``module.function``: the named step is
# replaced in that process only, so the kill lands at the same point every run, with no timing.
KILL_AT = """\
import importlib, os, signal, sys
module, _, name = sys.argv.pop(1).partition(":")
setattr(importlib.import_module(module), name, lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL))
from patchtool.cli import main
sys.exit(main())
"""


def killed_at(demo: Demo, step: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``patchtool ARGS`` in ``demo``, killed with SIGKILL as it calls ``step`` (module:function)."""
    env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(demo.cache)}
    res = subprocess.run(
        [sys.executable, "-c", KILL_AT, step, *args],
        cwd=demo.root,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert res.returncode == -signal.SIGKILL, res.stdout + res.stderr
    return res


def tree_of(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (links as their target), to compare before and after."""
    out: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = b"-> " + os.readlink(path).encode()
        elif path.is_file():
            out[rel] = path.read_bytes()
    return out


CORE = "python/demo/core.py"


def stop_at_bye(demo: Demo) -> Path:
    """greet, bye, extra rebased onto 1.1: bye conflicts in core.py; its worktree."""
    series(demo, "0002-greet", "0004-bye", "0001-extra")
    res = demo.run("rebase", "--to", "1.1", "--json")
    assert res.returncode == 3, res.stdout + res.stderr
    return Path(json.loads(res.stdout)["data"]["worktree"])


def resolve(worktree: Path) -> None:
    """Take the patch's side of the conflict and mark the resolution so it can be found again."""
    git(worktree, "checkout", "--theirs", "--", CORE)
    text = (worktree / CORE).read_text()
    (worktree / CORE).write_text(text + "\nRESOLVED_BY_HAND = True\n")


# -- kill -9 during rebase --continue ------------------------------------------------------------


def test_a_continue_killed_before_its_journal_commits_keeps_the_resolution(releases: Demo) -> None:
    worktree = stop_at_bye(releases)
    resolve(worktree)
    killed_at(releases, "patchtool.project.journal:commit", "rebase", "--continue")
    assert not worktree.exists()  # the kill came after the worktree it was resolved in was removed
    res = releases.run("rebase", "--continue")
    assert res.returncode == 0, res.stdout + res.stderr
    patch = (releases.root / "patches/0004-bye.patch").read_text()
    assert "+RESOLVED_BY_HAND = True" in patch and '+    word = "ciao"' in patch
    assert not (releases.root / ".patchtool").exists()


def test_a_skip_killed_before_its_journal_commits_stays_skipped(releases: Demo) -> None:
    stop_at_bye(releases)
    killed_at(releases, "patchtool.project.journal:commit", "rebase", "--skip", "--reason", "upstream rewrote it")
    res = releases.run("rebase", "--skip", "--reason", "again")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "no patch is stopped: the last --continue recorded its resolution before it was interrupted" in res.stderr
    res = releases.run("rebase", "--continue")
    assert res.returncode == 0, res.stdout + res.stderr
    manifest = (releases.root / "patchset.toml").read_text()
    assert "upstream rewrote it" in manifest and "again" not in manifest


# -- a repository moved during a stopped rebase ------------------------------------------------


def moved(demo: Demo) -> Demo:
    """``demo`` with its repository renamed to a sibling directory."""
    new = demo.root.with_name("moved-project")
    demo.root.rename(new)
    return dataclasses.replace(demo, root=new)


def test_a_repository_moved_during_a_stop_shows_continues_and_keeps_the_resolution(releases: Demo) -> None:
    resolve(stop_at_bye(releases))
    there = moved(releases)
    res = there.run("status")
    assert "stopped at bye" in res.stdout + res.stderr and "not one patchtool wrote" not in res.stderr, res.stderr
    res = there.run("rebase", "--continue")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "+RESOLVED_BY_HAND = True" in (there.root / "patches/0004-bye.patch").read_text()
    assert not (there.root / ".patchtool").exists()


def test_abort_gets_out_of_a_moved_repository(releases: Demo) -> None:
    stop_at_bye(releases)
    series_before = tree_of(releases.root)
    there = moved(releases)
    res = there.run("rebase", "--abort")
    assert res.returncode == 0 and "rebase aborted; nothing changed" in res.stdout, res.stdout + res.stderr
    assert not (there.root / ".patchtool").exists()
    assert tree_of(there.root) == {k: v for k, v in series_before.items() if not k.startswith(".patchtool")}
    assert git(there.root.parent / "cache" / "upstream.git", "worktree", "list").count("\n") == 1


def test_abort_gets_out_of_a_state_that_does_not_read(releases: Demo) -> None:
    stop_at_bye(releases)
    (releases.root / ".patchtool/rebase/state.json").write_text("{not json")
    res = releases.run("status")
    assert res.returncode == 1 and "`patchtool rebase --abort`" in res.stderr, res.stdout + res.stderr
    res = releases.run("rebase", "--abort")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not (releases.root / ".patchtool").exists()
    assert releases.run("status").returncode == 0


def test_abort_removes_a_linked_state_directory_but_nothing_it_points_at(releases: Demo, tmp_path: Path) -> None:
    series(releases, "0002-greet")
    outside = tmp_path / "outside"
    (outside / "worktree").mkdir(parents=True)
    (outside / "state.json").write_text("{}")
    before = tree_of(outside)
    (releases.root / ".patchtool").mkdir()
    (releases.root / ".patchtool/rebase").symlink_to(outside)
    res = releases.run("rebase", "--abort")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not (releases.root / ".patchtool").exists() and tree_of(outside) == before


# -- a ref lock a killed git left ---------------------------------------------------------------


def plant_ref_lock(demo: Demo, ref: str) -> Path:
    """What a ``git fast-import`` killed while it moved ``ref`` leaves: ``<ref>.lock`` beside it."""
    stale = demo.cache / "upstream.git" / f"{ref}.lock"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("0" * 40 + "\n")
    return stale


def test_a_replay_lock_a_killed_fast_import_left_does_not_stop_the_next_rebase(releases: Demo) -> None:
    series(releases, "0002-greet", "0001-extra")
    assert releases.run("rebase", "--to", "1.1", "--dry-run").returncode == 0
    stale = plant_ref_lock(releases, replay_ref(releases.root))
    res = releases.run("rebase", "--to", "1.1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not stale.exists() and "demo-1.1" in (releases.root / "patchset.toml").read_text()


def test_cache_prune_clears_the_stale_ref_locks_of_every_project(releases: Demo) -> None:
    series(releases, "0002-greet")
    assert releases.run("rebase", "--to", "1.1", "--dry-run").returncode == 0
    ours = plant_ref_lock(releases, replay_ref(releases.root))
    other = plant_ref_lock(releases, "refs/patchtool/0123456789abcdef/replay")
    branch = plant_ref_lock(releases, "refs/heads/patchtool/0123456789abcdef/series")  # the user's git writes these
    res = releases.run("cache", "prune")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not ours.exists() and not other.exists() and branch.exists()


# -- the cache lock waits as the repository lock does ----------------------------------------------

HOLD_CACHE = """import fcntl, sys
fh = open(sys.argv[1], "w")
fcntl.flock(fh, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def test_a_cache_held_by_another_clone_is_busy_after_the_timeout(releases: Demo) -> None:
    series(releases, "0002-greet")
    assert releases.run("status").returncode == 0  # the cache holds 1.0
    releases.cache.mkdir(exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_CACHE, str(releases.cache / "lock"), "patchtool", "status"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        before = snapshot(releases.root, releases.cache)
        res = releases.run("rebase", "--to", "1.1", "--json", env={"PATCHTOOL_LOCK_TIMEOUT": "0"})
        assert res.returncode == 75, res.stdout + res.stderr
        error = json.loads(res.stdout)["errors"][0]
        assert error["message"] == (
            f"another patchtool command (pid {holder.pid}, `patchtool status`) holds the lock "
            f"on the cache {releases.cache}"
        )
        assert error["hint"] == "wait for it to finish and run this again"
        assert snapshot(releases.root, releases.cache) == before
    finally:
        holder.communicate("")
    assert releases.run("rebase", "--to", "1.1").returncode == 0


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "soon", ""])
def test_a_lock_timeout_that_is_no_number_of_seconds_is_a_usage_error(one_patch: Demo, value: str) -> None:
    before = snapshot(one_patch.root)
    res = one_patch.run("status", env={"PATCHTOOL_LOCK_TIMEOUT": value})
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"$PATCHTOOL_LOCK_TIMEOUT is {value!r}: not a number of seconds" in res.stderr
    assert "give a number, 0 or more" in res.stderr
    assert snapshot(one_patch.root) == before


# -- an empty commit exported --------------------------------------------------------------------


def test_export_refuses_a_commit_that_changes_nothing_and_writes_nothing(one_patch: Demo, tmp_path: Path) -> None:
    res = one_patch.run("checkout", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    worktree = Path(json.loads(res.stdout)["data"]["worktree"])
    config = tmp_path / "gitconfig"
    config.write_text("[user]\n\tname = Ada Lovelace\n\temail = ada@example.org\n")
    assert one_patch.run("new", "foo", env={"GIT_CONFIG_GLOBAL": str(config)}).returncode == 0
    tip = git(worktree, "rev-parse", "HEAD")
    before = snapshot(one_patch.root, one_patch.cache)
    res = one_patch.run("export")
    assert res.returncode == 2, res.stdout + res.stderr
    assert (
        f"commit(s) {tip[:12]} (foo: describe the change) on 'series' change nothing: each would be written "
        "as an empty patch file; nothing was exported" in res.stderr
    )
    assert "`git commit --amend`" in res.stderr
    assert snapshot(one_patch.root, one_patch.cache) == before and git(worktree, "rev-parse", "HEAD") == tip
    assert one_patch.run("status").returncode == 0  # the series still loads
    (worktree / "python/demo/util.py").write_text("def helper():\n    return 7\n")
    git(worktree, "commit", "-q", "-a", "--amend", "--no-edit")
    res = one_patch.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "+    return 7" in (one_patch.root / "patches/0002-foo.patch").read_text()

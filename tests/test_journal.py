"""Multi-file writes are transactions: a process killed at any point leaves the repository as it
was, or with a journal the next command finishes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import Demo
from helpers import leftover_state, snapshot
from patchtool import fsroot
from patchtool.project import journal

BEFORE = {"patchset.toml": "pin = 'old'\n", "patches/0001-a.patch": "a\n", "patches/0002-b.patch": "b\n"}
AFTER = {"patchset.toml": "pin = 'new'\n", "patches/0001-a.patch": "a2\n", "patches/dropped/0002-b.patch": "b\n"}


def repo(tmp_path: Path) -> Path:
    for rel, text in BEFORE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def write(root: Path) -> list[str]:
    return journal.commit(root, AFTER, remove=["patches/0002-b.patch"], remove_trees=[".patchtool/rebase"])


def files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


class Killed(BaseException):
    """What a SIGKILL would be: nothing after it runs."""


def kill_at_replace(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Kill the process at the n-th rename journal.commit makes through the filesystem boundary
    (1: the journal itself)."""
    real = fsroot.Root.rename
    calls = []

    def rename(self: fsroot.Root, src: str, dst: str, *, sync: bool = True) -> None:
        calls.append(dst)
        if len(calls) == n:
            raise Killed
        real(self, src, dst, sync=sync)

    monkeypatch.setattr(fsroot.Root, "rename", rename)


def test_commit_writes_moves_and_removes(tmp_path: Path) -> None:
    root = repo(tmp_path)
    (root / ".patchtool" / "rebase").mkdir(parents=True)
    (root / ".patchtool" / "rebase" / "state.json").write_text("{}")
    written = write(root)
    assert files(root) == AFTER
    assert written == ["patchset.toml", "patches/0001-a.patch", "patches/dropped/0002-b.patch", "-patches/0002-b.patch"]
    assert not leftover_state(root)


def test_identical_files_are_left_alone(tmp_path: Path) -> None:
    root = repo(tmp_path)
    before = (root / "patches/0001-a.patch").stat().st_mtime_ns
    os.utime(root / "patches/0001-a.patch", ns=(1, 1))
    assert journal.commit(root, {"patches/0001-a.patch": "a\n"}) == []
    assert (root / "patches/0001-a.patch").stat().st_mtime_ns == 1 != before


def test_killed_before_the_journal_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = repo(tmp_path)
    kill_at_replace(monkeypatch, 1)
    with pytest.raises(Killed):
        write(root)
    monkeypatch.undo()
    assert (root / journal.STAGED).exists()  # staged, never committed
    assert journal.recover(root) == []
    assert files(root) == BEFORE


@pytest.mark.parametrize("n", [2, 3, 4])
def test_killed_after_the_journal_is_finished_by_recover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    root = repo(tmp_path)
    kill_at_replace(monkeypatch, n)  # after the journal, during the moves
    with pytest.raises(Killed):
        write(root)
    monkeypatch.undo()
    assert files(root) != AFTER  # half done
    assert journal.recover(root) == ["patchset.toml", "patches/0001-a.patch", "patches/dropped/0002-b.patch"]
    assert files(root) == AFTER
    assert journal.recover(root) == []  # and only once


def test_the_next_command_finishes_an_interrupted_drop(one_patch: Demo, monkeypatch: pytest.MonkeyPatch) -> None:
    """`patchtool drop` killed midway: a reading command (`status`) refuses the half-written
    series and writes nothing; `patchtool recover` finishes the drop, and `status` then sees it."""
    from patchtool.edit.drop import drop
    from patchtool.project.repository import Project

    before = snapshot(one_patch.root)
    with pytest.MonkeyPatch.context() as killing:  # undone alone: the autouse fixtures' settings stay
        kill_at_replace(killing, 2)
        with pytest.raises(Killed):
            drop(Project.load(one_patch.root), ident="greet", reason="upstream took it", rejected=False)
    half = snapshot(one_patch.root)
    assert half != before
    res = one_patch.run("status")
    assert res.returncode == 1
    assert "an interrupted patchtool write is not finished yet (.patchtool/journal.json)" in res.stderr
    assert "run `patchtool recover` (or any writing command) to finish it" in res.stderr
    assert snapshot(one_patch.root) == half  # a reading command never writes
    res = one_patch.run("recover")
    assert res.returncode == 0, res.stderr
    assert "finished an interrupted write: patches/dropped/0001-greet.patch, patchset.toml" in res.stdout
    res = one_patch.run("status", "--json")
    assert res.returncode == 0, res.stderr
    assert not (one_patch.root / "patches" / "0001-greet.patch").exists()
    assert (one_patch.root / "patches" / "dropped" / "0001-greet.patch").exists()
    manifest = (one_patch.root / "patchset.toml").read_text()
    assert "[[dropped]]" in manifest and 'reason = "upstream took it"' in manifest
    assert not leftover_state(one_patch.root)


def test_each_directory_moved_into_is_synced_once_before_the_journal_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The moves are flushed a directory at a time, not a rename at a time: each directory the
    transaction moved a file into is synced, once, before the journal that would redo them goes."""
    root = repo(tmp_path)
    events: list[str] = []
    real_sync, real_unlink = fsroot.Root.sync, fsroot.Root.unlink

    def sync(self: fsroot.Root, rel: str = "") -> None:
        events.append(f"sync {rel}")
        real_sync(self, rel)

    def unlink(self: fsroot.Root, rel: str) -> None:
        events.append(f"unlink {rel}")
        real_unlink(self, rel)

    monkeypatch.setattr(fsroot.Root, "sync", sync)
    monkeypatch.setattr(fsroot.Root, "unlink", unlink)
    write(root)
    assert files(root) == AFTER
    gone = events.index(f"unlink {journal.JOURNAL}")
    assert sorted(events[:gone]) == ["sync ", "sync patches", "sync patches/dropped", "unlink patches/0002-b.patch"]

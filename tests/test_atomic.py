"""The one atomic write: a temporary file beside the target, synced, renamed over it, the
directory synced; nothing left behind when it fails."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from patchtool import atomic


def test_write_replaces_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    atomic.write(target, "new \u00e9")
    assert target.read_bytes() == "new \u00e9".encode()
    atomic.write(target, b"\x00bytes")
    assert target.read_bytes() == b"\x00bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_write_gives_the_permissions_a_plain_write_gives(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        atomic.write(tmp_path / "report.md", "x")
        (tmp_path / "plain.md").write_text("x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "report.md").stat().st_mode) == stat.S_IMODE((tmp_path / "plain.md").stat().st_mode)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.mkdir()  # a directory cannot be replaced by a file
    with pytest.raises(OSError):
        atomic.write(target, "x")
    assert [p.name for p in tmp_path.iterdir()] == ["taken"] and target.is_dir()


def test_write_syncs_the_file_and_then_its_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic.write(tmp_path / "f", "x")
    assert synced == ["file", "dir"]

"""The one filesystem boundary: the atomic write (a temporary file beside the target, synced,
renamed over it, the directory synced; nothing left behind when it fails), and no write, delete
or rename ever follows a link out of its root or replaces anything but a regular file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from helpers import snapshot
from patchtool import fsroot
from patchtool.errors import InvalidInput, UsageError


def test_write_replaces_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    fsroot.Root(tmp_path).write("state.json", "new \u00e9")
    assert target.read_bytes() == "new \u00e9".encode()
    fsroot.Root(tmp_path).write("state.json", b"\x00bytes")
    assert target.read_bytes() == b"\x00bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_write_gives_the_permissions_a_plain_write_gives(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        fsroot.Root(tmp_path).write("report.md", "x")
        (tmp_path / "plain.md").write_text("x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "report.md").stat().st_mode) == stat.S_IMODE((tmp_path / "plain.md").stat().st_mode)


def test_write_syncs_the_file_and_then_its_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    fsroot.Root(tmp_path).write("f", "x")
    assert synced == ["file", "dir"]


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    decoy = tmp_path / "outside"
    (decoy / "sub").mkdir(parents=True)
    (decoy / "f").write_text("precious")
    (decoy / "sub" / "g").write_text("precious too")
    return decoy


@pytest.mark.parametrize(
    "act",
    [
        lambda r: r.write("link/f", "x"),
        lambda r: r.write("link/new/f", "x"),
        lambda r: r.create("link/f2", "x"),
        lambda r: r.append("link/f", "x"),
        lambda r: r.unlink("link/f"),
        lambda r: r.rmtree("link/sub"),
        lambda r: r.directory("link/new"),
        lambda r: r.rename("a", "link/f"),
        lambda r: r.place("link/tree"),
    ],
)
def test_nothing_is_done_through_a_link_out_of_the_root(tmp_path: Path, outside: Path, act: object) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "link").symlink_to(outside)
    (root / "a").write_text("a")
    before = snapshot(outside)
    with pytest.raises(InvalidInput) as exc:
        act(fsroot.Root(root))  # type: ignore[operator]
    assert exc.value.message == f"link: is a symbolic link; patchtool writes only into real directories beneath {root}"
    assert snapshot(outside) == before and sorted(p.name for p in outside.iterdir()) == ["f", "sub"]


def test_a_link_or_a_directory_is_never_replaced(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "to-outside").symlink_to(outside / "f")
    (tmp_path / "dir").mkdir()
    root = fsroot.Root(tmp_path)
    with pytest.raises(InvalidInput, match=r"^to-outside: is a symbolic link .*; refusing to replace it$"):
        root.write("to-outside", "x")
    with pytest.raises(InvalidInput, match=r"^dir: is a directory, not a regular file; refusing to replace it$"):
        root.write("dir", "x")
    assert (outside / "f").read_text() == "precious" and (tmp_path / "to-outside").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "outside", "to-outside"]  # no temporary left


def test_rmtree_of_a_link_removes_the_link_not_what_it_names(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "stale").symlink_to(outside)
    fsroot.Root(tmp_path).rmtree("stale")
    assert not (tmp_path / "stale").is_symlink() and (outside / "sub" / "g").read_text() == "precious too"


def test_a_path_that_leaves_the_root_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"escapes the tree"):
        fsroot.Root(tmp_path / "r").write("../x", "x")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("patchset.toml", "is patchset.toml of the patch repository; a report never replaces the series"),
        ("patches/0001-a.patch", "is patches/0001-a.patch of the patch repository; a report never replaces the series"),
        (
            "upstream-pins/demo-1.0.toml",
            "is upstream-pins/demo-1.0.toml of the patch repository; a report never replaces the series",
        ),
        ("fifo", "is a named pipe (FIFO), not a regular file; a report is written only to a regular file or a new one"),
        (
            "link.html",
            "is a symbolic link (it could lead outside the repository; patchtool follows none); a report is "
            "written only to a regular file or a new one",
        ),
    ],
)
def test_a_report_never_replaces_the_series_or_a_special_file(tmp_path: Path, name: str, why: str) -> None:
    repo = tmp_path / "repo"
    (repo / "patches").mkdir(parents=True)
    (repo / "upstream-pins").mkdir()
    for rel in ("patchset.toml", "patches/0001-a.patch", "upstream-pins/demo-1.0.toml"):
        (repo / rel).write_text("series\n")
    os.mkfifo(repo / "fifo")
    (repo / "link.html").symlink_to(repo / "patchset.toml")
    before = snapshot(tmp_path)
    with pytest.raises(UsageError) as exc:
        fsroot.write_output(repo / name, "<html>", repository=repo)
    assert exc.value.message == f"{repo / name} {why}"
    assert snapshot(tmp_path) == before


def test_a_report_is_not_written_over_a_device(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^/dev/null is a device, not a regular file; a report is written only"):
        fsroot.write_output(Path("/dev/null"), "x", repository=tmp_path)
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)

"""Every error is a message with its documented exit code, never a traceback, also under --json;
and nothing on disk changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import Demo, edit
from helpers import git, snapshot
from patchtool.cli import app as cli


def envelope(res: object) -> dict:  # type: ignore[type-arg]
    out = res.stdout
    assert "Traceback" not in out + res.stderr
    return json.loads(out)  # type: ignore[no-any-return]


def test_an_unexpected_exception_is_exit_70_with_the_envelope(
    one_patch: Demo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No input reaches an internal error on purpose: one is injected where status computes."""
    from patchtool.series import status

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(status, "status", broken)
    monkeypatch.setenv("PATCHTOOL_CACHE_DIR", str(one_patch.cache))
    assert cli.main(["status", "--json", "--root", str(one_patch.root)]) == 70
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "error" and data["exit_code"] == 70
    assert data["errors"][0]["message"].startswith("internal error: RuntimeError: boom (at test_errors.py:")
    assert data["errors"][0]["code"] == "InternalError"
    assert cli.main(["status", "--root", str(one_patch.root)]) == 70
    err = capsys.readouterr().err
    assert err.startswith("error: internal error: RuntimeError: boom") and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("status", "--bogus"), "No such option: --bogus"),
        (("scan", "--newest", "many"), "Invalid value for '--newest': Input should be a valid integer"),
        (("nonsense",), "No such command 'nonsense'."),
    ],
)
def test_argument_errors_are_an_envelope_under_json(one_patch: Demo, args: tuple[str, ...], message: str) -> None:
    res = one_patch.run(*args, "--json")
    assert res.returncode == 2
    data = envelope(res)
    assert data["status"] == "usage-error" and data["exit_code"] == 2
    assert message in data["errors"][0]["message"]
    res = one_patch.run(*args)
    assert res.returncode == 2 and message in res.stderr and res.stderr.startswith("usage: patchtool")


@pytest.mark.parametrize("n", ["0", "-3"])
def test_scan_newest_must_be_positive(one_patch: Demo, n: str) -> None:
    res = one_patch.run("scan", "--newest", n, "--json")
    assert res.returncode == 2
    assert envelope(res)["errors"][0]["message"] == (
        f"--newest {n}: give how many of the newest releases to scan, at least 1"
    )


def test_apply_into_an_existing_file_is_refused(one_patch: Demo) -> None:
    target = one_patch.root / "out"
    target.write_text("mine\n")
    before = snapshot(one_patch.root)
    res = one_patch.run("apply", "--into", str(target))
    assert res.returncode == 2
    assert f"{target} exists and is not a directory; refusing to replace it" in res.stderr
    assert snapshot(one_patch.root) == before


def test_keep_failed_never_deletes_a_directory_it_did_not_make(one_patch: Demo) -> None:
    one_patch.commit_patch("0002-bye.patch", edit("python/demo/core.py", 'word = "bye"', 'word = "ciao"'), "ciao")
    text = (one_patch.root / "patches/0002-bye.patch").read_text().replace('-    word = "bye"', '-    word = "adieu"')
    (one_patch.root / "patches/0002-bye.patch").write_text(text)
    one_patch.write_manifest(one_patch.entry("greet", "0001-greet.patch"), one_patch.entry("bye", "0002-bye.patch"))
    mine = one_patch.root / "build" / "demo-1.0.failed-bye"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("my debugging notes\n")
    before = snapshot(one_patch.root)
    res = one_patch.run("apply", "--keep-failed", "--json")
    assert res.returncode == 3
    data = envelope(res)
    assert data["data"]["partial_tree"] is None
    assert (
        f"no partial tree was written: {mine} exists and is not a tree patchtool made; refusing to replace it"
        in data["errors"][0]["hint"]
    )
    assert snapshot(one_patch.root) == before
    mine.joinpath("notes.txt").unlink()
    mine.rmdir()
    res = one_patch.run("apply", "--keep-failed", "--json")  # where nothing is in the way, it is made
    assert res.returncode == 3 and envelope(res)["data"]["partial_tree"] == str(mine)
    res = one_patch.run("apply", "--keep-failed", "--json")  # and replaced, being patchtool's own
    assert res.returncode == 3 and envelope(res)["data"]["partial_tree"] == str(mine)


def test_quilt_export_never_overwrites_a_series(one_patch: Demo, tmp_path: Path) -> None:
    out = tmp_path / "q"
    (out / "patches").mkdir(parents=True)
    (out / "patches" / "series").write_text("theirs.patch\n")
    before = snapshot(out, one_patch.root)
    res = one_patch.run("export", "--quilt", str(out))
    assert res.returncode == 2
    assert f"{out / 'patches'} exists and is not empty; refusing to overwrite a quilt series" in res.stderr
    assert snapshot(out, one_patch.root) == before


def test_a_cache_that_cannot_be_used_is_a_message(one_patch: Demo, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x\n")
    before = snapshot(one_patch.root)
    res = one_patch.run("status", "--json", "--cache-dir", str(blocker / "cache"))
    assert res.returncode == 2
    message = envelope(res)["errors"][0]["message"]
    assert message.startswith(f"cannot use {blocker / 'cache'}") and "Not a directory" in message
    assert snapshot(one_patch.root) == before


def test_a_killed_apply_leaves_no_locked_worktree_record(one_patch: Demo, tmp_path: Path) -> None:
    assert one_patch.run("apply").returncode == 0
    cache_git = one_patch.cache / "upstream.git"
    dead = one_patch.root / "build" / ".demo-1.0.patchtool-dead"
    tip = git(one_patch.root / "build" / "demo-1.0", "rev-parse", "HEAD").strip()
    git(tmp_path, f"--git-dir={cache_git}", "worktree", "add", "-q", "--detach", str(dead), tip)
    record = next(p for p in (cache_git / "worktrees").iterdir() if p.name.endswith("demo-1.0.patchtool-dead"))
    (record / "locked").write_text("initializing")  # what a kill during `git worktree add` leaves
    import shutil

    shutil.rmtree(dead)
    res = one_patch.run("apply", "--force")
    assert res.returncode == 0, res.stderr
    listing = git(tmp_path, f"--git-dir={cache_git}", "worktree", "list", "--porcelain")
    assert "patchtool-dead" not in listing and not record.exists()

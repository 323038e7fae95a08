"""A patch repository is hostile input: what a clone brings in .patchtool/ is never acted on, and
reading commands write nothing, whatever the repository holds."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import Demo
from helpers import git, snapshot

READERS = [("status",), ("check",), ("retread", "list")]


def commit_all(root: Path) -> None:
    git(root, "init", "-q")
    git(root, "add", "-A", "-f")
    git(root, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "repo")


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    (v / "dir").mkdir(parents=True)
    (v / "f").write_text("precious\n")
    (v / "dir" / "g").write_text("precious too\n")
    return v


def hostile_journals(victim: Path) -> list[dict[str, object]]:
    return [
        {"schema": 1, "moves": [], "remove": [str(victim / "f")], "remove_trees": []},
        {"schema": 1, "moves": [], "remove": ["../../victim/f"], "remove_trees": []},
        {"schema": 1, "moves": [], "remove": [], "remove_trees": [str(victim / "dir")]},
        {"schema": 1, "moves": [], "remove": [], "remove_trees": ["../victim/dir"]},
        {"schema": 1, "moves": [], "remove": [], "remove_trees": [".patchtool/../../victim"]},
        {"schema": 1, "moves": [[".patchtool/staged/x", str(victim / "f")]], "remove": [], "remove_trees": []},
        {"schema": 1, "moves": [[str(victim / "f"), "patches/stolen.patch"]], "remove": [], "remove_trees": []},
        {
            "schema": 1,
            "moves": [[".patchtool/staged/../../../victim/f", "../../victim/f"]],
            "remove": [],
            "remove_trees": [],
        },
        {
            "schema": 1,
            "moves": [[".patchtool/staged/.git/hooks/post-checkout", ".git/hooks/post-checkout"]],
            "remove": [],
            "remove_trees": [],
        },
        # found by an attack: inside the repository, but no series file (code the user's tools run)
        {
            "schema": 1,
            "moves": [[".patchtool/staged/.envrc", ".envrc"]],
            "remove": ["patchset.toml"],
            "remove_trees": [],
        },
        {"schema": 1, "moves": [], "remove": ["noxfile.py"], "remove_trees": []},
    ]


def plant(root: Path, record: object, *, staged: dict[str, str] | None = None) -> None:
    (root / ".patchtool").mkdir(exist_ok=True)
    (root / ".patchtool" / "journal.json").write_text(json.dumps(record))
    for rel, text in (staged or {}).items():
        (root / ".patchtool" / "staged" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / ".patchtool" / "staged" / rel).write_text(text)


@pytest.mark.parametrize("n", range(11))
def test_a_committed_journal_is_refused_and_deletes_nothing(
    one_patch: Demo, victim: Path, tmp_path: Path, n: int
) -> None:
    record = hostile_journals(victim)[n]
    plant(
        one_patch.root,
        record,
        staged={"x": "evil\n", ".git/hooks/post-checkout": "#!/bin/sh\n", ".envrc": "touch pwned\n"},
    )
    commit_all(one_patch.root)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(one_patch.root), str(clone))
    before, outside = snapshot(clone), snapshot(victim)
    for args in [*READERS, ("drop", "greet", "--reason", "x"), ("recover",)]:
        res = one_patch.run(*args, "--root", str(clone))
        assert res.returncode == 1, (args, res.stdout, res.stderr)
        out = res.stdout + res.stderr  # check reports its problems on stdout
        assert "is patchtool's private state, but git tracks .patchtool/journal.json" in out
        assert "refusing to act on it" in out
        assert "Traceback" not in out
    assert snapshot(clone) == before and snapshot(victim) == outside


@pytest.mark.parametrize("n", range(11))
def test_an_untracked_hostile_journal_is_refused_whole(one_patch: Demo, victim: Path, n: int) -> None:
    """Not committed (a tarball, a shared disk): the journal is still validated before any step."""
    record = hostile_journals(victim)[n]
    plant(
        one_patch.root,
        record,
        staged={"x": "evil\n", ".git/hooks/post-checkout": "#!/bin/sh\n", ".envrc": "touch pwned\n"},
    )
    before, outside = snapshot(one_patch.root), snapshot(victim)
    res = one_patch.run("recover", "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    error = json.loads(res.stdout)["errors"][0]
    assert error["file"] == ".patchtool/journal.json"
    assert "refusing to act on it" in error["message"]
    assert "patchtool writes no such journal" in error["hint"]
    assert snapshot(one_patch.root) == before and snapshot(victim) == outside
    res = one_patch.run("status")  # a reader names the pending write and touches nothing
    assert res.returncode == 1 and "an interrupted patchtool write is not finished yet" in res.stderr
    assert snapshot(one_patch.root) == before and snapshot(victim) == outside


@pytest.mark.parametrize(
    "text",
    [
        '{"schema": 1, "moves": [',
        "",
        "\xff\xfe",
        "[]",
        '{"schema": 2}',
        '{"schema": 1, "moves": [], "remove": [], "remove_trees": [], "run": "rm"}',
    ],
)
def test_a_truncated_or_invalid_journal_is_a_clear_error(one_patch: Demo, text: str) -> None:
    (one_patch.root / ".patchtool").mkdir()
    (one_patch.root / ".patchtool" / "journal.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    before = snapshot(one_patch.root)
    res = one_patch.run("drop", "greet", "--reason", "x")
    assert res.returncode == 1, res.stderr
    assert res.stderr.startswith("error: .patchtool/journal.json: ")
    assert "refusing to act on it" in res.stderr or "an interrupted write cannot be finished" in res.stderr
    assert "Traceback" not in res.stderr
    assert snapshot(one_patch.root) == before


def test_a_state_directory_linked_outside_is_not_written_through(one_patch: Demo, victim: Path) -> None:
    os.symlink(victim, one_patch.root / ".patchtool")
    before, outside = snapshot(one_patch.root), snapshot(victim)
    res = one_patch.run("drop", "greet", "--reason", "x")
    assert res.returncode == 1
    assert "error: .patchtool: is a symbolic link; patchtool writes only into real directories beneath" in res.stderr
    assert snapshot(one_patch.root) == before and snapshot(victim) == outside


def test_a_patch_destination_linked_outside_is_not_written_through(one_patch: Demo, victim: Path) -> None:
    """patches/dropped/ a symbolic link to a directory outside: drop must not write there."""
    os.symlink(victim, one_patch.root / "patches" / "dropped")
    before, outside = snapshot(one_patch.root), snapshot(victim)
    res = one_patch.run("drop", "greet", "--reason", "x")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "error: patches/dropped/0001-greet.patch: patches/dropped is a symbolic link" in res.stderr
    assert snapshot(victim) == outside
    assert {k: v for k, v in snapshot(one_patch.root).items() if "/.patchtool/" not in k} == before


def test_reading_commands_write_nothing(one_patch: Demo, tmp_path: Path) -> None:
    """status, check, scan and the registry's readers leave the repository byte for byte (and
    create no .patchtool/), on a clean repository and on one whose rebase stopped."""
    (one_patch.root / "retread.toml").write_text("schema = 1\n")
    manifest = one_patch.root / "patchset.toml"
    manifest.write_text(manifest.read_text().replace('pin = "demo-1.0"', 'pin = "demo-1.0"\nregistry = "retread.toml"'))
    deploy = tmp_path / "serve.sh"
    deploy.write_text("python -m sglang.launch_server --tp 4\n")
    before = snapshot(one_patch.root)
    for args in [
        *READERS,
        ("retread", "scan", str(deploy)),
        ("scan", "--versions", "1.0"),
        ("retread", "revisit"),
        ("rebase", "--to", "1.0", "--dry-run"),
    ]:
        res = one_patch.run(*args)
        assert res.returncode in (0, 1), (args, res.stdout, res.stderr)
        assert "Traceback" not in res.stderr
        assert snapshot(one_patch.root) == before, args
    assert not (one_patch.root / ".patchtool").exists()


def test_state_ignores_itself(one_patch: Demo) -> None:
    """What a stopped command leaves in .patchtool/ never shows in `git status`."""
    from patchtool.project import journal

    commit_all(one_patch.root)
    journal.commit(one_patch.root, {"patches/0001-greet.patch": "x\n"})
    (one_patch.root / ".patchtool").mkdir(exist_ok=True)
    from patchtool.project import statedir

    statedir.ensure(one_patch.root)
    (one_patch.root / ".patchtool" / "rebase").mkdir()
    (one_patch.root / ".patchtool" / "rebase" / "state.json").write_text("{}")
    status = git(one_patch.root, "status", "--porcelain", "--ignored=no")
    assert ".patchtool" not in status
    shutil.rmtree(one_patch.root / ".patchtool")

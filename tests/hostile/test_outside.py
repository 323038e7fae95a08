"""Nothing outside the repository and the cache is written, deleted or read, whatever the repository
holds: names from its files are checked types, and every write goes through ``fsroot`` beneath its
root without following a link. Each case keeps a decoy directory beside the repository and checks
it is byte-identical after the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import Demo
from helpers import git, snapshot


def decoy(demo: Demo) -> Path:
    """A directory outside the repository and the cache, with a file an attack could aim at."""
    path = demo.root.parent / "decoy"
    path.mkdir(exist_ok=True)
    (path / "x-1.0.tar.gz").write_bytes(b"precious\n")
    (path / "keep").mkdir(exist_ok=True)
    (path / "keep" / "file").write_text("keep me\n")
    return path


def run(demo: Demo, *args: str) -> tuple[int, dict[str, Any]]:
    res = demo.run(*args, "--json")
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, json.loads(res.stdout)


def sdist_pin(demo: Demo, distribution: str, filename: str) -> None:
    pin = demo.root / "upstream-pins" / "demo-1.0.toml"
    text = pin.read_text().replace('distribution = "demo"', f'distribution = "{distribution}"')
    text = text.replace(f'filename = "{demo.wheel.name}"', f'filename = "{filename}"')
    pin.write_text(text + f'url = "{demo.index.url[: -len("/simple")]}/files/{demo.wheel.name}"\n')


@pytest.mark.parametrize(
    ("distribution", "filename", "key", "message"),
    [
        (
            "../../../decoy/x",
            "../../../decoy/x-1.0.tar.gz",
            "artifact.distribution",
            "'../../../decoy/x' is not a distribution name (letters, digits, '.', '_', '-', starting and ending with a "
            "letter or digit)",
        ),
        (
            "x",
            "../../../decoy/x-1.0.tar.gz",
            "artifact.filename",
            "'../../../decoy/x-1.0.tar.gz' is a path, not a file name; a release file is named by one plain file name",
        ),
        ("x", "..-1.0.tar.gz", "artifact.filename", "'..-1.0.tar.gz' is neither a wheel nor an sdist file name"),
    ],
)
def test_an_sdist_name_that_is_a_path_is_refused(
    one_patch: Demo, distribution: str, filename: str, key: str, message: str
) -> None:
    outside = decoy(one_patch)
    sdist_pin(one_patch, distribution, filename)
    before = snapshot(one_patch.root.parent)
    for command in ("status", "check", "apply"):
        code, out = run(one_patch, command)
        assert code == 1, (command, out)
        problems = out["data"]["problems"] if command == "check" else out["errors"]
        found = [p for p in problems if p.get("key") == key]
        assert found and found[0]["message"] == message, problems
        assert found[0]["file"] == "upstream-pins/demo-1.0.toml"
    assert snapshot(one_patch.root.parent) == before
    assert (outside / "x-1.0.tar.gz").read_bytes() == b"precious\n"


@pytest.mark.parametrize(
    ("link", "command"),
    [
        ("build", ("apply",)),
        ("dist", ("build",)),
        ("work", ("checkout",)),
    ],
)
def test_a_committed_link_for_an_output_directory_is_refused(
    one_patch: Demo, link: str, command: tuple[str, ...]
) -> None:
    outside = decoy(one_patch)
    (one_patch.root / link).symlink_to(outside)
    # a stale tree of a killed apply, as the sweep would find it: it must survive too
    (outside / ".demo-1.0.patchtool-0000").mkdir()
    (outside / ".demo-1.0.patchtool-0000" / "f").write_text("keep\n")
    before = snapshot(outside)
    code, out = run(one_patch, *command)
    assert code == 1, out
    error = out["errors"][0]
    assert (error["file"], error["message"]) == (
        link,
        f"is a symbolic link; patchtool writes only into real directories beneath {one_patch.root}",
    )
    assert snapshot(outside) == before
    assert sorted(p.name for p in outside.iterdir()) == [".demo-1.0.patchtool-0000", "keep", "x-1.0.tar.gz"]


@pytest.mark.parametrize(
    ("link", "command"),
    [
        ("build", ("apply", "--into", "build/mytree")),
        ("dist", ("build", "--out", "dist/x")),
        ("debian", ("export", "--quilt", "debian/patches")),
    ],
)
def test_an_output_named_inside_the_repository_follows_no_committed_link(
    one_patch: Demo, link: str, command: tuple[str, ...]
) -> None:
    """Found by an attack: the default outputs refused a committed link, but a path the user typed
    under it (``--into build/mytree``) was followed out of the repository."""
    outside = decoy(one_patch)
    (one_patch.root / link).symlink_to(outside)
    before = snapshot(outside)
    code, out = run(one_patch, *command)
    assert code == 2, out
    error = out["errors"][0]
    assert error["file"] == link
    assert error["message"] == (
        f"{command[-1]} lies through {link}, a symbolic link in the repository; patchtool writes nothing through one"
    )
    assert snapshot(outside) == before
    assert sorted(p.name for p in outside.iterdir()) == ["keep", "x-1.0.tar.gz"]


@pytest.mark.parametrize("target", ["patchset.toml", "patches/0001-greet.patch", "upstream-pins/demo-1.0.toml"])
@pytest.mark.parametrize(
    "command", [("scan", "--versions", "1.0", "--html"), ("rebase", "--to", "1.0", "--dry-run", "--report")]
)
def test_a_report_never_replaces_a_series_file(one_patch: Demo, command: tuple[str, ...], target: str) -> None:
    before = snapshot(one_patch.root.parent)
    code, out = run(one_patch, *command, target)
    assert code == 2, out
    assert out["errors"][0]["message"] == (
        f"{target} is {target} of the patch repository; a report never replaces the series"
    )
    assert snapshot(one_patch.root.parent) == before


@pytest.mark.parametrize("dest", [".", ".git", ".patchtool", "patches", "elsewhere"])
def test_a_quilt_export_never_writes_into_the_series_git_or_state(one_patch: Demo, dest: str) -> None:
    """Found by an attack: ``export --quilt . --force`` rewrote the tracked patches/*.patch with
    DEP-3 headers and ``--quilt .git --force`` wrote .git/patches; the report files' rule holds."""
    git(one_patch.root, "init", "-q")
    (one_patch.root / ".patchtool").mkdir()
    (one_patch.root.parent / "elsewhere").symlink_to(one_patch.root)  # a link outside, to the repository
    named = str(one_patch.root.parent / dest) if dest == "elsewhere" else dest
    before = snapshot(one_patch.root.parent)
    code, out = run(one_patch, "export", "--quilt", named, "--force")
    assert code == 2, out
    rel = "patches" if dest in (".", "elsewhere") else f"{dest}/patches"
    assert out["errors"][0]["message"] == (
        f"--quilt {named}: it would write {rel}/ in the patch repository; "
        "export --quilt never writes into the series, .git/ or .patchtool/"
    )
    assert out["errors"][0]["hint"] == "export into a directory of its own, e.g. debian/ or one outside the repository"
    assert snapshot(one_patch.root.parent) == before


def test_a_quilt_export_never_writes_into_a_checkout(one_patch: Demo, tmp_path: Path) -> None:
    code, out = run(one_patch, "checkout", "--path", str(tmp_path / "wt"))
    assert code == 0, out
    before = snapshot(tmp_path)
    for dest in (tmp_path / "wt", tmp_path / "wt" / "python"):
        code, out = run(one_patch, "export", "--quilt", str(dest), "--force")
        assert code == 2, out
        assert out["errors"][0]["message"] == (
            f"--quilt {dest}: it would write into the checkout worktree {tmp_path / 'wt'}; "
            "export --quilt never writes into a checkout"
        )
    assert snapshot(tmp_path) == before
    code, out = run(one_patch, "export", "--quilt", str(tmp_path / "debian"))
    assert code == 0, out


def test_a_report_is_not_written_over_a_fifo_or_through_a_link(one_patch: Demo) -> None:
    import os

    outside = decoy(one_patch)
    os.mkfifo(one_patch.root / "pipe.html")
    (one_patch.root / "link.html").symlink_to(outside / "x-1.0.tar.gz")
    before = snapshot(one_patch.root.parent)
    code, out = run(one_patch, "scan", "--versions", "1.0", "--html", "pipe.html")
    assert code == 2, out
    assert out["errors"][0]["message"] == (
        "pipe.html is a named pipe (FIFO), not a regular file; a report is written only to a regular file or a new one"
    )
    code, out = run(one_patch, "scan", "--versions", "1.0", "--html", "link.html")
    assert code == 2, out
    assert out["errors"][0]["message"] == (
        "link.html is a symbolic link in the repository; patchtool writes nothing through one"
    )
    assert snapshot(one_patch.root.parent) == before


def test_a_quilt_series_that_links_outside_is_not_read(one_patch: Demo, tmp_path: Path) -> None:
    outside = decoy(one_patch)
    (outside / "secret").write_text("root:$6$secret-hash:19000:0:99999:7:::\n")
    quilt = tmp_path / "quilt"
    quilt.mkdir()
    (quilt / "series").symlink_to(outside / "secret")
    before = snapshot(one_patch.root.parent)
    res = one_patch.run("import", str(quilt), "--json")
    assert res.returncode == 1, res.stdout
    assert "secret-hash" not in res.stdout + res.stderr and "Traceback" not in res.stderr
    error = json.loads(res.stdout)["errors"][0]
    assert (error["file"], error["message"]) == (
        "series",
        "is a symbolic link (it could lead outside the repository; patchtool follows none)",
    )
    assert snapshot(one_patch.root.parent) == before


def test_a_committed_gpu_results_link_lists_nothing_outside(one_patch: Demo) -> None:
    """Found by an attack: ``gpu-results -> /outside`` made check and status print the names of the
    ``*.json`` files there."""
    outside = decoy(one_patch)
    (outside / "private-name.json").write_text("{}")
    (one_patch.root / "gpu-results").symlink_to(outside)
    for command in ("check", "status"):
        res = one_patch.run(command, "--json")
        assert "private-name" not in res.stdout + res.stderr, res.stdout
        assert "Traceback" not in res.stderr
    res = one_patch.run("check", "--json")
    problems = json.loads(res.stdout)["data"]["problems"]
    assert [p["message"] for p in problems if p.get("file") == "gpu-results"] == [
        "is a symbolic link; patchtool reads results only from a real directory inside the repository"
    ]


@pytest.mark.parametrize(
    "where",
    [
        *(".git/x", ".GIT/wt", "python/.Git/wt", "sub/.git./wt", "elsewhere.git/wt"),
        *("cache", "bare", "history", "link-head", "commondir"),
    ],
)
def test_checkout_path_inside_a_git_directory_is_refused(one_patch: Demo, tmp_path: Path, where: str) -> None:
    """git would put a worktree's files among the repository's own (found by issue 29); an attack
    found a bare repository's (patchtool's own history cache, any `*.git`) still open."""
    root = one_patch.root
    git(root, "init", "-q")
    if where in ("bare", "history", "link-head"):
        bare = tmp_path / "mirror.git" if where != "history" else one_patch.cache / "history" / "0123abcd.git"
        git(tmp_path, "init", "-q", "--bare", str(bare))
        if where == "link-head":  # git takes a HEAD that is a link to a ref (the second attack)
            (bare / "HEAD").unlink()
            (bare / "HEAD").symlink_to("refs/heads/unborn")
        path = bare / "refs" / "heads" / "wt"
        message = f"{path} lies inside the git directory {bare}"
    elif where == "commondir":  # a linked worktree's git directory: HEAD, and where the rest is
        git(tmp_path, "init", "-q", "--bare", str(tmp_path / "common.git"))
        linked = tmp_path / "linked"
        linked.mkdir()
        (linked / "HEAD").write_text("ref: refs/heads/main\n")
        (linked / "commondir").write_text(f"{tmp_path / 'common.git'}\n")
        path = linked / "hooks2"
        message = f"{path} lies inside the git directory {linked}"
    elif where == "elsewhere.git/wt":
        # the repository's .git is a `gitdir:` file: its git directory is found where the file says
        git(root, "init", "-q", f"--separate-git-dir={tmp_path / 'elsewhere.git'}")
        path = tmp_path / where
        message = f"{path} lies inside the git directory {tmp_path / 'elsewhere.git'}"
    elif where == "cache":
        assert run(one_patch, "check")[0] == 0  # the cache's repository exists
        path = one_patch.cache / "upstream.git" / "wt"
        message = f"{path} lies inside the git directory {one_patch.cache / 'upstream.git'}"
    else:
        path = root / where
        message = f"{where} lies inside a .git directory"
    before = snapshot(tmp_path)
    # a path relative to the repository, where the command runs, or an absolute one
    code, out = run(one_patch, "checkout", "--path", where if message.startswith(where) else str(path))
    assert code == 2, out
    assert out["errors"][0]["message"] == f"{message}; a checkout's worktree goes outside every git directory"
    assert snapshot(tmp_path) == before and not path.exists()

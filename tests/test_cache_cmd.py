"""`patchtool cache` and `cache prune`: what the shared cache holds, and removing what no pin uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_run import in_process
from conftest import Demo
from helpers import git, import_tag, snapshot
from test_pin_commands import add_release


def shown(demo: Demo, *args: str) -> dict:  # type: ignore[type-arg]
    res = demo.run("cache", *args, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)["data"]  # type: ignore[no-any-return]


def test_cache_shows_releases_who_uses_them_and_its_size(one_patch: Demo) -> None:
    add_release(one_patch, "1.1")
    assert one_patch.run("pin", "add", "1.1").returncode == 0
    assert one_patch.run("check", "--pin", "demo-1.1").returncode == 0
    assert one_patch.run("apply").returncode == 0
    data = shown(one_patch)
    releases = {r["version"]: r for r in data["releases"]}
    assert set(releases) == {"1.0", "1.1"} and releases["1.1"]["filename"] == "demo-1.1-py3-none-any.whl"
    assert releases["1.0"]["used_by"] == [f"{one_patch.root.resolve()}: demo-1.0"]
    assert releases["1.1"]["download_bytes"] > 0 and data["size_bytes"] > releases["1.1"]["download_bytes"]
    assert data["objects"]["count"] + data["objects"]["in-pack"] > 0
    text = one_patch.run("cache").stdout
    assert "artifact 1.1: demo-1.1-py3-none-any.whl" in text and "objects:" in text


def test_prune_removes_what_no_pin_uses_and_keeps_what_a_ref_reaches(one_patch: Demo) -> None:
    v11 = add_release(one_patch, "1.1")
    tag10, tag11 = import_tag(one_patch.wheel), import_tag(v11, version="1.1")
    assert one_patch.run("pin", "add", "1.1").returncode == 0
    assert one_patch.run("check", "--pin", "demo-1.1").returncode == 0
    assert one_patch.run("pin", "remove", "demo-1.1").returncode == 0
    assert one_patch.run("apply").returncode == 0
    cache_git = one_patch.cache / "upstream.git"
    download = one_patch.cache / "downloads"
    wheel = next(download.glob("*/demo-1.1-py3-none-any.whl"))
    import_commit = git(cache_git, "rev-parse", f"refs/tags/{tag11}").strip()
    # what a running rebase holds: a ref of this project's namespace reaching the import's commit
    from patchtool.upstream.namespaces import replay_ref

    git(cache_git, "update-ref", replay_ref(one_patch.root), import_commit)

    dry = shown(one_patch, "prune", "--dry-run")
    assert dry["dry_run"] is True and dry["removed"] == [f"refs/tags/{tag11}", str(wheel.relative_to(one_patch.cache))]
    assert wheel.is_file() and git(cache_git, "tag", "-l").split() == [tag10, tag11]

    done = shown(one_patch, "prune", "--now")
    assert done["removed"] == dry["removed"] and not wheel.exists() and done["freed_bytes"] > 0
    assert git(cache_git, "tag", "-l").split() == [tag10]
    git(cache_git, "cat-file", "-e", f"{import_commit}^{{tree}}")  # a ref reaches it: gc kept it
    assert done["objects"]["count"] == 0  # packed; nothing loose left
    assert one_patch.run("apply", "--force").returncode == 0  # the pin in use still works from the cache
    git(cache_git, "update-ref", "-d", replay_ref(one_patch.root))
    shown(one_patch, "prune", "--now")
    with pytest.raises(RuntimeError):  # nothing reaches it now: gone
        git(cache_git, "cat-file", "-e", f"{import_commit}^{{tree}}")
    res = one_patch.run("cache", "prune", "--dry-run", "--json")
    assert json.loads(res.stdout)["data"]["removed"] == []


def test_cache_refuses_an_unknown_action(one_patch: Demo, tmp_path: Path) -> None:
    res = one_patch.run("cache", "clean")
    assert res.returncode == 2 and "give show (the default), prune or clear" in res.stderr


def test_prune_removes_the_temporary_directories_of_commands_that_are_gone(one_patch: Demo, tmp_path: Path) -> None:
    """A killed command leaves its private temporary directory (``<cache>/tmp/<pid>-*``) behind:
    prune removes those whose process is gone, a link among them itself, never what it names."""
    assert one_patch.run("status").returncode == 0
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()  # its pid names no process now
    tmp = one_patch.cache / "tmp"
    (tmp / f"{gone.pid}-abcd" / "sub").mkdir(parents=True)
    (tmp / f"{gone.pid}-abcd" / "sub" / "left.bin").write_bytes(b"x" * 100)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("mine\n")
    (tmp / f"{gone.pid}-link").symlink_to(outside, target_is_directory=True)
    (tmp / f"{os.getpid()}-live").mkdir()  # this test's own process: alive
    (tmp / "not-a-command").mkdir()  # nothing patchtool names so: left alone
    before = snapshot(outside)

    dry = shown(one_patch, "prune", "--dry-run")
    assert dry["removed"] == [f"tmp/{gone.pid}-abcd", f"tmp/{gone.pid}-link"] and dry["freed_bytes"] >= 100
    assert (tmp / f"{gone.pid}-abcd" / "sub" / "left.bin").is_file()
    done = shown(one_patch, "prune")
    assert done["removed"] == dry["removed"]
    assert sorted(p.name for p in tmp.iterdir()) == [f"{os.getpid()}-live", "not-a-command"]
    assert snapshot(outside) == before and (outside / "precious").read_text() == "mine\n"


def test_unexported_checkout_commits_are_named_and_never_cleared_silently(one_patch: Demo) -> None:
    """A checkout's commits no export wrote live only in the cache's repository: clearing the cache
    lost them silently, and neither status nor rebase said so (found by issue 29)."""
    res = one_patch.run("checkout", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    wt = Path(json.loads(res.stdout)["data"]["worktree"])
    # nothing unexported yet: status says nothing, clear needs no --force (checked last)
    assert json.loads(one_patch.run("status", "--json").stdout)["data"]["unexported"] == []
    (wt / "python/demo/util.py").write_text("def helper():\n    return 3\n")
    git(wt, "commit", "-qam", "util: three")
    commit = git(wt, "rev-parse", "HEAD").strip()
    expected = [{"branch": "series", "root": str(one_patch.root.resolve()), "worktree": str(wt)}]

    status = one_patch.run("status", "--json")
    got = json.loads(status.stdout)["data"]["unexported"]
    assert [{k: u[k] for k in ("branch", "root", "worktree")} for u in got] == expected
    assert got[0]["commits"] == [{"commit": commit, "subject": "util: three"}]
    text = " ".join(one_patch.run("status").stdout.split())  # the table wraps to the terminal
    assert f"unexported: checkout branch 'series' of {one_patch.root.resolve()} (worktree {wt}) holds 1 " in text
    assert f"{commit[:12]} util: three" in text
    assert "`patchtool export` writes them into the series" in one_patch.run("status", "--long").stdout

    add_release(one_patch, "1.1")
    assert one_patch.run("pin", "add", "1.1").returncode == 0
    rebase = one_patch.run("rebase", "--dry-run", "--to", "1.1")
    assert rebase.returncode == 0, rebase.stdout + rebase.stderr
    assert rebase.stdout.startswith(
        "warning: the rebase moves the series as last exported, not these commits:\n"
        f"unexported: checkout branch 'series' of {one_patch.root.resolve()} (worktree {wt}) holds 1 unexported "
        "commit(s), kept only in the cache\n"
    )
    rebase = one_patch.run("rebase", "--dry-run", "--to", "1.1", "--json")
    assert rebase.returncode == 0, rebase.stdout + rebase.stderr
    warned = json.loads(rebase.stdout)["data"]["unexported"]
    assert [{k: u[k] for k in ("branch", "root", "worktree")} for u in warned] == expected
    assert warned[0]["commits"] == [{"commit": commit, "subject": "util: three"}]

    before = snapshot(one_patch.cache, one_patch.root)
    for args in (["cache", "clear"], ["cache", "clear", "--json"]):
        res = one_patch.run(*args)
        assert res.returncode == 2, res.stdout + res.stderr
    error = json.loads(res.stdout)["errors"][0]
    assert error["message"] == (
        f"the cache holds commits no patch file carries: checkout branch 'series' of {one_patch.root.resolve()} "
        f"(worktree {wt}) holds 1 unexported commit(s); clearing it would lose them"
    )
    assert "`patchtool cache clear --force` discards them" in error["hint"]
    assert snapshot(one_patch.cache, one_patch.root) == before

    # prune keeps every checkout branch: the commits stay
    assert one_patch.run("cache", "prune", "--now").returncode == 0
    assert git(one_patch.cache / "upstream.git", "cat-file", "-t", commit).strip() == "commit"

    res = one_patch.run("cache", "clear", "--force", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads(res.stdout)["data"]
    assert "upstream.git" in data["removed"] and data["discarded"][0]["commits"][0]["commit"] == commit
    assert not (one_patch.cache / "upstream.git").exists()
    # a cache with nothing unexported clears without --force
    assert one_patch.run("check").returncode == 0
    assert one_patch.run("cache", "clear").returncode == 0


def _checked_out(demo: Demo) -> Path:
    res = demo.run("checkout", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    return Path(json.loads(res.stdout)["data"]["worktree"])


def _refused_clear(demo: Demo, described: str) -> None:
    """``cache clear`` refuses (exit 2) naming ``described`` and --force, and changes nothing."""
    before = snapshot(demo.cache, demo.root)
    res = demo.run("cache", "clear", "--json")
    assert res.returncode == 2, res.stdout + res.stderr
    error = json.loads(res.stdout)["errors"][0]
    assert error["message"] == (
        f"the cache holds commits no patch file carries: {described}; clearing it would lose them"
    )
    assert "`patchtool cache clear --force` discards them" in error["hint"]
    assert snapshot(demo.cache, demo.root) == before


@pytest.mark.parametrize("kind", ["detached-head", "branch", "stash", "tag", "ref"])
def test_work_beside_the_checkout_branch_is_named_and_never_cleared_silently(one_patch: Demo, kind: str) -> None:
    """A commit on a detached HEAD (as an interrupted `git rebase -i` leaves it), on a branch of
    the user's own, in a stash or under a tag lives only in the cache too: status named none of
    it and `cache clear` deleted it with exit 0 (found by an attack, issue 29)."""
    wt = _checked_out(one_patch)
    if kind == "detached-head":
        git(wt, "checkout", "-q", "--detach")
    elif kind == "branch":
        git(wt, "switch", "-q", "-c", "mywork")
    (wt / "python/demo/util.py").write_text("def helper():\n    return 3\n")
    if kind == "stash":
        git(wt, "stash", "-q")
        held = git(wt, "rev-parse", "stash").strip()
    else:
        git(wt, "commit", "-qam", "util: three")
        held = git(wt, "rev-parse", "HEAD").strip()
    if kind == "tag":
        git(wt, "tag", "keep")
        git(wt, "reset", "-q", "--hard", "HEAD~1")
    if kind == "ref":  # a worktree's own ref, which for-each-ref in the cache does not list (an attack)
        git(wt, "update-ref", "refs/worktree/keep", "HEAD")
        git(wt, "reset", "-q", "--hard", "HEAD~1")
    admin = Path(git(wt, "rev-parse", "--absolute-git-dir").strip()).name
    root = one_patch.root.resolve()
    ref, described = {
        "ref": (f"worktrees/{admin}/refs/worktree/keep", f"ref worktrees/{admin}/refs/worktree/keep"),
        "detached-head": ("HEAD", f"the detached HEAD of worktree {wt} of {root}"),
        "branch": ("refs/heads/mywork", f"branch 'mywork' of {root} (worktree {wt})"),
        "stash": ("stash@{0}", "stash entry stash@{0}"),
        "tag": ("refs/tags/keep", "tag 'keep'"),
    }[kind]
    count = 2 if kind == "stash" else 1  # a stash is its commit and the index's

    got = json.loads(one_patch.run("status", "--json").stdout)["data"]["unexported"]
    assert [(u["kind"], u["ref"], len(u["commits"])) for u in got] == [(kind, ref, count)]
    assert got[0]["commits"][-1]["commit"] == held
    text = " ".join(one_patch.run("status").stdout.split())
    assert f"unexported: {described} holds {count} unexported commit(s), kept only in the cache" in text

    _refused_clear(one_patch, f"{described} holds {count} unexported commit(s)")
    assert git(one_patch.cache / "upstream.git", "cat-file", "-t", held).strip() == "commit"
    res = one_patch.run("cache", "clear", "--force", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["data"]["discarded"][0]["commits"][-1]["commit"] == held


def test_an_export_the_project_discarded_protects_its_commits_again(one_patch: Demo) -> None:
    """Whether a commit is exported is read from the project's patch files, not from what the
    cache recorded at the export: an export undone in the project (`git checkout -- .`) left its
    commits unprotected, and `cache clear` deleted them (found by an attack, issue 29)."""
    wt = _checked_out(one_patch)
    (wt / "python/demo/util.py").write_text("def helper():\n    return 3\n")
    git(wt, "commit", "-qam", "util: three")
    commit = git(wt, "rev-parse", "HEAD").strip()
    series = {p: p.read_bytes() for p in [one_patch.root / "patchset.toml", *(one_patch.root / "patches").iterdir()]}
    res = one_patch.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(one_patch.run("status", "--json").stdout)["data"]["unexported"] == []
    new = [p for p in (one_patch.root / "patches").iterdir() if p not in series]
    for path, data in series.items():  # the export undone, its new patch file left untracked
        path.write_bytes(data)

    got = json.loads(one_patch.run("status", "--json").stdout)["data"]["unexported"]
    assert new and [(u["kind"], u["branch"]) for u in got] == [("checkout-branch", "series")]
    assert [c["subject"] for c in got[0]["commits"]] == ["util: three"]
    wt_now = git(wt, "rev-parse", "HEAD").strip()  # the export gave the commit its trailer
    assert wt_now != commit and got[0]["commits"][0]["commit"] == wt_now
    _refused_clear(
        one_patch,
        f"checkout branch 'series' of {one_patch.root.resolve()} (worktree {wt}) holds 1 unexported commit(s)",
    )


@pytest.mark.parametrize("holder", ["head", "ref"])
def test_prune_refuses_work_only_a_removed_worktree_holds(one_patch: Demo, holder: str) -> None:
    """A worktree whose directory was removed is forgotten by `cache prune`, and with it the
    commits only its detached HEAD held, or only its own refs (refs/worktree/*: found by the second
    attack, issue 29): prune refuses unless --force."""
    wt = _checked_out(one_patch)
    git(wt, "checkout", "-q", "--detach")
    (wt / "python/demo/util.py").write_text("def helper():\n    return 3\n")
    git(wt, "commit", "-qam", "util: three")
    held = git(wt, "rev-parse", "HEAD").strip()
    admin = Path(git(wt, "rev-parse", "--absolute-git-dir").strip()).name
    if holder == "ref":
        git(wt, "update-ref", "refs/worktree/keep", "HEAD")
        git(wt, "checkout", "-q", "HEAD~1")
    subprocess.run(["rm", "-rf", str(wt)], check=True)
    before = snapshot(one_patch.cache, one_patch.root)
    res = one_patch.run("cache", "prune", "--now", "--json")
    assert res.returncode == 2, res.stdout + res.stderr
    error = json.loads(res.stdout)["errors"][0]
    holds = (
        f"the detached HEAD of worktree {wt}, gone, of {one_patch.root.resolve()}"
        if holder == "head"
        else f"ref worktrees/{admin}/refs/worktree/keep"
    )
    assert error["message"] == (
        f"the cache holds commits no patch file carries that only a removed worktree keeps: {holds} holds 1 "
        "unexported commit(s); pruning would forget that worktree and lose them"
    )
    assert "`patchtool cache prune --force` discards them" in error["hint"]
    assert snapshot(one_patch.cache, one_patch.root) == before
    assert shown(one_patch, "prune", "--dry-run")["dry_run"] is True
    assert one_patch.run("cache", "prune", "--now", "--force").returncode == 0
    res = subprocess.run(
        ["git", "--git-dir", str(one_patch.cache / "upstream.git"), "cat-file", "-e", held], check=False
    )
    assert res.returncode != 0


def test_a_project_whose_checkout_branch_has_a_slash_is_known_to_the_cache(one_patch: Demo, tmp_path: Path) -> None:
    """A checkout's record names its project, so that the cache keeps what that project's pins use
    when another project prunes it; a branch named ``feature/x`` put its record one directory
    deeper, where the cache did not look (noticed while moving the editing commands)."""
    import shutil

    assert one_patch.run("checkout", "--branch", "feature/x").returncode == 0
    other = tmp_path / "other"
    shutil.copytree(one_patch.root, other, ignore=shutil.ignore_patterns("work", ".patchtool"))
    res = in_process(["--json", "cache"], cwd=other, env=one_patch.environment())
    assert res.returncode == 0, res.stdout + res.stderr
    [release] = json.loads(res.stdout)["data"]["releases"]
    assert release["used_by"] == [f"{root.resolve()}: demo-1.0" for root in (other, one_patch.root)]

"""checkout / export / new under hostile conditions: clones sharing a cache, a checkout older
than the series, commits without a trailer, no git identity, branch names that are not names.

Each test is a bug that was found: it fails on the code before the fix, asserts the message the
user gets, and that a refused command changed nothing on disk.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import UPSTREAM_FILES, Demo, edit
from helpers import git, make_wheel, snapshot
from test_editing import checked_out, three

REGISTRY = """schema = 1

[[rejected]]
id = "tbo"
title = "Two-batch overlap"
tried = "--enable-two-batch-overlap"
verdict = "rejected"
reason = "measured worse"
revisit = "when decode TBO is wired"

[[rejected.evidence]]
metric = "throughput"
change = "worse"
source = "report"

[[rejected.knobs]]
type = "flag"
name = "--enable-two-batch-overlap"
"""


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


# -- 2. a checkout older than the series ----------------------------------------------------------


def test_export_from_a_stale_checkout_is_refused_naming_what_changed(demo: Demo) -> None:
    three(demo)
    wt = checked_out(demo)
    util = demo.root / "patches/0002-util.patch"
    util.write_text(util.read_text().replace("Subject: [PATCH] util: two", "Subject: [PATCH] util: two (reviewed)"))
    assert demo.run("drop", "cap", "--reason", "upstream took it").returncode == 0
    git(wt, "commit", "-q", "--allow-empty", "-m", "later work")
    before = snapshot(demo.root)
    res = demo.run("export")
    assert res.returncode == 2, res.stdout + res.stderr
    assert (
        "the series changed since branch 'series' was checked out: dropped cap; edited util "
        "(patches/0002-util.patch). Exporting that checkout would undo it"
    ) in res.stderr
    assert "`patchtool checkout --refresh` moves your commits onto the current series" in res.stderr
    assert snapshot(demo.root) == before


def test_a_damaged_checkout_record_is_no_record(demo: Demo) -> None:
    from patchtool.upstream.cache import Cache
    from patchtool.upstream.namespaces import CheckoutBranch

    three(demo)
    checked_out(demo)
    record = CheckoutBranch.of(demo.root, "series").record_path(Cache(demo.cache).repo)
    record.write_text('{"schema": 1, "pin": "demo-1.0", "base": "x", "patches": [{}]}')
    before = snapshot(demo.root)
    for command in (["export"], ["checkout", "--refresh"]):
        res = demo.run(*command)
        assert res.returncode == 2, res.stdout + res.stderr
        assert "no record of the series checkout branch 'series' was made from" in res.stderr
    assert snapshot(demo.root) == before


def test_a_checkout_record_reads_back_as_it_was_written() -> None:
    """Every key a record holds comes back: a stopped checkout's refresh under way too; a note of
    one with no stopped patch is no note."""
    from patchtool.upstream.namespaces import CheckoutRecord, Repairing

    data = {
        "schema": 1,
        "pin": "demo-1.0",
        "base": "b" * 40,
        "patches": [{"id": "cap", "file": "patches/0001-cap.patch", "sha256": "5" * 64, "commit": ""}],
        "stopped": "cap",
        "repairing": {"commit": "c" * 40, "sha256": "6" * 64},
    }
    record = CheckoutRecord.from_dict(data)
    assert record is not None and record.repairing == Repairing(commit="c" * 40, sha256="6" * 64)
    assert json.dumps({"schema": 1, **record.to_dict()}, sort_keys=True) == json.dumps(data, sort_keys=True)
    unstopped = CheckoutRecord.from_dict({**data, "stopped": None})
    assert unstopped is not None and unstopped.repairing is None
    assert CheckoutRecord.from_dict({**data, "patches": [{"id": "cap"}]}) is None


def test_refresh_carries_your_commits_onto_the_current_series(demo: Demo) -> None:
    three(demo)
    wt = checked_out(demo)
    # yours: an amended last patch, and a new commit
    edit("python/demo/core.py", "len(queue) >= cap", "len(queue) >= cap + 0")(wt)
    git(wt, "commit", "-qa", "--amend", "--no-edit")
    (wt / "python/demo/extra_new.py").write_text("X = 1\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "extra: a new module")
    # the series': util edited in its patch file, greet dropped
    util = demo.root / "patches/0002-util.patch"
    util.write_text(util.read_text().replace("+    return 2", "+    return 20"))
    assert demo.run("drop", "greet", "--reason", "upstream took it").returncode == 0

    res = demo.run("checkout", "--refresh")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "left out greet (dropped from the series)" in res.stdout
    assert git(wt, "status", "--porcelain") == ""
    res = demo.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    files = patches(demo)
    assert "+    return 20" in files["0001-util.patch"]  # the series' edit survived
    assert "len(queue) >= cap + 0" in files["0002-cap.patch"]  # so did yours
    assert "+X = 1" in files["0003-extra-a-new-module.patch"]
    manifest = (demo.root / "patchset.toml").read_text()
    assert (
        manifest.count('id = "greet"') == 1
        and "TODO" not in manifest.split("[[dropped]]")[0].split('id = "extra-a-new-module"')[0]
    )
    assert 'reason = "upstream took it"' in manifest


def test_refresh_keeps_a_patch_the_series_lost_without_a_drop(demo: Demo) -> None:
    # the patch repository is a git repository; `git stash -u` there takes back an export that was
    # not committed yet: no patch was dropped, and the branch keeps the patch's commit
    three(demo)
    git(demo.root, "init", "-q")
    (demo.root / ".gitignore").write_text("work/\n.patchtool/\n")
    git(demo.root, "add", "-A")
    git(demo.root, "commit", "-qm", "three patches")
    wt = checked_out(demo)
    (wt / "python/demo/extra_new.py").write_text("X = 1\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "extra: a new module")
    assert demo.run("export").returncode == 0
    (wt / "python/demo/scratch.py").write_text("Y = 2\n")
    git(wt, "stash", "-u")
    git(demo.root, "stash", "-u")
    res = demo.run("checkout", "--refresh")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "dropped" not in res.stdout
    assert (
        "  kept extra-a-new-module: the series no longer has it and records no drop of it "
        "(did its entry go back with a `git stash` or `git checkout` of patchset.toml?)"
    ) in res.stdout
    assert "Patchtool-Id: extra-a-new-module" in git(wt, "log", "-1", "--format=%B")
    git(demo.root, "stash", "pop", "-q")
    res = demo.run("checkout", "--refresh")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "  series  extra-a-new-module" in res.stdout and "kept" not in res.stdout
    res = demo.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "unchanged extra-a-new-module" in res.stdout


def test_refresh_after_a_rebase_moves_the_checkout_onto_the_new_pin(demo: Demo) -> None:
    three(demo)
    wheel = make_wheel(
        demo.wheel.parent / "demo-1.1-py3-none-any.whl",
        "demo",
        "1.1",
        {**UPSTREAM_FILES, "demo/__init__.py": '__version__ = "1.1"\n'},
    )
    demo.index.add(wheel)
    wt = checked_out(demo)
    (wt / "python/demo/extra_new.py").write_text("X = 1\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "extra: a new module")
    res = demo.run("rebase", "--to", "1.1")
    assert res.returncode == 0, res.stdout + res.stderr
    rebased, before = patches(demo), snapshot(demo.root)
    res = demo.run("export")
    assert res.returncode == 2, res.stdout + res.stderr
    assert (
        "the series changed since branch 'series' was checked out: the pin is demo-1.1, the checkout was "
        "made on demo-1.0"
    ) in res.stderr
    assert snapshot(demo.root) == before
    res = demo.run("checkout", "--refresh")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (wt / "python/demo/__init__.py").read_text() == '__version__ = "1.1"\n'
    res = demo.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    assert patches(demo) == {**rebased, "0004-extra-a-new-module.patch": patches(demo)["0004-extra-a-new-module.patch"]}


def test_refresh_after_an_import_keeps_the_imported_patch(demo: Demo, tmp_path: Path) -> None:
    three(demo)
    wt = checked_out(demo)
    (wt / "python/demo/extra_new.py").write_text("X = 1\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "extra: a new module")
    git(demo.work, "checkout", "-q", "-B", "y", "upstream")
    edit("python/demo/core.py", 'word = "bye"', 'word = "ciao"')(demo.work)
    git(demo.work, "commit", "-qam", "core: ciao")
    incoming = tmp_path / "ciao.patch"
    incoming.write_text(git(demo.work, "format-patch", "-1", "--stdout"))
    assert demo.run("import", str(incoming)).returncode == 0
    imported, before = patches(demo)["0004-core-ciao.patch"], snapshot(demo.root)
    res = demo.run("export")
    assert res.returncode == 2 and "checked out: added core-ciao. Exporting" in res.stderr
    assert snapshot(demo.root) == before
    assert demo.run("checkout", "--refresh").returncode == 0
    res = demo.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "unchanged core-ciao" in res.stdout and patches(demo)["0004-core-ciao.patch"] == imported
    assert "new       extra-a-new-module (patches/0005-extra-a-new-module.patch)" in res.stdout


def test_refresh_that_conflicts_changes_nothing(demo: Demo) -> None:
    three(demo)
    wt = checked_out(demo)
    commits = git(wt, "rev-list", "--reverse", "HEAD~3..HEAD").split()
    git(wt, "reset", "-q", "--hard", commits[1])  # at util: amend it, then put cap back
    edit("python/demo/util.py", "return 2", "return 22")(wt)
    git(wt, "commit", "-qa", "--amend", "--no-edit")
    git(wt, "cherry-pick", commits[2])
    util = demo.root / "patches/0002-util.patch"
    util.write_text(util.read_text().replace("+    return 2", "+    return 20"))
    before, tip = snapshot(demo.root, demo.cache / "upstream.git" / "refs"), head(wt)
    res = demo.run("checkout", "--refresh")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "your edit of patch util (commit " in res.stderr
    assert (
        "conflicts with the series' current version of it: CONFLICT (content): Merge conflict in "
        "python/demo/util.py; nothing was changed"
    ) in res.stderr
    assert snapshot(demo.root, demo.cache / "upstream.git" / "refs") == before and head(wt) == tip


def test_a_dropped_patch_comes_back_only_when_asked_for(demo: Demo) -> None:
    three(demo)
    manifest = demo.root / "patchset.toml"
    text = manifest.read_text().replace('pin = "demo-1.0"\n', 'pin = "demo-1.0"\nregistry = "retread.toml"\n')
    evidence = '\n[[patch.evidence]]\nmetric = "latency"\nbefore = 10\nafter = 12\nsource = "bench run 7"\n'
    at = text.index('[[patch]]\nid = "cap"')
    manifest.write_text(text[:at] + evidence.lstrip("\n") + "\n" + text[at:])
    (demo.root / "retread.toml").write_text(REGISTRY)
    wt = checked_out(demo)
    commits = git(wt, "rev-list", "--reverse", "HEAD~3..HEAD").split()
    git(wt, "reset", "-q", "--hard", commits[1])
    edit("python/demo/util.py", "return 2", "return 22")(wt)
    git(wt, "commit", "-qa", "--amend", "--no-edit")  # the user's edit of util
    git(wt, "cherry-pick", commits[2])
    res = demo.run("drop", "util", "--reason", "slower on the bench", "--rejected", "--pattern", r"def helper\(")
    assert res.returncode == 0, res.stdout + res.stderr
    assert demo.run("checkout", "--refresh").returncode == 0
    before = snapshot(demo.root)
    res = demo.run("export")
    assert res.returncode == 2, res.stdout + res.stderr
    assert (
        "carries Patchtool-Id: util, a patch dropped from the series (slower on the bench); refusing to "
        "bring it back unasked"
    ) in res.stderr
    assert "`patchtool export --revive util`" in res.stderr
    assert snapshot(demo.root) == before
    res = demo.run("export", "--revive", "util")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "revived   util" in res.stdout
    text = manifest.read_text()
    assert "[[dropped]]" not in text and 'metric = "latency"' in text and "TODO" not in text
    assert not (demo.root / "patches/dropped").exists() or not list((demo.root / "patches/dropped").iterdir())
    assert "return 22" in (demo.root / "patches/0002-util.patch").read_text()


def test_the_checkout_branch_keeps_a_reflog(demo: Demo) -> None:
    three(demo)
    wt = checked_out(demo)
    lost = head(wt)
    git(wt, "reset", "-q", "--hard", "HEAD~1")
    branch = git(wt, "symbolic-ref", "HEAD").strip()
    assert lost in git(wt, "reflog", "show", "--format=%H", branch).split()


# -- 3. plain commits keep the metadata written for them -------------------------------------------


def test_a_plain_commit_keeps_its_id_and_metadata(demo: Demo) -> None:
    three(demo)
    wt = checked_out(demo)
    (wt / "python/demo/util.py").write_text("def helper():\n    return 2\n\n\ndef other():\n    return 5\n")
    git(wt, "commit", "-qam", "util: add other()")
    res = demo.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "gave util-add-other its Patchtool-Id trailer on the branch" in res.stdout
    assert "Patchtool-Id: util-add-other" in git(wt, "log", "-1", "--format=%B")
    assert git(wt, "status", "--porcelain") == ""
    assert git(wt, "log", "-1", "--format=%an <%ae>") == "Test Author <author@example.org>\n"
    exported = patches(demo)
    manifest = demo.root / "patchset.toml"
    filled = (
        manifest.read_text()
        .replace("TODO: who maintains it", "util-team")
        .replace("TODO: why the patch exists", "callers need other()")
        .replace("TODO: when to drop it", "never")
    )
    # the skeleton's defaults are chosen too: one changed, one kept by deleting its TODO comment
    filled = re.sub(r'applies_to = ">=0"  # TODO[^\n]*', 'applies_to = ">=1.0"', filled)
    filled = re.sub(r'(kind = "correctness")  # TODO[^\n]*', r"\1", filled)
    manifest.write_text(filled)
    res = demo.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "unchanged util-add-other" in res.stdout
    assert manifest.read_text() == filled and patches(demo) == exported
    assert demo.run("check").returncode == 0


def test_export_after_the_worktree_was_deleted_by_hand(demo: Demo) -> None:
    three(demo)
    wt = checked_out(demo)
    (wt / "python/demo/extra_new.py").write_text("X = 1\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "extra: a new module")
    branch = git(wt, "symbolic-ref", "HEAD").strip()
    shutil.rmtree(wt)  # git still lists the worktree until it is pruned
    res = demo.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "new       extra-a-new-module" in res.stdout
    assert "Patchtool-Id: extra-a-new-module" in git(demo.cache / "upstream.git", "log", "-1", "--format=%B", branch)


# -- 4. new commits as the user ---------------------------------------------------------------------


def test_new_makes_the_commit_as_the_user(demo: Demo, tmp_path: Path) -> None:
    three(demo)
    wt = checked_out(demo)
    config = tmp_path / "gitconfig"
    config.write_text("[user]\n\tname = Ada Lovelace\n\temail = ada@example.org\n")
    res = demo.run("new", "feature-x", env={"GIT_CONFIG_GLOBAL": str(config)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert (
        git(wt, "log", "-1", "--format=%an <%ae>|%cn <%ce>")
        == "Ada Lovelace <ada@example.org>|Ada Lovelace <ada@example.org>\n"
    )
    res = demo.run(
        "new",
        "feature-y",
        env={
            "GIT_CONFIG_GLOBAL": str(config),
            "GIT_AUTHOR_NAME": "Grace Hopper",
            "GIT_AUTHOR_EMAIL": "grace@example.org",
        },
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert (
        git(wt, "log", "-1", "--format=%an <%ae>|%cn <%ce>")
        == "Grace Hopper <grace@example.org>|Ada Lovelace <ada@example.org>\n"
    )


def test_new_without_a_git_identity_is_refused(demo: Demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    three(demo)
    wt = checked_out(demo)
    monkeypatch.delenv("EMAIL", raising=False)
    config = tmp_path / "gitconfig"
    config.write_text("[user]\n\tuseConfigOnly = true\n")
    before, tip = snapshot(demo.root), head(wt)
    res = demo.run("new", "feature-x", env={"GIT_CONFIG_GLOBAL": str(config)})
    assert res.returncode == 2, res.stdout + res.stderr
    assert "git does not know who you are, so it cannot make the commit:" in res.stderr
    assert "git config --global user.name" in res.stderr
    assert snapshot(demo.root) == before and head(wt) == tip


# -- 5. branch names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["checkout"], ["export"], ["new", "extra"], ["checkout", "--refresh"]])
@pytest.mark.parametrize("name", ["a..b", "a\nb", "a/.git", "../x", "x/", "a b", "x.lock", "a/../../b"])
def test_a_branch_name_that_is_not_one_is_refused(demo: Demo, command: list[str], name: str) -> None:
    three(demo)
    before = snapshot(demo.root, demo.cache)
    res = demo.run(*command, f"--branch={name}")
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{name!r} is not a usable branch name:" in res.stderr
    assert snapshot(demo.root, demo.cache) == before

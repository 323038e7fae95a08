"""Projects that share one cache: each upstream under a ref named by everything it is made from
(``upstream/refnames.py``), so two projects whose upstreams share a version number, or a tag,
never meet; and a cache an older patchtool named is never misread."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

from conftest import UPSTREAM_FILES, Demo, demo_pin
from helpers import Index, git, import_tag, make_wheel, sha256, snapshot


def project(demo: Demo, name: str, pin_name: str, pin: str) -> Demo:
    """Another project on ``demo``'s cache, with no patches, at the one pin ``pin``."""
    root = demo.root.with_name(name)
    (root / "patches").mkdir(parents=True)
    (root / "upstream-pins").mkdir()
    (root / "upstream-pins" / f"{pin_name}.toml").write_text(pin)
    (root / "patchset.toml").write_text(f'schema = 1\npin = "{pin_name}"\n')
    return dataclasses.replace(demo, root=root)


def tree(demo: Demo, into: Path) -> dict[str, str]:
    """What ``apply --into`` writes for ``demo``: path -> text."""
    res = demo.run("apply", "--into", str(into))
    assert res.returncode == 0, res.stdout + res.stderr
    return {
        str(p.relative_to(into)): p.read_text() for p in sorted(into.rglob("*")) if p.is_file() and p.name != ".git"
    }


def tags(demo: Demo) -> list[str]:
    return git(demo.cache / "upstream.git", "tag", "--list").split()


# -- two projects on one cache, one version number -------------------------------------------------


def other_project(demo: Demo) -> Demo:
    """A second project on ``demo``'s cache whose upstream, ``other``, is also at 1.0."""
    wheel = make_wheel(
        demo.wheel.parent / "other-1.0-py3-none-any.whl", "other", "1.0", {"other/__init__.py": "OTHER = 1\n"}
    )
    demo.index.add(wheel)
    pin = (
        demo_pin(demo.index, wheel)
        .replace('name = "demo"', 'name = "other"')
        .replace('distribution = "demo"', 'distribution = "other"')
        .replace('"demo/"', '"other/"')
        .replace('"python/demo/"', '"python/other/"')
    )
    assert sha256(wheel) in pin
    return dataclasses.replace(project(demo, "other-project", "other-1.0", pin), wheel=wheel)


def test_two_upstreams_at_one_version_share_a_cache(one_patch: Demo, tmp_path: Path) -> None:
    other = other_project(one_patch)
    for each in (one_patch, other, one_patch, other):
        res = each.run("status", "--json")
        assert res.returncode == 0, res.stdout + res.stderr
    assert tags(one_patch) == sorted(
        [import_tag(one_patch.wheel), import_tag(other.wheel, "other", prefix="other/ -> python/other/")]
    )
    assert tree(other, tmp_path / "other-tree") == {"python/other/__init__.py": "OTHER = 1\n"}
    ours = tree(one_patch, tmp_path / "demo-tree")
    assert set(ours) == {f"python/{p}" for p in UPSTREAM_FILES} and '"hi"' in ours["python/demo/core.py"]


def forked_project(demo: Demo, tmp_path: Path) -> Demo:
    """A second project on ``demo``'s cache whose upstream is another ``demo`` 1.0: the same
    distribution, version and file name, another file, from another index (a fork's). Its
    sha256 starts as ours does, so a cache that kept files by a prefix of it would mix them up."""
    (tmp_path / "fork").mkdir()
    for n in itertools.count():
        wheel = make_wheel(
            tmp_path / "fork" / demo.wheel.name, "demo", "1.0", {**UPSTREAM_FILES, "demo/fork.py": f"FORK = {n}\n"}
        )
        if sha256(wheel)[:2] == sha256(demo.wheel)[:2]:
            break
    assert sha256(wheel) != sha256(demo.wheel)
    index = Index(tmp_path / "fork")
    index.add(wheel)
    # its pin names the index's address, known once it serves: the test writes it then
    return dataclasses.replace(project(demo, "fork-project", "demo-1.0", ""), wheel=wheel, index=index)


def test_one_release_from_two_indexes_gives_each_project_its_own(one_patch: Demo, tmp_path: Path) -> None:
    fork = forked_project(one_patch, tmp_path)
    with fork.index.serve():
        (fork.root / "upstream-pins" / "demo-1.0.toml").write_text(demo_pin(fork.index, fork.wheel))
        for each in (one_patch, fork, one_patch, fork):
            res = each.run("--json", "status")
            assert res.returncode == 0, res.stdout + res.stderr
        forked = tree(fork, tmp_path / "fork-tree")
    ours = tree(one_patch, tmp_path / "demo-tree")  # the fork's index is gone: ours needs nothing of it
    assert forked["python/demo/fork.py"].startswith("FORK = ") and "python/demo/fork.py" not in ours
    assert '"hi"' in ours["python/demo/core.py"] and '"hello"' in forked["python/demo/core.py"]
    assert tags(one_patch) == sorted([import_tag(one_patch.wheel), import_tag(fork.wheel)])
    # each project's cache listing names only its own import as used
    used = {r["ref"]: r["used_by"] for r in json.loads(one_patch.run("cache", "--json").stdout)["data"]["releases"]}
    assert used[f"refs/tags/{import_tag(one_patch.wheel)}"] == [f"{one_patch.root.resolve()}: demo-1.0"]
    assert used[f"refs/tags/{import_tag(fork.wheel)}"] == []  # the fork is no registered project
    # each file kept by its own hash, neither overwriting the other
    kept = {
        p.relative_to(one_patch.cache).as_posix(): sha256(p) for p in (one_patch.cache / "downloads").rglob("*.whl")
    }
    assert kept == {f"downloads/{sha256(w)}/{w.name}": sha256(w) for w in (one_patch.wheel, fork.wheel)}
    for each in (one_patch, fork):
        pins = json.loads(each.run("pin", "list", "--json").stdout)["data"]
        assert [p["cached"] for p in pins["pins"]] == [True]


# -- a cache an older patchtool named --------------------------------------------------------------


def test_a_cache_an_older_patchtool_tagged_is_imported_again_and_pruned(one_patch: Demo) -> None:
    assert one_patch.run("status").returncode == 0
    cache_git = one_patch.cache / "upstream.git"
    ours = import_tag(one_patch.wheel)
    commit = git(cache_git, "rev-parse", ours).strip()
    git(cache_git, "tag", "-d", ours)
    git(cache_git, "tag", "v1.0", commit)  # what the older naming left
    old_file = one_patch.cache / "downloads" / sha256(one_patch.wheel)[:2] / one_patch.wheel.name
    old_file.parent.mkdir()
    old_file.write_bytes(one_patch.wheel.read_bytes())  # and where it kept the file
    assert one_patch.run("status").returncode == 0
    assert git(cache_git, "rev-parse", ours).strip() == commit  # the same import, made again
    res = one_patch.run("cache", "prune", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    removed = json.loads(res.stdout)["data"]["removed"]
    assert removed == ["refs/tags/v1.0", old_file.relative_to(one_patch.cache).as_posix()]
    assert tags(one_patch) == [ours] and not old_file.parent.exists()
    assert (one_patch.cache / "downloads" / sha256(one_patch.wheel) / one_patch.wheel.name).is_file()


def test_an_older_tag_on_another_import_is_never_read_as_this_one(one_patch: Demo, tmp_path: Path) -> None:
    """v1.0 of an older cache may be another project's import: this pin never takes it."""
    other = other_project(one_patch)
    assert other.run("status").returncode == 0
    cache_git = one_patch.cache / "upstream.git"
    theirs = git(cache_git, "rev-parse", import_tag(other.wheel, "other", prefix="other/ -> python/other/")).strip()
    git(cache_git, "tag", "v1.0", theirs)
    before = snapshot(other.root)
    res = one_patch.run("status")
    assert res.returncode == 0, res.stdout + res.stderr
    assert set(tree(one_patch, tmp_path / "t")) == {f"python/{p}" for p in UPSTREAM_FILES}
    assert git(cache_git, "rev-parse", "v1.0").strip() == theirs and snapshot(other.root) == before


# -- git sources: one tag from two urls ------------------------------------------------------------


def git_upstream(where: Path, text: str) -> tuple[Path, str]:
    where.mkdir()
    git(where, "init", "-q")
    (where / "demo").mkdir()
    (where / "demo" / "__init__.py").write_text(text)
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", "1.0")
    git(where, "tag", "v1.0")
    return where, git(where, "rev-parse", "HEAD").strip()


def git_project(demo: Demo, name: str, url: Path, commit: str) -> Demo:
    pin = (
        f'schema = 1\nname = "demo"\nversion = "1.0"\nuse = "git"\n\n'
        f'[git]\nurl = "{url}"\ntag = "v1.0"\ncommit = "{commit}"\n'
    )
    return project(demo, name, "demo-1.0", pin)


def test_one_tag_from_two_urls_gives_each_project_its_own(demo: Demo, tmp_path: Path) -> None:
    a_url, a_commit = git_upstream(tmp_path / "up-a", "A = 1\n")
    b_url, b_commit = git_upstream(tmp_path / "up-b", "B = 1\n")
    a, b = git_project(demo, "a", a_url, a_commit), git_project(demo, "b", b_url, b_commit)
    for each in (a, b, a, b):
        res = each.run("--json", "status")
        assert res.returncode == 0, res.stdout + res.stderr
    refs = git(
        demo.cache / "upstream.git", "for-each-ref", "--format=%(refname) %(objectname)", "refs/patchtool/git/"
    ).splitlines()
    assert sorted(r.split()[1] for r in refs) == sorted([a_commit, b_commit]) and len(refs) == 2
    assert all("v1.0" not in r.split()[0] for r in refs)  # the tag, a stranger's text, names no ref
    assert tree(a, tmp_path / "ta") == {"demo/__init__.py": "A = 1\n"}
    assert tree(b, tmp_path / "tb") == {"demo/__init__.py": "B = 1\n"}


def test_another_projects_import_never_answers_for_this_projects_index(one_patch: Demo, tmp_path: Path) -> None:
    """A stranger's project on the same cache imports its own ``demo 1.1`` (from its own index): a
    ``pin add 1.1`` here asks this project's index, which has no 1.1, and pins nothing; it used to
    take the stranger's file and sha256 from the cache without asking."""
    (tmp_path / "stranger").mkdir()
    wheel = make_wheel(
        tmp_path / "stranger" / "demo-1.1-py3-none-any.whl",
        "demo",
        "1.1",
        {**UPSTREAM_FILES, "demo/planted.py": "PLANTED = 1\n"},
    )
    index = Index(tmp_path / "stranger")
    index.add(wheel)
    with index.serve():
        pin = demo_pin(index, wheel).replace('version = "1.0"', 'version = "1.1"')
        stranger = project(one_patch, "stranger-project", "demo-1.1", pin)
        res = stranger.run("status", "--json")
        assert res.returncode == 0, res.stdout + res.stderr
    assert import_tag(wheel, version="1.1") in tags(one_patch)
    before = snapshot(one_patch.root)
    res = one_patch.run("pin", "add", "1.1", "--json")
    assert res.returncode == 4, res.stdout + res.stderr
    assert "demo 1.1 has no demo-1.1-py3-none-any.whl on the index" in res.stdout
    assert snapshot(one_patch.root) == before
    assert not (one_patch.root / "upstream-pins" / "demo-1.1.toml").exists()

"""What a new entry starts with: the metadata `new` and `import` are given, the skeleton for the
rest, and `check` telling a skeleton's default from a chosen value. Core level (the workflows
called with keyword parameters) on the demo upstream; `check` through the command line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import Demo, edit
from helpers import git, leftover_state, snapshot
from patchtool.edit import import_
from patchtool.edit.checkout import checkout
from patchtool.edit.export import export
from patchtool.edit.new import new
from patchtool.errors import UsageError
from patchtool.project.repository import Project
from patchtool.series.ids import slug
from patchtool.series.metadata import Metadata
from patchtool.upstream.cache import Cache

ME = {
    "GIT_AUTHOR_NAME": "Dana Fork",
    "GIT_AUTHOR_EMAIL": "dana@example.org",
    "GIT_COMMITTER_NAME": "Dana Fork",
    "GIT_COMMITTER_EMAIL": "dana@example.org",
}


@pytest.fixture
def me(monkeypatch: pytest.MonkeyPatch) -> None:
    """The user as git knows them (the tests' git is isolated from any configuration)."""
    for key, value in ME.items():
        monkeypatch.setenv(key, value)


def one(demo: Demo) -> None:
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi")
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"))


def check(demo: Demo) -> list[dict[str, str]]:
    res = demo.run("check", "--json")
    return [e for e in json.loads(res.stdout)["data"]["warnings"] if e.get("code") == "skeleton"]


def unfilled(demo: Demo, patch: str) -> dict[str, str]:
    """The manifest's placeholders for ``patch`` (a placeholder subject is in its patch file)."""
    return {e["key"].split(".", 1)[1]: e["message"] for e in check(demo) if e.get("patch") == patch and "key" in e}


def ciao_patch(demo: Demo, tmp_path: Path) -> Path:
    git(demo.work, "checkout", "-q", "-B", "ciao", "upstream")
    edit("python/demo/core.py", 'word = "bye"', 'word = "ciao"')(demo.work)
    git(demo.work, "commit", "-qam", "core: ciao", "-m", "Italian farewell.")
    path = tmp_path / "ciao.patch"
    path.write_text(git(demo.work, "format-patch", "-1", "--stdout"))
    return path


# -- ids from subjects --------------------------------------------------------------------------


def test_an_id_from_a_long_subject_ends_with_a_whole_word() -> None:
    subject = "fake KV sender: PP consensus poll prefill completion before the transfer"
    assert slug(subject) == "fake-kv-sender-pp-consensus-poll-prefill"
    assert slug("a" * 60) == "a" * 48  # one word longer than an id may be is still cut
    assert slug("util: two") == "util-two" and slug("!!!") == "patch"
    assert slug("x" * 47 + " yz") == "x" * 47
    assert slug("x" * 48 + " yz") == "x" * 48


# -- the skeleton's defaults --------------------------------------------------------------------


def test_check_flags_the_skeletons_defaults_until_someone_chooses(demo: Demo) -> None:
    one(demo)
    project = Project.load(demo.root)
    import_.import_patches(project, Cache(demo.cache), [ciao_patch(demo, demo.root.parent)])
    found = unfilled(demo, "core-ciao")
    assert found["kind"] == "still the skeleton's default ('correctness'), never chosen"
    assert found["applies_to"] == "still the skeleton's default ('>=0'), never chosen"
    assert set(found) == {"kind", "owner", "why", "applies_to", "drop_when"}
    assert unfilled(demo, "greet") == {}  # a hand-written entry with the same kind is not a skeleton
    manifest = demo.root / "patchset.toml"
    text = manifest.read_text()
    # another value, even with the comment left behind, is a choice; the default with its comment
    # deleted is one too
    text = text.replace('kind = "correctness"  # TODO', 'kind = "performance"  # TODO')
    text = re.sub(r'(applies_to = ">=0")  # TODO[^\n]*', r"\1", text)
    manifest.write_text(text)
    assert set(unfilled(demo, "core-ciao")) == {"owner", "why", "drop_when"}


def test_import_takes_the_metadata_it_is_given(demo: Demo, tmp_path: Path) -> None:
    one(demo)
    given = Metadata(
        id="farewell-ciao",
        kind="operations",
        owner="ops team",
        why="the Italian deployment",
        applies_to=">=1.0,<1.1",
        drop_when="never",
    )
    result = import_.import_patches(
        Project.load(demo.root), Cache(demo.cache), [ciao_patch(demo, tmp_path)], given=given
    )
    assert [(r["id"], r["file"]) for r in result.added] == [("farewell-ciao", "patches/0002-farewell-ciao.patch")]
    entry = Project.load(demo.root).manifest.get("farewell-ciao")
    assert (entry.kind.value, entry.owner, entry.why, str(entry.applies_to), entry.drop_when) == (
        "operations",
        "ops team",
        "the Italian deployment",
        "<1.1,>=1.0",
        "never",
    )
    assert "TODO" not in (demo.root / "patchset.toml").read_text()
    assert check(demo) == []
    # only what was given is filled in; the rest stays the skeleton's
    res = import_.import_patches(
        Project.load(demo.root), Cache(demo.cache), [other_patch(demo, tmp_path)], given=Metadata(kind="correctness")
    )
    assert set(unfilled(demo, res.added[0]["id"])) == {"owner", "why", "applies_to", "drop_when"}


def other_patch(demo: Demo, tmp_path: Path) -> Path:
    git(demo.work, "checkout", "-q", "-B", "util", "upstream")
    edit("python/demo/util.py", "return 1", "return 2")(demo.work)
    git(demo.work, "commit", "-qam", "util: two")
    path = tmp_path / "util.patch"
    path.write_text(git(demo.work, "format-patch", "-1", "--stdout"))
    return path


def test_placeholders_are_warnings_and_strict_makes_them_errors(demo: Demo, tmp_path: Path) -> None:
    """A fresh import's TODOs are shown and pass; `check --strict` fails on them (exit 1), and a
    real problem stays an error either way, not buried among them."""
    one(demo)
    import_.import_patches(Project.load(demo.root), Cache(demo.cache), [ciao_patch(demo, tmp_path)])
    res = demo.run("check")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "warning: patchset.toml: patch core-ciao: patch[1].owner: still the skeleton's placeholder" in res.stdout
    assert "error:" not in res.stdout
    assert res.stdout.rstrip().endswith(
        "check: clean, but 5 metadata placeholder(s) to fill in (`check --strict` fails on them)"
    )
    envelope = json.loads(demo.run("check", "--json").stdout)
    assert (envelope["exit_code"], envelope["errors"]) == (0, [])
    assert {w["code"] for w in envelope["data"]["warnings"]} == {"skeleton"}
    assert len(envelope["data"]["warnings"]) == 5
    strict = demo.run("check", "--strict")
    assert strict.returncode == 1
    assert "error: patchset.toml: patch core-ciao: patch[1].owner: still the skeleton's placeholder" in strict.stdout
    assert strict.stdout.rstrip().endswith("0 problem(s) found, 5 metadata placeholder(s) to fill in")
    envelope = json.loads(demo.run("check", "--strict", "--json").stdout)
    assert envelope["exit_code"] == 1 and len(envelope["errors"]) == 5
    # a real problem beside them is an error without --strict
    manifest = demo.root / "patchset.toml"
    manifest.write_text(manifest.read_text().replace('applies_to = ">=1.0"', 'applies_to = ">=2.0"', 1))
    res = demo.run("check", "--json")
    envelope = json.loads(res.stdout)
    assert res.returncode == 1 and [(e["code"], e["patch"]) for e in envelope["errors"]] == [("version", "greet")]
    assert len(envelope["data"]["warnings"]) == 5


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            Metadata(kind="perf"),
            "kind: unknown value 'perf'; expected one of correctness, performance, reliability, operations",
        ),
        (
            Metadata(applies_to="0.5.23"),
            "applies_to: '0.5.23' is not a PEP 440 version specifier (e.g. '>=0.5.23,<0.5.24')",
        ),
        (Metadata(owner=" ", why=""), "why: must not be empty; owner: must not be empty"),
        (
            Metadata(id="Not An Id"),
            "id: 'Not An Id' is not a valid id (lower-case letters, digits, '.', '_', '-'; "
            "starting with a letter or digit)",
        ),
    ],
)
def test_metadata_is_held_to_the_manifests_rules(
    demo: Demo, tmp_path: Path, me: None, given: Metadata, message: str
) -> None:
    one(demo)
    patch = ciao_patch(demo, tmp_path)
    cache = Cache(demo.cache)
    checkout(Project.load(demo.root), cache, pin_name=None, branch="series", path=None)
    before = snapshot(demo.root / "patchset.toml", demo.root / "patches")
    with pytest.raises(UsageError) as exc:
        import_.import_patches(Project.load(demo.root), cache, [patch], given=given)
    assert str(exc.value) == message
    if given.id is None:
        with pytest.raises(UsageError) as exc:
            new(Project.load(demo.root), cache, ident="fresh", branch="series", given=given)
        assert str(exc.value) == message
    assert snapshot(demo.root / "patchset.toml", demo.root / "patches") == before
    assert leftover_state(demo.root) == []


def test_an_id_names_one_new_patch(demo: Demo, tmp_path: Path) -> None:
    one(demo)
    project, cache = Project.load(demo.root), Cache(demo.cache)
    two = [ciao_patch(demo, tmp_path), other_patch(demo, tmp_path)]
    with pytest.raises(UsageError, match="an id names one patch, and 2 are being imported"):
        import_.import_patches(project, cache, two, given=Metadata(id="both"))
    with pytest.raises(UsageError, match="a patch 'greet' exists already"):
        import_.import_patches(project, cache, two[:1], given=Metadata(id="greet"))


def test_new_keeps_what_it_was_told_for_the_export(demo: Demo, me: None) -> None:
    one(demo)
    cache = Cache(demo.cache)
    wt = Path(checkout(Project.load(demo.root), cache, pin_name=None, branch="series", path=None).worktree)
    given = Metadata(kind="performance", owner="perf team", why="faster farewells", applies_to="==1.0")
    new(Project.load(demo.root), cache, ident="fast-bye", branch="series", given=given)
    edit("python/demo/core.py", 'word = "bye"', 'word = "ciao"')(wt)
    git(wt, "commit", "-q", "-a", "--amend", "--no-edit")
    result = export(Project.load(demo.root), cache, branch="series", allow_drop=False)
    assert [(r["id"], r["change"]) for r in result.patches] == [("greet", "unchanged"), ("fast-bye", "new")]
    entry = Project.load(demo.root).manifest.get("fast-bye")
    assert (entry.kind.value, entry.owner, entry.why, str(entry.applies_to)) == (
        "performance",
        "perf team",
        "faster farewells",
        "==1.0",
    )
    assert set(unfilled(demo, "fast-bye")) == {"drop_when"}  # the one value it was not told
    assert leftover_state(demo.root) == []  # consumed by the export that made the entry


def test_new_told_nothing_forgets_what_an_earlier_new_was_told(demo: Demo, me: None) -> None:
    one(demo)
    cache = Cache(demo.cache)
    wt = Path(checkout(Project.load(demo.root), cache, pin_name=None, branch="series", path=None).worktree)
    new(Project.load(demo.root), cache, ident="later", branch="series", given=Metadata(kind="reliability"))
    assert leftover_state(demo.root) == [".patchtool/new-later", ".patchtool/new-later/metadata.json"]
    git(wt, "reset", "-q", "--hard", "HEAD~1")
    new(Project.load(demo.root), cache, ident="later", branch="series")
    assert leftover_state(demo.root) == []
    edit("python/demo/util.py", "return 1", "return 2")(wt)
    git(wt, "commit", "-q", "-a", "--amend", "--no-edit")
    export(Project.load(demo.root), cache, branch="series", allow_drop=False)
    assert Project.load(demo.root).manifest.get("later").kind.value == "correctness"
    assert set(unfilled(demo, "later")) == {"kind", "owner", "why", "applies_to", "drop_when"}


def test_new_told_everything_leaves_only_its_placeholder_subject(demo: Demo, me: None) -> None:
    one(demo)
    res = demo.run("checkout", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    wt = Path(json.loads(res.stdout)["data"]["worktree"])
    told = ("--kind", "performance", "--owner", "perf team", "--why", "w", "--applies-to", "==1.0")
    res = demo.run("new", "t1", *told, "--drop-when", "upstream has it")
    assert res.returncode == 0, res.stdout + res.stderr
    edit("python/demo/core.py", 'word = "bye"', 'word = "ciao"')(wt)
    git(wt, "commit", "-q", "-a", "--amend", "--no-edit")
    res = demo.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "TODO" not in res.stdout  # every field was given: the entry has none
    assert "t1: its commit's subject is still the placeholder 't1: describe the change'" in res.stdout
    res = demo.run("check")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (
        "warning: patches/0002-t1.patch:3: patch t1: the subject is still the placeholder "
        "'t1: describe the change' that `patchtool new` wrote (hint: reword the commit in the checkout "
        "(`git commit --amend`), then `patchtool export`)"
    ) in res.stdout
    assert "1 metadata placeholder(s) to fill in" in res.stdout
    assert (demo.root / "patches/0002-t1.patch").read_text().split("\n")[
        2
    ] == "Subject: [PATCH] t1: describe the change"
    assert demo.run("check", "--strict").returncode == 1
    git(wt, "commit", "-q", "--amend", "-m", "core: ciao\n\nPatchtool-Id: t1")
    assert demo.run("export").returncode == 0
    res = demo.run("check", "--strict")
    assert res.returncode == 0, res.stdout


def test_export_names_the_new_patches_whose_metadata_has_todos(demo: Demo, me: None) -> None:
    one(demo)
    res = demo.run("checkout", "--json")
    wt = Path(json.loads(res.stdout)["data"]["worktree"])
    edit("python/demo/core.py", 'word = "bye"', 'word = "ciao"')(wt)
    git(wt, "commit", "-qam", "core: ciao")
    res = demo.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "core-ciao: its metadata skeleton has TODOs to fill (`patchtool check` lists them)" in res.stdout


def test_new_told_everything_and_its_subject_leaves_nothing_to_fill(demo: Demo, me: None) -> None:
    """With every field and `--subject` given, the loop new -> edit -> refresh -> check is clean and
    strict, with nothing left to reword; a subject of more than one line is refused, nothing made."""
    one(demo)
    res = demo.run("checkout", "--json")
    wt = Path(json.loads(res.stdout)["data"]["worktree"])
    told = ("--kind", "performance", "--owner", "perf team", "--why", "w", "--applies-to", "==1.0")
    tip = git(wt, "rev-parse", "HEAD")
    res = demo.run("new", "t1", *told, "--drop-when", "upstream has it", "--subject", "core: two\nlines")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--subject 'core: two\\nlines': give one line of text" in res.stderr
    assert git(wt, "rev-parse", "HEAD") == tip
    res = demo.run("new", "t1", *told, "--drop-when", "upstream has it", "--subject", "core: ciao")
    assert res.returncode == 0, res.stdout + res.stderr
    edit("python/demo/core.py", 'word = "bye"', 'word = "ciao"')(wt)
    res = demo.run("refresh", "t1")
    assert res.returncode == 0, res.stdout + res.stderr
    res = demo.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "TODO" not in res.stdout and "placeholder" not in res.stdout
    assert (demo.root / "patches/0002-t1.patch").read_text().split("\n")[2] == "Subject: [PATCH] core: ciao"
    res = demo.run("check", "--strict")
    assert res.returncode == 0, res.stdout + res.stderr
    assert demo.run("new", "t2", "--subject", "core: more").returncode == 0
    res = demo.run("refresh", "t2")
    assert res.returncode == 2
    assert res.stderr == (
        f"error: nothing to refresh t2 with: the worktree {wt} holds the branch as it is committed "
        f"(hint: edit the files in {wt} (with --index: `git add` them), then run it again; "
        "if a refresh of t2 was interrupted, `patchtool export` writes it)\n"
    )

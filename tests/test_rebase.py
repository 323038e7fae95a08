"""rebase and scan on a small real upstream with two releases served over HTTP."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from cli_run import in_process
from conftest import UPSTREAM_FILES, Demo, edit
from helpers import git, leftover_state, make_wheel, snapshot, write_tree

SIBLINGS = textwrap.dedent('''\
    """Two classes with identical methods, as real SGLang files have."""


    class A:
        name = "a"

        def to_json(self):
            data = {}
            data["kind"] = self.name
            return data

        def other(self):
            return 1


    class B:
        name = "b"

        def to_json(self):
            data = {}
            data["kind"] = self.name
            return data

        def other(self):
            return 1
    ''')

V10 = {**UPSTREAM_FILES, "demo/siblings.py": SIBLINGS, "demo/extra.py": "def extra():\n    return 3\n"}


def release_11() -> dict[str, str]:
    files = dict(V10)
    core = files["demo/core.py"]
    core = core.replace(
        '"""Core of the demo upstream."""\n',
        '"""Core of the demo upstream."""\n\nimport os\n\nDEBUG = os.environ.get("DEMO_DEBUG")\n',
    )
    core = core.replace('word = "bye"', 'word = "goodbye"')  # collides with the farewell patch
    core = core.replace("len(queue) > cap", "len(queue) >= cap")  # upstream took the cap patch
    files["demo/core.py"] = core
    files["demo/siblings.py"] = SIBLINGS.replace(
        '"""Two classes with identical methods, as real SGLang files have."""\n',
        '"""Two classes with identical methods, as real SGLang files have."""\n\nimport json\n\n\n'
        'def dumps(obj):\n    """Serialise anything with a to_json()."""\n    data = obj.to_json()\n'
        "    text = json.dumps(data, sort_keys=True)\n    return text\n",
    )
    del files["demo/util.py"]
    return files


@pytest.fixture
def releases(demo: Demo) -> Demo:
    """demo 1.0 and 1.1 on the index; the pin is 1.0 and the test series is written against it."""
    for version, files in (("1.0", V10), ("1.1", release_11())):
        wheel = make_wheel(demo.wheel.parent / f"demo-{version}-py3-none-any.whl", "demo", version, files)
        demo.index.add(wheel)
    pin = demo.root / "upstream-pins" / "demo-1.0.toml"
    from helpers import sha256

    text = pin.read_text().split('sha256 = "')
    pin.write_text(text[0] + f'sha256 = "{sha256(demo.index.files["demo-1.0-py3-none-any.whl"])}"' + text[1][65:])
    write_tree(demo.work, {"python/demo/siblings.py": SIBLINGS, "python/demo/extra.py": V10["demo/extra.py"]})
    git(demo.work, "add", "-A")
    git(demo.work, "commit", "-q", "-m", "upstream 1.0 (complete)")
    return demo


def series(demo: Demo, *names: str) -> None:
    makers = {
        "0001-extra": (edit("python/demo/extra.py", "return 3", "return 4"), "extra: four"),
        "0002-greet": (edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi"),
        "0003-sibling": (
            edit(
                "python/demo/siblings.py",
                'name = "b"\n\n    def to_json(self):\n        data = {}\n        data["kind"] = self.name',
                'name = "b"\n\n    def to_json(self):\n        data = {}\n        data["kind"] = self.name.upper()',
            ),
            "siblings: upper-case B's kind",
        ),
        "0004-bye": (edit("python/demo/core.py", 'word = "bye"', 'word = "ciao"'), "core: ciao"),
        "0005-cap": (edit("python/demo/core.py", "len(queue) > cap", "len(queue) >= cap"), "core: inclusive cap"),
        "0006-util": (edit("python/demo/util.py", "return 1", "return 2"), "util: two"),
    }
    entries = []
    for name in names:
        change, subject = makers[name]
        demo.commit_patch(f"{name}.patch", change, subject)
        entries.append(demo.entry(name.split("-", 1)[1], f"{name}.patch"))
    demo.write_manifest(*entries)


def outcomes(data: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {p["id"]: p["outcome"] for p in data["patches"]}


def test_dry_run_gives_each_patch_one_outcome(releases: Demo) -> None:
    series(releases, "0001-extra", "0002-greet", "0003-sibling", "0004-bye", "0005-cap", "0006-util")
    before = snapshot(releases.root)
    res = releases.run("rebase", "--to", "1.1", "--dry-run", "--json")
    data = json.loads(res.stdout)
    assert res.returncode == 5, res.stdout + res.stderr  # a conflict predicted: its own exit code
    assert data["status"] == "conflicts-predicted"
    assert outcomes(data["data"]) == {
        "extra": "applied unchanged",
        "greet": "applied with shifted context",
        "sibling": "merged by 3-way merge",
        "bye": "conflict",
        "cap": "already upstream",
        "util": "target gone",
    }
    assert data["data"]["partial"] is False and "sibling" in data["data"]["range_diff"]
    assert snapshot(releases.root) == before


def test_shifted_hunks_are_listed_per_file_and_hunk(releases: Demo) -> None:
    """A shifted patch says which hunk of which file moved where: fields in JSON, a list in
    the text and in the Markdown report (not git apply's "Hunk #1 succeeded at ...;" prose)."""
    series(releases, "0002-greet")
    res = releases.run("rebase", "--to", "1.1", "--dry-run", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    (step,) = json.loads(res.stdout)["data"]["patches"]
    assert step["outcome"] == "applied with shifted context"
    moved = {"file": "python/demo/core.py", "hunk": 1, "old_line": 2, "new_line": 6, "offset": 4}
    assert step["shifted"] == [moved]
    assert step["detail"] == "python/demo/core.py: hunk 1 at 6 (+4)"
    text = releases.run("rebase", "--to", "1.1", "--dry-run", "--report", str(releases.root / "r.md")).stdout
    assert "  greet: applied with shifted context\n      python/demo/core.py: hunk 1: line 2 -> 6 (offset +4)\n" in text
    report = (releases.root / "r.md").read_text()
    assert "| `greet` | applied with shifted context | 1 hunk(s) at other lines, listed below |" in report
    assert (
        "### Hunks applied at other lines\n\n- `greet`: `python/demo/core.py` hunk 1: line 2 -> 6 (offset +4)\n"
        in report
    )


def test_shifted_hunks_survive_a_stop(releases: Demo) -> None:
    """The moved hunks of a patch before a conflict are kept in the rebase state and reported
    at the end."""
    series(releases, "0002-greet", "0004-bye")
    assert releases.run("rebase", "--to", "1.1").returncode == 3
    res = releases.run("rebase", "--skip", "--reason", "upstream says goodbye", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    greet, _ = json.loads(res.stdout)["data"]["patches"]
    assert greet["shifted"] == [{"file": "python/demo/core.py", "hunk": 1, "old_line": 2, "new_line": 6, "offset": 4}]


def test_three_way_merge_keeps_the_hunk_in_its_sibling(releases: Demo) -> None:
    """git apply would put B's change into A (nearer the old line); the rebase must not."""
    series(releases, "0003-sibling")
    patch = releases.root / "patches" / "0003-sibling.patch"
    git(releases.work, "checkout", "-q", "-B", "v11", "upstream")
    write_tree(releases.work, {f"python/{k}": v for k, v in release_11().items()})
    git(releases.work, "add", "-A")
    git(releases.work, "commit", "-qm", "1.1")
    git(releases.work, "apply", str(patch))  # what git am / quilt would do
    wrong = (releases.work / "python/demo/siblings.py").read_text()
    assert wrong.index(".upper()") < wrong.index("class B")  # landed in A: the trap is real
    git(releases.work, "checkout", "-q", "--", ".")
    res = releases.run("rebase", "--to", "1.1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "sibling: merged by 3-way merge" in res.stdout
    rebased = (releases.root / "patches" / "0003-sibling.patch").read_text()
    git(releases.work, "checkout", "-q", "--", ".")
    (releases.work / "p.patch").write_text(rebased)
    git(releases.work, "apply", "p.patch")
    right = (releases.work / "python/demo/siblings.py").read_text()
    assert right.index(".upper()") > right.index("class B")


def test_rebase_writes_the_new_series_pin_and_records_upstreamed_patches(releases: Demo) -> None:
    series(releases, "0001-extra", "0002-greet", "0005-cap")
    old_extra = (releases.root / "patches/0001-extra.patch").read_text()
    res = releases.run("rebase", "--to", "v1.1", "--report", str(releases.root / "report.md"))
    assert res.returncode == 0, res.stdout + res.stderr
    manifest = (releases.root / "patchset.toml").read_text()
    assert 'pin = "demo-1.1"' in manifest
    assert (releases.root / "upstream-pins/demo-1.1.toml").is_file()
    assert (releases.root / "patches/0001-extra.patch").read_text() == old_extra  # unchanged: byte-identical
    assert not (releases.root / "patches/0005-cap.patch").exists()
    assert (releases.root / "patches/dropped/0005-cap.patch").is_file()
    assert "[[dropped]]" in manifest and 'upstream = { status = "merged", version = "1.1" }' in manifest
    assert 'dropped_at = "1.1"' in manifest
    report = (releases.root / "report.md").read_text()
    assert "| `cap` | already upstream |" in report and "### Range-diff" in report
    assert not leftover_state(releases.root)
    check = releases.run("check")
    assert "applies at the pin: 2/2" in check.stdout


def test_rebase_moves_the_pin_comment_init_writes_with_the_pin(releases: Demo) -> None:
    """`init` writes `pin = "X"   # upstream-pins/X.toml`: after a rebase the comment names the new
    pin's file, not the old one (found by an attack); other comments are kept as they are."""
    series(releases, "0001-extra", "0002-greet")
    manifest = releases.root / "patchset.toml"
    text = manifest.read_text()
    assert 'pin = "demo-1.0"\n' in text
    manifest.write_text(
        text.replace('pin = "demo-1.0"\n', 'pin = "demo-1.0"   # upstream-pins/demo-1.0.toml\n# kept\n')
    )
    res = releases.run("rebase", "--to", "v1.1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert 'pin = "demo-1.1"   # upstream-pins/demo-1.1.toml\n# kept\n' in manifest.read_text()


def test_rebase_onto_the_same_release_leaves_every_file_byte_identical(releases: Demo) -> None:
    series(releases, "0001-extra", "0002-greet", "0003-sibling")
    before = snapshot(releases.root)
    res = releases.run("rebase", "--to", "1.0")
    assert res.returncode == 0, res.stdout + res.stderr
    assert snapshot(releases.root) == before


def test_rebase_twice_onto_the_same_target_is_byte_identical(releases: Demo) -> None:
    series(releases, "0001-extra", "0002-greet", "0003-sibling")
    assert releases.run("rebase", "--to", "1.1").returncode == 0
    first = snapshot(releases.root)
    res = releases.run("rebase", "--to", "1.1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert snapshot(releases.root) == first


def test_conflict_stops_leaves_a_worktree_and_abort_restores(releases: Demo) -> None:
    series(releases, "0002-greet", "0004-bye", "0001-extra")
    before = snapshot(releases.root)
    res = releases.run("rebase", "--to", "1.1", "--json")
    data = json.loads(res.stdout)
    assert res.returncode == 3, res.stdout
    assert outcomes(data["data"]) == {
        "greet": "applied with shifted context",
        "bye": "conflict",
        "extra": "not reached",
    }
    worktree = Path(data["data"]["worktree"])
    assert "<<<<<<<" in (worktree / "python/demo/core.py").read_text()
    assert "resolve it in" in data["errors"][0]["hint"]
    # a stop's report is partial, and says so: the whole-series sections come at the end
    assert data["data"]["partial"] is True and data["data"]["range_diff"] == ""
    md = releases.root / "stop.md"
    releases.run("rebase", "--abort")
    text = releases.run("rebase", "--to", "1.1", "--report", str(md)).stdout
    assert "come with the finished rebase" in " ".join(text.split()) and "### Not yet" in md.read_text()
    md.unlink()
    assert {k for k in snapshot(releases.root) if ".patchtool" not in k} == set(before)
    assert all(snapshot(releases.root)[k] == v for k, v in before.items())
    again = releases.run("rebase", "--to", "1.1")
    assert again.returncode == 2 and "a rebase is already in progress" in again.stderr
    res = releases.run("rebase", "--abort", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["data"] == {"status": "aborted"}
    assert snapshot(releases.root) == before


def test_continue_after_resolving(releases: Demo) -> None:
    series(releases, "0002-greet", "0004-bye", "0001-extra")
    data = json.loads(releases.run("rebase", "--to", "1.1", "--json").stdout)
    worktree = Path(data["data"]["worktree"])
    res = releases.run("rebase", "--continue")
    assert res.returncode == 2 and "conflict markers remain in python/demo/core.py" in res.stderr
    core = worktree / "python/demo/core.py"
    text = core.read_text()
    start, end = text.index("<<<<<<<"), text.index(">>>>>>>")
    end = text.index("\n", end) + 1
    core.write_text(text[:start] + '    word = "ciao"\n' + text[end:])
    res = releases.run("rebase", "--continue")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "bye: merged by 3-way merge - resolved by hand" in res.stdout
    assert "extra: applied unchanged" in res.stdout
    assert 'pin = "demo-1.1"' in (releases.root / "patchset.toml").read_text()
    assert releases.run("check").stdout.count("applies at the pin: 3/3") == 1


def test_skip_records_the_patch_as_dropped(releases: Demo) -> None:
    series(releases, "0002-greet", "0004-bye")
    assert releases.run("rebase", "--to", "1.1").returncode == 3
    res = releases.run("rebase", "--skip")
    assert res.returncode == 2 and "--skip needs --reason" in res.stderr
    res = releases.run("rebase", "--skip", "--reason", "upstream now says goodbye; ours is moot")
    assert res.returncode == 0, res.stdout + res.stderr
    manifest = (releases.root / "patchset.toml").read_text()
    assert 'reason = "upstream now says goodbye; ours is moot"' in manifest
    assert (releases.root / "patches/dropped/0004-bye.patch").is_file()


def test_drift_is_reported_when_code_under_a_clean_patch_changed(releases: Demo) -> None:
    releases.commit_patch(
        "0001-empty.patch", edit("python/demo/core.py", "    return True", "    return cap >= 0"), "core: limit"
    )
    releases.write_manifest(releases.entry("limit", "0001-empty.patch"))
    data = json.loads(releases.run("rebase", "--to", "1.1", "--dry-run", "--json").stdout)["data"]
    assert outcomes(data) == {"limit": "merged by 3-way merge"}
    assert data["drift"] == [
        {
            "patch": "limit",
            "path": "python/demo/core.py",
            "scope": "limit",
            "change": "changed",
            "detail": "limit changed upstream (+0 lines)",
        }
    ]


def test_scan_matrix(releases: Demo) -> None:
    series(releases, "0001-extra", "0004-bye", "0005-cap", "0006-util")
    res = releases.run("scan", "--versions", "1.0..1.1", "--json")
    data = json.loads(res.stdout)["data"]
    assert res.returncode == 5, res.stderr  # bye conflicts at 1.1: predicted, its own exit code
    assert data["versions"] == ["1.0", "1.1"]
    assert data["matrix"] == {
        "extra": {"1.0": "applied unchanged", "1.1": "applied unchanged"},
        "bye": {"1.0": "applied unchanged", "1.1": "conflict"},
        "cap": {"1.0": "applied unchanged", "1.1": "already upstream"},
        "util": {"1.0": "applied unchanged", "1.1": "target gone"},
    }
    text = releases.run("scan", "--versions", "1.0,1.1").stdout
    assert "bye" in text and "conflict" in text
    # the summary says each stop in its own word: util's target is gone, which is no conflict
    summary = " ".join(text[text.index("predicted: ") :].split())
    assert "a rebase would stop for bye at 1.1 (conflict); util at 1.1 (target gone) (exit 5)" in summary, text


def test_scan_says_a_range_is_reversed_before_asking_the_index(releases: Demo) -> None:
    series(releases, "0001-extra")
    asked = len(releases.index.requests)
    res = releases.run("scan", "--versions", "1.1..1.0")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--versions 1.1..1.0: the range is reversed (1.1 is newer than 1.0)" in res.stderr
    assert "write the oldest first: --versions 1.0..1.1" in res.stderr
    assert "no release between" not in res.stderr
    assert len(releases.index.requests) == asked


def _placement_of_b_change(tmp_path: Path, siblings: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A patch upper-cases B.to_json's kind; check_placement on the tree the patch made, and on
    the tree git apply would make where the hunk lands in the identical A.to_json."""
    from helpers import format_patch
    from patchtool import git as gitmod
    from patchtool.project.repository import LoadedPatch
    from patchtool.rebase.replay import check_placement

    work = tmp_path / "w"
    work.mkdir()
    git(work, "init", "-q")
    write_tree(work, {"s.py": siblings})
    git(work, "add", "-A")
    git(work, "commit", "-qm", "base")
    base = git(work, "rev-parse", "HEAD").strip()
    text = siblings.split("class B")
    write_tree(work, {"s.py": text[0] + "class B" + text[1].replace("self.name", "self.name.upper()")})
    git(work, "commit", "-qam", "B upper")
    patched = git(work, "rev-parse", "HEAD").strip()
    write_tree(work, {"s.py": text[0].replace("self.name", "self.name.upper()") + "class B" + text[1]})
    git(work, "commit", "-qam", "A upper (wrong)")
    wrong_tree = git(work, "rev-parse", "HEAD^{tree}").strip()
    (tmp_path / "p.patch").write_text(format_patch(work, patched))
    lp = LoadedPatch(
        entry=SimpleNamespace(file="p.patch"),  # type: ignore[arg-type]
        text=(tmp_path / "p.patch").read_text(),
        path=tmp_path / "p.patch",
    )
    repo = gitmod.Repo(work / ".git")
    return (
        check_placement(repo, patched, repo.tree_of(base), repo.tree_of(patched), lp),
        check_placement(repo, patched, repo.tree_of(base), wrong_tree, lp),
    )


def test_placement_check_catches_a_hunk_in_the_wrong_sibling(tmp_path: Path) -> None:
    """Fed the tree git apply produced (B's change inside A), the check refuses it."""
    right, wrong = _placement_of_b_change(tmp_path, SIBLINGS)
    assert right == ()
    (mismatch,) = wrong
    assert (
        mismatch.startswith("s.py: hunk @@ -18,7 +18,7 @@") and "was in B.to_json, would land in A.to_json" in mismatch
    )


def test_placement_check_sees_past_a_triple_quoted_string_in_brackets(tmp_path: Path) -> None:
    """A verbose regex (a triple-quoted string opened inside a call) before the siblings once hid
    every later def from the scanner: both hunks sat in <module> and the misplacement passed."""
    pattern = (
        'import re\n\nKIND = re.compile(r"""\n    (?P<kind> [a-z]+ )  # as in "a" or \'b\'\nclass Fake:\n""", re.X)\n'
    )
    siblings = SIBLINGS.replace('have."""\n', 'have."""\n\n' + pattern, 1)
    right, wrong = _placement_of_b_change(tmp_path, siblings)
    assert right == ()
    (mismatch,) = wrong
    assert "was in B.to_json, would land in A.to_json" in mismatch


def test_a_class_renamed_upstream_is_not_a_misplacement(tmp_path: Path) -> None:
    """Upstream renamed the class around the method; the hunk still lands in that method."""
    from helpers import format_patch
    from patchtool import git as gitmod
    from patchtool.project.repository import LoadedPatch
    from patchtool.rebase.replay import check_placement

    src = "class LayerBase:\n    def hc_pre(self, x):\n        y = x\n        return y\n"
    work = tmp_path / "w"
    work.mkdir()
    git(work, "init", "-q")
    write_tree(work, {"m.py": src})
    git(work, "add", "-A")
    git(work, "commit", "-qm", "base")
    base = git(work, "rev-parse", "HEAD").strip()
    write_tree(work, {"m.py": src.replace("y = x", "y = x * 2")})
    git(work, "commit", "-qam", "patch")
    patched = git(work, "rev-parse", "HEAD").strip()
    git(work, "checkout", "-q", base)
    write_tree(work, {"m.py": src.replace("LayerBase", "Layer")})
    git(work, "commit", "-qam", "renamed")
    renamed = git(work, "rev-parse", "HEAD").strip()
    write_tree(work, {"m.py": src.replace("LayerBase", "Layer").replace("y = x", "y = x * 2")})
    git(work, "commit", "-qam", "merged")
    merged_tree = git(work, "rev-parse", "HEAD^{tree}").strip()
    (tmp_path / "p.patch").write_text(format_patch(work, patched))
    lp = LoadedPatch(
        entry=SimpleNamespace(file="p.patch"),  # type: ignore[arg-type]
        text=(tmp_path / "p.patch").read_text(),
        path=tmp_path / "p.patch",
    )
    repo = gitmod.Repo(work / ".git")
    assert check_placement(repo, patched, repo.tree_of(renamed), merged_tree, lp) == ()


def test_a_patch_id_upstream_changed_since_stops_instead_of_dropping(tmp_path: Path) -> None:
    """A git-source pin: upstream took the patch as a commit of its own, then changed the same line
    again. The patch neither applies nor applies in reverse, and the 3-way merge conflicts; its
    patch-id finds it upstream (git cherry), but the target's content does not show it: one kind of
    evidence stops once, showing it, never a drop (issue 31, section 0). It was dropped on the
    patch-id alone."""
    import os

    from helpers import format_patch

    up = tmp_path / "upstream"
    (up / "python" / "demo").mkdir(parents=True)
    git(up, "init", "-q", "-b", "main")
    core = "def limit():\n    return 10\n\n\ndef name():\n    return 'demo'\n"
    write_tree(up, {"python/demo/core.py": core})
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "demo 1.0")
    git(up, "tag", "v1.0")
    v10 = git(up, "rev-parse", "HEAD").strip()
    write_tree(up, {"python/demo/core.py": core.replace("return 10", "return 20")})
    git(up, "commit", "-qam", "core: raise the limit")
    patch = format_patch(up)
    write_tree(up, {"python/demo/core.py": core.replace("return 10", "return int(os.environ.get('LIMIT', 20))")})
    git(up, "commit", "-qam", "core: the limit from the environment")
    git(up, "tag", "v1.1")

    root = tmp_path / "project"
    (root / "patches").mkdir(parents=True)
    (root / "upstream-pins").mkdir()
    (root / "upstream-pins" / "demo-1.0.toml").write_text(
        f'schema = 1\nname = "demo"\nversion = "1.0"\nuse = "git"\n\n[git]\nurl = "{up}"\ntag = "v1.0"\n'
        f'commit = "{v10}"\n'
    )
    (root / "patches" / "0001-limit.patch").write_text(patch)
    (root / "patchset.toml").write_text(
        'schema = 1\npin = "demo-1.0"\n\n[[patch]]\nid = "limit"\nfile = "patches/0001-limit.patch"\n'
        'kind = "performance"\nowner = "team"\nwhy = "more"\napplies_to = ">=1.0"\ndrop_when = "upstream"\n'
        'upstream = { status = "pending" }\n'
    )
    env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(tmp_path / "cache")}
    res = in_process(["rebase", "--to", "1.1", "--dry-run", "--json", "--root", str(root)], env=env)
    assert res.returncode == 5, res.stdout + res.stderr  # a dry run that would stop
    (step,) = json.loads(res.stdout)["data"]["patches"]
    why = "its patch-id matches a commit upstream made between 1.0 and 1.1, but the target's content does not show it"
    assert step["outcome"] == "conflict", step
    assert step["detail"] == f"upstream may have it: {why}"
    assert step["evidence"] == [why]


def test_a_release_already_in_the_cache_is_still_asked_of_the_index(releases: Demo) -> None:
    """Once 1.1 is imported, rebasing to it still asks the pin's own index for its sha256: the
    import in a shared cache may have come from another project's index (test_cache_sharing), so
    it is no answer for this one. With the index down, the rebase says so and changes nothing;
    with it up, the new pin is the one the index gives."""
    from helpers import sha256

    series(releases, "0001-extra", "0002-greet")
    assert releases.run("rebase", "--to", "1.1", "--dry-run").returncode == 0  # downloads and imports 1.1
    before = snapshot(releases.root)
    res = releases.run("rebase", "--to", "1.1", env={"PATCHTOOL_INDEX_URL": "http://127.0.0.1:9/simple"})
    assert res.returncode == 4 and "could not read the package index" in res.stderr, res.stdout + res.stderr
    assert snapshot(releases.root) == before
    res = releases.run("rebase", "--to", "1.1")
    assert res.returncode == 0, res.stdout + res.stderr
    wheel = releases.index.files["demo-1.1-py3-none-any.whl"]
    pin = (releases.root / "upstream-pins/demo-1.1.toml").read_text()
    assert f'sha256 = "{sha256(wheel)}"' in pin  # the test index lists no size: none is pinned


def test_the_chain_and_its_changes_are_remembered(releases: Demo) -> None:
    """A --continue finds the old chain and what each commit changes asking git nothing but the
    chain's ref (one read through the object reader, which holds the chain's objects from gc)."""
    from patchtool.project.repository import Project
    from patchtool.rebase.replay import chain_changes, old_chain
    from patchtool.upstream.cache import Cache

    series(releases, "0001-extra", "0002-greet")
    project = Project.load(releases.root)
    cache = Cache(releases.cache)
    base, loaded = cache.ensure(project.pin()), project.series()
    chain = old_chain(cache.repo, base, loaded)
    changes = chain_changes(cache.repo, chain)
    assert len(chain) == 3 and [c.new_path for c in changes[chain[1]]] == ["python/demo/extra.py"]

    asked: list[str] = []

    class NoGit:
        git_dir = cache.repo.git_dir

        def resolve(self, rev: str) -> str | None:
            asked.append(rev)
            return cache.repo.resolve(rev)

        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"git was asked: {name}")

    assert old_chain(NoGit(), base, loaded) == chain  # type: ignore[arg-type]
    assert chain_changes(NoGit(), chain) == changes  # type: ignore[arg-type]
    assert len(asked) == 1 and asked[0].startswith("refs/patchtool/chain/")


def test_a_remembered_chain_holds_only_while_its_ref_keeps_it(releases: Demo) -> None:
    """The memo of a chain whose ref is gone (deleted, its commits pruned) is no answer: the chain
    is made again, and its ref with it; so are memos not of the shape written."""
    from patchtool.git import memo
    from patchtool.project.repository import Project
    from patchtool.rebase.replay import old_chain
    from patchtool.upstream.cache import Cache

    series(releases, "0001-extra", "0002-greet")
    project = Project.load(releases.root)
    cache = Cache(releases.cache)
    base, loaded = cache.ensure(project.pin()), project.series()
    chain = old_chain(cache.repo, base, loaded)
    git_dir = str(cache.repo.git_dir)
    listed = git(releases.cache, "--git-dir", git_dir, "for-each-ref", "--format=%(objectname) %(refname)")
    (ref,) = [r for sha, r in (line.split() for line in listed.splitlines()) if sha == chain[-1] and "/chain/" in r]
    key = ref.rsplit("/", 1)[1]
    git(releases.cache, "--git-dir", git_dir, "update-ref", "-d", ref)
    git(releases.cache, "--git-dir", git_dir, "gc", "--quiet", "--prune=now")
    assert memo.recall(cache.repo.git_dir, "chains", key) == list(chain)  # still there, but no answer
    fresh = Cache(releases.cache)
    assert old_chain(fresh.repo, base, loaded) == chain
    assert git(releases.cache, "--git-dir", git_dir, "rev-parse", ref).strip() == chain[-1]
    for bad in (["not hex", chain[-1]], [chain[0], 7, chain[-1]], 7, [chain[0], chain[-1]]):
        memo.remember(cache.repo.git_dir, "chains", key, bad)
        assert old_chain(Cache(releases.cache).repo, base, loaded) == chain


def test_bad_rebase_requests_are_refused_and_change_nothing(releases: Demo) -> None:
    """A target that is no version, tag or commit; a release the index does not have; and a series
    edited while a rebase waits at a conflict: each refused with what to do, nothing written."""
    series(releases, "0002-greet", "0004-bye")
    before = snapshot(releases.root)
    res = releases.run("rebase", "--to", "not-a-release")
    assert res.returncode == 2 and "'not-a-release' is neither a version, a tag (v1.0) nor a commit" in res.stderr
    res = releases.run("rebase", "--to", "abcdef0")
    assert res.returncode == 2 and "give a release version of demo, as 1.0" in " ".join(res.stderr.split())
    res = releases.run("rebase", "--to", "9.9", "--dry-run")
    assert res.returncode == 4 and "demo 9.9 has no demo-9.9-py3-none-any.whl on the index" in res.stderr
    assert snapshot(releases.root) == before

    assert releases.run("rebase", "--to", "1.1").returncode == 3
    waiting = snapshot(releases.root)
    patch = releases.root / "patches/0002-greet.patch"
    patch.write_text(patch.read_text().replace("core: ", "core (edited): ", 1))
    edited = snapshot(releases.root)
    res = releases.run("rebase", "--continue")
    assert res.returncode == 2 and "patchset.toml or patches/ changed since the rebase started" in res.stderr
    assert "`patchtool rebase --abort` and start again" in res.stderr
    assert snapshot(releases.root) == edited != waiting
    assert releases.run("rebase", "--abort").returncode == 0


def test_predicted_conflicts_have_their_own_exit_code(releases: Demo) -> None:
    """A nightly job fails on a predicted conflict without parsing JSON; a clean prediction is 0."""
    series(releases, "0001-extra")
    for args in (("rebase", "--to", "1.1", "--dry-run"), ("scan", "--versions", "1.0..1.1")):
        res = releases.run(*args)
        assert res.returncode == 0 and "predicted" not in res.stdout, res.stdout + res.stderr
    series(releases, "0001-extra", "0004-bye")
    for args in (("rebase", "--to", "1.1", "--dry-run"), ("scan", "--versions", "1.0..1.1")):
        res = releases.run(*args)
        assert res.returncode == 5, res.stdout + res.stderr
        assert "bye" in res.stdout.split("predicted")[-1] and not res.stderr
    res = releases.run("scan", "--versions", "1.0..1.1", "--json")
    assert (res.returncode, json.loads(res.stdout)["status"]) == (5, "conflicts-predicted")


def test_widen_admits_the_target_for_each_verified_patch_and_says_so(releases: Demo) -> None:
    series(releases, "0001-extra", "0002-greet", "0005-cap")
    manifest = releases.root / "patchset.toml"
    text = manifest.read_text()
    for ident, spec in (("extra", "==1.0"), ("greet", ">=1.0,<1.1")):
        text = text.replace(f'id = "{ident}"', f'id = "{ident}"  # keep this comment', 1)
        head, tail = text.split(f'id = "{ident}"', 1)
        text = head + f'id = "{ident}"' + tail.replace('applies_to = ">=1.0"', f'applies_to = "{spec}"', 1)
    manifest.write_text(text)
    plain = releases.run("rebase", "--to", "1.1", "--dry-run", "--json")
    data = json.loads(plain.stdout)["data"]
    assert data["widened"] == [] and len(data["follow_up"]) == 2
    assert "'>=1.0,<=1.1' admits it" in data["follow_up"][1]

    res = releases.run("rebase", "--to", "1.1", "--widen", "--json", "--report", str(releases.root / "r.md"))
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads(res.stdout)["data"]
    assert data["widened"] == [
        {"patch": "extra", "old": "==1.0", "new": ">=1.0,<=1.1"},
        {"patch": "greet", "old": ">=1.0,<1.1", "new": ">=1.0,<=1.1"},
    ]
    assert data["follow_up"] == []
    assert data["old_pin_advice"]["admitted_by"] == ["extra", "greet"]
    assert "keep pin demo-1.0" in data["old_pin_advice"]["text"]
    written = manifest.read_text()
    assert 'applies_to = ">=1.0,<=1.1"' in written and "# keep this comment" in written
    report = (releases.root / "r.md").read_text()
    assert "### applies_to widened" in report and "- `extra`: `==1.0` → `>=1.0,<=1.1`" in report
    check = releases.run("check")
    assert check.returncode == 0 and "outside" not in check.stdout, check.stdout + check.stderr


def test_the_report_says_to_remove_an_old_pin_nothing_needs(releases: Demo) -> None:
    series(releases, "0001-extra")
    manifest = releases.root / "patchset.toml"
    manifest.write_text(manifest.read_text().replace('applies_to = ">=1.0"', 'applies_to = ">=1.1"'))
    res = releases.run("rebase", "--to", "1.1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "old pin: `patchtool pin remove demo-1.0`: no patch's applies_to admits 1.0 any more" in res.stdout


def test_a_dry_run_keeps_the_old_pin_a_conflicting_patch_admits(releases: Demo) -> None:
    """A patch that would stop the rebase still admits the old version: the dry run says so,
    never that no patch admits it."""
    series(releases, "0004-bye")
    res = releases.run("rebase", "--to", "1.1", "--dry-run")
    assert res.returncode == 5, res.stdout + res.stderr
    assert "no patch's applies_to admits" not in res.stdout
    assert (
        "old pin: keep pin demo-1.0 for now: bye (which would stop the rebase) still admit 1.0; once the "
        "rebase is through, `patchtool pin remove demo-1.0` if no patch kept admits it"
    ) in " ".join(res.stdout.split())
    series(releases, "0001-extra", "0004-bye")
    res = releases.run("rebase", "--to", "1.1", "--dry-run", "--json")
    advice = json.loads(res.stdout)["data"]["old_pin_advice"]
    assert (advice["admitted_by"], advice["undecided"]) == (["extra"], ["bye"])
    assert advice["text"].startswith("keep pin demo-1.0: extra and bye (which would stop the rebase) still admit 1.0;")


def test_widen_given_at_the_start_survives_a_conflict_stop(releases: Demo) -> None:
    series(releases, "0002-greet", "0004-bye")
    manifest = releases.root / "patchset.toml"
    manifest.write_text(manifest.read_text().replace('applies_to = ">=1.0"', 'applies_to = "==1.0"'))
    res = releases.run("rebase", "--to", "1.1", "--widen")
    assert res.returncode == 3, res.stdout + res.stderr
    worktree = releases.root / ".patchtool/rebase/worktree/python/demo/core.py"
    resolved = worktree.read_text()
    ours = resolved.split("=======\n")[1].split(">>>>>>>")[0]
    worktree.write_text(resolved.split("<<<<<<<")[0] + ours + resolved.split(">>>>>>>")[1].split("\n", 1)[1])
    done = releases.run("rebase", "--continue", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    widened = json.loads(done.stdout)["data"]["widened"]
    assert [w["patch"] for w in widened] == ["greet", "bye"]
    assert manifest.read_text().count('applies_to = ">=1.0,<=1.1"') == 2


def test_a_pruned_cache_recomputes_what_it_remembered(releases: Demo) -> None:
    """The remembered chain and its changes name commits and blobs; once their refs are gone and
    git prunes them, the next command computes them again instead of failing on a missing object."""
    series(releases, "0001-extra", "0002-greet", "0003-sibling", "0004-bye", "0005-cap", "0006-util")
    first = releases.run("rebase", "--to", "1.1", "--dry-run", "--json")
    assert first.returncode == 5, first.stdout + first.stderr
    cache = releases.cache / "upstream.git"
    refs = git(cache, "for-each-ref", "--format=%(refname)", "refs/patchtool/").split()
    assert any(r.startswith("refs/patchtool/chain/") for r in refs)
    for ref in refs:
        git(cache, "update-ref", "-d", ref)
    git(cache, "gc", "--quiet", "--prune=now")
    again = releases.run("rebase", "--to", "1.1", "--dry-run", "--json")
    assert again.returncode == first.returncode, again.stdout + again.stderr
    assert json.loads(again.stdout) == json.loads(first.stdout)


def test_scan_gives_each_version_what_a_dry_run_would_report(releases: Demo) -> None:
    """The scan page's cell detail: drift under applied patches and failed assumptions, per version."""
    releases.commit_patch(
        "0001-empty.patch", edit("python/demo/core.py", "    return True", "    return cap >= 0"), "core: limit"
    )
    releases.write_manifest(
        releases.entry("limit", "0001-empty.patch")
        + textwrap.dedent(r"""
        [[patch.assumptions]]
        id = "cap-check"
        file = "python/demo/core.py"
        regex = 'len\(queue\) > cap'
        why = "the limit is strict"
        """)
    )
    res = releases.run("scan", "--versions", "1.0..1.1", "--json")
    data = json.loads(res.stdout)["data"]
    assert res.returncode == 0, res.stdout + res.stderr
    assert data["drift"] == {
        "1.0": [],
        "1.1": [
            {
                "patch": "limit",
                "path": "python/demo/core.py",
                "scope": "limit",
                "change": "changed",
                "detail": "limit changed upstream (+0 lines)",
            }
        ],
    }
    assert data["failed_assumptions"]["1.0"] == []
    assert [(a["patch"], a["id"], a["ok"]) for a in data["failed_assumptions"]["1.1"]] == [
        ("limit", "cap-check", False)
    ]
    assert data["revisit"] == {}  # no registry


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        ({"pyproject.toml": '[project]\nname = "Demo"\nversion = "1.1.dev3"\n'}, "1.1.dev3"),
        ({"src/demo/__init__.py": '"""demo"""\n__version__ = "1.1rc1"\n'}, "1.1rc1"),
        ({"python/demo/version.py": '__version__ = "1.2"\n'}, "1.2"),
        ({"demo/_version.py": "__version__ = 'not a version'\n"}, "1.0"),  # none stated: the pin's own
    ],
)
def test_a_commit_target_takes_the_version_its_own_tree_states(
    tmp_path: Path, layout: dict[str, str], expected: str
) -> None:
    """``rebase --to <commit>`` names the new pin by the version the commit's tree states, found
    the way a Python project states one (pyproject, version.py, __init__.py), not only in SGLang's
    ``python/sglang/version.py``; a version packaging cannot read is no version, not a traceback."""
    import os

    up = tmp_path / "upstream"
    up.mkdir()
    git(up, "init", "-q", "-b", "main")
    write_tree(up, {"demo/core.py": "x = 1\n"})
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "demo 1.0")
    git(up, "tag", "v1.0")
    v10 = git(up, "rev-parse", "HEAD").strip()
    write_tree(up, layout)
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "next")
    head = git(up, "rev-parse", "HEAD").strip()
    root = tmp_path / "project"
    (root / "upstream-pins").mkdir(parents=True)
    (root / "upstream-pins" / "demo-1.0.toml").write_text(
        f'schema = 1\nname = "demo"\nversion = "1.0"\nuse = "git"\n\n[git]\nurl = "{up}"\ntag = "v1.0"\n'
        f'commit = "{v10}"\n'
    )
    (root / "patchset.toml").write_text('schema = 1\npin = "demo-1.0"\n')
    env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(tmp_path / "cache")}
    res = in_process(["rebase", "--to", head, "--dry-run", "--json", "--root", str(root)], env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["data"]["new_pin"] == f"demo-{expected}-g{head[:12]}"


def test_a_skipped_patch_s_assumptions_are_not_checked_as_if_it_stayed(releases: Demo) -> None:
    """After `--skip`, the finished rebase's failed assumptions are those of the patches the series
    still carries: the skipped patch's own claims went with it (issue 23)."""
    series(releases, "0001-extra", "0004-bye")
    text = (releases.root / "patchset.toml").read_text()
    claim = textwrap.dedent(r"""
        [[patch.assumptions]]
        id = "cap-check"
        file = "python/demo/core.py"
        regex = 'len\(queue\) > cap'
        why = "the limit is strict"
        """)
    (releases.root / "patchset.toml").write_text(text + claim)  # on bye, the last entry: 1.1 has >=
    res = releases.run("rebase", "--to", "1.1", "--json")
    assert res.returncode == 3, res.stdout + res.stderr  # bye conflicts at 1.1
    res = releases.run("rebase", "--skip", "--reason", "upstream rewrote it", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads(res.stdout)["data"]
    assert [s["outcome"] for s in data["patches"]] == ["applied unchanged", "dropped"]
    assert data["failed_assumptions"] == [], data["failed_assumptions"]

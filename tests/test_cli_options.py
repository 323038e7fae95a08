"""The issue-14 options on the command line: `import`/`new` metadata, plain diffs with
--author/--subject, and a pristine upstream tree (`apply --series none`) that `checkout` points to.
The core of each is tested in test_importing.py and test_metadata.py; these prove the wiring."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from conftest import Demo, edit
from helpers import git


def data(res) -> dict:  # type: ignore[no-untyped-def]
    assert res.stdout, res.stderr
    return json.loads(res.stdout)["data"]


def test_import_takes_the_entry_metadata_and_a_plain_diff(demo: Demo, tmp_path: Path) -> None:
    demo.write_manifest()
    git(demo.work, "checkout", "-q", "upstream")
    edit("python/demo/core.py", 'word = "bye"', 'word = "ciao"')(demo.work)
    diff = tmp_path / "ciao.diff"
    diff.write_text(git(demo.work, "diff"))
    git(demo.work, "checkout", "-q", "--", ".")
    res = demo.run(
        "import",
        str(diff),
        "--json",
        "--subject",
        "core: ciao",
        "--author",
        "Maria Rossi <m@example.org>",
        "--id",
        "say-ciao",
        "--kind",
        "operations",
        "--owner",
        "serving",
        "--why",
        "Italian users",
        "--applies-to",
        ">=1.0,<2",
        "--drop-when",
        "never",
    )
    assert res.returncode == 0, res.stdout + res.stderr
    (row,) = data(res)["added"]
    assert row["id"] == "say-ciao"
    (entry,) = tomllib.loads((demo.root / "patchset.toml").read_text())["patch"]
    assert {k: entry[k] for k in ("id", "kind", "owner", "why", "applies_to", "drop_when")} == {
        "id": "say-ciao",
        "kind": "operations",
        "owner": "serving",
        "why": "Italian users",
        "applies_to": ">=1.0,<2",
        "drop_when": "never",
    }
    assert "From: Maria Rossi <m@example.org>" in (demo.root / row["file"]).read_text()


def test_import_refuses_a_bad_kind_naming_the_field(demo: Demo, tmp_path: Path) -> None:
    demo.write_manifest()
    before = (demo.root / "patchset.toml").read_text()
    res = demo.run("import", str(tmp_path / "missing.patch"), "--kind", "perf", "--json")
    assert res.returncode == 2
    (error,) = json.loads(res.stdout)["errors"]
    assert "kind" in (error.get("key", "") + error["message"]) and "perf" in error["message"]
    assert (demo.root / "patchset.toml").read_text() == before


def test_new_takes_the_entry_metadata(one_patch: Demo) -> None:
    before = one_patch.run("new", "faster-greet", "--json")  # no checkout yet: a message, not a git failure
    assert before.returncode == 2 and "patchtool checkout" in before.stdout, before.stdout
    assert one_patch.run("checkout").returncode == 0
    me = {
        "GIT_AUTHOR_NAME": "Dana Fork",
        "GIT_AUTHOR_EMAIL": "dana@example.org",
        "GIT_COMMITTER_NAME": "Dana Fork",
        "GIT_COMMITTER_EMAIL": "dana@example.org",
    }
    res = one_patch.run("new", "faster-greet", "--kind", "performance", "--applies-to", ">=1.0", "--json", env=me)
    assert res.returncode == 0, res.stdout + res.stderr
    worktree = Path(data(res)["worktree"])
    edit("python/demo/core.py", '"hi"', '"hey"')(worktree)
    git(
        worktree,
        "-c",
        "user.name=Dana Fork",
        "-c",
        "user.email=dana@example.org",
        "commit",
        "-q",
        "-a",
        "--amend",
        "--no-edit",
    )
    res = one_patch.run("export", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    entry = tomllib.loads((one_patch.root / "patchset.toml").read_text())["patch"][-1]
    assert entry["id"] == "faster-greet" and entry["kind"] == "performance" and entry["applies_to"] == ">=1.0"


def test_a_pristine_upstream_tree_for_quilt_users(one_patch: Demo, tmp_path: Path) -> None:
    res = one_patch.run("checkout")
    assert res.returncode == 0, res.stderr
    assert "patchtool apply --series none --into DIR" in res.stdout
    res = one_patch.run("apply", "--series", "none", "--into", str(tmp_path / "pristine"), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert data(res)["patches"] == []
    assert '"hello"' in (tmp_path / "pristine" / "python/demo/core.py").read_text()
    patched = one_patch.run("apply", "--into", str(tmp_path / "patched"))
    assert patched.returncode == 0 and '"hi"' in (tmp_path / "patched" / "python/demo/core.py").read_text()
    assert one_patch.run("apply", "--series", "some").returncode == 2

"""apply / check / status on a small real upstream served over HTTP, through the real CLI."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from conftest import Demo, edit
from helpers import git, snapshot


def envelope(stdout: str) -> dict:  # type: ignore[type-arg]
    data = json.loads(stdout)
    assert set(data) == {"schema", "tool", "version", "command", "status", "exit_code", "data", "errors"}
    assert data["schema"] == 1 and data["tool"] == "patchtool"
    return data


def two_patches(demo: Demo) -> None:
    demo.commit_patch(
        "0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi", "Shorter greeting."
    )
    git(demo.work, "checkout", "-q", "p-0001-greet.patch")
    git(demo.work, "branch", "-f", "upstream-next", "HEAD")
    demo.commit_patch(
        "0002-cap.patch", edit("python/demo/core.py", "len(queue) > cap", "len(queue) >= cap"), "core: cap is inclusive"
    )
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"), demo.entry("cap", "0002-cap.patch"))


def test_apply_builds_one_commit_per_patch(demo: Demo) -> None:
    two_patches(demo)
    into = demo.root / "out"
    res = demo.run("apply", "--into", str(into))
    assert res.returncode == 0, res.stderr
    assert "applied  greet" in res.stdout and "applied  cap" in res.stdout
    log = git(into, "log", "--format=%an <%ae>|%s|%b", "-3").splitlines()
    assert log[0] == "Test Author <author@example.org>|core: cap is inclusive|"
    assert log[1] == "Test Author <author@example.org>|core: say hi|Shorter greeting."
    assert log[3].startswith("patchtool <patchtool@localhost>|demo 1.0|")
    core = (into / "python/demo/core.py").read_text()
    assert '"hi"' in core and "len(queue) >= cap" in core
    assert not git(into, "status", "--porcelain")


def test_apply_is_deterministic(demo: Demo) -> None:
    two_patches(demo)
    a = envelope(demo.run("apply", "--into", str(demo.root / "a"), "--json").stdout)
    b = envelope(demo.run("apply", "--into", str(demo.root / "b"), "--json").stdout)
    assert a["data"]["tip"] == b["data"]["tip"]
    assert [p["commit"] for p in a["data"]["patches"]] == [p["commit"] for p in b["data"]["patches"]]


def test_apply_refuses_a_non_empty_target_and_force_replaces_only_its_own(demo: Demo) -> None:
    two_patches(demo)
    mine = demo.root / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    res = demo.run("apply", "--into", str(mine), "--force")
    assert res.returncode == 2
    assert "is not a tree patchtool made; refusing to replace it" in res.stderr
    assert (mine / "notes.txt").read_text() == "keep me"
    out = demo.root / "out"
    assert demo.run("apply", "--into", str(out)).returncode == 0
    res = demo.run("apply", "--into", str(out))
    assert res.returncode == 2 and "exists and is not empty" in res.stderr
    assert demo.run("apply", "--into", str(out), "--force").returncode == 0


def failing(demo: Demo, old: str, new: str, *, ctx_edit: tuple[str, str] | None = None) -> None:
    """A series whose second patch was written against an upstream that differs from the pin."""
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi")
    git(demo.work, "checkout", "-q", "-B", "other", "upstream")
    if ctx_edit:
        edit("python/demo/core.py", *ctx_edit)(demo.work)
        git(demo.work, "commit", "-qam", "a different upstream")
    edit("python/demo/core.py", old, new)(demo.work)
    git(demo.work, "commit", "-qam", "core: change farewell")
    from helpers import format_patch

    (demo.root / "patches" / "0002-bye.patch").write_text(format_patch(demo.work))
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"), demo.entry("bye", "0002-bye.patch"))


def test_failure_names_patch_file_hunk_and_reason_and_leaves_target_untouched(demo: Demo) -> None:
    failing(demo, '"bye"', '"ciao"', ctx_edit=("word = ", "farewell_word = "))
    into = demo.root / "out"
    before = snapshot(demo.root)
    res = demo.run("apply", "--into", str(into))
    assert res.returncode == 3, res.stdout + res.stderr
    assert "applied  greet" in res.stdout
    assert "failed   bye" in res.stdout
    assert "python/demo/core.py: hunk 1 @@ -7,7 +7,7 @@ def greet(name):" in res.stdout
    assert (
        "why: context does not match - line 10: expected '    farewell_word = \"bye\"', found '    word = \"bye\"'"
    ) in res.stdout
    assert "patch bye (patches/0002-bye.patch) does not apply at demo-1.0" in res.stdout
    assert f"{into} was left untouched" in res.stdout
    assert not into.exists()
    assert snapshot(demo.root) == before


def test_keep_failed_leaves_a_partial_tree_where_the_report_says(demo: Demo) -> None:
    failing(demo, '"bye"', '"ciao"', ctx_edit=("word = ", "farewell_word = "))
    into = demo.root / "out"
    data = envelope(demo.run("apply", "--into", str(into), "--keep-failed", "--json").stdout)
    assert data["status"] == "conflict" and data["exit_code"] == 3
    partial = Path(data["data"]["partial_tree"])
    assert partial == demo.root / "out.failed-bye"
    assert '"hi"' in (partial / "python/demo/core.py").read_text()
    assert (partial / "python/demo/core.py.rej").exists()
    assert not into.exists()


def test_keep_failed_again_after_the_partial_tree_was_removed_by_hand(demo: Demo) -> None:
    """Found by an attack: after `rm -rf build`, the cache still registered the partial tree and
    git refused its path ("a missing but already registered worktree", exit 70)."""
    import shutil

    failing(demo, '"bye"', '"ciao"', ctx_edit=("word = ", "farewell_word = "))
    first = demo.run("apply", "--keep-failed", "--json")  # beside build/<pin>
    assert first.returncode == 3, first.stdout + first.stderr
    partial = Path(envelope(first.stdout)["data"]["partial_tree"])
    assert partial.parent == demo.root / "build"
    shutil.rmtree(demo.root / "build")
    before = snapshot(demo.root)
    res = demo.run("apply", "--keep-failed", "--json")
    data = envelope(res.stdout)
    assert (data["status"], data["exit_code"], res.returncode) == ("conflict", 3, 3), res.stdout + res.stderr
    assert data["errors"][0]["message"] == "patch bye (patches/0002-bye.patch) does not apply at demo-1.0"
    assert Path(data["data"]["partial_tree"]) == partial
    assert '"hi"' in (partial / "python/demo/core.py").read_text()
    assert (partial / "python/demo/core.py.rej").exists()
    assert {k: v for k, v in snapshot(demo.root).items() if not k.startswith(str(partial))} == before


def test_already_applied_patch_is_reported(demo: Demo) -> None:
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi")
    (demo.root / "patches" / "0002-again.patch").write_text((demo.root / "patches" / "0001-greet.patch").read_text())
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"), demo.entry("again", "0002-again.patch"))
    res = demo.run("apply", "--json")
    data = envelope(res.stdout)
    assert res.returncode == 3
    failure = data["data"]["patches"][1]["failures"][0]
    assert failure == {"file": "python/demo/core.py", "reason": "already applied (it applies in reverse)"}


def test_missing_file_is_reported(demo: Demo) -> None:
    def change(root: Path) -> None:
        (root / "python/demo/gone.py").write_text("a = 1\n")

    demo.commit_patch("0001-new.patch", change, "add gone")
    git(demo.work, "checkout", "-q", "p-0001-new.patch")
    git(demo.work, "branch", "-f", "upstream", "HEAD")
    demo.commit_patch("0002-edit-gone.patch", edit("python/demo/gone.py", "a = 1", "a = 2"), "edit gone")
    demo.write_manifest(demo.entry("edit-gone", "0002-edit-gone.patch"))
    (demo.root / "patches" / "0001-new.patch").unlink()
    res = demo.run("check")
    assert res.returncode == 1
    assert (
        "patches/0002-edit-gone.patch: patch edit-gone: does not apply at demo-1.0: python/demo/gone.py "
        "patch: file missing: the patch changes it, but upstream has no such file"
    ) in res.stdout


def test_check_is_clean_and_reports_assumptions(one_patch: Demo) -> None:
    manifest = (one_patch.root / "patchset.toml").read_text() + textwrap.dedent("""\
        [[patch.assumptions]]
        id = "limit-exists"
        file = "python/demo/core.py"
        regex = '^def limit\\('
        count = 1
        why = "the patch relies on limit()"
        """)
    (one_patch.root / "patchset.toml").write_text(manifest)
    res = one_patch.run("check", "--json")
    data = envelope(res.stdout)
    assert res.returncode == 0, res.stdout
    assert data["status"] == "ok"
    assert data["data"]["assumptions"][0]["ok"] is True


def test_check_reports_every_problem_at_once(one_patch: Demo) -> None:
    manifest = (one_patch.root / "patchset.toml").read_text() + textwrap.dedent("""\
        [[patch.assumptions]]
        id = "limit-twice"
        file = "python/demo/core.py"
        regex = '^def limit\\('
        count = 2
        why = "needs two"

        [[patch.assumptions]]
        id = "file-gone"
        file = "python/demo/removed.py"
        why = "needs it"
        """)
    manifest = manifest.replace('applies_to = ">=1.0"', 'applies_to = ">=2.0"')
    (one_patch.root / "patchset.toml").write_text(manifest)
    (one_patch.root / "patches" / "0009-stray.patch").write_text("junk")
    res = one_patch.run("check")
    assert res.returncode == 1
    out = res.stdout
    assert "patches/0009-stray.patch: patch file is not in the series" in out
    assert "patch greet: patch[0].applies_to: pin demo-1.0 is version 1.0, outside '>=2.0'" in out
    assert (
        "patch greet: assumptions.limit-twice: assumption failed at demo-1.0: expected python/demo/core.py "
        "has exactly 2 match(es) of /^def limit\\(/, found 1 match(es)"
    ) in out
    assert (
        "assumptions.file-gone: assumption failed at demo-1.0: expected python/demo/removed.py exists, found file absent"
        in out
    )
    assert "4 problem(s) found" in out


def test_check_wants_file_order_to_match_series_order(demo: Demo) -> None:
    two_patches(demo)
    demo.write_manifest(demo.entry("cap", "0002-cap.patch"), demo.entry("greet", "0001-greet.patch"))
    res = demo.run("check")
    assert "patch file names do not sort in series order" in res.stdout
    assert res.returncode == 1


def test_status_lists_the_series(demo: Demo) -> None:
    two_patches(demo)
    res = demo.run("status", "--long")
    assert res.returncode == 0, res.stderr
    assert "pin demo-1.0: demo 1.0 (artifact, base " in res.stdout
    assert "1. greet  [correctness]  upstream: pending  +1/-1  at pin: applied" in res.stdout
    assert "\x1b[" not in res.stdout  # colour only on a terminal
    data = envelope(demo.run("status", "--json").stdout)["data"]
    assert data["patches"][1] == {
        "id": "cap",
        "kind": "correctness",
        "upstream": "pending",
        "why": "because",
        "owner": "team",
        "evidence": [],
        "files": ["python/demo/core.py"],
        "added": 1,
        "removed": 1,
        "applies": "applied",
        "gpu_verification": [],
    }


def test_status_shows_gpu_verification(one_patch: Demo) -> None:
    manifest = (one_patch.root / "patchset.toml").read_text() + textwrap.dedent("""\
        [[patch.gpu_verification]]
        run = "python -m pytest tests/gpu/test_0001_greet.py::test_mma"
        expect = "max abs error < 1e-2"
        hardware = "sm_120"
        """)
    (one_patch.root / "patchset.toml").write_text(manifest)
    res = one_patch.run("status", "--long")
    assert "GPU verification on sm_120: python -m pytest tests/gpu/test_0001_greet.py::test_mma" in res.stdout
    assert "expect: max abs error < 1e-2" in res.stdout
    assert "no evidence: no results file in gpu-results/ has a check this runs" in res.stdout


def test_git_am_applies_the_series_without_the_tool(demo: Demo) -> None:
    two_patches(demo)
    git(demo.work, "checkout", "-q", "-B", "am", "upstream")
    patches = sorted(str(p) for p in (demo.root / "patches").glob("*.patch"))
    git(demo.work, "am", "-q", *patches)
    assert git(demo.work, "log", "--format=%s", "-2").splitlines() == ["core: cap is inclusive", "core: say hi"]


def test_check_carries_each_file_forward_through_the_series(demo: Demo) -> None:
    """Patch 2 edits the line patch 1 wrote: it applies only after patch 1, as in the series."""
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi")
    git(demo.work, "checkout", "-q", "p-0001-greet.patch")
    git(demo.work, "branch", "-f", "upstream", "HEAD")
    demo.commit_patch("0002-hey.patch", edit("python/demo/core.py", '"hi"', '"hey"'), "core: say hey")
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"), demo.entry("hey", "0002-hey.patch"))
    res = demo.run("check")
    assert res.returncode == 0, res.stdout
    assert "applies at the pin: 2/2" in res.stdout
    demo.write_manifest(demo.entry("hey", "0002-hey.patch"))
    res = demo.run("check")
    assert res.returncode == 1
    assert "python/demo/core.py hunk 1" in res.stdout and "context does not match" in res.stdout


def test_a_staging_tree_left_by_a_killed_run_is_cleaned_up(one_patch: Demo) -> None:
    stale = one_patch.root / ".out.patchtool-deadbeef"
    (stale / "python").mkdir(parents=True)
    res = one_patch.run("apply", "--into", str(one_patch.root / "out"))
    assert res.returncode == 0, res.stderr
    assert not stale.exists()
    assert (one_patch.root / "out" / "python/demo/core.py").read_text().count('"hi"') == 1

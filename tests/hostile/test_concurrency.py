"""One lock per patch repository: concurrent writers wait for each other (or fail naming the
holder), readers never see half a write; a stopped rebase is shown and guarded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import Demo, edit
from helpers import HANG_GUARD_S, git, snapshot
from test_rebase import releases, series  # noqa: F401  (the fixture, and the series it rebases)


def popen(demo: Demo, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    full = {**os.environ, "PATCHTOOL_CACHE_DIR": str(demo.cache), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "patchtool", *args],
        cwd=demo.root,
        env=full,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def exported(demo: Demo, tmp_path: Path, name: str, path: str, old: str, new: str) -> Path:
    git(demo.work, "checkout", "-q", "-B", name, "upstream")
    edit(path, old, new)(demo.work)
    git(demo.work, "commit", "-qam", f"{name}: change")
    out = tmp_path / f"{name}.patch"
    out.write_text(git(demo.work, "format-patch", "-1", "--stdout"))
    return out


def test_imports_at_once_all_land_under_their_own_numbers(one_patch: Demo, tmp_path: Path) -> None:
    changes = [
        ("aaa", "python/demo/util.py", "return 1", "return 2"),
        ("bbb", "python/demo/core.py", 'word = "bye"', 'word = "ciao"'),
        ("ccc", "python/demo/core.py", "len(queue) > cap", "len(queue) >= cap"),
        ("ddd", "python/demo/__init__.py", '"1.0"', '"1.0+x"'),
    ]
    patches = [exported(one_patch, tmp_path, *c) for c in changes]
    assert one_patch.run("status").returncode == 0  # the cache holds the pin: they race on the repository
    procs = [popen(one_patch, "import", str(p), "--json") for p in patches]
    for p in procs:
        out, err = p.communicate(timeout=HANG_GUARD_S)
        assert p.returncode == 0, out + err
    res = one_patch.run("status", "--json")
    assert res.returncode == 0, res.stderr
    ids = sorted(p["id"] for p in json.loads(res.stdout)["data"]["patches"])
    assert ids == ["aaa-change", "bbb-change", "ccc-change", "ddd-change", "greet"]
    files = sorted(p.name for p in (one_patch.root / "patches").glob("*.patch"))
    assert [f[:4] for f in files] == ["0001", "0002", "0003", "0004", "0005"]
    assert "applies at the pin: 5/5" in one_patch.run("check").stdout  # (the skeletons' TODOs are problems)


def test_two_applies_at_once_each_report_a_tree_that_exists(one_patch: Demo) -> None:
    assert one_patch.run("status").returncode == 0
    procs = [popen(one_patch, "apply", "--force", "--json") for _ in range(2)]
    trees = []
    for p in procs:
        out, err = p.communicate(timeout=HANG_GUARD_S)
        assert p.returncode == 0, out + err
        trees.append(json.loads(out)["data"]["tree"])
    assert trees[0] == trees[1]
    assert (Path(trees[0]) / "python/demo/core.py").read_text().count('"hi"') == 1


def test_a_writer_held_too_long_is_named_and_nothing_changes(one_patch: Demo, tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from patchtool.project import lock\n"
            "with lock.held(Path(sys.argv[1]), exclusive=True):\n    print('held', flush=True); sys.stdin.read()",
            str(one_patch.root),
            "patchtool",
            "import",
        ],
        stdin=subprocess.PIPE,  # it holds the lock until the test closes its input: on any load
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        patch = exported(one_patch, tmp_path, "ccc", "python/demo/util.py", "return 1", "return 2")
        before = snapshot(one_patch.root)
        for args in (("import", str(patch)), ("drop", "greet", "--reason", "x"), ("status",)):
            res = one_patch.run(*args, "--json", env={"PATCHTOOL_LOCK_TIMEOUT": "0.3"})
            assert res.returncode == 75, res.stdout + res.stderr
            envelope = json.loads(res.stdout)
            assert envelope["status"] == "busy"
            assert envelope["errors"][0]["message"] == (
                f"another patchtool command (pid {holder.pid}, `patchtool import`) holds the lock on {one_patch.root}"
            )
            assert envelope["errors"][0]["hint"] == "wait for it to finish and run this again"
        assert snapshot(one_patch.root) == before
    finally:
        holder.kill()
        holder.wait()
    assert one_patch.run("import", str(patch)).returncode == 0  # the kernel freed it with the process


def test_readers_share_the_lock(one_patch: Demo) -> None:
    assert one_patch.run("status").returncode == 0
    procs = [popen(one_patch, "status", env={"PATCHTOOL_LOCK_TIMEOUT": "0"}) for _ in range(3)]
    assert [p.wait(timeout=HANG_GUARD_S) for p in procs] == [0, 0, 0]


def test_a_stopped_rebase_is_shown_and_guards_the_series(releases: Demo, tmp_path: Path) -> None:  # noqa: F811
    series(releases, "0002-greet", "0004-bye", "0001-extra")
    res = releases.run("rebase", "--to", "1.1")
    assert res.returncode == 3
    stopped = snapshot(releases.root)
    patch = exported(releases, tmp_path, "ddd", "python/demo/util.py", "return 1", "return 2")
    for args in (
        ("drop", "greet", "--reason", "x"),
        ("import", str(patch)),
        ("export",),
        ("new", "fresh"),
        ("checkout",),
    ):
        res = releases.run(*args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert f"a rebase to demo-1.1 is in progress, stopped at bye; `{args[0]}` would change the series" in res.stderr
        assert "finish it first: `patchtool rebase --continue`" in res.stderr
        assert snapshot(releases.root) == stopped
    res = releases.run("status", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["data"]["rebase"] == {
        "old_pin": "demo-1.0",
        "new_pin": "demo-1.1",
        "done": 1,
        "stopped_at": "bye",
        "worktree": str(releases.root / ".patchtool/rebase/worktree"),
    }
    text = releases.run("status").stdout
    assert "rebase in progress: demo-1.0 -> demo-1.1, stopped at bye (patch 2 of 3)" in text
    assert releases.run("rebase", "--abort").returncode == 0
    assert json.loads(releases.run("status", "--json").stdout)["data"]["rebase"] is None
    assert releases.run("drop", "greet", "--reason", "now it may").returncode == 0


def test_a_rebase_state_naming_another_worktree_is_refused(releases: Demo, tmp_path: Path) -> None:  # noqa: F811
    series(releases, "0002-greet", "0004-bye", "0001-extra")
    assert releases.run("rebase", "--to", "1.1").returncode == 3
    state = releases.root / ".patchtool/rebase/state.json"
    data = json.loads(state.read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("mine\n")
    data["worktree"] = str(elsewhere)
    state.write_text(json.dumps(data))
    before = snapshot(releases.root, elsewhere)
    for args in (("rebase", "--continue"), ("status",)):
        res = releases.run(*args)
        assert res.returncode == 1, (args, res.stderr)
        assert (
            f"the rebase state is not one patchtool wrote (worktree '{elsewhere}' is not .patchtool/rebase/worktree)"
            in res.stderr
        )
    assert snapshot(releases.root, elsewhere) == before
    # --abort always gets out: it removes patchtool's own state and never goes where the state points
    res = releases.run("rebase", "--abort")
    assert res.returncode == 0, res.stderr
    assert not (releases.root / ".patchtool").exists() and snapshot(elsewhere) == {
        k: v for k, v in before.items() if k.startswith(str(elsewhere))
    }


def test_a_fifo_swapped_in_during_a_stop_is_refused_not_waited_on(releases: Demo) -> None:  # noqa: F811
    series(releases, "0002-greet", "0004-bye", "0001-extra")
    assert releases.run("rebase", "--to", "1.1").returncode == 3
    patch = releases.root / "patches" / "0001-extra.patch"
    patch.unlink()
    os.mkfifo(patch)
    for args in (("rebase", "--continue"), ("rebase", "--skip", "--reason", "x")):
        proc = popen(releases, *args)
        out, err = proc.communicate(
            timeout=HANG_GUARD_S
        )  # a FIFO read would block here forever: the limit guards that hang
        assert proc.returncode == 1, out + err
        assert err.startswith("error: patches/0001-extra.patch: is a named pipe (FIFO), not a regular file")


def test_a_resolution_that_keeps_none_of_the_patch_is_refused(releases: Demo) -> None:  # noqa: F811
    """Found by the model test: taking upstream's side of every conflict left an empty commit,
    exported as a patch file with no diff, and every command after refused the series."""
    series(releases, "0002-greet", "0004-bye", "0001-extra")
    data = json.loads(releases.run("rebase", "--to", "1.1", "--json").stdout)
    worktree = Path(data["data"]["worktree"])
    core = worktree / "python/demo/core.py"
    text = core.read_text()
    start, middle = text.index("<<<<<<<"), text.index("=======")
    end = text.index("\n", text.index(">>>>>>>")) + 1
    ours = text[text.index("\n", start) + 1 : middle]
    core.write_text(text[:start] + ours + text[end:])  # upstream's side only
    stopped = snapshot(releases.root)
    res = releases.run("rebase", "--continue")
    assert res.returncode == 2, res.stdout + res.stderr
    assert (
        f"the resolution in {worktree} leaves nothing of patch bye: it would be written as an empty patch file"
        in res.stderr
    )
    assert snapshot(releases.root) == stopped
    res = releases.run("rebase", "--skip", "--reason", "upstream's wording wins")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "applies at the pin: 2/2" in releases.run("check").stdout

"""A rebase where git's own merge conflicts, or does not: patchtool says the same, and loses nothing.

Each case is an upstream git repository with two tags (``v1.0``, ``v1.1``) and one patch made on
``v1.0``; the project pins ``v1.0`` (a git pin) and ``rebase --to 1.1`` moves it. ``git merge-tree``
of the same two commits is the reference (merge-ort; git 2.39 finds the merge base itself).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from cli_run import in_process
from helpers import format_patch, git, leftover_state, snapshot, write_tree

Change = Callable[[Path], None]


@dataclasses.dataclass(frozen=True)
class Fork:
    root: Path  # the patch project
    upstream: Path  # the upstream repository: v1.0, v1.1, and the patch's commit
    patch_commit: str
    cache: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(self.cache)}
        return in_process([*args, "--root", str(self.root)], env=env)

    def git_merge(self) -> tuple[int, str]:
        """``git merge-tree --write-tree v1.1 <patch>``: its exit code and messages."""
        res = subprocess.run(
            ["git", "merge-tree", "--write-tree", "v1.1", self.patch_commit],
            cwd=self.upstream,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"},
        )
        return res.returncode, res.stdout


def files(tree: dict[str, str]) -> Change:
    def change(work: Path) -> None:
        write_tree(work, tree)

    return change


def commands(*argvs: tuple[str, ...]) -> Change:
    """git commands run in the upstream worktree, then whatever ``files`` writes."""

    def change(work: Path) -> None:
        for argv in argvs:
            git(work, *argv)

    return change


def both(*changes: Change) -> Change:
    def change(work: Path) -> None:
        for c in changes:
            c(work)

    return change


def make_fork(tmp_path: Path, base: dict[str, str], patch: Change, upstream: Change) -> Fork:
    up = tmp_path / "upstream"
    up.mkdir()
    git(up, "init", "-q", "-b", "main")
    write_tree(up, base)
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "demo 1.0")
    git(up, "tag", "v1.0")
    v10 = git(up, "rev-parse", "HEAD").strip()
    patch(up)
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "the patch")
    patch_commit = git(up, "rev-parse", "HEAD").strip()
    text = format_patch(up)
    git(up, "checkout", "-q", "v1.0")
    upstream(up)
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "demo 1.1")
    git(up, "tag", "v1.1")
    root = tmp_path / "project"
    (root / "patches").mkdir(parents=True)
    (root / "upstream-pins").mkdir()
    (root / "upstream-pins" / "demo-1.0.toml").write_text(
        f'schema = 1\nname = "demo"\nversion = "1.0"\nuse = "git"\n\n[git]\nurl = "{up}"\ntag = "v1.0"\n'
        f'commit = "{v10}"\n'
    )
    (root / "patches" / "0001-change.patch").write_text(text)
    (root / "patchset.toml").write_text(
        'schema = 1\npin = "demo-1.0"\n\n[[patch]]\nid = "change"\nfile = "patches/0001-change.patch"\n'
        'kind = "correctness"\nowner = "team"\nwhy = "needed"\napplies_to = ">=1.0"\ndrop_when = "upstream"\n'
        'upstream = { status = "pending" }\n'
    )
    return Fork(root=root, upstream=up, patch_commit=patch_commit, cache=tmp_path / "cache")


def stopped(fork: Fork) -> tuple[dict[str, object], Path, str]:
    """``rebase --to 1.1`` that stops (exit 3): the patch's step, the conflict worktree, and the
    error (its message, then its hint)."""
    res = fork.run("rebase", "--to", "1.1", "--json")
    assert res.returncode == 3, res.stdout + res.stderr
    out = json.loads(res.stdout)
    (step,) = out["data"]["patches"]
    (error,) = out["errors"]
    return step, Path(out["data"]["worktree"]), f"{error['message']}\n{error.get('hint', '')}"


# -- file/directory ----------------------------------------------------------------------------

CORE = "def core():\n    return 1\n"
DIR_BASE = {"pkg/core.py": CORE, "pkg/dir/a.py": "A = 1\n"}


@pytest.mark.parametrize("replacement", ["file", "symlink"])
def test_a_file_added_under_a_directory_upstream_made_a_file_is_a_conflict(tmp_path: Path, replacement: str) -> None:
    """Upstream replaced the directory pkg/dir by a file (or a link); the patch adds pkg/dir/new.py.
    git reports a file/directory conflict; patchtool once applied it "unchanged" and wrote a tree
    without upstream's pkg/dir."""

    def upstream(work: Path) -> None:
        git(work, "rm", "-q", "-r", "pkg/dir")
        if replacement == "file":
            (work / "pkg/dir").write_text("upstream's file\n")
        else:
            (work / "pkg/dir").symlink_to("core.py")

    fork = make_fork(tmp_path, DIR_BASE, files({"pkg/dir/new.py": "NEW = 1\n"}), upstream)
    assert fork.git_merge()[0] == 1 and "CONFLICT (file/directory)" in fork.git_merge()[1]
    before = snapshot(fork.root / "patches", fork.root / "upstream-pins", fork.upstream)
    step, worktree, error = stopped(fork)
    assert step["outcome"] == "conflict"
    assert step["conflicted"] == ["pkg/dir~patch/new.py"]
    assert step["detail"] == (
        "CONFLICT (file/directory): the patch adds pkg/dir/new.py, but pkg/dir is a file "
        "upstream; the patch's file is left at pkg/dir~patch/new.py"
    )
    assert "patch change stopped the rebase (conflict): pkg/dir~patch/new.py" in error
    # nothing lost: upstream's pkg/dir as it was, the patch's file beside it, as git's index records it
    if replacement == "file":
        assert (worktree / "pkg/dir").read_text() == "upstream's file\n"
    else:
        assert os.readlink(worktree / "pkg/dir") == "core.py"
    assert (worktree / "pkg/dir~patch/new.py").read_text() == "NEW = 1\n"
    assert git(worktree, "status", "--porcelain").splitlines() == ["UA pkg/dir~patch/new.py"]
    assert snapshot(fork.root / "patches", fork.root / "upstream-pins", fork.upstream) == before
    res = fork.run("rebase", "--abort")
    assert res.returncode == 0, res.stderr
    assert leftover_state(fork.root) == []


def test_a_file_added_where_upstream_made_a_directory_is_a_conflict(tmp_path: Path) -> None:
    """The other way round: the patch adds the file pkg/extra, upstream added pkg/extra/mod.py."""
    fork = make_fork(
        tmp_path, DIR_BASE, files({"pkg/extra": "patch's file\n"}), files({"pkg/extra/mod.py": "MOD = 1\n"})
    )
    assert fork.git_merge()[0] == 1 and "CONFLICT (file/directory)" in fork.git_merge()[1]
    step, worktree, _ = stopped(fork)
    assert step["outcome"] == "conflict" and step["conflicted"] == ["pkg/extra~patch"]
    assert step["detail"] == (
        "CONFLICT (file/directory): the patch adds the file pkg/extra, but upstream has a "
        "directory there (pkg/extra/mod.py); the patch's file is left at pkg/extra~patch"
    )
    assert (worktree / "pkg/extra~patch").read_text() == "patch's file\n"
    assert git(worktree, "show", "HEAD:pkg/extra/mod.py") == "MOD = 1\n"


def test_a_patch_that_turns_a_directory_into_a_file_upstream_left_alone_applies(tmp_path: Path) -> None:
    """No conflict where git has none: the patch replaces pkg/dir by a file, upstream edits elsewhere."""
    fork = make_fork(
        tmp_path,
        DIR_BASE,
        both(commands(("rm", "-q", "-r", "pkg/dir")), files({"pkg/dir": "flat\n"})),
        files({"pkg/core.py": CORE + "\n\ndef more():\n    return 2\n"}),
    )
    assert fork.git_merge()[0] == 0
    res = fork.run("rebase", "--to", "1.1", "--dry-run", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    (step,) = json.loads(res.stdout)["data"]["patches"]
    assert step["outcome"] == "applied unchanged"


# -- rename/rename -----------------------------------------------------------------------------

BODY = "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(8))


def test_a_file_renamed_one_way_upstream_and_another_by_the_patch_is_a_conflict(tmp_path: Path) -> None:
    """Upstream renames pkg/f.py to pkg/g2.py, the patch to pkg/h.py: git conflicts (rename/rename);
    patchtool once wrote h.py and deleted upstream's g2.py."""
    fork = make_fork(
        tmp_path,
        {"pkg/f.py": BODY},
        both(commands(("mv", "pkg/f.py", "pkg/h.py")), files({"pkg/h.py": BODY.replace("return 2", "return 22")})),
        both(commands(("mv", "pkg/f.py", "pkg/g2.py")), files({"pkg/g2.py": BODY.replace("return 6", "return 66")})),
    )
    assert fork.git_merge()[0] == 1 and "CONFLICT (rename/rename)" in fork.git_merge()[1]
    step, worktree, error = stopped(fork)
    assert step["outcome"] == "conflict" and step["conflicted"] == ["pkg/h.py"]
    assert (
        step["detail"]
        == "CONFLICT (rename/rename): pkg/f.py renamed to pkg/g2.py upstream and to pkg/h.py by the patch"
    )
    assert "patch change stopped the rebase (conflict): pkg/h.py" in error
    # upstream's file stays; the patch's name holds both sides' changes, recorded as git records a conflict
    assert git(worktree, "show", "HEAD:pkg/g2.py") == BODY.replace("return 6", "return 66")
    merged = (worktree / "pkg/h.py").read_text()
    assert "return 22" in merged and "return 66" in merged
    stages = [line.split()[2] for line in git(worktree, "ls-files", "-u", "--", "pkg/h.py").splitlines()]
    assert stages == ["1", "2", "3"]


def test_a_file_renamed_the_same_way_by_both_merges_cleanly(tmp_path: Path) -> None:
    fork = make_fork(
        tmp_path,
        {"pkg/f.py": BODY},
        both(commands(("mv", "pkg/f.py", "pkg/g.py")), files({"pkg/g.py": BODY.replace("return 2", "return 22")})),
        commands(("mv", "pkg/f.py", "pkg/g.py")),
    )
    assert fork.git_merge()[0] == 0
    res = fork.run("rebase", "--to", "1.1", "--dry-run", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    (step,) = json.loads(res.stdout)["data"]["patches"]
    assert step["outcome"] == "merged by 3-way merge" and step["renamed"] == ["pkg/f.py -> pkg/g.py (renamed upstream)"]


def test_drift_follows_a_file_upstream_renamed_and_says_where_it_went(tmp_path: Path) -> None:
    """Upstream moved pkg/f.py to pkg/g.py and edited f2 below the patch's line: the drift says
    where the file went and compares f2 there, never that the file no longer exists."""
    body = BODY.replace("    return 2\n", "".join(f"    v{i} = {i}\n" for i in range(6)) + "    return 2\n")
    fork = make_fork(
        tmp_path,
        {"pkg/f.py": body},
        files({"pkg/f.py": body.replace("v1 = 1", "v1 = 11")}),
        both(commands(("mv", "pkg/f.py", "pkg/g.py")), files({"pkg/g.py": body.replace("return 2", "return 3")})),
    )
    assert fork.git_merge()[0] == 0
    res = fork.run("rebase", "--to", "1.1", "--dry-run", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["data"]["drift"] == [
        {
            "patch": "change",
            "path": "pkg/f.py",
            "scope": "<file>",
            "change": "moved",
            "detail": "the file moved upstream to pkg/g.py",
        },
        {
            "patch": "change",
            "path": "pkg/f.py",
            "scope": "f2",
            "change": "changed",
            "detail": "f2 changed upstream (+0 lines)",
        },
    ]
    text = fork.run("rebase", "--to", "1.1", "--dry-run").stdout
    assert "change: pkg/f.py: the file moved upstream to pkg/g.py" in text and "no longer exists" not in text


def test_a_target_refused_on_a_git_pin_gives_that_pins_own_examples(tmp_path: Path) -> None:
    """`--to v2` on demo's git pin: the example tag and version are demo's, never sglang's."""
    change = files({"pkg/f.py": BODY.replace("return 2", "return 22")})
    fork = make_fork(tmp_path, {"pkg/f.py": BODY}, change, files({"pkg/g.py": BODY}))
    before = snapshot(fork.root)
    res = fork.run("rebase", "--to", "v2")
    assert res.returncode == 2, res.stdout + res.stderr
    message = " ".join(res.stderr.split())
    assert "'v2' is neither a version, a tag (v1.0) nor a commit" in message
    assert f"name a release of demo by its version or tag (as 1.0 or v1.0), or a commit of {fork.upstream}" in message
    assert "0.5" not in res.stderr
    assert snapshot(fork.root) == before


# -- placement ---------------------------------------------------------------------------------

SIBLING_CALLS = '"""Two siblings making the same call."""\n\n\n' + "".join(
    f'def {name}():\n    setup()\n    x = 1\n    y = 2\n    z = 3\n    call("a")\n    w = 4\n    v = 5\n'
    f"    u = 6\n    return x\n\n\n"
    for name in ("first", "second")
)


def test_the_same_edit_in_two_siblings_is_not_a_misplacement(tmp_path: Path) -> None:
    """The patch makes the same edit in first() and second(); upstream adds a line on top. git
    merges it cleanly; patchtool paired both hunks with first()'s and said second's "was in
    second, would land in first"."""
    fork = make_fork(
        tmp_path,
        {"pkg/calls.py": SIBLING_CALLS},
        files({"pkg/calls.py": SIBLING_CALLS.replace('call("a")', 'call("b")')}),
        files({"pkg/calls.py": "import os\n" + SIBLING_CALLS}),
    )
    assert fork.git_merge()[0] == 0
    res = fork.run("rebase", "--to", "1.1", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    (step,) = json.loads(res.stdout)["data"]["patches"]
    assert step["outcome"] == "applied with shifted context" and "misplaced" not in step
    patch = (fork.root / "patches/0001-change.patch").read_text()
    assert patch.count('-    call("a")\n+    call("b")') == 2


def test_an_edit_landing_in_the_other_sibling_is_still_a_misplacement(tmp_path: Path) -> None:
    """Pairing by position still sees a hunk that moved: the patch's edit was in second(), the
    merge's only such change is in first(); two edits that stayed in their functions pass."""
    from patchtool.diff.scopes import PlacedHunk
    from patchtool.rebase.replay import misplacements

    def hunk(line: int) -> PlacedHunk:
        return PlacedHunk("calls.py", line, line, ('    call("b")',), ('    call("a")',), (), "@@")

    patched = SIBLING_CALLS.replace('call("a")', 'call("b")')
    both_in_place = misplacements(
        [hunk(8), hunk(20)], {"calls.py": patched}, [hunk(9), hunk(21)], {"calls.py": "import os\n" + patched}
    )
    assert both_in_place == ()
    (wrong,) = misplacements([hunk(20)], {"calls.py": patched}, [hunk(9)], {"calls.py": "import os\n" + patched})
    assert "was in second, would land in first (line 9)" in wrong


SCRIPT = (
    '#!/usr/bin/env python3\n"""Tools."""\nimport sys\n\n\n'
    "def main():\n    a = 1\n    b = 2\n    c = 3\n    return a\n\n\n"
    "def other():\n    x = 1\n    y = 2\n    z = 3\n    return x\n\n\n"
    'if __name__ == "__main__":\n    sys.exit(main())\n'
)


def _applied_at_v11(fork: Fork, path: str) -> str:
    """``path`` after the rebased patch, applied by ``git apply`` onto v1.1."""
    wt = fork.upstream.parent / "at-v1.1"
    git(fork.upstream, "worktree", "add", "-q", "--detach", str(wt), "v1.1")
    git(wt, "apply", str(fork.root / "patches/0001-change.patch"))
    return (wt / path).read_text()


@pytest.mark.parametrize(("old", "new"), [("tools", "pkg/new.py"), ("pkg/tool.py", "bin/tool")])
def test_a_file_upstream_renamed_to_another_extension_keeps_its_hunks_in_place(
    tmp_path: Path, old: str, new: str
) -> None:
    """Upstream renames a script to a module (or a module to a script) and edits it; the patch
    edits other(). The hunk's scope was read by the old path's rules at the old pin and by the new
    path's after the merge ('def other():', a header line, against 'other'): a false "misplaced"
    where git merges cleanly. Both are read by the rules of the path the hunk lands in."""
    fork = make_fork(
        tmp_path,
        {old: SCRIPT},
        files({old: SCRIPT.replace("    y = 2\n", "    y = 22\n")}),
        both(commands(("rm", "-q", old)), files({new: SCRIPT.replace("import sys\n", "import os\nimport sys\n")})),
    )
    assert fork.git_merge()[0] == 0
    step = _rebased(fork)
    assert step["outcome"] == "merged by 3-way merge" and "misplaced" not in step
    assert step["renamed"] == [f"{old} -> {new} (renamed upstream)"]
    assert (
        _applied_at_v11(fork, new)
        == _git_tree_file(fork, new)
        == (SCRIPT.replace("import sys\n", "import os\nimport sys\n").replace("    y = 2\n", "    y = 22\n"))
    )


FOLDED = (
    "def first():\n    a = 1\n    return a\n\n\n"
    "def second():\n    b = 1\n    c = 2\n    d = 3\n    e = 4\n    f = 5\n    g = 6\n    return b\n"
)


def test_a_hunk_whose_def_line_upstream_deleted_lands_where_upstream_put_its_lines(tmp_path: Path) -> None:
    """Upstream folds second() into first() (it deletes first's return and second's def line);
    the patch edits second()'s last assignment. git merges it cleanly, the edit on its own line,
    now in first(); patchtool said "was in second, would land in first" though no second is left."""
    fork = make_fork(
        tmp_path,
        {"m.py": FOLDED},
        files({"m.py": FOLDED.replace("    g = 6\n", "    g = 66\n")}),
        files({"m.py": FOLDED.replace("    return a\n\n\ndef second():\n", "")}),
    )
    assert fork.git_merge()[0] == 0
    step = _rebased(fork)
    assert step["outcome"] == "applied with shifted context" and "misplaced" not in step
    assert (
        _applied_at_v11(fork, "m.py")
        == _git_tree_file(fork, "m.py")
        == (FOLDED.replace("    return a\n\n\ndef second():\n", "").replace("    g = 6\n", "    g = 66\n"))
    )


# -- already upstream, in another form ---------------------------------------------------------

RUN = 'def run(limit):\n    """Run up to limit."""\n    total = 0\n    return total\n\n\ndef other():\n    return 1\n'
GUARD = "    total = 0\n    if{}limit):\n        total = limit  # {}\n"


def test_a_patch_upstream_took_with_other_spacing_stops_and_offers_skip(tmp_path: Path) -> None:
    """Upstream merged the patch as `if (limit` where it said `if(limit` (in a commit of its own
    that changed more, so no patch-id finds it): the merge conflicts, and the stop says upstream
    has it, where, and the --skip that drops it with that reason."""
    fork = make_fork(
        tmp_path,
        {"pkg/run.py": RUN, "pkg/notes.txt": "a b\n"},
        files(
            {"pkg/run.py": RUN.replace("    total = 0\n", GUARD.format("(", "the cap")), "pkg/notes.txt": "a  b c\n"}
        ),
        files(
            {
                "pkg/run.py": RUN.replace("    total = 0\n", GUARD.format(" (", "the cap")).replace(
                    "return 1", "return 2"
                ),
                "pkg/notes.txt": "a b  c\n",
            }
        ),
    )
    assert fork.git_merge()[0] == 1
    step, _, error = stopped(fork)
    assert step["outcome"] == "conflict" and step["conflicted"] == ["pkg/notes.txt", "pkg/run.py"]
    assert step["upstream_has"] == [
        "pkg/notes.txt: the patch's lines 1-1 are upstream's 1-1",
        "pkg/run.py: the patch's lines 4-5 are upstream's 4-5",
    ]
    assert step["detail"].startswith("upstream has it (differs in whitespace/formatting): pkg/notes.txt: ")
    assert (
        "to drop it, `patchtool rebase --skip --reason 'upstream has it (differs in whitespace/formatting)'`" in error
    )
    res = fork.run("rebase", "--skip", "--reason", "upstream has it (differs in whitespace/formatting)")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "upstream has it (differs in whitespace/formatting)" in (fork.root / "patchset.toml").read_text()


def test_a_patch_upstream_took_with_other_words_is_a_plain_conflict(tmp_path: Path) -> None:
    """A comment's words, a string's contents are not formatting: the same conflict says nothing of upstream."""
    fork = make_fork(
        tmp_path,
        {"pkg/run.py": RUN},
        files({"pkg/run.py": RUN.replace("    total = 0\n", GUARD.format("(", "the cap"))}),
        files({"pkg/run.py": RUN.replace("    total = 0\n", GUARD.format(" (", "a cap"))}),
    )
    step, _, error = stopped(fork)
    assert step["outcome"] == "conflict" and "upstream_has" not in step
    assert step["detail"] == "CONFLICT (content): Merge conflict in pkg/run.py"
    assert "--skip --reason '...'" in error


# -- the 3-way merge decides, the text application only labels ---------------------------------


def _rebased(fork: Fork) -> dict[str, object]:
    res = fork.run("rebase", "--to", "1.1", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    (step,) = json.loads(res.stdout)["data"]["patches"]
    return step


def _git_tree_file(fork: Fork, path: str) -> str:
    tree = fork.git_merge()[1].split("\n", 1)[0]
    return git(fork.upstream, "cat-file", "-p", f"{tree}:{path}")


def test_periodic_context_matching_at_the_old_line_does_not_override_the_merge(tmp_path: Path) -> None:
    """Upstream deletes the four lines above a file of six identical periods; the patch edits the
    third period. Its context matches again at the hunk's own old line (another period), so the
    text application took that spot and said "applied unchanged" without asking the merge; git
    puts the edit in the period it was in (finding 01)."""
    period = "    pass\n    pass\n    pass\n    x = 1\n"
    base = "h1\nh2\nh3\nh4\n" + period * 6
    lines = base.splitlines(True)
    lines[15] = "    x = 2\n"
    fork = make_fork(tmp_path, {"pkg/a.py": base}, files({"pkg/a.py": "".join(lines)}), files({"pkg/a.py": period * 6}))
    assert fork.git_merge()[0] == 0
    step = _rebased(fork)
    assert step["outcome"] == "merged by 3-way merge"
    assert step["detail"] == "plain context matching would have put it elsewhere; the 3-way merge placed it"
    rebased = (fork.root / "patches/0001-change.patch").read_text()
    assert "@@ -9,7 +9,7 @@" in rebased  # the third period, as git's merge put it (line 12 of 24)
    assert _git_tree_file(fork, "pkg/a.py").splitlines()[11] == "    x = 2"


def test_a_reverse_match_in_another_function_is_not_already_upstream(tmp_path: Path) -> None:
    """The patch changes call("a") to call("b") in first(); upstream changed that line to call("c")
    and added a second() whose body is the patch's result. The reverse application found it in
    second() and dropped the patch as "already upstream"; git conflicts, and so does patchtool
    now, its patch file and pins untouched (finding 02)."""

    def fn(name: str, arg: str) -> str:
        return (
            f'def {name}():\n    log("{name}")\n    setup()\n    prepare()\n    load()\n    call("{arg}")\n'
            "    finish()\n    cleanup()\n    close()\n\n\n"
        )

    fork = make_fork(
        tmp_path,
        {"pkg/a.py": "import x\n\n\n" + fn("first", "a") + "# tail\n"},
        files({"pkg/a.py": "import x\n\n\n" + fn("first", "b") + "# tail\n"}),
        files({"pkg/a.py": "import x\n\n\n" + fn("first", "c") + "# tail\n\n\n" + fn("second", "b") + "# end\n"}),
    )
    assert fork.git_merge()[0] == 1 and "CONFLICT (content)" in fork.git_merge()[1]
    before = snapshot(fork.root / "patches", fork.root / "upstream-pins", fork.upstream)
    step, _, error = stopped(fork)
    assert step["outcome"] == "conflict" and step["conflicted"] == ["pkg/a.py"]
    assert step["detail"] == "CONFLICT (content): Merge conflict in pkg/a.py"
    assert "patch change stopped the rebase (conflict): pkg/a.py" in error
    assert snapshot(fork.root / "patches", fork.root / "upstream-pins", fork.upstream) == before


def test_a_content_merge_gives_merge_orts_verdict_on_any_git(tmp_path: Path) -> None:
    """Three identical blocks; the patch edits the middle one, upstream adds a line on top and
    drops a block. merge-ort (histogram) conflicts; git merge-file before 2.42 cannot diff with
    histogram, and the silent myers fallback merged it cleanly (finding 04). The conflict's
    markers carry patchtool's labels, as git merge-file's would."""
    block = "".join(f"l{i}\n" for i in range(12))
    fork = make_fork(
        tmp_path,
        {"pkg/a.txt": block * 3},
        files({"pkg/a.txt": block + block.replace("l5\n", "L5\n") + block}),
        files({"pkg/a.txt": "top\n" + block * 2}),
    )
    assert fork.git_merge()[0] == 1 and "CONFLICT (content)" in fork.git_merge()[1]
    step, worktree, _ = stopped(fork)
    assert step["outcome"] == "conflict" and step["detail"] == "CONFLICT (content): Merge conflict in pkg/a.txt"
    merged = (worktree / "pkg/a.txt").read_text()
    assert merged.startswith("<<<<<<< demo 1.1 + series\ntop\n=======\n>>>>>>> patch change\nl0\n")
    assert merged == _git_tree_file(fork, "pkg/a.txt").replace("<<<<<<< v1.1", "<<<<<<< demo 1.1 + series").replace(
        f">>>>>>> {fork.patch_commit}", ">>>>>>> patch change"
    )
    assert git(fork.cache / "upstream.git", "for-each-ref", "refs/patchtool/merge-file") == ""  # none left


# -- directory renames (merge-ort's directory rename detection) ----------------------------------

LINES = {"pkg/d/x.txt": "".join(f"l{i}\n" for i in range(12)), "pkg/d/y.txt": "".join(f"g{i}\n" for i in range(12))}


def test_a_file_upstream_adds_in_a_directory_the_patch_moves_is_a_file_location_conflict(tmp_path: Path) -> None:
    """The patch moves pkg/d to pkg/e; upstream adds pkg/d/z.txt. git conflicts (file location)
    and puts z.txt in pkg/e; patchtool was clean and left z.txt alone in the emptied pkg/d."""
    fork = make_fork(tmp_path, LINES, commands(("mv", "pkg/d", "pkg/e")), files({"pkg/d/z.txt": "z\n"}))
    assert fork.git_merge()[0] == 1 and "CONFLICT (file location)" in fork.git_merge()[1]
    before = snapshot(fork.root / "patches", fork.root / "upstream-pins", fork.upstream)
    step, worktree, error = stopped(fork)
    assert step["outcome"] == "conflict" and step["conflicted"] == ["pkg/e/z.txt"]
    assert step["detail"] == (
        "CONFLICT (file location): upstream added pkg/d/z.txt in pkg/d, which the patch renamed "
        "to pkg/e; git would put it at pkg/e/z.txt, and so it is left there"
    )
    assert "stopped the rebase (conflict): pkg/e/z.txt" in error
    assert (worktree / "pkg/e/z.txt").read_text() == "z\n" and not (worktree / "pkg/d/z.txt").exists()
    assert snapshot(fork.root / "patches", fork.root / "upstream-pins", fork.upstream) == before


def test_a_file_the_patch_adds_in_a_directory_upstream_moved_is_a_file_location_conflict(tmp_path: Path) -> None:
    """The mirror: upstream moves pkg/d to pkg/e, the patch adds pkg/d/new.txt; patchtool said
    "applied unchanged" and left new.txt alone in pkg/d."""
    fork = make_fork(tmp_path, LINES, files({"pkg/d/new.txt": "n\n"}), commands(("mv", "pkg/d", "pkg/e")))
    assert fork.git_merge()[0] == 1 and "CONFLICT (file location)" in fork.git_merge()[1]
    step, worktree, _ = stopped(fork)
    assert step["outcome"] == "conflict" and step["conflicted"] == ["pkg/e/new.txt"]
    assert step["detail"] == (
        "CONFLICT (file location): the patch adds pkg/d/new.txt in pkg/d, which upstream renamed "
        "to pkg/e; git would put it at pkg/e/new.txt, and so it is left there"
    )
    assert (worktree / "pkg/e/new.txt").read_text() == "n\n" and not (worktree / "pkg/d/new.txt").exists()


# -- file types (merge-ort's "distinct types") ---------------------------------------------------


def _link(path: str, target: str) -> Change:
    """Upstream replaces ``path`` by a symbolic link to ``target``."""

    def change(work: Path) -> None:
        (work / path).unlink()
        (work / path).symlink_to(target)

    return change


def test_a_file_upstream_made_a_symlink_of_the_same_blob_is_a_distinct_types_conflict(tmp_path: Path) -> None:
    """Upstream turns pkg/f into a link whose target is the file's old text (the same blob, only
    the mode 100644 -> 120000 changes); the patch rewrites pkg/f. git conflicts (distinct types),
    keeps upstream's link at pkg/f and the patch's file at pkg/f~patch; patchtool merged it cleanly
    into a patch that edits a symbolic link (finding 01 of the second attack)."""
    fork = make_fork(
        tmp_path,
        {"pkg/f": "target.txt", "pkg/target.txt": "t\n"},
        files({"pkg/f": "line one\nline two\n"}),
        _link("pkg/f", "target.txt"),
    )
    code, out = fork.git_merge()
    assert code == 1 and "CONFLICT (distinct types)" in out
    assert "\tpkg/f~" in out and "2\tpkg/f\n" in out  # git too: upstream's link stays, the patch's file aside
    before = snapshot(fork.root / "patches", fork.root / "upstream-pins", fork.upstream)
    step, worktree, error = stopped(fork)
    assert step["outcome"] == "conflict" and step["conflicted"] == ["pkg/f~patch"]
    assert step["detail"] == (
        "CONFLICT (distinct types): pkg/f is a symlink upstream and a regular file in the patch; "
        "the patch's file is left at pkg/f~patch"
    )
    assert "patch change stopped the rebase (conflict): pkg/f~patch" in error
    assert os.readlink(worktree / "pkg/f") == "target.txt"
    assert (worktree / "pkg/f~patch").read_text() == "line one\nline two\n"
    # recorded as git records the patch's side: the base (a regular file, as it is) and the patch's file
    stages = [line.split()[:3] for line in git(worktree, "ls-files", "-u", "--", "pkg/f~patch").splitlines()]
    blob = git(fork.upstream, "rev-parse", f"{fork.patch_commit}:pkg/f").strip()
    assert stages[1] == ["100644", blob, "3"] and [s[2] for s in stages] == ["1", "3"]
    assert snapshot(fork.root / "patches", fork.root / "upstream-pins", fork.upstream) == before
    res = fork.run("rebase", "--abort")
    assert res.returncode == 0, res.stderr
    assert leftover_state(fork.root) == []


def test_a_file_the_patch_deletes_and_upstream_made_a_symlink_is_a_conflict(tmp_path: Path) -> None:
    """The same type change, the patch deleting pkg/f: for git the file changed upstream (its
    mode), a modify/delete conflict; patchtool compared only the blobs and deleted upstream's link."""
    fork = make_fork(
        tmp_path,
        {"pkg/f": "target.txt", "pkg/target.txt": "t\n"},
        commands(("rm", "-q", "pkg/f")),
        _link("pkg/f", "target.txt"),
    )
    code, out = fork.git_merge()
    assert code == 1 and "CONFLICT (modify/delete)" in out
    step, worktree, _ = stopped(fork)
    assert step["outcome"] == "conflict" and step["conflicted"] == ["pkg/f"]
    assert step["detail"] == "CONFLICT (delete/modify): pkg/f changed upstream and deleted by the patch"
    assert os.readlink(worktree / "pkg/f") == "target.txt"


def test_a_file_upstream_made_executable_and_the_patch_edits_still_merges(tmp_path: Path) -> None:
    """100644 -> 100755 is no change of type: git merges it cleanly, the executable bit kept."""

    def chmod(work: Path) -> None:
        (work / "pkg/run.sh").chmod(0o755)

    script = "".join(f"echo {i}\n" for i in range(8))
    fork = make_fork(
        tmp_path, {"pkg/run.sh": script}, files({"pkg/run.sh": script.replace("echo 6", "echo 66")}), chmod
    )
    assert fork.git_merge()[0] == 0
    step = _rebased(fork)
    assert step["outcome"] == "applied unchanged"
    assert "old mode 100644\nnew mode 100755" not in (fork.root / "patches/0001-change.patch").read_text()


NESTED = {f"pkg/d/sub/{n}.txt": "".join(f"{n}{i}\n" for i in range(6)) for n in "abc"}


def _move_sub(to: str) -> Change:
    """``git mv pkg/d/sub`` to ``to`` (its parent made first), leaving pkg/d empty."""

    def change(work: Path) -> None:
        (work / to).parent.mkdir(parents=True, exist_ok=True)
        git(work, "mv", "pkg/d/sub", to)

    return change


def test_a_file_upstream_adds_above_a_subdirectory_the_patch_moves_is_a_file_location_conflict(tmp_path: Path) -> None:
    """The patch moves pkg/d/sub to pkg/e/sub, which leaves pkg/d empty; upstream adds pkg/d/new.txt.
    merge-ort counts each file's rename for the directories above too (d/sub -> e/sub says d -> e)
    and conflicts, putting new.txt in pkg/e; patchtool looked only at each file's own directory,
    was clean and left new.txt in pkg/d (finding 02 of the second attack)."""
    fork = make_fork(tmp_path, NESTED, _move_sub("pkg/e/sub"), files({"pkg/d/new.txt": "new\n"}))
    code, out = fork.git_merge()
    assert code == 1 and "CONFLICT (file location)" in out and "moved to pkg/e/new.txt" in out
    before = snapshot(fork.root / "patches", fork.root / "upstream-pins", fork.upstream)
    step, worktree, error = stopped(fork)
    assert step["outcome"] == "conflict" and step["conflicted"] == ["pkg/e/new.txt"]
    assert step["detail"] == (
        "CONFLICT (file location): upstream added pkg/d/new.txt in pkg/d, which the patch "
        "renamed to pkg/e; git would put it at pkg/e/new.txt, and so it is left there"
    )
    assert "stopped the rebase (conflict): pkg/e/new.txt" in error
    assert (worktree / "pkg/e/new.txt").read_text() == "new\n" and not (worktree / "pkg/d/new.txt").exists()
    assert snapshot(fork.root / "patches", fork.root / "upstream-pins", fork.upstream) == before


def test_a_file_the_patch_adds_above_a_subdirectory_upstream_moved_is_a_file_location_conflict(tmp_path: Path) -> None:
    """The mirror: upstream moves pkg/d/sub to pkg/e/sub, the patch adds pkg/d/new.txt."""
    fork = make_fork(tmp_path, NESTED, files({"pkg/d/new.txt": "new\n"}), _move_sub("pkg/e/sub"))
    code, out = fork.git_merge()
    assert code == 1 and "CONFLICT (file location)" in out and "moved to pkg/e/new.txt" in out
    step, worktree, _ = stopped(fork)
    assert step["outcome"] == "conflict" and step["conflicted"] == ["pkg/e/new.txt"]
    assert step["detail"] == (
        "CONFLICT (file location): the patch adds pkg/d/new.txt in pkg/d, which upstream "
        "renamed to pkg/e; git would put it at pkg/e/new.txt, and so it is left there"
    )
    assert (worktree / "pkg/e/new.txt").read_text() == "new\n" and not (worktree / "pkg/d/new.txt").exists()


def test_a_subdirectory_moved_under_another_name_moves_no_parent(tmp_path: Path) -> None:
    """pkg/d/sub -> pkg/e/other says nothing of pkg/d (the names below differ): git merges
    upstream's pkg/d/new.txt where it is, cleanly, and so does patchtool."""
    fork = make_fork(tmp_path, NESTED, _move_sub("pkg/e/other"), files({"pkg/d/new.txt": "new\n"}))
    assert fork.git_merge()[0] == 0
    step = _rebased(fork)
    assert step["outcome"] == "merged by 3-way merge"

"""Plain (non-git) diffs read as ``git apply`` reads them, and git diff headers git refuses
refused here too: each case runs real ``git apply --check`` and ``git apply`` beside
``plain.git_diff`` + ``model.parse`` and asserts the same verdict and the same bytes.

The cases are written here in the style of git's t41xx apply tests (GPL: none is copied); the
comment on each names the t-file it follows."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Demo
from helpers import snapshot, write_tree
from patchtool.diff import model, plain
from patchtool.diff.patchfile import PatchFile
from patchtool.errors import InvalidInput

Tree = dict[str, bytes]
HEAD = f"From {'0' * 40} Mon Sep 17 00:00:00 2001\nFrom: A <a@example.org>\nSubject: [PATCH] x\n\n---\n"


def _git(cwd: Path, *args: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "LC_ALL": "C"}
    return subprocess.run(["git", *args], cwd=cwd, input=data, capture_output=True, env=env, check=False)


def _files(root: Path) -> Tree:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def git_apply(tree: Tree, diff: bytes, where: Path) -> Tree | None:
    """The tree ``git apply`` makes of ``tree`` and ``diff`` (None: git refuses), checked with
    ``--check`` first, as the verdict is."""
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    assert _git(where, "init", "-q").returncode == 0
    write_tree(where, tree)
    if _git(where, "apply", "--check", "-", data=diff).returncode:
        return None
    res = _git(where, "apply", "-", data=diff)
    assert res.returncode == 0, res.stderr
    return _files(where)


def ours(tree: Tree, diff: bytes, where: Path) -> Tree | model.DiffError | None:
    """What patchtool makes of a plain diff: its git diff, read by the model, applied by git;
    the DiffError where patchtool refuses it."""
    try:
        converted = plain.git_diff(diff.decode(), exists=lambda path: path in tree)
        parsed = model.parse(converted)
    except model.DiffError as exc:
        return exc
    result = git_apply(tree, converted.encode(), where)
    if result is not None:  # the model names the files git touched
        touched = {p for p in {*tree, *result} if tree.get(p) != result.get(p)}
        assert touched <= {f.path for f in parsed.files}
    return result


def agree(tmp_path: Path, tree: Tree, diff: bytes) -> Tree | None:
    theirs = git_apply(tree, diff, tmp_path / "git")
    mine = ours(tree, diff, tmp_path / "ours")
    if isinstance(mine, model.DiffError):
        assert theirs is None, f"git applies what patchtool refuses: {mine.message}"
        return None
    assert mine == theirs
    return mine


OLD = b"one\ntwo\nthree\n"
NEW = b"one\n2\nthree\n"
HUNK = "@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
STAMP = "2021-08-14 01:44:55.000000000 -0700"
EPOCH = "1970-01-01 00:00:00.000000000 +0000"

PLAIN = [
    # t4135-apply-weird-filenames.sh: a traditional patch, its timestamp after a tab
    ("tab-timestamp", {"x": OLD}, f"--- a/x\t{STAMP}\n+++ b/x\t{STAMP}\n{HUNK}", {"x": NEW}),
    # t4135: "whitespace-damaged traditional patch": two spaces, not a tab, before the timestamp
    (
        "spaces-timestamp",
        {"x": OLD},
        "--- a/x  2021-08-14 01:44:55 -0700\n+++ b/x  2021-08-14 01:44:55 -0700\n" + HUNK,
        {"x": NEW},
    ),
    # t4135: "traditional patch with colon in timezone"
    (
        "colon-zone",
        {"x": OLD},
        "--- a/x\t2021-08-14 01:44:55 -07:00\n+++ b/x\t2021-08-14 01:44:55 -07:00\n" + HUNK,
        {"x": NEW},
    ),
    # t4135: names with a space, no timestamp
    ("space-in-name", {"sp ace.py": OLD}, f"--- a/sp ace.py\n+++ b/sp ace.py\n{HUNK}", {"sp ace.py": NEW}),
    # t4135 "with tab": a tab ends a name that has no timestamp after it
    ("tab-ends-name", {"x": OLD}, f"--- a/x\tjunk\n+++ b/x\tjunk\n{HUNK}", {"x": NEW}),
    # t4132-apply-removal.sh: /dev/null creates and deletes
    ("dev-null-creates", {}, "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1,2 @@\n+a\n+b\n", {"new.py": b"a\nb\n"}),
    (
        "dev-null-deletes",
        {"x": OLD, "y": b"y\n"},
        "--- a/x\n+++ /dev/null\n@@ -1,3 +0,0 @@\n-one\n-two\n-three\n",
        {"y": b"y\n"},
    ),
    # t4132: the epoch timestamp of GNU diff -N creates and deletes, in any zone
    ("epoch-creates", {}, f"--- a/new.py\t{EPOCH}\n+++ b/new.py\t{STAMP}\n@@ -0,0 +1 @@\n+a\n", {"new.py": b"a\n"}),
    (
        "epoch-west-creates",
        {},
        "--- a/new.py\t1969-12-31 16:00:00 -0800\n+++ b/new.py\t2021-01-01 00:00:00 +0000\n@@ -0,0 +1 @@\n+a\n",
        {"new.py": b"a\n"},
    ),
    (
        "epoch-east-deletes",
        {"x": b"a\n", "y": b""},
        "--- a/x\t2021-01-01 00:00:00 +0000\n+++ b/x\t1970-01-01 05:30:00 +0530\n@@ -1 +0,0 @@\n-a\n",
        {"y": b""},
    ),
    # t4132: a near-epoch timestamp neither creates nor deletes: the file is emptied
    (
        "not-epoch-empties",
        {"x": b"a\n"},
        "--- a/x\t2021-01-01 00:00:00 +0000\n+++ b/x\t1970-01-01 00:00:01 +0000\n@@ -1 +0,0 @@\n-a\n",
        {"x": b""},
    ),
    # t4120-apply-popt.sh: names without a directory are taken whole (git guesses -p0)
    ("orig-and-new", {"x": OLD}, f"--- x.orig\t{STAMP}\n+++ x\t{STAMP}\n{HUNK}", {"x": NEW}),
    ("new-and-orig", {"x": OLD}, f"--- x\n+++ x.orig\n{HUNK}", {"x": NEW}),
    # t4120: the first directory is stripped whatever it is called
    ("any-prefix", {"src/m.py": OLD}, f"--- pkg-1.0.orig/src/m.py\n+++ pkg-1.0/src/m.py\n{HUNK}", {"src/m.py": NEW}),
    # t4133-apply-filenames.sh: the '+++' name wins over a different '---' name
    ("plus-name-wins", {"x": OLD, "y": OLD}, f"--- a/y\n+++ b/x\n{HUNK}", {"x": NEW, "y": OLD}),
    # quilt and diff -ru output: Index:/=== and 'diff -ru' lines between files are ignored
    (
        "quilt-garbage",
        {"a.py": OLD, "b.py": OLD},
        f"Index: pkg/a.py\n{'=' * 20}\n--- pkg.orig/a.py\n+++ pkg/a.py\n"
        f"{HUNK}diff -ru pkg.orig/b.py pkg/b.py\n--- pkg.orig/b.py\n+++ pkg/b.py\n{HUNK}",
        {"a.py": NEW, "b.py": NEW},
    ),
    # t4101-apply-nonl.sh: the marker after the last line of a hunk
    (
        "no-newline",
        {"x": b"a\nb"},
        "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n",
        {"x": b"a\nc\n"},
    ),
    # an empty line inside a hunk is an empty context line (newer GNU diff)
    ("empty-context", {"x": b"a\n\nb\n"}, "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n", {"x": b"a\n\nc\n"}),
    # an only-added file in one hunk, no /dev/null: created where missing, patched where present
    ("only-added-missing", {}, "--- a/n\n+++ b/n\n@@ -0,0 +1 @@\n+a\n", {"n": b"a\n"}),
    ("only-added-present", {"n": b"z\n"}, "--- a/n\n+++ b/n\n@@ -0,0 +1 @@\n+a\n", None),  # git: does not apply
    # CRLF text: a '\r' at the end of a name line is not part of the name
    (
        "crlf-lines",
        {"x": b"one\r\ntwo\r\n"},
        "--- a/x\r\n+++ b/x\r\n@@ -1,2 +1,2 @@\n one\r\n-two\r\n+2\r\n",
        {"x": b"one\r\n2\r\n"},
    ),
]

REFUSED = [
    # t4124-apply-ws-rule.sh style: a bare CR line inside a hunk is corrupt to git
    (
        "bare-cr",
        {"x": b"a\n\r\nb\n"},
        "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n\r\n-b\n+c\n",
        "corrupt patch at line 5: '\\r' inside a hunk",
    ),
    # t4136-apply-check.sh: a cut-short hunk
    (
        "cut-short",
        {"x": OLD},
        "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n one\n-two\n",
        "corrupt patch at line 6: the hunk at line 3 is cut short",
    ),
    ("no-change", {"x": OLD}, "--- a/x\n+++ b/x\n@@ -1 +1 @@\n one\n", "the hunk changes no line"),
    ("hunk-without-header", {"x": OLD}, "@@ -1 +1 @@\n-one\n+1\n", "line 1: a hunk without a '---'/'+++' header"),
    (
        "new-with-old-contents",
        {},
        "--- /dev/null\n+++ b/n\n@@ -1 +1 @@\n-a\n+b\n",
        "new file n depends on old contents",
    ),
    (
        "deleted-with-contents",
        {"x": b"a\n"},
        "--- a/x\n+++ /dev/null\n@@ -1 +1 @@\n-a\n+b\n",
        "deleted file x still has contents",
    ),
    ("nothing", {"x": OLD}, "just words\n", "no file's diff found"),
    # t4139-apply-escape.sh style: what git would write outside the tree or into .git
    ("dotdot", {}, "--- /dev/null\n+++ b/../../etc/x\n@@ -0,0 +1 @@\n+a\n", "unsafe diff: path '../../etc/x' escapes"),
    ("dotgit", {}, "--- /dev/null\n+++ b/.git/hooks/pre-commit\n@@ -0,0 +1 @@\n+a\n", "touches .git/"),
    ("tab-in-name", {}, f"--- /dev/null\n+++ b/x\ty\t{STAMP}\n@@ -0,0 +1 @@\n+a\n", "contains a control character"),
]


@pytest.mark.parametrize(("tree", "diff", "result"), [c[1:] for c in PLAIN], ids=[c[0] for c in PLAIN])
def test_plain_diffs_apply_as_git_applies_them(tmp_path: Path, tree: Tree, diff: str, result: Tree | None) -> None:
    assert agree(tmp_path, tree, diff.encode()) == result


@pytest.mark.parametrize(("tree", "diff", "message"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_what_git_calls_corrupt_or_unsafe_is_refused_at_its_line(
    tmp_path: Path, tree: Tree, diff: str, message: str
) -> None:
    before = snapshot(tmp_path)
    with pytest.raises(model.DiffError, match=re.escape(message)) as exc:
        plain.git_diff(diff, exists=lambda path: path in tree)
    assert exc.value.hint and snapshot(tmp_path) == before
    if "unsafe" not in message and "control" not in message and ".git" not in message:
        assert git_apply(tree, diff.encode(), tmp_path / "git") is None  # git refuses it too


def test_binary_files_lines_are_refused_not_dropped(tmp_path: Path) -> None:
    """diff -ru writes 'Binary files A and B differ' for a binary file; git apply skips the line
    (and loses the change); unidiff made a file of it with whatever path it names, even an
    absolute one, which no validator saw. A binary change cannot come from a plain diff."""
    diff = f"--- a/x\n+++ b/x\n{HUNK}Binary files /etc/a/img.png and /etc/b/img.png differ\n"
    with pytest.raises(
        model.DiffError,
        match="line 8: 'Binary files /etc/a/img.png and /etc/b/img.png differ': "
        "a binary change cannot be applied from a plain diff",
    ):
        plain.git_diff(diff)
    assert git_apply({"x": OLD}, diff.encode(), tmp_path / "git") == {"x": NEW}  # git: silently dropped


def test_a_file_only_added_to_is_not_guessed_without_the_tree() -> None:
    with pytest.raises(model.DiffError, match="'n' is only added to and not marked new"):
        plain.git_diff("--- a/n\n+++ b/n\n@@ -0,0 +1 @@\n+a\n")


def test_the_git_diff_keeps_the_hunks_and_quotes_names() -> None:
    converted = plain.git_diff(f"--- a/sp ace\u00e9.py\t{STAMP}\n+++ b/sp ace\u00e9.py\t{STAMP}\n{HUNK}")
    assert converted == (
        'diff --git "a/sp ace\\303\\251.py" "b/sp ace\\303\\251.py"\n'
        '--- "a/sp ace\\303\\251.py"\n+++ "b/sp ace\\303\\251.py"\n' + HUNK
    )
    (f,) = model.parse(converted).files
    assert (f.path, f.status, f.old_path, f.new_path) == (
        "sp ace\u00e9.py",
        "modified",
        "sp ace\u00e9.py",
        "sp ace\u00e9.py",
    )


# git diff headers git's apply.c refuses (check_header_line, gitdiff_verify_name), and hunks it
# calls corrupt: the model refused them as git does, or read them its own way.
GIT_REFUSED = [
    # t4136-apply-check.sh: "invalid combination: create and copy" / "create and rename"
    (
        "create-and-copy",
        "diff --git a/x b/y\nnew file mode 100644\ncopy from x\ncopy to y\n",
        "inconsistent header lines 2 and 3: 'copy from x' makes the section added and copied at once",
    ),
    (
        "create-and-rename",
        "diff --git a/x b/y\nnew file mode 100644\nrename from x\nrename to y\n",
        "inconsistent header lines 2 and 3: 'rename from x' makes the section added and renamed at once",
    ),
    (
        "delete-and-rename",
        "diff --git a/x b/y\ndeleted file mode 100644\nrename from x\nrename to y\n",
        "inconsistent header lines 2 and 3",
    ),
    ("rename-and-copy", "diff --git a/x b/y\nrename from x\ncopy to y\n", "inconsistent header lines 2 and 3"),
    # t4154-apply-git-header.sh style: '/dev/null' where no header said new
    (
        "dev-null-not-new",
        "diff --git a/x b/x\n--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+a\n",
        "'--- /dev/null' at line 2 in a section without 'new file mode'",
    ),
    (
        "new-not-dev-null",
        "diff --git a/x b/x\nnew file mode 100644\n--- a/x\n+++ b/x\n@@ -0,0 +1 @@\n+a\n",
        "'--- a/x' at line 3: git apply expects /dev/null there",
    ),
    (
        "inconsistent-new-name",
        "diff --git a/x b/x\nnew file mode 100644\n--- /dev/null\n+++ b/y\n@@ -0,0 +1 @@\n+a\n",
        "inconsistent new filename on line 4: 'y', where the header named 'x'",
    ),
    (
        "bare-cr",
        "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n\r\n-b\n+c\n",
        "corrupt patch at line 6: '\\r' inside a hunk",
    ),
]


@pytest.mark.parametrize(("diff", "message"), [c[1:] for c in GIT_REFUSED], ids=[c[0] for c in GIT_REFUSED])
def test_git_headers_git_refuses_are_refused(tmp_path: Path, diff: str, message: str) -> None:
    with pytest.raises(model.DiffError, match=re.escape(message)):
        model.parse(diff)
    with pytest.raises(InvalidInput) as exc:
        PatchFile.parse(HEAD + diff, name="p.patch")
    (problem,) = exc.value.problems
    assert problem.line is not None and problem.line > HEAD.count("\n") and problem.hint
    assert git_apply({"x": b"a\n\r\nb\n"}, diff.encode(), tmp_path / "git") is None


@pytest.mark.parametrize(
    ("name", "diff", "message"),
    [
        ("create-and-rename", GIT_REFUSED[1][1], "inconsistent header lines 7 and 8"),
        ("bare-cr", GIT_REFUSED[-1][1], "corrupt patch at line 11"),
        (
            "stray-binary",
            "diff --git a/greet.py b/greet.py\n--- a/greet.py\n+++ b/greet.py\n@@ -1 +1 @@\n-a\n+b\n"
            "Binary files /etc/a and /etc/b differ\n",
            "is outside every 'diff --git' section: a binary change",
        ),
    ],
)
def test_a_patch_file_git_refuses_stops_apply_and_check(one_patch: Demo, name: str, diff: str, message: str) -> None:
    (one_patch.root / "patches" / "0001-greet.patch").write_text(HEAD + diff)
    before = snapshot(one_patch.root)
    for command in ("apply", "check"):
        res = one_patch.run(command)
        assert res.returncode == 1, res.stderr
        assert message in res.stdout + res.stderr and "Traceback" not in res.stderr
    assert snapshot(one_patch.root) == before


# Differential, generated: GNU diff -u of real file pairs, with random labels in the styles
# found in the wild (a/ b/ prefixes, pkg-1.0.orig/ and pkg-1.0/, .orig names, /dev/null or the
# epoch for a new or deleted file), timestamps after a tab or spaces, in any zone.
LINES = ["a", "b", "c", "def f():", "    return 1", "", "x = 1", "# comment"]


def _text(rng: random.Random) -> bytes:
    return "".join(rng.choice(LINES) + "\n" for _ in range(rng.randrange(0, 8))).encode()


def _label(rng: random.Random, style: str, side: str, path: str, stamp: str) -> str:
    name = {
        "ab": f"{side}/{path}",
        "pkg": f"pkg-1.{0 if side == 'a' else 1}{'.orig' if side == 'a' else ''}/{path}",
        "orig": path + (".orig" if side == "a" else ""),
    }[style]
    return name + rng.choice(["\t", "  ", " "]) + stamp


@pytest.mark.skipif(shutil.which("diff") is None, reason="GNU diff (Debian's diffutils) is not installed")
@settings(max_examples=40, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32),
    style=st.sampled_from(["ab", "pkg", "orig"]),
    change=st.sampled_from(["modify", "create", "delete"]),
)
def test_generated_plain_diffs_agree_with_git(tmp_path: Path, seed: int, style: str, change: str) -> None:
    rng = random.Random(seed)
    path = "f.py" if style == "orig" else rng.choice(["f.py", "pkg/m.py", "d e/n.py"])
    old, new = _text(rng), _text(rng)
    if change == "create":
        old = b""
    elif change == "delete":
        new = b""
    if old == new:
        new += b"z\n"
    for side, text in (("a", old), ("b", new)):
        (tmp_path / side).write_bytes(text)
    zone = rng.choice(["+0000", "-0700", "+05:30", "+0100"])
    stamp = f"2021-08-14 01:44:55.{rng.randrange(10**9):09d} {zone}"
    epoch = rng.choice(
        ["1970-01-01 00:00:00 +0000", "1970-01-01 00:00:00.000000000 +0000", "1969-12-31 17:00:00.000000000 -0700"]
    )
    labels = [_label(rng, style, "a", path, stamp), _label(rng, style, "b", path, stamp)]
    marker = rng.choice(["dev-null", "epoch"])
    if change in ("create", "delete"):
        i = 0 if change == "create" else 1
        labels[i] = "/dev/null" if marker == "dev-null" else labels[i].rsplit(stamp, 1)[0].rstrip(" \t") + "\t" + epoch
    res = subprocess.run(
        ["diff", "-u", "--label", labels[0], "--label", labels[1], "a", "b"],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    assert res.returncode == 1, res.stderr
    tree = {} if change == "create" else {path: old}
    result = agree(tmp_path, tree, res.stdout)
    if result is not None:  # git accepted it: the file is what diff saw
        assert result.get(path, b"") == new


# an absolute name: its leading '/' is the first component -pN strips (git's find_name_traditional,
# GNU patch's strip_leading_slashes); t4120-apply-popt.sh style, compared with `git apply --summary`
ABSOLUTE = "--- /dev/null\n+++ /tmp/evil-abs.txt\n@@ -0,0 +1 @@\n+x\n"


@pytest.mark.parametrize(
    ("strip", "created"), [(None, "tmp/evil-abs.txt"), (1, "tmp/evil-abs.txt"), (2, "evil-abs.txt")]
)
def test_an_absolute_name_loses_its_slash_as_the_first_stripped_component(
    tmp_path: Path, strip: int | None, created: str
) -> None:
    assert _git(tmp_path, "init", "-q").returncode == 0
    summary = _git(tmp_path, "apply", "--summary", f"-p{strip or 1}", "-", data=ABSOLUTE.encode())
    assert summary.stdout.decode() == f" create {created}\n"  # what git makes of it
    (f,) = model.parse(plain.git_diff(ABSOLUTE, strip=strip)).files
    assert (f.status, f.path) == ("added", created)


def test_an_absolute_name_kept_whole_at_p0_is_refused(tmp_path: Path) -> None:
    assert _git(tmp_path, "init", "-q").returncode == 0
    summary = _git(tmp_path, "apply", "--summary", "-p0", "-", data=ABSOLUTE.encode())
    assert summary.stdout.decode() == " create /tmp/evil-abs.txt\n"  # git would write outside
    before = snapshot(tmp_path)
    with pytest.raises(model.DiffError, match=re.escape("unsafe diff: absolute path '/tmp/evil-abs.txt' (line 1)")):
        plain.git_diff(ABSOLUTE, strip=0)
    assert snapshot(tmp_path) == before and not Path("/tmp/evil-abs.txt").exists()

"""patchtool's in-memory apply against real ``git apply``, on cases written in the style of git's
own t41xx apply tests (each names the t-file or the apply.c rule it follows; the cases are ours,
git's tests are GPL-2). Each states what git does, so a change in git shows here, and asserts
that patchtool agrees: the same verdict, the same tree."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from differ import Entry, Link, check, make_repo

pytestmark = pytest.mark.corpus

FIVE = "a\nb\nc\nd\ne\n"


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    follows: str  # the git test (or apply.c rule) it is written after
    files: dict[str, Entry]
    patch: str
    git_applies: bool
    reverse: bool = False
    why: str = ""  # the part of git's message that names the refusal


CASES = [
    Case(
        "overlapping hunks: the second's context is the first's output",
        "apply.c LINE_PATCHED; t4104",
        {"f": FIVE},
        """\
diff --git a/f b/f
--- a/f
+++ b/f
@@ -1,3 +1,3 @@
 a
-b
+X
 c
@@ -2,3 +2,3 @@
 X
-c
+Y
 d
""",
        False,
        why="patch does not apply",
    ),
    Case(
        "overlapping hunks: the second reuses the first's trailing context",
        "apply.c LINE_PATCHED; t4104",
        {"f": FIVE},
        """\
diff --git a/f b/f
--- a/f
+++ b/f
@@ -1,3 +1,3 @@
 a
-b
+X
 c
@@ -3,3 +3,3 @@
 c
-d
+Y
 e
""",
        False,
        why="patch does not apply",
    ),
    Case(
        "adjacent hunks that share no line apply",
        "t4104-apply-boundary.sh",
        {"f": "a\nb\nc\nd\ne\nf\ng\n"},
        """\
diff --git a/f b/f
--- a/f
+++ b/f
@@ -1,3 +1,3 @@
 a
-b
+X
 c
@@ -4,3 +4,3 @@
 d
-e
+Y
 f
""",
        True,
    ),
    Case(
        "a copy keeps its source",
        "t4102-apply-rename.sh (copy)",
        {"a": "one\ntwo\n"},
        """\
diff --git a/a b/c
similarity index 100%
copy from a
copy to c
""",
        True,
    ),
    Case(
        "a copy with an edit keeps its source as it was",
        "t4102-apply-rename.sh (copy)",
        {"a": "one\ntwo\n"},
        """\
diff --git a/a b/c
similarity index 50%
copy from a
copy to c
--- a/a
+++ b/c
@@ -1,2 +1,2 @@
 one
-two
+three
""",
        True,
    ),
    Case(
        "a rename removes its source",
        "t4102-apply-rename.sh",
        {"a": "one\ntwo\n"},
        """\
diff --git a/a b/c
similarity index 100%
rename from a
rename to c
""",
        True,
    ),
    Case(
        "criss-cross renames read the tree, not each other",
        "t4130-apply-criss-cross-rename.sh",
        {"a": "one\n", "b": "uno\n"},
        """\
diff --git a/a b/b
similarity index 100%
rename from a
rename to b
diff --git a/b b/a
similarity index 100%
rename from b
rename to a
""",
        True,
    ),
    Case(
        "a three-way rotation of renames",
        "t4130-apply-criss-cross-rename.sh",
        {"a": "one\n", "b": "two\n", "c": "three\n"},
        """\
diff --git a/a b/b
similarity index 100%
rename from a
rename to b
diff --git a/b b/c
similarity index 100%
rename from b
rename to c
diff --git a/c b/a
similarity index 100%
rename from c
rename to a
""",
        True,
    ),
    Case(
        "a rename onto a file that stays",
        "t4102-apply-rename.sh",
        {"a": "one\n", "b": "two\n"},
        """\
diff --git a/a b/b
similarity index 100%
rename from a
rename to b
""",
        False,
        why="already exists in index",
    ),
    Case(
        "new file mode beside rename headers",
        "apply.c check_header_line",
        {"a": "one\n"},
        """\
diff --git a/a b/z
new file mode 100644
similarity index 100%
rename from a
rename to z
""",
        False,
        why="inconsistent header lines",
    ),
    Case(
        "new file mode beside copy headers",
        "apply.c check_header_line",
        {"a": "one\n"},
        """\
diff --git a/a b/z
new file mode 100644
similarity index 100%
copy from a
copy to z
""",
        False,
        why="inconsistent header lines",
    ),
    Case(
        "a file created beyond a symlinked directory",
        "t4122-apply-symlink-inside.sh",
        {"dir/x": "x\n", "link": Link("dir")},
        """\
diff --git a/link/new b/link/new
new file mode 100644
index 0000000..45b983b
--- /dev/null
+++ b/link/new
@@ -0,0 +1 @@
+hi
""",
        False,
        why="beyond a symbolic link",
    ),
    Case(
        "a file created inside a file",
        "t4114-apply-typechange.sh",
        {"f": "x\n"},
        """\
diff --git a/f/new b/f/new
new file mode 100644
index 0000000..45b983b
--- /dev/null
+++ b/f/new
@@ -0,0 +1 @@
+hi
""",
        False,
        why="appears as both a file and as a directory",
    ),
    Case(
        "a file created over a directory",
        "t4114-apply-typechange.sh",
        {"d/x": "x\n"},
        """\
diff --git a/d b/d
new file mode 100644
index 0000000..45b983b
--- /dev/null
+++ b/d
@@ -0,0 +1 @@
+hi
""",
        False,
        why="appears as both a file and as a directory",
    ),
    Case(
        "a directory becomes a file",
        "t4114-apply-typechange.sh (directory becomes file)",
        {"d/x": "x\n"},
        """\
diff --git a/d/x b/d/x
deleted file mode 100644
index 587be6b..0000000
--- a/d/x
+++ /dev/null
@@ -1 +0,0 @@
-x
diff --git a/d b/d
new file mode 100644
index 0000000..45b983b
--- /dev/null
+++ b/d
@@ -0,0 +1 @@
+hi
""",
        True,
    ),
    Case(
        "a file becomes a directory",
        "t4114-apply-typechange.sh (file becomes directory)",
        {"f": "x\n"},
        """\
diff --git a/f b/f
deleted file mode 100644
index 587be6b..0000000
--- a/f
+++ /dev/null
@@ -1 +0,0 @@
-x
diff --git a/f/new b/f/new
new file mode 100644
index 0000000..45b983b
--- /dev/null
+++ b/f/new
@@ -0,0 +1 @@
+hi
""",
        True,
    ),
    Case(
        "a text patch to a symbolic link",
        "t4115-apply-symlink.sh",
        {"link": Link("dir")},
        """\
diff --git a/link b/link
index 1234567..89abcde 100644
--- a/link
+++ b/link
@@ -1 +1 @@
-dir
\\ No newline at end of file
+etc
\\ No newline at end of file
""",
        False,
        why="wrong type",
    ),
    Case(
        "two changes to one file: the second reads the first's result",
        "t4127-apply-same-fn.sh",
        {"f": FIVE},
        """\
diff --git a/f b/f
--- a/f
+++ b/f
@@ -1,2 +1,2 @@
-a
+A
 b
diff --git a/f b/f
--- a/f
+++ b/f
@@ -4,2 +4,2 @@
 d
-e
+E
""",
        True,
    ),
    Case(
        "a change after a rename, to the new name",
        "t4127-apply-same-fn.sh (same new filename after rename)",
        {"f": FIVE},
        """\
diff --git a/f b/g
similarity index 100%
rename from f
rename to g
diff --git a/g b/g
--- a/g
+++ b/g
@@ -1,2 +1,2 @@
-a
+A
 b
""",
        True,
    ),
    Case(
        "a change after a rename, to the old name",
        "t4127-apply-same-fn.sh (same old filename after rename)",
        {"f": FIVE},
        """\
diff --git a/f b/g
similarity index 100%
rename from f
rename to g
diff --git a/f b/f
--- a/f
+++ b/f
@@ -1,2 +1,2 @@
-a
+A
 b
""",
        False,
        why="has been renamed/deleted",
    ),
    Case(
        "a hunk at the start must match at the start",
        "t4104-apply-boundary.sh",
        {"f": "z\n" + FIVE},
        """\
diff --git a/f b/f
--- a/f
+++ b/f
@@ -1,2 +1,2 @@
-a
+A
 b
""",
        False,
        why="patch does not apply",
    ),
    Case(
        "a hunk without trailing context must match at the end",
        "t4113-apply-ending.sh",
        {"f": FIVE + "z\n"},
        """\
diff --git a/f b/f
--- a/f
+++ b/f
@@ -4,2 +4,2 @@
 d
-e
+E
""",
        False,
        why="patch does not apply",
    ),
    Case(
        "a hunk found away from its line",
        "t4104-apply-boundary.sh",
        {"f": "0\n1\n2\n" + "a\nb\nc\nd\ne\nf\ng\n"},
        """\
diff --git a/f b/f
--- a/f
+++ b/f
@@ -2,3 +2,3 @@
 b
-c
+C
 d
""",
        True,
    ),
    Case(
        "the newline at the end taken away",
        "t4101-apply-nonl.sh",
        {"f": "a\nb\n"},
        """\
diff --git a/f b/f
--- a/f
+++ b/f
@@ -1,2 +1,2 @@
 a
-b
+b
\\ No newline at end of file
""",
        True,
    ),
    Case(
        "a hunk that expects no newline where there is one",
        "t4101-apply-nonl.sh",
        {"f": "a\nb\n"},
        """\
diff --git a/f b/f
--- a/f
+++ b/f
@@ -1,2 +1,2 @@
 a
-b
\\ No newline at end of file
+c
""",
        False,
        why="patch does not apply",
    ),
    Case(
        "a deletion that leaves text behind",
        "apply.c (removal patch leaves file contents)",
        {"f": "a\nb\n"},
        """\
diff --git a/f b/f
deleted file mode 100644
--- a/f
+++ /dev/null
@@ -1 +0,0 @@
-a
""",
        False,
        why="patch does not apply",
    ),
    Case(
        "a creation over an existing file",
        "t4102-apply-rename.sh",
        {"f": "a\n"},
        """\
diff --git a/f b/f
new file mode 100644
--- /dev/null
+++ b/f
@@ -0,0 +1 @@
+b
""",
        False,
        why="already exists in index",
    ),
    Case(
        "a mode change without a hunk",
        "t4129-apply-samemode.sh",
        {"f": "a\n"},
        """\
diff --git a/f b/f
old mode 100644
new mode 100755
""",
        True,
    ),
    Case(
        "a mode change to a file that has the other mode",
        "t4129-apply-samemode.sh",
        {"f": ("100755", "a\n")},
        """\
diff --git a/f b/f
index 7898192..6178079 100644
--- a/f
+++ b/f
@@ -1 +1 @@
-a
+b
""",
        True,
    ),
    Case(
        "the same, in reverse: git takes the index line's mode as the new one",
        "t4129-apply-samemode.sh (-R)",
        {"f": ("100755", "b\n")},
        """\
diff --git a/f b/f
index 7898192..6178079 100644
--- a/f
+++ b/f
@@ -1 +1 @@
-a
+b
""",
        True,
        reverse=True,
    ),
    Case(
        "a change to a file that is not there",
        "t4102-apply-rename.sh",
        {"f": "a\n"},
        """\
diff --git a/g b/g
--- a/g
+++ b/g
@@ -1 +1 @@
-a
+b
""",
        False,
        why="does not exist in index",
    ),
    Case(
        "a reverse application of a rename",
        "t4102-apply-rename.sh (-R)",
        {"c": "one\n"},
        """\
diff --git a/a b/c
similarity index 100%
rename from a
rename to c
""",
        True,
        reverse=True,
    ),
]

# Traditional patches with top-level names, `diff -u x.orig x` run at the top of the tree (t4135's
# diff-*.diff, t4119's gpatch.file): git guesses -p0 where neither name has a directory, and so
# does `import` given no -p. (t4135's backslash and tab names are refused by paths.py's rules.)
STAMP = "2010-08-18 20:13:31.432002255 -0500"
TOP_LEVEL = [
    Case(
        "a traditional patch of a top-level file",
        "t4135-apply-weird-filenames.sh (plain, traditional patch)",
        {"postimage.txt": "preimage\n"},
        f"--- postimage.txt.orig\t{STAMP}\n+++ postimage.txt\t{STAMP}\n@@ -1 +1 @@\n-preimage\n+postimage\n",
        True,
    ),
    Case(
        "a traditional patch of a top-level name with spaces",
        "t4135-apply-weird-filenames.sh (with spaces, traditional patch)",
        {"post image.txt": "preimage\n"},
        f"--- post image.txt.orig\t{STAMP}\n+++ post image.txt\t{STAMP}\n@@ -1 +1 @@\n-preimage\n+postimage\n",
        True,
    ),
    Case(
        "a traditional patch of a top-level name in quotes",
        "t4135-apply-weird-filenames.sh (with quote, traditional patch: expected to fail)",
        {'"postimage".txt': "preimage\n"},
        f'--- "postimage".txt.orig\t{STAMP}\n+++ "postimage".txt\t{STAMP}\n@@ -1 +1 @@\n-preimage\n+postimage\n',
        False,
    ),
    Case(
        "a traditional patch whose new name has something tacked on",
        "t4119-apply-config.sh (gpatch.file)",
        {"file1": "A\n"},
        "--- file1\t2007-02-21 01:04:24.000000000 -0800\n+++ file1+\t2007-02-21 01:07:44.000000000 -0800\n"
        "@@ -1 +1 @@\n-A\n+B\n",
        True,
    ),
    Case(
        "a whitespace-damaged traditional patch of a top-level file",
        "t4135-apply-weird-filenames.sh (whitespace-damaged traditional patch)",
        {"postimage.txt": "preimage\n"},
        "--- postimage.txt.orig  2010-08-18 20:13:31 -05:00\n+++ postimage.txt  2010-08-18 20:13:31 -05:00\n"
        "@@ -1 +1 @@\n-preimage\n+postimage\n",
        True,
    ),
    Case(
        "a traditional creation of a top-level file (GNU diff -N's epoch)",
        "t4135-apply-weird-filenames.sh (traditional file creation patch)",
        {"other": "x\n"},
        f"--- postimage.txt.orig\t1969-12-31 18:00:00.000000000 -0600\n+++ postimage.txt\t{STAMP}\n"
        "@@ -0,0 +1 @@\n+postimage\n",
        True,
    ),
    Case(
        "a traditional deletion of a top-level file (GNU diff -N's epoch)",
        "t4132-apply-removal.sh",
        {"gone.txt": "a\nb\n", "other": "x\n"},
        f"--- gone.txt.orig\t{STAMP}\n+++ gone.txt\t1970-01-01 00:00:00.000000000 +0000\n@@ -1,2 +0,0 @@\n-a\n-b\n",
        True,
    ),
    Case(
        "two top-level files in one traditional patch",
        "t4135-apply-weird-filenames.sh, twice",
        {"a.txt": "one\n", "b.txt": "two\n"},
        "--- a.txt.orig\n+++ a.txt\n@@ -1 +1 @@\n-one\n+1\n--- b.txt.orig\n+++ b.txt\n@@ -1 +1 @@\n-two\n+2\n",
        True,
    ),
]
CASES += TOP_LEVEL

ALPHABET = "".join(f"{c}\n" for c in "abcdefghijklmnopqrstuvwxyz")


def _two_sections(second: str, second_at: str) -> str:
    """t4127's patch: ``d`` made ``z`` by one diff of the file, then ``second`` by another diff of it."""
    one = "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,7 +1,7 @@\n a\n b\n c\n-d\n+z\n e\n f\n g\n"
    return one + f"diff --git a/f b/f\n--- a/f\n+++ b/f\n{second_at}{second}"


INDEPENDENT = _two_sections(" f\n g\n h\n-i\n+y\n j\n k\n l\n", "@@ -6,7 +6,7 @@\n")
OVERLAPPING = _two_sections(" b\n c\n z\n-e\n+y\n f\n g\n h\n", "@@ -2,7 +2,7 @@\n")
CASES += [
    Case(
        f"one file in two sections, {name}{', in reverse' if reverse else ''}",
        "t4127-apply-same-fn.sh" + (" (-R: git lists the files last first)" if reverse else ""),
        {"f": ALPHABET.replace("d\n", "z\n").replace(changed, "y\n") if reverse else ALPHABET},
        patch,
        True,
        reverse=reverse,
    )
    for name, patch, changed in (("independent", INDEPENDENT, "i\n"), ("overlapping", OVERLAPPING, "e\n"))
    for reverse in (False, True)
]
CASES.append(
    Case(
        "one file in two sections, in reverse on a file that has only the second",
        "t4127-apply-same-fn.sh (-R)",
        {"f": ALPHABET.replace("i\n", "y\n")},
        INDEPENDENT,
        False,
        reverse=True,
        why="patch does not apply",
    )
)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_in_memory_apply_agrees_with_git(tmp_path: Path, case: Case) -> None:
    root = tmp_path / "repo"
    commit = make_repo(root, case.files)
    ours, theirs = check(root, commit, case.patch, reverse=case.reverse)
    assert (theirs.tree is not None) == case.git_applies, theirs.message
    assert (ours.tree is not None) == case.git_applies, ours.message
    if not case.git_applies:
        assert case.why in theirs.message
        assert case.why in ours.message  # in git's words

"""The one diff model: a patch's diff parsed once into files, hunks and lines, which every other
reader (in-memory apply, placement, the registry guard, apply's diagnosis) uses."""

from __future__ import annotations

import pytest

from patchtool.diff import model
from patchtool.diff.patchfile import PatchFile
from patchtool.diff.scopes import placed_hunks
from patchtool.errors import InvalidInput
from patchtool.registry import entries as reg

HEAD = f"From {'0' * 40} Mon Sep 17 00:00:00 2001\nFrom: A <a@example.org>\nSubject: [PATCH] x\n\n---\n"


def test_lines_have_kinds_texts_and_places_in_the_diff() -> None:
    diff = (
        "diff --git a/f.py b/f.py\nindex 1111111..2222222 100644\n--- a/f.py\n+++ b/f.py\n"
        "@@ -1,3 +1,3 @@ def f():\n a = 1\n-b = 2\r\n+b = '\x0c\u2028'\n c = 3\n"
        "@@ -9 +9 @@\n-x\n\\ No newline at end of file\n+y\n\\ No newline at end of file\n"
    )
    (f,) = model.parse(diff).files
    assert (f.path, f.status, f.old_path, f.new_path, f.added, f.removed, f.at) == (
        "f.py",
        "modified",
        "f.py",
        "f.py",
        2,
        2,
        1,
    )
    first, second = f.hunks
    assert first.header == "@@ -1,3 +1,3 @@ def f():"
    assert [tuple(ln) for ln in first.lines] == [
        (" ", "a = 1\n", 6),
        ("-", "b = 2\r\n", 7),
        ("+", "b = '\x0c\u2028'\n", 8),
        (" ", "c = 3\n", 9),
    ]
    assert (first.at, first.end, first.first_change()) == (5, 9, (2, 2))
    # the marker takes the newline off the line before it, and belongs to the hunk
    assert [tuple(ln) for ln in second.lines] == [("-", "x", 11), ("+", "y", 13)]
    assert (second.at, second.end) == (10, 14)
    assert (
        model.parse(diff).hunk_text(second) == "@@ -9 +9 @@\n-x\n\\ No newline at end of file\n+y\n"
        "\\ No newline at end of file\n"
    )


def test_names_are_gits_quoted_names_unquoted() -> None:
    diff = (
        'diff --git "a/sp ace\\303\\251.py" "b/sp ace\\303\\251.py"\nindex 1111111..2222222 100644\n'
        '--- "a/sp ace\\303\\251.py"\n+++ "b/sp ace\\303\\251.py"\n@@ -1 +1 @@\n-a\n+b\n'
    )
    (f,) = model.parse(diff).files
    assert (f.path, f.old_path, f.new_path) == ("sp ace\u00e9.py", "sp ace\u00e9.py", "sp ace\u00e9.py")
    (placed,) = placed_hunks(model.parse(diff))
    assert placed.path == "sp ace\u00e9.py"  # the old hunk reader kept '"b/sp ace\\303\\251.py"'


def test_new_deleted_renamed_and_binary_files() -> None:
    diff = (
        "diff --git a/new.py b/new.py\nnew file mode 100644\nindex 0000000..e69de29\n--- /dev/null\n"
        "+++ b/new.py\n@@ -0,0 +1 @@\n+x = 1\n"
        "diff --git a/old.py b/old.py\ndeleted file mode 100644\n--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-y\n"
        "diff --git a/a.py b/b.py\nsimilarity index 90%\nrename from a.py\nrename to b.py\n"
        "diff --git a/img.png b/img.png\nBinary files a/img.png and b/img.png differ\n"
    )
    parsed = model.parse(diff)
    new, old, moved, binary = parsed.files
    assert (new.status, new.old_path, new.new_path, new.hunks[0].first_change()) == ("added", None, "new.py", (1, 1))
    assert (old.status, old.old_path, old.new_path) == ("deleted", "old.py", None)
    assert (moved.status, moved.source, moved.path, moved.hunks) == ("renamed", "a.py", "b.py", ())
    assert binary.binary and not binary.hunks
    assert (
        parsed.file_header(moved) == "diff --git a/a.py b/b.py\nsimilarity index 90%\nrename from a.py\n"
        "rename to b.py\n"
    )
    assert [p.path for p in placed_hunks(parsed)] == ["new.py"]  # nothing placed in a deleted file


@pytest.mark.parametrize(
    ("diff", "message"),
    [
        (
            "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc\n",
            "'new file mode 120000' makes 'l' a symbolic link",
        ),
        (
            "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+b\n",
            r"corrupt patch at line \d+: the hunk at line \d+ is cut short",
        ),
    ],
)
def test_what_may_not_be_applied_or_read_is_refused(diff: str, message: str) -> None:
    with pytest.raises(model.DiffError, match=message):
        model.parse(diff)
    with pytest.raises(InvalidInput, match=message):
        PatchFile.parse(HEAD + diff, name="p.patch")


def test_added_lines_are_numbered_by_gits_lines_in_the_patch_file() -> None:
    """A form feed or U+2028 inside an added line does not end it (``str.splitlines`` did, and
    every finding after it named the wrong line of the patch file)."""
    text = HEAD + (
        "diff --git a/f.py b/f.py\nindex 1111111..2222222 100644\n--- a/f.py\n+++ b/f.py\n"
        "@@ -1 +1,3 @@\n a\n+page\x0cbreak = '\u2028'\n+extra = 1\r\n"
    )
    patch = PatchFile.parse(text, name="p.patch")
    assert reg.added_lines(patch.model, patch.diff_offset) == {
        "f.py": [(12, "page\x0cbreak = '\u2028'"), (13, "extra = 1\r")]
    }
    assert text.split("\n")[11] == "+page\x0cbreak = '\u2028'"  # line 12 of the file


def test_lines_of_cuts_at_newlines_only() -> None:
    assert model.lines_of("a\x0cb\u2028c\r\nd") == ["a\x0cb\u2028c\r\n", "d"]
    assert model.lines_of("a\nb\n", keepends=False) == ["a", "b"]
    assert model.lines_of("", keepends=False) == [] and model.lines_of("") == []

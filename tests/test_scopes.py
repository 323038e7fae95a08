"""Scopes are found on git's lines: a form feed or U+2028 inside a line does not end it."""

from __future__ import annotations

from patchtool.scopes import parse_hunks, scope_at, scope_text

SOURCE = ("# section one\x0c continues on the same line for git\n"
          "class A:\n"
          "    def f(self):\n"
          "        return 'a\u2028b'\n"
          "\n"
          "    def g(self):\n"
          "        return 2\n")


def test_line_numbers_are_gits() -> None:
    assert scope_at("m.py", SOURCE, 4).name == "A.f"
    assert scope_at("m.py", SOURCE, 7).name == "A.g"
    assert scope_text("m.py", SOURCE, "A.g") == "    def g(self):\n        return 2"


def test_hunks_count_gits_lines() -> None:
    diff = ("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -6,2 +6,2 @@\n"
            "     def g(self):\n-        return 2\n+        return '\x0c'\n")
    (hunk,) = parse_hunks(diff)
    assert (hunk.old_line, hunk.new_line, hunk.added) == (7, 7, ("        return '\x0c'",))

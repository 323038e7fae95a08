"""Scopes are found on git's lines: a form feed or U+2028 inside a line does not end it."""

from __future__ import annotations

import ast
import sys
import warnings

import pytest

from patchtool.diff import model
from patchtool.diff.scopes import placed_hunks, python_scopes, scope_at, scope_text

SOURCE = (
    "# section one\x0c continues on the same line for git\n"
    "class A:\n"
    "    def f(self):\n"
    "        return 'a\u2028b'\n"
    "\n"
    "    def g(self):\n"
    "        return 2\n"
)


def test_line_numbers_are_gits() -> None:
    assert scope_at("m.py", SOURCE, 4).name == "A.f"
    assert scope_at("m.py", SOURCE, 7).name == "A.g"
    assert scope_text("m.py", SOURCE, "A.g") == "    def g(self):\n        return 2"


def test_hunks_count_gits_lines() -> None:
    diff = (
        "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -6,2 +6,2 @@\n"
        "     def g(self):\n-        return 2\n+        return '\x0c'\n"
    )
    (hunk,) = placed_hunks(model.parse(diff))
    assert (hunk.old_line, hunk.new_line, hunk.added) == (7, 7, ("        return '\x0c'",))


def scopes(source: str) -> set[tuple[str, int, int]]:
    return {(s.name, s.start, s.end) for s in python_scopes(source)}


def ast_scopes(source: str) -> set[tuple[str, int, int]]:
    """What ``ast`` says: every def and class, qualified through the defs and classes around it."""
    found: set[tuple[str, int, int]] = set()

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found.add((prefix + child.name, child.lineno, child.end_lineno or child.lineno))
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes are warnings, not the point here
        walk(ast.parse(source), "")
    return found


AFTER = "\n\nclass A:\n    def f(self):\n        return 1\n\n    def g(self):\n        return 2\n"


@pytest.mark.parametrize(
    "opening",
    [
        'KIND = re.compile(r"""\n    (?P<kind> \\w+ )  # a comment inside the pattern\n""", re.X)',
        'TEXT = dedent("""\\\n    indented\ndedented, like a def would be:\ndef fake():\n""")',
        "CALL = f(\n    '''\n''',\n    x)",
        'DATA = {"k": [\n    b"""\n"""]}',
    ],
)
def test_a_triple_quoted_string_opened_inside_brackets_hides_no_later_def(opening: str) -> None:
    source = opening + AFTER
    first = opening.count("\n") + 3
    assert scopes(source) == {("A", first, first + 5), ("A.f", first + 1, first + 2), ("A.g", first + 4, first + 5)}
    assert scopes(source) == ast_scopes(source)


@pytest.mark.parametrize(
    "line",
    [
        "SEP = \"'''\"",
        'SEP = \'"""\'',
        "SEP = '\\'\\'\\''",
        'SEP = "\'" + \'"""\'[0]',
        "x = 1  # a comment's quote: '''",
        "x = 1  # \\",
    ],
)
def test_a_triple_quote_inside_a_one_line_string_or_comment_opens_nothing(line: str) -> None:
    source = line + AFTER
    assert scopes(source) == {("A", 3, 8), ("A.f", 4, 5), ("A.g", 7, 8)} == ast_scopes(source)


# hand-picked: each agrees with ast (on every Python that parses it) and gives these scopes
CASES = {
    "prefixes": (
        'X = [rb"\\"", Rb"(", bR"""[""", Br"{", u"(", U"\\\'", r"\'\'\'\\\\"]\n'
        'Y = [f"{x:{y}}(", F"""{x!r:>{w}}[""", fR"{x}{{", Rf"}}{y}", rF"""\\N{x}"""]\n'
        "def f():\n    pass\n",
        {("f", 3, 4)},
    ),
    "escapes": (
        "X = \"a\\\"'''\" + 'b\\'\"\"\"' + \"\"\"c\\\"\"\"\" + '''d\\''''\ndef f():\n    pass\n",
        {("f", 2, 3)},
    ),
    "backslash ending a one-line string's line": (
        'X = "a\\\ndef fake():\\\n    "\ndef f():\n    pass\n',
        {("f", 4, 5)},
    ),
    "backslash joining code lines": ("if True:\n    x = 1 + \\\n2\n    def f():\n        pass\n", {("f", 4, 5)}),
    "N escape braces": ('X = f"\\N{BULLET} {y}" + f"\\N{EN DASH}"\ndef f():\n    pass\n', {("f", 2, 3)}),
    "format spec with a quote as fill": ("X = f\"{y:'>10}\" + f'{y:\"^{w}}'\ndef f():\n    pass\n", {("f", 2, 3)}),
    "nested fields and dict displays": (
        "X = f\"{ {'a': 1}['a'] :{w}.{p}}{x!r:{'<'}{10}}\"\ndef f():\n    pass\n",
        {("f", 2, 3)},
    ),
    "a name ending in a prefix letter": ('X = y or"(" if\'(\'else"("\ndef f():\n    pass\n', {("f", 2, 3)}),
    "ends with the last line of a string": (
        'class A:\n    def f(self):\n        return """\nclass B:\n"""\n'
        "    # a trailing comment is not the body\n\ndef g():\n    pass\n",
        {("A", 1, 5), ("A.f", 2, 5), ("g", 8, 9)},
    ),
    "ends with a closing bracket": ("def f():\n    return (1,\n2)\ndef g(): pass\n", {("f", 1, 3), ("g", 4, 4)}),
    "decorators and nesting": (
        "class A:\n    @d(\n1)\n    def f(self):\n        def inner():\n            pass\n"
        "        class C: pass\n    x = 1\n",
        {("A", 1, 8), ("A.f", 4, 7), ("A.f.inner", 5, 6), ("A.f.C", 7, 7)},
    ),
    "defs under if and async": (
        "if X:\n    async  def f():\n        await y\nelse:\n    def f(): pass\n",
        {("f", 2, 3), ("f", 5, 5)},
    ),
    "form feeds reset the column": (
        "\x0cclass A:\n    def f(self):\n        pass\n  \x0c    def g(self):\n        pass\n",
        {("A", 1, 5), ("A.f", 2, 3), ("A.g", 4, 5)},
    ),
    "CRLF": ('X = """a\r\ndef fake():\r\n"""\r\nY = "\\\r\n"\r\ndef f():\r\n    pass\r\n', {("f", 6, 7)}),
    "identifiers as Python normalises them": (
        "def \ufb01le():\n    pass\nclass \u00c4:\n    def \u00df(self): pass\n",
        {("file", 1, 2), ("\u00c4", 3, 4), ("\u00c4.\u00df", 4, 4)},
    ),
}
CASES_312 = {  # PEP 701: an f-string's fields may reuse its quote, hold comments and span lines
    "a field reusing the quote": (
        'X = f"{d["a"]}" + f"{ {"k": "}"}["k"] :{"<"}{w}}"\ndef f():\n    pass\n',
        {("f", 2, 3)},
    ),
    "a field over several lines": (
        'X = f"list: {", ".join([\n    "a",  # a comment with a " quote\n'
        '    f\'{"""\n"""}\',\n])}"\ndef f():\n    pass\n',
        {("f", 6, 7)},
    ),
    "nested format specs": ('X = f"{a:{b:{c}}}"\ndef f():\n    pass\n', {("f", 2, 3)}),
}


@pytest.mark.parametrize("name", list(CASES) + list(CASES_312))
def test_hand_picked_cases(name: str) -> None:
    source, expected = {**CASES, **CASES_312}[name]
    assert scopes(source) == expected
    if name in CASES or sys.version_info >= (3, 12):
        assert scopes(source) == ast_scopes(source)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('X = "never closed\ndef f():\n    pass\n', {("f", 2, 3)}),  # a one-line string ends with its line
        ("X = f'{x\ndef f():\n    pass\n", set()),  # a 3.12 field may run on: what follows is inside it
        ('X = """never closed\ndef f():\n    pass\n', set()),
        ("def f(:\n    x = ((\n", {("f", 1, 2)}),
        ("def f():\n  pass\n    def g():\n pass\n", {("f", 1, 4), ("f.g", 3, 3)}),
        ("\\", set()),
        ("f'''{", set()),
        ("f'{x:{", set()),
    ],
)
def test_files_that_do_not_parse_still_give_scopes(source: str, expected: set[tuple[str, int, int]]) -> None:
    assert scopes(source) == expected

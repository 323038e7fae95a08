"""The scope scanner against ``ast``: on real files and on generated programs, and never a crash.

A scope is (qualified name, ``def``/``class`` line, last line of its last statement), as
``ast`` gives ``lineno`` and ``end_lineno``; names are qualified through the defs and classes
around them (``Class.method``, ``f.inner``), as the scanner makes them.
"""

from __future__ import annotations

import io
import sys
import sysconfig
import tokenize
import zipfile
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchtool.diff.scopes import python_scopes, scope_at, scope_text
from patchtool.project.pins import load_pin
from patchtool.upstream.cache import Cache
from test_scopes import ast_scopes, scopes

REPO = Path(__file__).resolve().parent.parent


def _decode(data: bytes) -> str:
    try:
        return data.decode(tokenize.detect_encoding(io.BytesIO(data).readline)[0])
    except (SyntaxError, LookupError, UnicodeDecodeError):
        return data.decode("utf-8", "replace")  # as the rebase reads files


def disagreements(files: Iterable[tuple[str, bytes]]) -> tuple[int, list[str]]:
    """How many files ``ast`` parses, and where the scanner differs from it on them. The scanner
    reads every file, those ``ast`` refuses too."""
    compared = 0
    found: list[str] = []
    for name, data in files:
        source = _decode(data)
        got = scopes(source)
        try:
            want = ast_scopes(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        compared += 1
        if got != want:
            found.append(f"{name}: only ast {sorted(want - got)[:3]}, only the scanner {sorted(got - want)[:3]}")
    return compared, found


@pytest.mark.slow
def test_agrees_with_ast_on_the_standard_library() -> None:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = (
        (str(p), p.read_bytes())
        for p in sorted(stdlib.rglob("*.py"))
        if "site-packages" not in p.relative_to(stdlib).parts
    )
    compared, found = disagreements(files)
    assert compared > 1000
    assert found == []


@pytest.fixture(scope="session")
def sglang_wheel(real_cache: Path) -> Path:
    cache = Cache(real_cache)
    with cache.locked():
        return cache.artifact_path(load_pin(REPO, "sglang-0.5.23"))


@pytest.mark.upstream
@pytest.mark.slow
def test_agrees_with_ast_on_every_file_of_sglang(sglang_wheel: Path) -> None:
    with zipfile.ZipFile(sglang_wheel) as wheel:
        files = [(n, wheel.read(n)) for n in wheel.namelist() if n.endswith(".py")]
    compared, found = disagreements(files)
    assert compared == len(files) > 4000
    assert found == []


# -- generated programs: defs and classes nested, strings of every kind in between ---------------

NAMES = st.sampled_from(["a", "_b", "x1", "classy", "define", "async_", "\u00e9t\u00e9"])


@st.composite
def string_literals(draw: st.DrawFn, *, multiline: bool = True) -> str:
    """A literal of any prefix and quote whose text is made of pieces that fool line scanners."""
    prefix = draw(st.sampled_from(["", "r", "u", "b", "br", "rb", "f", "fr", "rf"]))
    prefix = "".join(c.upper() if draw(st.booleans()) else c for c in prefix)
    quote = draw(st.sampled_from(["'", '"', "'''", '"""'] if multiline else ["'", '"']))
    own, other = quote[0], "'" if quote[0] == '"' else '"'
    raw, is_bytes, is_f = "r" in prefix.lower(), "b" in prefix.lower(), "f" in prefix.lower()
    pieces = [
        "(",
        ")]",
        "[",
        " # ",
        "def g():",
        "class C:",
        other,
        other * 3,
        "\\" + own,
        "\\\\",
        "\\n",
        "\\\n",
        ":",
        "!",
        "=",
        "\t",
    ]
    if not is_bytes:
        pieces += ["\u00e9", "\u2028"]
    if not is_bytes and not raw:
        pieces.append("\\N{BULLET}")
    if len(quote) == 3:
        pieces += ["\n", "\ndef fake():\n", "\n    ", "\nclass Fake:\n\t"]
    if not is_f:
        pieces += ["{", "}", "{x:"]
    else:
        pieces += [
            "{{",
            "}}",
            "{x}",
            "{x!r}",
            "{x:>10}",
            "{x:{w}.{p}}",
            "{x:#x}",
            "{x=}",
            "{a if b else c}",
            f"{{d[{other}k{other}]}}",
            f"{{ {{{other}a{other}: 1}}[{other}a{other}] }}",
            f"{{x:{other}>10}}",
            "{(lambda: 1)()}",
            f"{{x!r:{{{other}<{other}}}{{w}}}}",
        ]
        if len(quote) == 3:
            pieces.append("{\nx\n}")
        if sys.version_info >= (3, 12):  # PEP 701: a field may reuse the quote, span lines, hold comments
            pieces += [
                f"{{d[{own}k{own}]}}",
                f"{{ {own}{{{own} }}",
                f"{{f{own}{{x}}{own}}}",
                f"{{x  # a comment with a {own}\n}}",
                f"{{\n{own}\\n{own}.join([])\n}}",
            ]
    return prefix + quote + "".join(draw(st.lists(st.sampled_from(pieces), max_size=6))) + quote


@st.composite
def blocks(draw: st.DrawFn, level: int, unit: str, room: int) -> list[str]:
    """The lines of a block at ``level``: statements, comments and blank lines; defs, classes and
    ifs nest while there is ``room``."""
    pad = unit * level
    anywhere = st.sampled_from(["", " ", "\t", pad, pad + unit * 2])  # comments and continuations
    lines: list[str] = []
    kinds = ["assign", "brackets", "backslash", "docstring", "comment", "blank"]
    if room:
        kinds += ["def", "class", "if", "one-liner"]
    for kind in draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=4)):
        name = draw(NAMES)
        if kind == "assign":
            items = draw(st.lists(string_literals(), min_size=1, max_size=3))
            comment = draw(st.sampled_from(["", "  # it's '''", '  # """', "  # \\"]))
            lines.append(f"{pad}{name} = [{', '.join(items)}]{comment}")
        elif kind == "brackets":
            lines.append(f"{pad}{name} = call(")
            for literal in draw(st.lists(string_literals(), min_size=1, max_size=3)):
                lines.append(f"{draw(anywhere)}{literal},")
                if draw(st.booleans()):
                    lines.append(f"{draw(anywhere)}# a comment in brackets: '''")
            lines.append(f"{draw(anywhere)})")
        elif kind == "backslash":
            lines += [
                f"{pad}{name} = {draw(string_literals(multiline=False))} + \\",
                f"{draw(anywhere)}{draw(string_literals())}",
            ]
        elif kind == "docstring":
            lines.append(pad + draw(string_literals()))
        elif kind == "comment":
            lines.append(draw(anywhere) + "# '''" + draw(st.sampled_from(["", '"', "(", "\\"])))
        elif kind == "blank":
            lines.append(draw(st.sampled_from(["", "  ", "\t"])))
        elif kind == "one-liner":
            lines.append(
                draw(
                    st.sampled_from(
                        [
                            f"{pad}def {name}(a={draw(string_literals())}): return a",
                            f"{pad}class {name}: x = {draw(string_literals())}",
                        ]
                    )
                )
            )
        else:
            if kind in ("def", "class") and draw(st.booleans()):
                lines += [f"{pad}@decorate(", f"{draw(anywhere)}{draw(string_literals())})"]
            header = {
                "def": draw(st.sampled_from([f"def {name}(p=", f"async  def {name}(p="])),
                "class": f"class {name}(",
                "if": "if (",
            }[kind]
            lines.append(f"{pad}{header}{draw(string_literals())}")
            lines.append(f"{draw(anywhere)}):")
            lines += draw(blocks(level + 1, unit, room - 1))
            if kind == "if" and draw(st.booleans()):
                lines.append(f"{pad}else:")
                lines += draw(blocks(level + 1, unit, room - 1))
    if all(line.lstrip().startswith("#") or not line.strip() for line in lines):
        lines.append(f"{pad}pass")  # a block needs a statement
    return lines


@st.composite
def programs(draw: st.DrawFn) -> str:
    unit = draw(st.sampled_from(["    ", "  ", "\t"]))
    return "\n".join(draw(blocks(0, unit, 3))) + draw(st.sampled_from(["\n", ""]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_agrees_with_ast_on_generated_programs(source: str) -> None:
    assert scopes(source) == ast_scopes(source)


PYTHONISH = st.lists(st.sampled_from([*"'\"\\#{}()[]:!=\n\r\t\x0c frRbBuUtT_xN", "def ", "class ", "async "])).map(
    "".join
)


def _sound(source: str) -> None:
    """Scopes lie within the file, start before they end, and nest."""
    lines = source.count("\n") + 1
    found = python_scopes(source)
    for s in found:
        assert 1 <= s.start <= s.end <= lines
        outer = s.name.rpartition(".")[0]
        if outer:
            assert any(o.name == outer and o.start < s.start and s.end <= o.end for o in found)
        assert scope_at("m.py", source, s.start).start >= s.start
        assert scope_text("m.py", source, s.name) is not None


@settings(max_examples=500, deadline=None)
@given(st.text() | PYTHONISH)
def test_never_raises_on_any_text(source: str) -> None:
    _sound(source)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.data())
def test_never_raises_on_a_program_cut_anywhere(source: str, data: st.DataObject) -> None:
    """A program with a stretch cut out, as a half-merged file is: strings and fields left open."""
    start = data.draw(st.integers(0, len(source)))
    end = data.draw(st.integers(start, min(len(source), start + 40)))
    _sound(source[:start] + source[end:])

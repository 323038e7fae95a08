"""Patches upstream absorbed, recognised from the target's content (issue 31, sections 0 and 1).

Each case is written in the style of Debian's security-backport series: a fix carried against
release 1.0 that upstream took, extended, reformatted or never had by 1.1. Each builds an upstream
git repository with tags ``v1.0`` and ``v1.1`` and a series made on ``v1.0`` (one commit per
patch); the project pins ``v1.0`` (a git pin) and ``rebase --to 1.1`` moves it.

The rule they hold (section 0): a patch leaves the series without a stop only where two
independent kinds of evidence agree (it applies in reverse, exactly, at its own place, and the
target has every line it adds and none it removes at each hunk's place); anything weaker stops
once and shows what it saw; a patch upstream does not have is never dropped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from pathlib import Path

from cli_run import in_process
from debian_backports import FIXED, HEADERS, NAME_CHECK, PARTITION, VALUE_CHECK
from helpers import format_patch, git, write_tree

Files = dict[str, str | None]  # None: the file is deleted


def _write(root: Path, files: Files) -> None:
    """``files`` written under ``root``; a file mapped to None is deleted, with any directory it
    leaves empty."""
    for rel, content in files.items():
        if content is None:
            (root / rel).unlink()
            parent = (root / rel).parent
            while parent != root and not any(parent.iterdir()):
                parent.rmdir()
                parent = parent.parent
        else:
            write_tree(root, {rel: content})


@dataclasses.dataclass(frozen=True)
class Series:
    root: Path  # the patch project
    upstream: Path
    cache: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(self.cache)}
        return in_process([*args, "--root", str(self.root)], env=env)

    def dry_run(self) -> dict[str, dict[str, object]]:
        res = self.run("rebase", "--to", "1.1", "--dry-run", "--json")
        assert res.returncode in (0, 5), res.stdout + res.stderr
        return {p["id"]: p for p in json.loads(res.stdout)["data"]["patches"]}


def make_series(tmp_path: Path, base: Files, patches: list[tuple[str, Files]], upstream: Files) -> Series:
    """Upstream ``base`` tagged v1.0, ``upstream`` (files changed on it) tagged v1.1, and one patch
    per ``(id, files)`` of ``patches``, each commit on the one before it, from v1.0."""
    up = tmp_path / "upstream"
    up.mkdir()
    git(up, "init", "-q", "-b", "main")
    _write(up, base)
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "demo 1.0")
    git(up, "tag", "v1.0")
    v10 = git(up, "rev-parse", "HEAD").strip()
    root = tmp_path / "project"
    (root / "patches").mkdir(parents=True)
    (root / "upstream-pins").mkdir()
    manifest = 'schema = 1\npin = "demo-1.0"\n'
    for n, (pid, files) in enumerate(patches, 1):
        _write(up, files)
        git(up, "add", "-A")
        git(up, "commit", "-q", "-m", f"{pid}: backport")
        name = f"patches/{n:04d}-{pid}.patch"
        (root / name).write_text(format_patch(up))
        manifest += (
            f'\n[[patch]]\nid = "{pid}"\nfile = "{name}"\nkind = "correctness"\nowner = "debian"\n'
            'why = "security fix"\napplies_to = ">=1.0"\ndrop_when = "upstream"\nupstream = { status = "pending" }\n'
        )
    git(up, "checkout", "-q", "v1.0")
    _write(up, upstream)
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "demo 1.1")
    git(up, "tag", "v1.1")
    (root / "upstream-pins" / "demo-1.0.toml").write_text(
        f'schema = 1\nname = "demo"\nversion = "1.0"\nuse = "git"\n\n[git]\nurl = "{up}"\ntag = "v1.0"\n'
        f'commit = "{v10}"\n'
    )
    (root / "patchset.toml").write_text(manifest)
    return Series(root=root, upstream=up, cache=tmp_path / "cache")


TESTS = """\
import unittest

from demo.headers import parse_header


class TestHeaders(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(parse_header(b"a: b"), (b"a", b"b"))


if __name__ == "__main__":
    unittest.main()
"""
SIMPLE_END = '        self.assertEqual(parse_header(b"a: b"), (b"a", b"b"))\n'
LONG_NAME = (
    "\n    def test_long_name(self):\n        with self.assertRaises(ValueError):\n"
    '            parse_header(b"a" * 100 + b": b")\n'
)
LONG_VALUE = (
    "\n    def test_long_value(self):\n        with self.assertRaises(ValueError):\n"
    '            parse_header(b"a: " + b"b" * 300)\n'
)


def test_a_backport_upstream_extended_stops_once_showing_that_upstream_has_its_lines(tmp_path: Path) -> None:
    """Debian carries the name check; upstream took it and added a value check right after it.
    The merge conflicts with a patch side that brings nothing; no reverse application finds it
    exactly. One kind of evidence: it stops, once, saying what it saw, and is not dropped."""
    s = make_series(
        tmp_path,
        {"demo/headers.py": HEADERS},
        [("cve-name", {"demo/headers.py": FIXED})],
        {"demo/headers.py": HEADERS.replace(PARTITION, PARTITION + NAME_CHECK + VALUE_CHECK)},
    )
    step = s.dry_run()["cve-name"]
    assert step["outcome"] == "conflict"
    assert step["evidence"] == [
        "the target has every line it adds and none it removes, at each hunk's place: "
        "demo/headers.py @@ -5,6 +5,8 @@ (the target's lines 8-11)"
    ]
    assert step["detail"].startswith("upstream may have it: the target has every line it adds")
    res = s.run("rebase", "--to", "1.1")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "evidence: the target has every line it adds and none it removes" in res.stdout
    assert (s.root / "patches/0001-cve-name.patch").is_file()


def test_a_backport_upstream_took_as_it_is_beside_its_own_new_tests_is_dropped_on_two_kinds(
    tmp_path: Path,
) -> None:
    """Upstream took the fix as Debian carries it, and its test with a test of its own after it;
    Debian's test is a patch of its own. The fix applies in reverse at its own place and applying
    it changes nothing: dropped, with both pieces of evidence in the report. The test patch is
    upstream by content, but no reverse application finds it: it stops, showing that."""
    s = make_series(
        tmp_path,
        {"demo/headers.py": HEADERS, "tests/test_headers.py": TESTS},
        [
            ("cve-name", {"demo/headers.py": FIXED}),
            ("cve-name-test", {"tests/test_headers.py": TESTS.replace(SIMPLE_END, SIMPLE_END + LONG_NAME)}),
        ],
        {
            "demo/headers.py": FIXED.replace('"""Parse HTTP-ish headers."""\n', '"""Parse headers."""\n'),
            "tests/test_headers.py": TESTS.replace(SIMPLE_END, SIMPLE_END + LONG_NAME + LONG_VALUE),
        },
    )
    steps = s.dry_run()
    fix, test = steps["cve-name"], steps["cve-name-test"]
    assert fix["outcome"] == "already upstream" and fix["detail"] == "it applies in reverse on the target"
    assert fix["evidence"] == [
        "it applies in reverse on the target (as `git apply -R`), every hunk at its own place",
        "applying it changes nothing: the 3-way merge leaves the target as it is",
    ]
    assert test["outcome"] == "conflict"
    assert test["evidence"] == [
        "the target has every line it adds and none it removes, at each hunk's place: "
        "tests/test_headers.py @@ -7,6 +7,10 @@ (the target's lines 10-17)",
    ]
    res = s.run("rebase", "--to", "1.1", "--dry-run")
    assert "  cve-name: already upstream - it applies in reverse on the target\n" in res.stdout
    assert "      evidence: the target has every line it adds and none it removes" in res.stdout
    data = json.loads(s.run("rebase", "--to", "1.1", "--dry-run", "--json").stdout)["data"]
    (drop,) = data["drop"]
    assert drop["patch"] == "cve-name" and drop["evidence"] == fix["evidence"]


def test_a_debian_only_fix_whose_lines_upstream_has_elsewhere_is_not_dropped(tmp_path: Path) -> None:
    """Debian adds the name check to parse_header; upstream never took it, but wrote the very same
    lines in a new function above, and changed the patch's context, so it does not apply as it
    is. A reverse application with fuzz (and the lines themselves) find them there, not at the
    patch's place: the fix is merged, with no claim that upstream has it."""
    lookup = "def parse_name(data):\n" + PARTITION + NAME_CHECK + "    name = name.strip()\n    return name\n\n\n"
    s = make_series(
        tmp_path,
        {"demo/headers.py": HEADERS},
        [("cve-name", {"demo/headers.py": FIXED})],
        {
            "demo/headers.py": HEADERS.replace("def parse_header", lookup + "def parse_header").replace(
                "value = value.strip()", 'value = value.strip(b" \\t")'
            )
        },
    )
    step = s.dry_run()["cve-name"]
    assert step["outcome"] == "merged by 3-way merge", step
    assert "evidence" not in step
    res = s.run("rebase", "--to", "1.1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert NAME_CHECK in (s.root / "patches/0001-cve-name.patch").read_text().replace("\n+", "\n")


def test_a_backport_of_code_upstream_later_removed_stops_as_a_plain_conflict(tmp_path: Path) -> None:
    """Debian fixes parse_all; upstream removed parse_all since. The lines the patch removes are
    gone upstream, the ones it adds are not: no evidence that upstream has it, a plain conflict."""
    s = make_series(
        tmp_path,
        {"demo/headers.py": HEADERS},
        [("fix-all", {"demo/headers.py": HEADERS.replace("for line in lines]", "for line in lines if line]")})],
        {"demo/headers.py": HEADERS.split("\n\ndef parse_all")[0] + "\n"},
    )
    step = s.dry_run()["fix-all"]
    assert step["outcome"] == "conflict" and "evidence" not in step
    assert step["detail"] == "CONFLICT (content): Merge conflict in demo/headers.py"


def test_a_conflict_upstream_resolved_in_one_hunk_is_partly_upstream_naming_it(tmp_path: Path) -> None:
    """Debian's patch fixes parse_header and sorts names(); upstream took (and extended) the fix
    only. The fix's hunk conflicts with a patch side that brings nothing; it is left out, the
    other hunk applies: "partly upstream", naming the hunk, and the result holds upstream's check
    once and Debian's names()."""
    s = make_series(
        tmp_path,
        {"demo/headers.py": HEADERS},
        [
            (
                "cve-name",
                {
                    "demo/headers.py": FIXED.replace("return [name for", "return sorted(name for").replace(
                        "(lines)]", "(lines))"
                    )
                },
            )
        ],
        {"demo/headers.py": HEADERS.replace(PARTITION, PARTITION + NAME_CHECK + VALUE_CHECK)},
    )
    step = s.dry_run()["cve-name"]
    assert step["outcome"] == "partly upstream"
    assert step["detail"] == "1 hunk(s) already upstream, the rest applied"
    assert step["evidence"] == [
        "upstream has demo/headers.py @@ -5,6 +5,8 @@ (the target's lines 8-11): every line it adds, none it removes"
    ]
    res = s.run("rebase", "--to", "1.1")
    assert res.returncode == 0, res.stdout + res.stderr
    rebased = (s.root / "patches/0001-cve-name.patch").read_text()
    assert "+    return sorted(name for name, _ in parse_all(lines))\n" in rebased
    assert "+    if len(name)" not in rebased


# -- a conflict's stop names what upstream has: some hunks, or every hunk in another form ---------


def test_a_backport_whose_test_upstream_took_and_whose_fix_upstream_rewrote_stops_naming_the_test(
    tmp_path: Path,
) -> None:
    """Debian's backport fixes parse_header and adds its test; upstream took the test as it is and
    rewrote parse_header around a helper of its own (as werkzeug 2.3 did to the cookie parser
    Debian's 0003 fixes). The fix conflicts and is nowhere in another form; the stop names the
    test's hunk, which the target has at its place, and the patch is not dropped."""
    rewritten = HEADERS.replace(PARTITION, "    name, value = _split(data)\n    _check_name(name)\n")
    s = make_series(
        tmp_path,
        {"demo/headers.py": HEADERS, "tests/test_headers.py": TESTS},
        [
            (
                "cve-name",
                {"demo/headers.py": FIXED, "tests/test_headers.py": TESTS.replace(SIMPLE_END, SIMPLE_END + LONG_NAME)},
            )
        ],
        {"demo/headers.py": rewritten, "tests/test_headers.py": TESTS.replace(SIMPLE_END, SIMPLE_END + LONG_NAME)},
    )
    step = s.dry_run()["cve-name"]
    assert step["outcome"] == "conflict"
    assert step["detail"] == "CONFLICT (content): Merge conflict in demo/headers.py"
    assert step["evidence"] == [
        "upstream has tests/test_headers.py @@ -7,6 +7,10 @@ (the target's lines 10-13): "
        "every line it adds, none it removes"
    ]
    res = s.run("rebase", "--to", "1.1")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "`patchtool rebase --skip --merged`" in res.stdout + res.stderr
    assert (s.root / "patches/0001-cve-name.patch").is_file()


SAME_CHECK = '    if len(name) >= MAX + 1:\n        raise ValueError("name too long")\n'


def test_the_same_fix_written_otherwise_at_its_place_stops_naming_upstreams_lines(tmp_path: Path) -> None:
    """Upstream fixed what Debian's backport fixes, at the same place, in other words (as pip 18
    unlinks with os.path.exists where conda-forge's patch has os.path.lexists, and setuptools
    takes the first word of CC with shlex.split where the patch has str.split). Neither a reverse
    application nor the lines themselves find it: the stop names the lines upstream wrote there,
    which hold 9 of the 10 words the hunk adds; the patch stays."""
    s = make_series(
        tmp_path,
        {"demo/headers.py": HEADERS},
        [("cve-name", {"demo/headers.py": FIXED})],
        {"demo/headers.py": HEADERS.replace(PARTITION, PARTITION + SAME_CHECK)},
    )
    step = s.dry_run()["cve-name"]
    assert step["outcome"] == "conflict"
    assert step["evidence"] == [
        "upstream has demo/headers.py @@ -5,6 +5,8 @@ in another form: 9 of the 10 words it adds "
        "are in the lines upstream wrote at its place (the target's lines 8-9)"
    ]
    res = s.run("rebase", "--to", "1.1")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "in another form: 9 of the 10 words" in res.stdout
    assert (s.root / "patches/0001-cve-name.patch").is_file()


def test_a_file_upstream_moved_from_crlf_to_lf_is_compared_line_by_line(tmp_path: Path) -> None:
    """The same fix written otherwise, in a file whose CRLF line endings upstream made LF (as pip's
    sdists did between 10.0.1 and 18.0): every line differs by its ending, none by its content.
    The stop names upstream's lines at the fix's place as it does without the CRLF."""

    def crlf(text: str) -> str:
        return text.replace("\n", "\r\n")

    s = make_series(
        tmp_path,
        {"demo/headers.py": crlf(HEADERS)},
        [("cve-name", {"demo/headers.py": crlf(FIXED)})],
        {"demo/headers.py": HEADERS.replace(PARTITION, PARTITION + SAME_CHECK)},
    )
    # the patch file as git writes it, its CRs kept (format_patch reads git's output as text)
    out = tmp_path / "format-patch"
    opts = ("--zero-commit", "--full-index", "--no-signature", "--no-stat")
    git(s.upstream, "format-patch", "-1", "main", "-o", str(out), *opts)
    (made,) = out.iterdir()
    raw = re.sub(rb"^Date: .*\n", b"", made.read_bytes(), count=1, flags=re.MULTILINE)
    assert b"\r\n+" in raw
    (s.root / "patches/0001-cve-name.patch").write_bytes(raw)
    step = s.dry_run()["cve-name"]
    assert step["outcome"] == "conflict"
    assert step["evidence"] == [
        "upstream has demo/headers.py @@ -5,6 +5,8 @@ in another form: 9 of the 10 words it adds "
        "are in the lines upstream wrote at its place (the target's lines 8-9)"
    ]


def test_a_fix_upstream_moved_into_a_helper_stops_naming_where_it_went(tmp_path: Path) -> None:
    """Upstream moved parse_header's body into a helper at the end of the module, the fix within it
    with its message reworded (as werkzeug 2.3 moved the multipart decoder's code that Debian's
    CVE-2023-46136 backport fixes into _parse_data). Nothing is left at the fix's place; the
    helper holds one of its two lines as it is and 9 of its 10 words: the stop names it."""
    helper = (
        "\n\ndef _split(data):\n"
        + PARTITION
        + NAME_CHECK.replace("header name", "name")
        + "    return name.strip(), value.strip()\n"
    )
    body = PARTITION + "    name = name.strip()\n    value = value.strip()\n    return name, value\n"
    s = make_series(
        tmp_path,
        {"demo/headers.py": HEADERS},
        [("cve-name", {"demo/headers.py": FIXED})],
        {"demo/headers.py": HEADERS.replace(body, "    return _split(data)\n") + helper},
    )
    step = s.dry_run()["cve-name"]
    assert step["outcome"] == "conflict"
    assert step["evidence"] == [
        "upstream has demo/headers.py @@ -5,6 +5,8 @@ in another form: 9 of the 10 words it adds, and 1 of "
        "its 2 lines as they are, are in the lines upstream wrote elsewhere in the file (the target's lines 16-22)"
    ]


def test_a_debian_only_fix_where_upstream_changed_the_same_lines_otherwise_names_nothing(tmp_path: Path) -> None:
    """Three Debian-only fixes that conflict with upstream's own change at their place, which shares
    some of their words: upstream checks the name for emptiness where Debian checks its length (6
    of the fix's 10 words); upstream moved the code the fix is in into a helper without the fix;
    and a patch with the length check and a second hunk upstream wrote nothing like. None says
    upstream has it: plain conflicts, no evidence."""
    empty = '    if not name:\n        raise ValueError("empty header name")\n'
    two = FIXED.replace("return [name for", "return sorted(name for").replace("(lines)]", "(lines))")
    body = PARTITION + "    name = name.strip()\n    value = value.strip()\n    return name, value\n"
    moved = HEADERS.replace(body, "    return _split(data)\n") + "\n\ndef _split(data):\n" + body
    for n, (patched, upstream) in enumerate(
        [
            (FIXED, HEADERS.replace(PARTITION, PARTITION + empty)),
            (FIXED, moved),
            (two, HEADERS.replace(PARTITION, PARTITION + SAME_CHECK).replace("for name, _ in", "for name, _v in")),
        ]
    ):
        (tmp_path / str(n)).mkdir()
        s = make_series(
            tmp_path / str(n),
            {"demo/headers.py": HEADERS},
            [("fix", {"demo/headers.py": patched})],
            {"demo/headers.py": upstream},
        )
        step = s.dry_run()["fix"]
        assert step["outcome"] == "conflict" and "evidence" not in step, (n, step)


# -- never twice --------------------------------------------------------------------------------


def test_a_backported_test_upstream_also_added_elsewhere_in_the_class_is_never_applied_twice(tmp_path: Path) -> None:
    """Debian's test method is added at the end of the class; upstream added the same test at the
    top of it. The merge is clean, and would leave two test_long_name in TestHeaders (Python keeps
    the last, silently): a stop, naming the name, never an applied outcome."""
    first = "    def test_simple(self):\n"
    s = make_series(
        tmp_path,
        {"tests/test_headers.py": TESTS},
        [("cve-name-test", {"tests/test_headers.py": TESTS.replace(SIMPLE_END, SIMPLE_END + LONG_NAME)})],
        {"tests/test_headers.py": TESTS.replace(first, LONG_NAME[1:] + "\n" + first).replace("a: b", "k: v")},
    )
    step = s.dry_run()["cve-name-test"]
    assert step["outcome"] == "conflict"
    assert step["evidence"] == [
        "tests/test_headers.py: TestHeaders.test_long_name would be defined 2 times in one scope; "
        "the target already defines it there"
    ]
    res = s.run("rebase", "--to", "1.1")
    assert res.returncode == 3, res.stdout + res.stderr


def test_legitimate_redefinitions_are_not_duplicates() -> None:
    from patchtool.rebase.twice import defined_twice

    source = (
        "from typing import overload\n\n\nclass A:\n"
        "    @property\n    def x(self):\n        return 1\n\n    @x.setter\n    def x(self, v):\n        pass\n\n"
        "    @overload\n    def f(self, a: int) -> int: ...\n    @overload\n    def f(self, a: str) -> str: ...\n"
        "    def f(self, a):\n        return a\n\n\n"
        "if True:\n    def g():\n        return 1\nelse:\n    def g():\n        return 2\n\n\n"
        "try:\n    def h():\n        return 1\nexcept ImportError:\n    def h():\n        return 2\n"
    )
    names = frozenset({"x", "f", "g", "h"})
    assert defined_twice("m.py", source, names, "") == ()
    twice = source + "\n\ndef g():\n    return 3\n\n\ndef g():\n    return 4\n"
    assert defined_twice("m.py", twice, names, "") == (
        "m.py: g would be defined 3 times in one scope; the target already defines it there",
    )  # the if's g, and the two beside it
    assert defined_twice("m.py", twice, frozenset({"x"}), "") == ()  # only the names the patch adds
    assert defined_twice("m.py", twice + "def (:\n", names, "") == ()  # a file that does not parse
    assert defined_twice("m.py", twice, names, twice) == ()  # the target had them twice already


def test_a_second_setter_and_a_def_beside_a_branch_are_duplicates() -> None:
    """Two ``@x.setter`` of one property are two definitions (Python keeps the last); a function
    defined in a ``try`` branch and again beside the ``try`` is bound twice. (From a helper's attack
    on issue 31: both were applied unchanged.)"""
    from patchtool.rebase.twice import defined_twice

    getter = "class Conn:\n    @property\n    def timeout(self):\n        return self._t\n\n"
    setter = "    @timeout.setter\n    def timeout(self, v):\n        self._t = v\n\n"
    assert defined_twice("m.py", getter + setter, frozenset({"timeout"}), "") == ()
    assert defined_twice("m.py", getter + setter + setter, frozenset({"timeout"}), "") == (
        "m.py: Conn.timeout would be defined 2 times in one scope; the target already defines it there",
    )
    fallback = "try:\n    from os import fspath as helper\nexcept ImportError:\n    def helper(p):\n        return p\n"
    assert defined_twice("m.py", fallback, frozenset({"helper"}), "") == ()
    beside = fallback + "\n\ndef helper(p):\n    return str(p)\n"
    assert defined_twice("m.py", beside, frozenset({"helper"}), "") == (
        "m.py: helper would be defined 2 times in one scope; the target already defines it there",
    )
    assert defined_twice("m.py", beside, frozenset({"helper"}), beside) == ()  # upstream's own pattern


# -- the maintainer's loop: --skip --merged ------------------------------------------------------


def _merged_series(tmp_path: Path) -> Series:
    """Debian's fix and its test, both taken and extended upstream (each a stop with evidence
    from content), then a fix of parse_all, which upstream removed (a plain conflict)."""
    fix_all = FIXED.replace("for line in lines]", "for line in lines if line]")
    return make_series(
        tmp_path,
        {"demo/headers.py": HEADERS, "tests/test_headers.py": TESTS},
        [
            ("cve-name", {"demo/headers.py": FIXED}),
            ("cve-name-test", {"tests/test_headers.py": TESTS.replace(SIMPLE_END, SIMPLE_END + LONG_NAME)}),
            ("fix-all", {"demo/headers.py": fix_all}),
        ],
        {
            "demo/headers.py": HEADERS.replace(PARTITION, PARTITION + NAME_CHECK + VALUE_CHECK).split(
                "\n\ndef parse_all"
            )[0]
            + "\n",
            "tests/test_headers.py": TESTS.replace(SIMPLE_END, SIMPLE_END + LONG_NAME + LONG_VALUE),
        },
    )


def test_skip_merged_records_upstreams_version_and_the_stops_evidence_in_dropped(tmp_path: Path) -> None:
    """At a stop whose evidence says upstream may have the patch, the hint names `--skip --merged`;
    that records it under [[dropped]] as merged in 1.1 with the evidence the stop showed, and the
    manifest still loads."""
    import tomllib

    from patchtool.project.manifest import load

    s = _merged_series(tmp_path)
    res = s.run("rebase", "--to", "1.1")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "patch cve-name stopped the rebase" in res.stdout + res.stderr
    assert (
        "if upstream merged it, `patchtool rebase --skip --merged` records that with this evidence"
        in res.stdout + res.stderr
    )
    res = s.run("rebase", "--skip", "--merged")
    assert res.returncode == 3 and "patch cve-name-test stopped the rebase" in res.stdout + res.stderr, (
        res.stdout + res.stderr
    )
    assert s.run("rebase", "--skip", "--merged", "--reason", "upstream 1.1 has both tests").returncode == 3
    res = s.run("rebase", "--skip", "--reason", "upstream removed parse_all")
    assert res.returncode == 0, res.stdout + res.stderr
    dropped = {t["id"]: t for t in tomllib.loads((s.root / "patchset.toml").read_text())["dropped"]}
    fix, test, gone = dropped["cve-name"], dropped["cve-name-test"], dropped["fix-all"]
    assert fix["upstream"] == {"status": "merged", "version": "1.1"}
    assert fix["reason"] == "already upstream in 1.1: recorded by `rebase --skip --merged` at the stop"
    assert fix["merged_evidence"] == [
        "the target has every line it adds and none it removes, at each hunk's place: "
        "demo/headers.py @@ -5,6 +5,8 @@ (the target's lines 8-11)"
    ]
    assert test["reason"].endswith("at the stop: upstream 1.1 has both tests")
    assert test["merged_evidence"][0].startswith("the target has every line it adds")
    assert gone["upstream"] == {"status": "pending"} and "merged_evidence" not in gone
    manifest = load(s.root / "patchset.toml")
    assert [d.merged_evidence for d in manifest.dropped][:2] == [
        tuple(fix["merged_evidence"]),
        tuple(test["merged_evidence"]),
    ]


def test_skip_merged_all_evidenced_takes_every_stop_the_content_shows_and_stops_at_the_others(tmp_path: Path) -> None:
    """One command accepts every remaining stop whose evidence is the target's content: the fix
    and its test go as merged, the parse_all fix (a plain conflict, no evidence) still stops, and
    there `--all-evidenced` is refused with what to do instead; nothing changed by the refusal."""
    s = _merged_series(tmp_path)
    res = s.run("rebase", "--to", "1.1")
    assert res.returncode == 3
    assert (
        "`patchtool rebase --skip --merged --all-evidenced` records it and every later stop" in res.stdout + res.stderr
    )
    res = s.run("rebase", "--skip", "--merged", "--all-evidenced", "--json")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "patch fix-all stopped the rebase" in res.stdout + res.stderr
    steps = {p["id"]: p for p in json.loads(res.stdout)["data"]["patches"]}
    assert [steps[p]["outcome"] for p in ("cve-name", "cve-name-test", "fix-all")] == [
        "already upstream",
        "already upstream",
        "conflict",
    ]
    assert steps["cve-name-test"]["detail"] == "recorded by `rebase --skip --merged --all-evidenced` at the stop"
    state = (s.root / ".patchtool/rebase/state.json").read_bytes()
    res = s.run("rebase", "--skip", "--merged", "--all-evidenced")
    assert res.returncode == 2 and "--all-evidenced skips only such stops" in res.stdout + res.stderr, res.stdout
    assert (s.root / ".patchtool/rebase/state.json").read_bytes() == state
    assert s.run("rebase", "--merged").returncode == 2
    assert s.run("rebase", "--skip", "--all-evidenced", "--reason", "x").returncode == 2
    assert s.run("rebase", "--skip", "--reason", "upstream removed parse_all").returncode == 0


# -- the dry run, scan and the rebase agree -------------------------------------------------------


def _verdict(step: dict[str, object]) -> tuple[object, ...]:
    return step["outcome"], step.get("detail"), step.get("evidence"), step.get("conflicted")


def test_the_dry_run_predicts_every_verdict_of_a_rebase_whose_stops_are_skipped(tmp_path: Path) -> None:
    """A differential test: five patches, two of them stops in the middle. The dry run (and scan)
    leave each stop out; the real rebase stops at each and is told `--skip`: every patch's verdict
    is the same, the stop's where it stopped. Debian folds the schema directory into one file in
    two patches (the first deletes its only file, the last adds the file), around a backport
    upstream extended and a fix of code upstream removed: the last patch's text application must
    see the directory the first emptied in the tree being built, not in the tree the replay
    started from (which a resumed rebase and a dry run do not share). A later patch on a stopped
    patch's file says which stop it assumes skipped."""
    schema = '{"version": 1}\n'
    s = make_series(
        tmp_path,
        {"demo/headers.py": HEADERS, "demo/schema/v1.json": schema, "README": "demo\n"},
        [
            ("schema-flat-1", {"demo/schema/v1.json": None}),
            ("cve-name", {"demo/headers.py": FIXED}),
            ("fix-all", {"demo/headers.py": FIXED.replace("for line in lines]", "for line in lines if line]")}),
            ("schema-flat-2", {"demo/schema": schema}),
            ("readme", {"README": "demo, as Debian ships it\n"}),
        ],
        {
            "demo/headers.py": HEADERS.replace(PARTITION, PARTITION + NAME_CHECK + VALUE_CHECK).split(
                "\n\ndef parse_all"
            )[0]
            + "\n",
            "docs/index.md": "# demo\n",
        },
    )
    predicted = s.dry_run()
    scanned = json.loads(s.run("scan", "--versions", "1.1", "--json").stdout)["data"]
    assert {p: row["1.1"] for p, row in scanned["matrix"].items()} == {p: v["outcome"] for p, v in predicted.items()}
    assert predicted["fix-all"]["assumes"] == ["cve-name"]
    assert scanned["assumes"] == {"fix-all": {"1.1": ["cve-name"]}}
    assert "assumes" not in predicted["schema-flat-2"] and "assumes" not in predicted["readme"]
    text = s.run("rebase", "--to", "1.1", "--dry-run").stdout
    assert "  fix-all: conflict - " in text and "      assumes cve-name skipped\n" in text
    real: dict[str, dict[str, object]] = {}
    res = s.run("rebase", "--to", "1.1", "--json")
    while res.returncode == 3:
        stop = next(p for p in json.loads(res.stdout)["data"]["patches"] if p["outcome"] == "conflict")
        real[str(stop["id"])] = stop
        res = s.run("rebase", "--skip", "--reason", "as the dry run assumes", "--json")
    assert res.returncode == 0, res.stdout
    for p in json.loads(res.stdout)["data"]["patches"]:
        real.setdefault(p["id"], p)
    assert list(real) == ["cve-name", "fix-all", "schema-flat-1", "schema-flat-2", "readme"]
    assert {p: _verdict(real[p]) for p in predicted} == {p: _verdict(v) for p, v in predicted.items()}
    assert predicted["schema-flat-2"]["outcome"] == "applied unchanged"


# -- files upstream moved where git's rename detection misses them --------------------------------

PARSE_HEADER = HEADERS[HEADERS.index("def parse_header") : HEADERS.index("\n\n\ndef parse_all")] + "\n"
PARSE = '"""Parsing one header."""\n\nfrom demo.headers.limits import MAX\n\n\n' + PARSE_HEADER
NAMES = '"""Header lists."""\n\nfrom demo.headers.parse import parse_header\n\n\n'
NAMES += HEADERS[HEADERS.index("def parse_all") :]
INIT = '"""Parse HTTP-ish headers: split into modules in 1.1."""\n\nfrom demo.headers.names import names, parse_all\n'
INIT += 'from demo.headers.parse import parse_header\n\n__all__ = ["names", "parse_all", "parse_header"]\n'
SORTED = (
    "    return [name for name, _ in parse_all(lines)]\n",
    "    return sorted(name for name, _ in parse_all(lines))\n",
)


def _split(tmp_path: Path, extra: Files | None = None) -> Series:
    """demo/headers.py split into the package demo/headers/ in 1.1 (git sees no rename: no new
    file is like enough the old one); Debian's fix changes parse_header and names()."""
    return make_series(
        tmp_path,
        {"demo/headers.py": HEADERS},
        [("cve-name", {"demo/headers.py": FIXED.replace(*SORTED)})],
        {
            "demo/headers.py": None,
            "demo/headers/__init__.py": INIT,
            "demo/headers/parse.py": PARSE,
            "demo/headers/names.py": NAMES,
            "demo/headers/limits.py": "MAX = 64\n",
            **(extra or {}),
        },
    )


def test_a_module_upstream_split_into_a_package_is_followed_by_each_hunks_lines(tmp_path: Path) -> None:
    """Upstream split headers.py into a package; git's rename detection finds no rename (checked
    here with git itself). Each of the patch's hunks is followed by its lines to the one file
    that has them, not called "target gone", and the report says where each went."""
    s = _split(tmp_path)
    moved = git(s.upstream, "diff", "-M", "--name-status", "v1.0", "v1.1")
    assert "D\tdemo/headers.py" in moved and not any(line.startswith("R") for line in moved.splitlines())
    step = s.dry_run()["cve-name"]
    assert step["outcome"] == "merged by 3-way merge", step
    assert step["renamed"] == [
        "demo/headers.py -> demo/headers/parse.py (moved upstream, followed by its lines: hunk @@ -5,6 +5,8 @@)",
        "demo/headers.py -> demo/headers/names.py (moved upstream, followed by its lines: hunk @@ -15,4 +17,4 @@)",
    ]
    res = s.run("rebase", "--to", "1.1")
    assert res.returncode == 0, res.stdout
    rebased = (s.root / "patches/0001-cve-name.patch").read_text()
    assert "+++ b/demo/headers/parse.py\n" in rebased and "+    if len(name) > MAX:\n" in rebased
    assert "+++ b/demo/headers/names.py\n" in rebased and "+" + SORTED[1] in rebased
    assert "demo/headers.py" not in rebased


def test_a_hunk_whose_lines_upstream_has_in_two_files_stops_naming_both(tmp_path: Path) -> None:
    """The same split, with parse_header also copied into a compatibility module: the hunk's
    lines are in two files. Nothing is guessed: the patch stops, naming both."""
    s = _split(tmp_path, {"demo/headers/compat.py": '"""Old names."""\n\nMAX = 64\n\n\n' + PARSE_HEADER})
    step = s.dry_run()["cve-name"]
    assert step["outcome"] == "target gone", step
    assert step["detail"] == (
        "CONFLICT (modify/delete): demo/headers.py deleted upstream and modified by the patch; demo/headers.py: "
        "deleted upstream; the lines of its hunk @@ -5,6 +5,8 @@ are in several places "
        "(demo/headers/compat.py line 5, demo/headers/parse.py line 5): not guessed"
    )
    res = s.run("rebase", "--to", "1.1")
    assert res.returncode == 3


TWO_FUNCS = '''\
"""Two checks."""


def check_name(name):
    limit = 1
    spare = 0
    return len(name) < limit


def one():
    return 1


def two():
    return 2


def check_value(value):
    """The value's check."""
    value = value.strip()
    value = value.lower()
    limit = 1
    return len(value) < limit
'''


def test_a_patch_whose_every_change_upstream_has_in_other_places_is_never_an_empty_patch(
    tmp_path: Path,
) -> None:
    """Found on Debian's urllib3 series moved to 1.26.20 (GHSA-g4mx-q9vg-27p4): some hunks the
    target has at their place, the others it has too but where the check does not see them (here
    upstream renamed the function around one). With the former left out the merge was clean and
    changed nothing: the rebase said "partly upstream, the rest applied" and wrote a patch file of
    0 bytes. Applying what is left changes nothing: it stops once with the evidence, and no
    patch file is ever written empty."""
    fixed = TWO_FUNCS.replace("    limit = 1\n    spare", "    limit = 64\n    spare").replace(
        "    limit = 1\n    return len(value)", "    limit = 256\n    return len(value)"
    )
    target = fixed.replace("    spare = 0\n", "    spare = 2\n").replace("def check_value", "def check_field")
    s = make_series(
        tmp_path, {"demo/checks.py": TWO_FUNCS}, [("cve-limits", {"demo/checks.py": fixed})], {"demo/checks.py": target}
    )
    step = s.dry_run()["cve-limits"]
    assert step["outcome"] == "conflict", step
    assert any("changes nothing" in e for e in step.get("evidence", ())), step
    res = s.run("rebase", "--to", "1.1")
    assert res.returncode == 3, res.stdout + res.stderr
    assert (s.root / "patches/0001-cve-limits.patch").read_text().startswith("From ")
    res = s.run("rebase", "--skip", "--merged")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not list((s.root / "patches").glob("*.patch"))
    assert (s.root / "patches/dropped/0001-cve-limits.patch").stat().st_size > 0


XML_BASE = '''\
import re


def xmlattr(d):
    """Attributes."""
    rv = " ".join(
        f'{k}="{v}"'
        for k, v in d.items()
        if v is not None
    )
    return rv
'''

XML_SPACES = '''\
import re

_space_re = re.compile(r"\\s", flags=re.ASCII)


def xmlattr(d):
    """Attributes. A key with a space fails."""
    items = []

    for k, v in d.items():
        if v is None:
            continue

        if _space_re.search(k) is not None:
            raise ValueError(f"Spaces are not allowed in attributes: '{k}'")

        items.append(f'{k}="{v}"')

    return " ".join(items)
'''

XML_INVALID = (
    XML_SPACES.replace(
        '_space_re = re.compile(r"\\s", flags=re.ASCII)', '_attr_key_re = re.compile(r"[\\s/>=]", flags=re.ASCII)'
    )
    .replace("_space_re.search(k)", "_attr_key_re.search(k)")
    .replace("Spaces are not allowed in attributes: '{k}'", "Invalid character in attribute name: {k!r}")
    .replace("A key with a space fails.", "A key with a space, /, > or = fails.")
)


XML_TESTS = """\
import pytest

from demo.filters import xmlattr


class TestFilter:
    def test_xmlattr(self):
        assert xmlattr({"a": 1}) == 'a="1"'

    def test_sort(self):
        assert sorted([2, 1]) == [1, 2]
"""
XML_TEST_SPACES = XML_TESTS.replace(
    "\n    def test_sort",
    "\n    def test_xmlattr_key_with_spaces(self):\n"
    '        with pytest.raises(ValueError, match="Spaces are not allowed"):\n'
    "            xmlattr({'src=1 onerror=alert(1)': 'my_class'})\n"
    "\n    def test_sort",
)
XML_TEST_INVALID = XML_TESTS.replace(
    "\n    def test_sort",
    '\n    @pytest.mark.parametrize("sep", ("\\t", "\\n", " ", "/", ">", "="))\n'
    "    def test_xmlattr_key_invalid(self, sep: str) -> None:\n"
    '        with pytest.raises(ValueError, match="Invalid character"):\n'
    "            xmlattr({f\"class{sep}onclick=alert(1)\": 'my_class'})\n"
    "\n    def test_sort",
)


LATER = "with the series' later patch(es) xmlattr-invalid, which rewrote it, every hunk of its files"


def test_a_backport_upstream_rewrote_as_the_series_next_patch_stops_naming_it(tmp_path: Path) -> None:
    """jinja2's Debian series in miniature (0001-xmlattr-filter-disallows-keys-with-spaces, then
    the series' own rewrite of it, which upstream released): the second applies in reverse and is
    dropped; the first conflicts, and its stop says that with the second every hunk of its files is
    in the target. It is never dropped on that alone (one kind of evidence)."""
    s = make_series(
        tmp_path,
        {"demo/filters.py": XML_BASE, "tests/test_filters.py": XML_TESTS},
        [
            ("xmlattr-spaces", {"demo/filters.py": XML_SPACES, "tests/test_filters.py": XML_TEST_SPACES}),
            ("xmlattr-invalid", {"demo/filters.py": XML_INVALID, "tests/test_filters.py": XML_TEST_INVALID}),
        ],
        {"demo/filters.py": XML_INVALID, "tests/test_filters.py": XML_TEST_INVALID},
    )
    steps = s.dry_run()
    assert steps["xmlattr-invalid"]["outcome"] == "already upstream"
    first = steps["xmlattr-spaces"]
    assert first["outcome"] == "conflict"
    assert [e[: len(LATER)] for e in first["evidence"]] == [LATER]  # type: ignore[union-attr]


def test_a_later_patch_upstream_does_not_have_gives_no_evidence(tmp_path: Path) -> None:
    """Upstream rewrote the function its own way: the series' two patches together are not in the
    target, so the first one's stop names nothing of upstream."""
    other = XML_BASE.replace('"""Attributes."""', '"""Attributes, escaped."""').replace(
        "f'{k}=\"{v}\"'", "f'{k}=\"{escape(v)}\"'"
    )
    s = make_series(
        tmp_path,
        {"demo/filters.py": XML_BASE},
        [("xmlattr-spaces", {"demo/filters.py": XML_SPACES}), ("xmlattr-invalid", {"demo/filters.py": XML_INVALID})],
        {"demo/filters.py": other},
    )
    steps = s.dry_run()
    assert steps["xmlattr-spaces"]["outcome"] == "conflict"
    assert not steps["xmlattr-spaces"].get("evidence")
    assert steps["xmlattr-invalid"]["outcome"] != "already upstream"


def test_a_later_patch_that_undoes_it_is_no_evidence(tmp_path: Path) -> None:
    """The series' next patch takes the first one back: together they change nothing, which the
    target cannot "have"; the first one's conflict names nothing of upstream."""
    other = XML_BASE.replace('"""Attributes."""', '"""Attributes, escaped."""')
    s = make_series(
        tmp_path,
        {"demo/filters.py": XML_BASE},
        [("xmlattr-spaces", {"demo/filters.py": XML_SPACES}), ("undo", {"demo/filters.py": XML_BASE})],
        {"demo/filters.py": other.replace("    rv = ", "    # joined\n    rv = ")},
    )
    steps = s.dry_run()
    assert steps["xmlattr-spaces"]["outcome"] == "conflict"
    assert not steps["xmlattr-spaces"].get("evidence")

"""Round trips that keep what they carry: the manifest's layout after import and export, DEP-3 and
Yocto headers read into upstream statuses, and a quilt export that imports back to the same
manifest."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from conftest import Demo, edit
from helpers import git, quilt_push_all, require_tool, snapshot
from patchtool.project.repository import Project
from patchtool.series import dep3
from test_editing import checked_out, three
from test_importing import CIAO, empty_project
from test_sdist_pins import sdist_demo  # noqa: F401 - the fixture, used by name


def blank_runs(text: str) -> list[int]:
    """The number of blank lines before each ``[[patch]]`` header after the first."""
    return [len(m.group(1)) - 1 for m in re.finditer(r"(\n+)\[\[patch\]\]", text)][1:]


def test_one_blank_line_between_entries_after_import_and_export(demo: Demo, tmp_path: Path) -> None:
    three(demo)
    diff = tmp_path / "ciao.diff"
    diff.write_text(CIAO)
    res = demo.run("import", str(diff), "--subject", "core: ciao", "--author", "A B <a@b.org>")
    assert res.returncode == 0, res.stdout + res.stderr
    text = (demo.root / "patchset.toml").read_text()
    assert blank_runs(text) == [1, 1, 1] and text.endswith("}\n") and not text.endswith("\n\n")
    wt = checked_out(demo)
    edit("python/demo/util.py", "return 2", "return 3")(wt)
    git(wt, "commit", "-qam", "util: three")
    res = demo.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    text = (demo.root / "patchset.toml").read_text()
    assert blank_runs(text) == [1, 1, 1, 1] and not text.endswith("\n\n")
    again = demo.run("export")
    assert again.returncode == 0 and (demo.root / "patchset.toml").read_text() == text


# -- diff -u with -p0 names --------------------------------------------------------------------

P0 = (
    CIAO.replace("Index: demo/python/demo/core.py\n" + "=" * 67 + "\n", "")
    .replace("demo.orig/python/demo/core.py", "python/demo/core.py.orig\t2024-05-01 10:00:00.000000000 +0200")
    .replace("+++ demo/python/demo/core.py", "+++ python/demo/core.py\t2024-05-01 10:01:00.000000000 +0200")
)


def test_a_p0_diff_imports_with_p0_and_is_refused_naming_the_option_without(demo: Demo, tmp_path: Path) -> None:
    demo.write_manifest()
    diff = tmp_path / "ciao.diff"
    diff.write_text(P0)
    before = snapshot(demo.root)
    res = demo.run("import", str(diff), "--subject", "core: ciao", "--author", "A B <a@b.org>")
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr == (
        f"error: {diff}: its names are -p0 names (python/demo/core.py is in the tree, demo/core.py is not) "
        "(hint: import it with -p0)\n"
    )
    assert snapshot(demo.root) == before
    res = demo.run("import", "-p0", str(diff), "--subject", "core: ciao", "--author", "A B <a@b.org>", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    (row,) = json.loads(res.stdout)["data"]["added"]
    text = (demo.root / row["file"]).read_text()
    assert "diff --git a/python/demo/core.py b/python/demo/core.py\n" in text and '+    word = "ciao"' in text
    res = demo.run("import", "--strip", "2", str(diff), "--subject", "x", "--author", "A B <a@b.org>")
    assert res.returncode != 0 and "demo/core.py" not in (demo.root / "patchset.toml").read_text()


# `diff -u PKG-INFO.orig PKG-INFO` run at the top of an unpacked sdist (t4135's traditional patch)
TOP_LEVEL = (
    "--- PKG-INFO.orig\t2024-05-01 10:00:00.000000000 +0200\n"
    "+++ PKG-INFO\t2024-05-01 10:01:00.000000000 +0200\n"
    "@@ -1,3 +1,3 @@\n Metadata-Version: 2.1\n-Name: demo\n+Name: demo-fork\n Version: 1.0\n"
)


def test_a_diff_of_top_level_names_imports_as_git_apply_reads_it(sdist_demo: Demo, tmp_path: Path) -> None:  # noqa: F811
    """git apply guesses -p0 where neither name has a directory, and so does import without -p;
    -p1 given is refused, as `git apply -p1` refuses it (no name is left once a directory is
    stripped), and nothing is written."""
    diff = tmp_path / "name.diff"
    diff.write_text(TOP_LEVEL)
    before = snapshot(sdist_demo.root)
    res = sdist_demo.run("import", "-p1", str(diff), "--subject", "metadata: rename", "--author", "A B <a@b.org>")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "no file name on the '---'/'+++' lines" in res.stderr and snapshot(sdist_demo.root) == before
    git(tmp_path, "init", "-q", "git-apply")
    (tmp_path / "git-apply" / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
    git(tmp_path / "git-apply", "apply", str(diff))  # git takes it without -p
    res = sdist_demo.run("import", str(diff), "--subject", "metadata: rename", "--author", "A B <a@b.org>", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    (row,) = json.loads(res.stdout)["data"]["added"]
    text = (sdist_demo.root / row["file"]).read_text()
    assert "diff --git a/PKG-INFO b/PKG-INFO\n" in text and "+Name: demo-fork\n" in text
    assert (tmp_path / "git-apply" / "PKG-INFO").read_text() == "Metadata-Version: 2.1\nName: demo-fork\nVersion: 1.0\n"


def test_p0_on_a_git_diff_names_the_option_given(one_patch: Demo, tmp_path: Path) -> None:
    """A git diff is -p1 whatever the command line says: the refusal names the -p given, not a series."""
    patch = tmp_path / "greet.patch"
    patch.write_text((one_patch.root / "patches/0001-greet.patch").read_text())
    before = snapshot(one_patch.root)
    res = one_patch.run("import", "-p0", str(patch))
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr == (
        f"error: {patch}: a git format-patch file is -p1, not -p0 "
        "(hint: import it without -p (in a series file: its line without -pN, or -p1 where -p is given))\n"
    )
    assert snapshot(one_patch.root) == before


# -- DEP-3 and Yocto headers read into upstream statuses ---------------------------------------


@pytest.mark.parametrize(
    ("header", "status", "not_kept"),
    [
        # the three the issue found
        (
            "Origin: backport, https://github.com/o/r/commit/abc1234\n",
            {"status": "backport", "ref": "abc1234", "url": "https://github.com/o/r/commit/abc1234"},
            [],
        ),
        ("Origin: upstream, commit:abc123\n", {"status": "backport", "ref": "abc123"}, []),
        (
            "Forwarded: not-needed\n",
            {"status": "inappropriate", "reason": "not needed upstream (Forwarded: not-needed)"},
            [],
        ),
        ("Forwarded: no\n", {"status": "pending"}, []),
        (
            "Forwarded: https://github.com/o/r/pull/7\n",
            {"status": "submitted", "url": "https://github.com/o/r/pull/7"},
            [],
        ),
        # Bug: is where the bug is, not where the patch went (python-idna's CVE-2024-3651.patch in Debian
        # bookworm names a GitHub advisory there)
        ("Bug: https://github.com/o/r/security/advisories/GHSA-x\n", {"status": "pending"}, []),
        (
            "Forwarded: not-necessary\n",
            {"status": "inappropriate", "reason": "not needed upstream (Forwarded: not-necessary)"},
            [],
        ),
        ("Forwarded: yes\n", {"status": "pending"}, ["Forwarded: yes (submitted needs a URL)"]),
        ("Applied-Upstream: 1.2, commit:abc123\n", {"status": "merged", "version": "1.2", "ref": "abc123"}, []),
        ("Applied-Upstream: commit:abc123\n", {"status": "backport", "ref": "abc123"}, []),
        (
            "Origin: other, https://bugs.example.org/1.patch\nLast-Update: 2024-01-01\nBug-Debian: https://b.d/1\n",
            {"status": "pending"},
            [],  # the patch file's header keeps them as they are
        ),
        ("Upstream-Status: Pending\n", {"status": "pending"}, []),
        (
            "Upstream-Status: Submitted [https://l.example.org/m/1]\n",
            {"status": "submitted", "url": "https://l.example.org/m/1"},
            [],
        ),
        ("Upstream-Status: Backport [v1.2]\nOrigin: upstream, commit:abc\n", {"status": "backport", "ref": "abc"}, []),
        ("Upstream-Status: Backport [1.2]\nApplied-Upstream: 1.2\n", {"status": "merged", "version": "1.2"}, []),
        ("Upstream-Status: Denied [maintainer said no]\n", {"status": "denied", "reason": "maintainer said no"}, []),
        ("Upstream-Status: Inappropriate [oe specific]\n", {"status": "inappropriate", "reason": "oe specific"}, []),
        ("Upstream-Status: Inactive-Upstream\n", {"status": "inappropriate", "reason": "upstream is inactive"}, []),
        (
            "Upstream-Status: Submitted [oe-core@lists]\n",
            {"status": "pending"},
            ["Upstream-Status: Submitted [oe-core@lists] (no status of the manifest says it; read DEP-3's fields)"],
        ),
    ],
)
def test_dep3_and_yocto_fields_mean_what_their_specs_say(
    header: str, status: dict[str, str], not_kept: list[str]
) -> None:
    got, notes = dep3.upstream(dep3.fields(header))
    assert got == status
    assert notes == not_kept


# -- export --quilt and import --series: the same manifest -----------------------------------------

FULL = {
    "greet": 'why = "Shorter greeting.\\n\\nOur users asked."\nupstream = { status = "pending" }\n',
    "util": 'upstream = { status = "submitted", url = "https://github.com/demo/demo/pull/7" }\n'
    '[[patch.evidence]]\nmetric = "latency"\nbefore = 3\nafter = 2\nsource = "bench.md"\n',
    "cap": 'kind = "performance"\nowner = "perf team"\napplies_to = ">=1.0,<2"\n'
    'upstream = { status = "backport", ref = "0123456789abcdef0123456789abcdef01234567" }\n',
}


def full(demo: Demo) -> None:
    three(demo)
    entries = []
    for ident, file in (("greet", "0001-greet.patch"), ("util", "0002-util.patch"), ("cap", "0003-cap.patch")):
        text = demo.entry(ident, file).replace('upstream = { status = "pending" }\n', "")
        for line in FULL[ident].splitlines():
            key = line.split(" = ", 1)[0]
            text = re.sub(rf"^{re.escape(key)} = .*\n", "", text, flags=re.MULTILINE)
        entries.append(text + FULL[ident])
    demo.write_manifest(*entries)


def test_a_quilt_export_imports_back_to_the_same_manifest(demo: Demo, tmp_path: Path) -> None:
    full(demo)
    before = Project.load(demo.root).manifest.patches
    assert before[1].evidence and "\n\n" in before[0].why and before[2].upstream.ref
    res = demo.run("export", "--quilt", str(tmp_path / "debian"))
    assert res.returncode == 0, res.stdout + res.stderr
    cap = (tmp_path / "debian/patches/0003-cap.patch").read_text()
    # DEP-3's meaning: upstream's commit needs no Forwarded: (it is upstream), a fork's own patch no Origin:
    assert "Origin: upstream, commit:0123456789abcdef0123456789abcdef01234567\nUpstream-Status: Backport [" in cap
    assert "Forwarded:" not in cap
    greet = (tmp_path / "debian/patches/0001-greet.patch").read_text()
    assert "Origin:" not in greet and "Forwarded: no\n" in greet
    fork = empty_project(tmp_path / "fork", demo.root)
    res = demo.run("--root", str(fork.root), "import", "--series", str(tmp_path / "debian/patches/series"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "TODO" not in (fork.root / "patchset.toml").read_text()
    again = Project.load(fork.root).manifest.patches
    assert [e.imported.name if e.imported else None for e in again] == [Path(e.file).name for e in before]
    assert [dataclasses.replace(e, imported=None) for e in again] == list(before)
    for p in (demo.root / "patches").glob("*.patch"):
        assert (fork.root / "patches" / p.name).read_text() == p.read_text()


def test_export_quilt_force_refreshes_in_place(demo: Demo, tmp_path: Path) -> None:
    full(demo)
    out = tmp_path / "debian"
    (out / "patches").mkdir(parents=True)
    (out / "patches/series").write_text("old.patch\n0001-greet.patch\n")
    (out / "patches/old.patch").write_text("gone\n")
    (out / "patches/README").write_text("kept\n")
    res = demo.run("export", "--quilt", str(out))
    assert res.returncode == 2 and "--force" in res.stdout + res.stderr
    res = demo.run("export", "--quilt", str(out), "--force")
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(p.name for p in (out / "patches").iterdir()) == [
        "0001-greet.patch",
        "0002-util.patch",
        "0003-cap.patch",
        "README",
        "series",
    ]


@pytest.mark.parametrize("key", ["why", "reason"])
def test_a_control_character_in_prose_never_reaches_a_header_raw(demo: Demo, tmp_path: Path, key: str) -> None:
    """Found by an attack: ``export --quilt`` wrote a ``why``'s ESC and BEL into its
    ``Patchtool-Why:`` header as they were. A value holding a control character (but a newline or
    a tab) goes in ``Patchtool-Entry``, TOML-escaped, and imports back to the same entry."""
    three(demo)
    value = "Shorter.\\u001b]0;owned\\u0007\\u001b[2J\\r"
    entry = demo.entry("greet", "0001-greet.patch")
    if key == "why":
        entry = entry.replace('why = "because"', f'why = "{value}"')
    else:
        entry = entry.replace('status = "pending" }', f'status = "inappropriate", reason = "{value}" }}')
    demo.write_manifest(entry, demo.entry("util", "0002-util.patch"), demo.entry("cap", "0003-cap.patch"))
    before = Project.load(demo.root).manifest.patches
    res = demo.run("export", "--quilt", str(tmp_path / "debian"))
    assert res.returncode == 0, res.stdout + res.stderr
    exported = (tmp_path / "debian/patches/0001-greet.patch").read_bytes()
    header = exported[: exported.index(b"\ndiff --git ")]
    assert not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", header), header
    assert f'{key} = "{value}"'.encode() in header  # escaped in Patchtool-Entry
    fork = empty_project(tmp_path / "fork", demo.root)
    res = demo.run("--root", str(fork.root), "import", "--series", str(tmp_path / "debian/patches/series"))
    assert res.returncode == 0, res.stdout + res.stderr
    again = Project.load(fork.root).manifest.patches
    assert [dataclasses.replace(e, imported=None) for e in again] == list(before)


def test_the_exported_quilt_series_pushes_and_git_am_keeps_the_message(demo: Demo, tmp_path: Path) -> None:
    quilt = require_tool("quilt", enables="`quilt push -a` on an exported series with DEP-3 headers")
    full(demo)
    out = tmp_path / "q"
    assert demo.run("export", "--quilt", str(out)).returncode == 0
    git(demo.work, "checkout", "-q", "upstream")
    _, push = quilt_push_all(quilt, demo.work, out / "patches", tmp_path)
    assert push.returncode == 0, push.stdout + push.stderr
    assert "Now at patch patches/0003-cap.patch" in push.stdout
    git(demo.work, "checkout", "-q", "-b", "am", "upstream")
    git(demo.work, "am", "-q", *sorted(str(p) for p in (out / "patches").glob("*.patch")))
    assert git(demo.work, "log", "--format=%B", "-1", "HEAD~2").strip() == "core: say hi\n\nShorter greeting."


def test_what_has_no_place_is_reported() -> None:
    found = dep3.fields("Origin: upstream, https://example.org/list/42\nApplied-Upstream: https://example.org/x\n")
    status, notes = dep3.upstream(found)
    assert (status, notes) == (
        {"status": "pending"},
        ["Applied-Upstream: https://example.org/x (names no version or commit)"],
    )
    # among a format-patch's mail headers (which git am drops), what the entry does not say either
    assert dep3.unplaced({**found, "last-update": "2024-01-01", "subject": "x"}, status) == [
        "Last-Update: 2024-01-01",
        "Origin: upstream, https://example.org/list/42",
    ]


# -- headers import refuses: each names the file, the line where it can, and what to do ------------

AUTHOR = ("--author", "A B <a@b.org>")


def refused(demo: Demo, path: Path, *args: str) -> tuple[str, str]:
    """``import PATH ARGS`` is refused with exit 1 and changes nothing: its message and hint."""
    before = snapshot(demo.root)
    res = demo.run("import", str(path), *args)
    assert res.returncode == 1, res.stdout + res.stderr
    assert snapshot(demo.root) == before
    m = re.fullmatch(r"error: (.*) \(hint: (.*)\)\n", res.stderr)
    assert m, res.stderr
    return m.group(1), m.group(2)


def test_a_long_description_parses_whole_up_to_the_bound_and_no_further(demo: Demo, tmp_path: Path) -> None:
    """Found by an attack: each continuation line copied the field so far (200,000 lines took 30
    s). Now lines are joined once, and a header is read up to a bound on its lines and size."""
    lines = [f" c {n}" for n in range(dep3.MAX_HEADER_LINES - 1)]
    assert dep3.fields("Description: x\n" + "\n".join(lines) + "\n") == {
        "description": "x\n" + "\n".join(line[1:] for line in lines)
    }
    demo.write_manifest()
    patch = tmp_path / "long.patch"
    patch.write_text("Description: x\n" + "".join(f" c {n}\n" for n in range(200_000)) + CIAO)
    size = len(patch.read_text()) - len(CIAO)
    assert refused(demo, patch, *AUTHOR) == (
        f"{patch}: its header (the text before the diff) has 200,001 lines, {size:,} characters; "
        "import reads at most 10,000 lines, 1,048,576 characters",
        "shorten the text before the diff (its description)",
    )
    patch.write_text("Description: " + "x" * (1 << 20) + "\n" + CIAO)
    assert refused(demo, patch, *AUTHOR)[0].startswith(f"{patch}: its header (the text before the diff) has 1 lines, ")


def test_an_upstream_status_padded_with_spaces_reads_in_linear_time() -> None:
    """Found by an attack: ``\\s*(...)?\\s*$`` backtracked quadratically over a run of spaces (this
    line took hours); the header's bound alone would not have saved it."""
    header = "Upstream-Status: Pending" + " " * 1_000_000 + "x\n"
    assert dep3.upstream(dep3.fields(header))[0] == {"status": "pending"}


@pytest.mark.parametrize(
    ("header", "message", "hint"),
    [
        (
            "Patchtool-Id: ../../etc/passwd\n",
            "Patchtool-Id: '../../etc/passwd' is not a valid id (lower-case letters, digits, '.', '_', '-'; "
            "starting with a letter or digit)",
            "fix Patchtool-Id, or delete it (the id then comes from the patch's subject)",
        ),
        (
            "Patchtool-Id: ciao\n .\n",
            "Patchtool-Id: 'ciao\\n' is not a valid id (lower-case letters, digits, '.', '_', '-'; "
            "starting with a letter or digit)",
            "fix Patchtool-Id, or delete it (the id then comes from the patch's subject)",
        ),
        (
            'Patchtool-Entry: { id = "../x" }\n',
            "Patchtool-Entry's id: '../x' is not a valid id (lower-case letters, digits, '.', '_', '-'; "
            "starting with a letter or digit)",
            "fix Patchtool-Entry's id, or delete it (the id then comes from the patch's subject)",
        ),
        (
            "Description: ciao\nPatchtool-Id: ciao\nPatchtool-Id: other\n",
            ":3: a second Patchtool-Id field (the first is at line 2)",
            "keep one Patchtool-Id field; import would read only the first",
        ),
        (
            "Upstream-Status: Pending\nForwarded: no\nUpstream-Status: Denied [no]\n",
            ":3: a second Upstream-Status field (the first is at line 1)",
            "keep one Upstream-Status field; import would read only the first",
        ),
        (
            'Patchtool-Kind: performance\nPatchtool-Entry: { kind = "correctness" }\n',
            "Patchtool-Entry gives kind, and so does its Patchtool-Kind field",
            "keep one of them: delete Patchtool-Kind, or kind from Patchtool-Entry",
        ),
        (
            "Patchtool-Knd: performance\n",
            ":1: Patchtool-Knd is no field patchtool knows",
            "the Patchtool-* fields are Patchtool-Id, Patchtool-Kind, Patchtool-Owner, Patchtool-Why, "
            "Patchtool-Applies-To, Patchtool-Drop-When, Patchtool-Entry",
        ),
        (
            "Patchtool-Entry: " + "{a=" * 3000 + "1" + "}" * 3000 + "\n",
            "Patchtool-Entry is not an inline TOML table: TOML value nested more than 100 levels deep "
            "(column 300 of the value)",
            "fix the patch's Patchtool-Entry field, or delete it",
        ),
        (
            "Patchtool-Entry: { x = " + "[" * 100 + "]" * 100 + " }\n",
            "Patchtool-Entry is not an inline TOML table: TOML value nested more than 100 levels deep "
            "(column 105 of the value)",
            "fix the patch's Patchtool-Entry field, or delete it",
        ),
        (
            'Patchtool-Entry: { why = "a", why = "b" }\n',
            'Patchtool-Entry is not an inline TOML table: Key "why" already exists.',
            "fix the patch's Patchtool-Entry field, or delete it",
        ),
        (
            'Patchtool-Entry: { owner = "me" }\n why = "hidden"\n',
            "Patchtool-Entry is not an inline TOML table: more follows the value (why = ...)",
            "fix the patch's Patchtool-Entry field, or delete it",
        ),
    ],
)
def test_a_header_field_import_cannot_take_is_refused_naming_it(
    demo: Demo, tmp_path: Path, header: str, message: str, hint: str
) -> None:
    """Found by an attack: an invalid Patchtool-Id was dropped for the subject's, a second field
    lost to the first, Patchtool-Entry overrode Patchtool-Kind, and deep nesting was exit 70."""
    demo.write_manifest()
    patch = tmp_path / "ciao.patch"
    patch.write_text(header + CIAO)
    got = refused(demo, patch, *AUTHOR)
    assert got == (f"{patch}{'' if message.startswith(':') else ': '}{message}", hint)


def test_a_second_field_is_named_at_its_line_in_a_file_of_several_messages(one_patch: Demo, tmp_path: Path) -> None:
    text = (one_patch.root / "patches/0001-greet.patch").read_text()
    second = text.replace("Subject:", "Upstream-Status: Pending\nUpstream-Status: Pending\nSubject:", 1)
    patch = tmp_path / "pr.patch"
    patch.write_text(text + second)
    line = text.count("\n") + second[: second.index("Upstream-Status")].count("\n") + 2
    assert refused(one_patch, patch) == (
        f"{patch}:{line}: a second Upstream-Status field (the first is at line {line - 1})",
        "keep one Upstream-Status field; import would read only the first",
    )


# -- strip levels and --series: a hint that names what was meant -------------------------------------


def test_an_ab_diff_imported_with_p0_is_refused_naming_p1(demo: Demo, tmp_path: Path) -> None:
    demo.write_manifest()
    diff = tmp_path / "ab.diff"
    diff.write_text(CIAO.replace("demo.orig/", "a/").replace("+++ demo/", "+++ b/"))
    before = snapshot(demo.root)
    res = demo.run("import", "-p0", str(diff), "--subject", "core: ciao", *AUTHOR)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr == (
        f"error: {diff}: its names are -p1 names (python/demo/core.py is in the tree, "
        "b/python/demo/core.py is not) (hint: import it with -p1 (the default), not -p0)\n"
    )
    assert snapshot(demo.root) == before
    res = demo.run("import", str(diff), "--subject", "core: ciao", *AUTHOR)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("layout", ["series", "patches/series", None])
def test_series_given_a_directory_names_the_series_file_it_meant(
    demo: Demo, tmp_path: Path, layout: str | None
) -> None:
    demo.write_manifest()
    quilt = tmp_path / "debian"
    quilt.mkdir()
    if layout:
        (quilt / layout).parent.mkdir(exist_ok=True)
        (quilt / layout).write_text("")
    before = snapshot(demo.root)
    res = demo.run("import", "--series", str(quilt))
    assert res.returncode == 2, res.stdout + res.stderr
    hint = (
        f"give --series {quilt / layout}, or the directory itself as FILE"
        if layout
        else f"give --series DIR/series, the file that lists the patches ({quilt} has none)"
    )
    assert res.stderr == (
        f"error: --series {quilt}: it is a directory; --series names a quilt series file (hint: {hint})\n"
    )
    assert snapshot(demo.root) == before


def test_an_entry_that_ends_in_sub_tables_is_followed_by_one_blank_line() -> None:
    """The writer's one blank line goes after an entry's last sub-table ([[patch.gpu_verification]]),
    not after its own keys too: the real series' entries end so, and a rebase onto its own pin
    wrote patchset.toml again with two blank lines after each."""
    from patchtool.project import tomlio

    text = (
        'schema = 1\n\n[[patch]]\nid = "a"\n\n[[patch.gpu_verification]]\nrun = "r"\n\n'
        '[[patch]]\nid = "b"\n\n[patch.upstream]\nstatus = "pending"\n\n[[patch]]\nid = "c"\n'
    )
    assert tomlio.dumps(tomlio.parse(text, file="patchset.toml"), file="patchset.toml") == text


def test_what_has_no_place_is_printed_with_control_characters_escaped(demo: Demo, tmp_path: Path) -> None:
    """Found by an attack: the "not kept" line printed a header's ESC and U+202E as they were."""
    demo.write_manifest()
    patch = tmp_path / "ciao.patch"
    mail = "From 0123456789abcdef0123456789abcdef01234567 Mon Sep 17 00:00:00 2001\nFrom: A B <a@b.org>\n"
    diff = CIAO.split("===\n", 1)[1].replace("demo.orig/", "a/").replace("+++ demo/", "+++ b/")
    diff = "diff --git a/python/demo/core.py b/python/demo/core.py\n" + diff
    patch.write_text(mail + "Subject: [PATCH] ciao\nReviewed-by: \x1b[2Jme \u202eevil\n\n---\n" + diff)
    res = demo.run("import", str(patch))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "\x1b" not in res.stdout and "\u202e" not in res.stdout
    assert r"    not kept (no place in the manifest): Reviewed-By: \x1b[2Jme \u202eevil" in res.stdout


@pytest.mark.parametrize(
    "line",
    [" ---", " --- a/setup.py", " diff -u shows it", " Index: setup.py", " From: the reporter"],
)
def test_a_description_line_that_would_end_the_message_is_kept(demo: Demo, tmp_path: Path, line: str) -> None:
    """Found on issue 29's loss hunt: a DEP-3 description whose continuation line reads `---`
    (or `diff -`, `Index: `, `--- name`) lost that line and everything after it, its other fields
    too, since unindented it is where a patch file's message ends for `git am` and for patchtool;
    one reading `From: ` first would become the commit's author. Such a line keeps its DEP-3
    indent in the message, and a checkout/export round trip keeps the patch file as it is."""
    demo.write_manifest()
    header = f"Description: core: ciao\n{line}\n After it: kept.\nAuthor: A B <a@b.org>\nForwarded: no\n\n"
    diff = tmp_path / "ciao.diff"
    diff.write_text(header + CIAO)
    res = demo.run("import", str(diff))
    assert res.returncode == 0, res.stdout + res.stderr
    [written] = sorted((demo.root / "patches").glob("*.patch"))
    patch = Project.load(demo.root).series()[0].patch
    assert patch.body == f"{line}\nAfter it: kept.\n\nForwarded: no"
    assert patch.author_name == "A B"
    before = written.read_text()
    checked_out(demo)
    res = demo.run("export")
    assert res.returncode == 0, res.stdout + res.stderr
    assert written.read_text() == before


def test_an_hg_export_imports_with_its_diff_command_line_as_the_diff(demo: Demo, tmp_path: Path) -> None:
    """conda-forge's setuptools series carries an `hg export` whose `diff -r A -r B path` line
    stands before its `--- `: that line starts the diff, as GNU patch and git apply read it, not
    a line of the message (where it would end the message: import refused it, found by the run of
    the real series)."""
    demo.write_manifest()
    diff = tmp_path / "hg.patch"
    diff.write_text(
        "# HG changeset patch\n# User Jane Doe <jane@example.org>\n# Node ID 85c317f36cd8\nconda schema fixes\n\n"
        "From: Someone Else <else@example.com>\nsaid in review.\n\n"
        "diff -r e9052b361691 -r 85c317f36cd8 python/demo/core.py\n" + CIAO.split("=" * 67 + "\n", 1)[1]
    )
    res = demo.run("import", str(diff))
    assert res.returncode == 0, res.stdout + res.stderr
    patch = Project.load(demo.root).series()[0].patch
    assert "conda schema fixes" in patch.body and "diff -r" not in patch.body
    assert patch.paths == ("python/demo/core.py",)
    # its '# User ' line is its author (the third attack found it credited to the importer), and a
    # 'From:' line its description quotes stays in the message (the fourth found it dropped)
    assert (patch.author_name, patch.author_email) == ("Jane Doe", "jane@example.org")
    assert "From: Someone Else <else@example.com>\nsaid in review." in patch.body


PROSE = "Description: a fix\n\n{} and now it is fine.\nAuthor: D <d@example.com>\n\n"


@pytest.mark.parametrize(
    ("header", "line"),
    [
        ("Description: core: ciao\nAuthor: A B <a@b.org>\n\nfree text\ndiff -u is how it was made\n\n", 4),
        (PROSE.format("--- old behaviour was bad\n"), 3),
        (PROSE.format("Index: the word index, in prose\n"), 3),
        (PROSE.format("diff between old and new, said in words\n--- that's it\n"), 4),
    ],
)
def test_a_header_that_cannot_be_kept_whole_is_refused(demo: Demo, tmp_path: Path, header: str, line: int) -> None:
    """A header whose free text, not a field's continuation, would end the message where git am
    ends it is refused, naming the file and the line, and nothing is imported. Found by the third
    attack: a line of prose that starts like a diff ('--- ', 'Index: ', a 'diff' line before '--- ')
    was taken for the diff's start, and the header after it (its Author: included) silently lost.
    A diff starts only where a '--- '/'+++ ' pair does (or the line a tool printed just before one),
    as GNU patch finds it; the prose stays in the header, which refuses it."""
    demo.write_manifest()
    diff = tmp_path / "prose.patch"
    diff.write_text(header + CIAO)
    before = snapshot(demo.root)
    res = demo.run("import", str(diff))
    assert res.returncode == 1, res.stdout + res.stderr
    assert snapshot(demo.root) == before
    assert f"{diff}: its header cannot be kept whole in a patch file: line {line} of its message" in res.stderr


def test_a_format_patch_saved_with_crlf_imports_as_git_am_reads_it(demo: Demo, tmp_path: Path) -> None:
    """Found by the fourth attack: a format-patch mail saved with CRLF line ends (as a mail client
    may) was refused, blaming its ordinary '---' line. `git am` strips the CRs (no --keep-cr), and
    so does import: the patch is the one saved with LF."""
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi")
    text = (demo.root / "patches" / "0001-greet.patch").read_text()
    (demo.root / "patches" / "0001-greet.patch").unlink()
    demo.write_manifest()
    mail = tmp_path / "greet.patch"
    mail.write_bytes(text.replace("\n", "\r\n").encode())
    res = demo.run("import", str(mail))
    assert res.returncode == 0, res.stdout + res.stderr
    [written] = (demo.root / "patches").glob("*.patch")
    assert written.read_text() == text


def test_an_mbox_of_several_plain_mails_is_refused_not_read_as_one(demo: Demo, tmp_path: Path) -> None:
    """Found by the fourth attack: two mails with ordinary mbox envelopes (a mail client's, lore's,
    b4's 'From git@z Thu Jan  1 00:00:00 1970') were read as one patch, the second's change credited
    to the first's author and its subject and text lost. Such a file is refused, saying to split it."""
    demo.write_manifest()
    one = "From alice@example.com Mon Jan  1 10:00:00 2024\nFrom: Alice <a@example.com>\nSubject: one\n\n"
    two = "From git@z Thu Jan  1 00:00:00 1970\nFrom: Bob <b@example.com>\nSubject: two\n\nBob's reason.\n"
    mbox = tmp_path / "two.mbox"
    mbox.write_text(one + CIAO + "\n" + two + CIAO.replace("ciao", "hola"))
    before = snapshot(demo.root)
    res = demo.run("import", str(mbox))
    assert res.returncode == 2, res.stdout + res.stderr
    assert snapshot(demo.root) == before
    assert f"{mbox} holds several mails whose envelopes" in res.stderr
    assert "git mailsplit" in res.stderr

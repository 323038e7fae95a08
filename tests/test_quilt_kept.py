"""A quilt series in Debian's style kept whole on import (DEP-3 as its spec reads, mail headers as
``git mailinfo`` reads them) and given back by ``export --quilt`` as it came.

``tests/data/debian-style/`` is written for these tests, in the layout of Debian bookworm's own
series (fetched with ``/work/shared/tools/debian-source.sh``, not copied): a format-patch with a
``(cherry picked from commit X)`` line and a signature (python-werkzeug's CVE-2023-46136.patch,
preserve-any-existing-PYTHONPATH-in-tests.patch), a gbp-pq mail whose body holds DEP-3 fields with
an ``Origin:`` commit URL and no keyword and ``Bug:`` advisories (python-urllib3's
CVE-2023-43804.patch, python-idna's CVE-2024-3651.patch), a DEP-3 header over an ``Index:`` quilt
diff in a subdirectory (python-werkzeug's remove-test_exclude_patterns-test.patch), a folded
``Subject:`` followed by fields and two ``Origin:`` fields (python-urllib3's
Prevent-issue-in-HTTPResponse-.read-when-decoded_con.patch, sqlparse's CVE-2024-4340.patch), a
``-p0`` diff after a ``---`` line of free text (jinja2's 0006-Fix-CVE-2024-56201.patch), and a
branch tag in the subject (python-django's security backports, ``[4.2.x]``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import Demo
from helpers import git, quilt_push_all, require_tool
from patchtool.diff.patchfile import clean_subject
from patchtool.edit import import_
from patchtool.edit.quilt import export_quilt
from patchtool.project.pins import load_pin
from patchtool.project.repository import Project
from patchtool.series import dep3
from patchtool.upstream.cache import Cache
from test_importing import empty_project, git_upstream, me  # noqa: F401 (fixtures)

DEBIAN_STYLE = Path(__file__).parent / "data" / "debian-style"

# -- subjects as git mailinfo -b reads them ------------------------------------------------------

SUBJECTS = [
    "[PATCH 10/10] Fix the parser",
    "Re: [PATCH v2 3/4] Fix the parser",
    "[4.2.x] Fixed CVE-2024-1 -- Escaped names",
    "[PATCH] [4.2.x] Fixed CVE-2024-1",
    "[4.2.x] [PATCH] Fixed CVE-2024-1",
    "[PATCH] [other] [PATCH] message",
    ":  [RFC PATCH]   spaced    out ",
    "Re:",
    "[PATCH]",
    "Read me",
    "[PATCH 2/2] [stable] re: [PATCH] nested",
    "[unclosed bracket",
]


@pytest.mark.parametrize("subject", SUBJECTS)
def test_a_subject_is_cleaned_as_git_mailinfo_b_cleans_it(subject: str) -> None:
    mail = f"From: A <a@example.org>\nSubject: {subject}\n\nbody\n"
    out = subprocess.run(
        ["git", "mailinfo", "-b", "/dev/null", "/dev/null"], input=mail, capture_output=True, text=True, check=True
    ).stdout
    said = next(line for line in out.splitlines() if line.startswith("Subject:"))
    assert clean_subject(subject) == said.removeprefix("Subject:").strip()


INBODY = [
    "From: Dana Upstream <dana@upstream.example>\n\n",  # git send-email, sending another's patch
    "From: Dana Upstream <dana@upstream.example>\nDate: Mon, 1 Jan 2024 10:00:00 +0000\n"
    "Subject: [PATCH v2 3/4] Greet with hi,\n  not hello\n\n",  # folded, cleaned like the mail's own
    "\n\nsubject: Greet with hi\n\n",  # blank lines before, any case
    "[PATCH] Greet with hi\n\n",
    "From: Dana Upstream <dana@upstream.example>\nA text line ends the block and stays.\n\n",
]


@pytest.mark.parametrize("inbody", INBODY)
def test_a_format_patchs_in_body_headers_are_read_as_git_am_reads_them(
    demo: Demo,
    me: None,  # noqa: F811
    tmp_path: Path,
    inbody: str,
) -> None:
    mail = (DEBIAN_STYLE / "0001-Greet-with-hi.patch").read_text()
    head, _, body = mail.partition("\n\n")
    head = head.replace("From: Dana Upstream <dana@upstream.example>", "From: Sam Sender <sam@list.example>")
    patch = tmp_path / "0001-Greet-with-hi.patch"
    patch.write_text(f"{head.replace('[PATCH 1/6] Greet with hi', 'Say hi')}\n\n{inbody}{body}")
    info = subprocess.run(
        ["git", "mailinfo", "-b", str(tmp_path / "msg"), str(tmp_path / "diff")],
        stdin=patch.open(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    said = dict(line.split(": ", 1) for line in info.splitlines() if ": " in line)
    demo.write_manifest()
    import_.import_patches(Project.load(demo.root), Cache(demo.cache), [patch])
    (lp,) = Project.load(demo.root).series()
    assert (lp.patch.author_name, lp.patch.author_email) == (said["Author"], said["Email"])
    assert lp.patch.subject == said["Subject"]
    assert lp.patch.body == (tmp_path / "msg").read_text().strip()


# -- DEP-3 and mail headers kept whole --------------------------------------------------------------


@pytest.fixture
def imported(demo: Demo, me: None) -> Project:  # noqa: F811
    demo.write_manifest()
    result = import_.import_patches(Project.load(demo.root), Cache(demo.cache), [DEBIAN_STYLE])
    assert len(result.added) == 6
    return Project.load(demo.root)


def test_every_header_line_is_kept_in_the_patch_file_and_the_subject_is_one(imported: Project) -> None:
    loaded = {lp.entry.id: lp for lp in imported.series()}
    assert list(loaded) == [
        "greet-with-hi",
        "backport-ghsa-aaaa-bbbb-cccc",
        "say-goodbye-in-italian",
        "prevent-an-off-by-one-in-limit-when-the-queue-is",
        "say-the-core-is-patched",
        "fixed-cve-2099-0002-marked-the-version-as",  # the branch tag leaves the id ...
    ]
    said = {i: (lp.patch.subject, lp.patch.body, lp.patch.author_name) for i, lp in loaded.items()}
    assert said["greet-with-hi"] == (
        "Greet with hi",
        "A shorter greeting.\n\n(cherry picked from commit 1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d)",
        "Dana Upstream",
    )
    assert said["backport-ghsa-aaaa-bbbb-cccc"] == (
        "Backport GHSA-aaaa-bbbb-cccc",
        "Co-authored-by: Quentin Helper <quentin@upstream.example>\n"
        "Origin: https://github.com/demo/demo/commit/01220354d389cd05474713f8c982d05c9b17aafb\n"
        "Bug: https://github.com/demo/demo/security/advisories/GHSA-aaaa-bbbb-cccc\n"
        "Bug: https://github.com/demo/demo/pull/3139\n"
        "Bug-Debian: https://security-tracker.debian.org/tracker/CVE-2099-0001",
        "Seth Upstream",
    )
    assert said["say-goodbye-in-italian"] == (
        "Say goodbye in Italian",
        "The Italian deployment wants its own farewell.\n\nDebian-specific: upstream keeps English.\n\n"
        "Forwarded: not-needed\nLast-Update: 2024-02-27",
        "Maria Rossi",
    )
    assert said["prevent-an-off-by-one-in-limit-when-the-queue-is"] == (
        "Prevent an off-by-one in limit() when the queue is exactly full and the cap is reached Provided it "
        "was checked once",
        "Origin: https://github.com/demo/demo/commit/cefd1dbba6a20ea4f017e6e472f9ada3a8a743e0\n"
        "Origin: https://github.com/demo/demo/commit/698df9ef7e88354e8ec9392471189a168fb31521\n\n"
        '[Maria Rossi: Backport for code before 1.1 ("Standardize limit()").]',
        "Ahmed Contributor",
    )
    assert said["say-the-core-is-patched"] == (
        "Say the core is patched",
        "Origin: backport, https://github.com/demo/demo/commit/767b23617628419ae3709ccfb02f9602ae9fe51f\n"
        "Reviewed-by: Lee Reviewer <lee@debian.example>\n"
        "Bug-Debian: https://bugs.debian.org/1031370\n"
        "Last-Update: 2025-02-27",  # what follows the '---' line is no part of the message, as for git am
        "Dana Fork",  # no Author: the importer's own identity
    )
    assert said["fixed-cve-2099-0002-marked-the-version-as"][0] == (
        "[1.0.x] Fixed CVE-2099-0002 -- Marked the version as patched."  # ... and stays in the subject
    )
    text = (imported.root / loaded["greet-with-hi"].entry.file).read_text()
    assert "Date:" not in text and "Subject: [PATCH] Greet with hi\n" in text


def test_upstream_status_reads_dep3_as_its_spec_means(imported: Project) -> None:
    up = {e.id: e.upstream.to_dict() for e in imported.manifest.patches}
    assert up["backport-ghsa-aaaa-bbbb-cccc"] == {"status": "pending"}  # Bug: is where the bug is
    assert up["say-goodbye-in-italian"] == {
        "status": "inappropriate",
        "reason": "not needed upstream (Forwarded: not-needed)",
    }
    assert up["say-the-core-is-patched"] == {
        "status": "backport",
        "ref": "767b23617628419ae3709ccfb02f9602ae9fe51f",
        "url": "https://github.com/demo/demo/commit/767b23617628419ae3709ccfb02f9602ae9fe51f",
    }


def test_the_commits_a_patch_names_are_kept_not_acted_on(imported: Project) -> None:
    came = {e.id: e.imported.to_dict() if e.imported else None for e in imported.manifest.patches}
    greet = came["greet-with-hi"]
    assert greet is not None
    assert greet["commit"] == "3f2a1c0d9e8b7a6f5e4d3c2b1a0f9e8d7c6b5a49"
    assert greet["cherry_picked_from"] == ["1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d"]
    assert [c["name"] for c in came.values() if c] == [
        "0001-Greet-with-hi.patch",
        "CVE-2099-0001.patch",
        "debian-specific/farewell-in-italian.patch",
        "fold-subject.patch",
        "docstring.patch",
        "1.0.x-version.patch",
    ]
    assert imported.manifest.patches[0].upstream.to_dict() == {"status": "pending"}  # upstream's history lacks it


def test_an_origin_commit_url_with_no_keyword_is_a_backport_of_upstreams_repository_only() -> None:
    """Debian's usual form (python-urllib3: 10 of 12 patches)."""
    header = "Origin: https://github.com/urllib3/urllib3/commit/01220354d389cd05474713f8c982d05c9b17aafb\n"
    found = dep3.fields(header)
    ref = "01220354d389cd05474713f8c982d05c9b17aafb"
    assert dep3.upstream(found, {"github.com/urllib3/urllib3"}) == (
        {"status": "backport", "ref": ref, "url": header[8:-1]},
        [],
    )
    assert dep3.upstream(found, {"github.com/someone/urllib3"}) == ({"status": "pending"}, [])
    assert dep3.upstream(found) == ({"status": "pending"}, [])
    assert dep3.repository("https://GitHub.com/urllib3/urllib3.git") == "github.com/urllib3/urllib3"
    assert dep3.repository("https://gitlab.com/o/r/-/commit/abc1234") == "gitlab.com/o/r"


def test_an_origin_commit_in_upstreams_history_is_a_backport(
    tmp_path: Path,
    git_upstream: tuple[Path, str, str],  # noqa: F811
    me: None,  # noqa: F811
) -> None:
    up, fix, pins = git_upstream
    diff = git(up, "show", "--format=", fix)
    patch = tmp_path / "fix.patch"
    patch.write_text(f"Description: util: two\nOrigin: https://github.com/demo/demo/commit/{fix}\n\n{diff}")
    cache = Cache(tmp_path / "cache")
    fork = empty_project(tmp_path / "fork", Path(pins))
    cache.ensure(load_pin(fork.root, "demo-1.1"))
    (row,) = import_.import_patches(fork, cache, [patch], author="A B <a@b.org>").added
    assert (row["upstream_status"], row["upstream_ref"]) == ("backport", fix)


# -- export --quilt gives the series back as it came ------------------------------------------------


def tree_of(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file() and ".pc" not in p.parts
    }


def test_an_imported_series_exported_unchanged_gives_the_same_files(imported: Project, tmp_path: Path) -> None:
    out = tmp_path / "debian"
    export_quilt(imported, out)
    assert tree_of(out / "patches") == tree_of(DEBIAN_STYLE)  # series comments, -pN words, subdirectories


def test_a_changed_patch_keeps_its_name_and_header_and_only_its_diff_is_rebuilt(
    demo: Demo, imported: Project, tmp_path: Path
) -> None:
    files = {e.imported.name: e.file for e in imported.manifest.patches if e.imported and e.imported.name}
    for name, old, new in (
        ("docstring.patch", "upstream, patched.", "upstream, patched twice."),  # -p0, free text after '---'
        ("CVE-2099-0001.patch", "+    return 2", "+    return 3"),  # a mail with a diffstat
        ("0001-Greet-with-hi.patch", '"hi"', '"hey"'),  # a format-patch with a signature
    ):
        stored = imported.root / files[name]
        stored.write_text(stored.read_text().replace(old, new))
    out = tmp_path / "debian"
    export_quilt(Project.load(imported.root), out)
    got, was = tree_of(out / "patches"), tree_of(DEBIAN_STYLE)
    assert [n for n in got if got[n] != was[n]] == [
        "0001-Greet-with-hi.patch",
        "CVE-2099-0001.patch",
        "docstring.patch",
    ]
    doc = got["docstring.patch"]
    assert doc.startswith(was["docstring.patch"].split("--- python/demo/core.py.orig")[0])  # the header as it was
    assert "--- python/demo/core.py\n+++ python/demo/core.py\n" in doc and "patched twice" in doc  # still -p0
    cve = got["CVE-2099-0001.patch"]
    head = was["CVE-2099-0001.patch"].split("---\n")[0]
    assert cve.startswith(head + "---\n\ndiff --git a/python/demo/util.py") and "+    return 3" in cve  # no stale stat
    assert got["0001-Greet-with-hi.patch"].endswith('"hey"\n     return f"{greeting} {name}"\n \n \n-- \n2.39.2\n\n')
    quilt = require_tool("quilt", enables="`quilt push -a` of a rebuilt Debian-style series")
    tree, push = quilt_push_all(quilt, demo.work, out / "patches", tmp_path)
    assert push.returncode == 0, push.stdout + push.stderr
    core = (tree / "python/demo/core.py").read_text()
    assert '"hey"' in core and "patched twice" in core and "ciao" in core and ">= cap" in core
    assert (tree / "python/demo/util.py").read_text() == "def helper():\n    return 3\n"


def test_the_series_loses_a_dropped_patchs_line_and_gains_a_new_one_after_its_neighbour(
    demo: Demo, imported: Project, tmp_path: Path
) -> None:
    res = demo.run("drop", "say-goodbye-in-italian", "--reason", "upstream says ciao now")
    assert res.returncode == 0, res.stdout + res.stderr
    diff = tmp_path / "tail.diff"
    (demo.work / "python/demo/extra.py").write_text("X = 1\n")
    git(demo.work, "add", "-N", "python/demo/extra.py")
    diff.write_text(git(demo.work, "diff"))
    git(demo.work, "reset", "-q")
    res = demo.run("import", str(diff), "--subject", "extra: add X", "--author", "A B <a@b.org>")
    assert res.returncode == 0, res.stdout + res.stderr
    out = tmp_path / "debian"
    export_quilt(Project.load(demo.root), out)
    assert (out / "patches/series").read_text() == (DEBIAN_STYLE / "series").read_text().replace(
        "debian-specific/farewell-in-italian.patch -p1\n", ""
    ) + "0006-extra-add-x.patch\n"
    assert not (out / "patches/debian-specific").exists()
    new = (out / "patches/0006-extra-add-x.patch").read_text()
    assert "Patchtool-Id: extra-add-x\n" in new and "TODO" not in new and "Patchtool-Kind" not in new
    assert "Origin:" not in new and "Forwarded: no\n" in new

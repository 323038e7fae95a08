"""Patch files: format-patch headers, stats via unidiff, and paths that may not escape the tree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from patchtool.diff.patchfile import PatchFile
from patchtool.errors import InvalidInput

DATA = Path(__file__).parent / "data"


def parse(name: str) -> PatchFile:
    return PatchFile.parse((DATA / name).read_text(), name=f"patches/{name}")


def fail(name: str) -> str:
    with pytest.raises(InvalidInput) as exc:
        parse(name)
    (problem,) = exc.value.problems
    assert problem.file == f"patches/{name}"
    return problem.render()


def test_format_patch_headers_and_stats() -> None:
    p = parse("two-files.patch")
    assert (p.author_name, p.author_email) == ("Jane Dev", "jane@example.org")
    assert p.subject == "core: say hi and add a helper"
    assert p.body == "Shorter greeting, and a helper for callers."
    assert p.paths == ("python/demo/core.py", "python/demo/extra.py")
    assert [f.status for f in p.files] == ["modified", "added"]
    assert (p.added, p.removed) == (3, 1)
    assert p.message == "core: say hi and add a helper\n\nShorter greeting, and a helper for callers.\n"


def test_encoded_subject_and_author_are_decoded() -> None:
    p = parse("encoded-headers.patch")
    assert p.author_name == "Zoë Ingénieur"
    assert p.subject == "core: é in a long subject that git folded onto a second line"


def test_not_a_diff() -> None:
    assert fail("not-a-diff.patch") == (
        "patches/not-a-diff.patch: not a patch: no 'diff --git' section found "
        "(hint: export the commit with `git format-patch` (or use `patchtool import`))"
    )


def test_plain_diff_without_headers_is_refused() -> None:
    assert "the first line must be 'From <sha> Mon Sep 17 00:00:00 2001'" in fail("plain-diff.patch")


@pytest.mark.parametrize(
    ("name", "why", "line"),
    [
        ("escape-dotdot.patch", "path '../../etc/passwd' escapes the tree", 5),
        ("escape-absolute.patch", "absolute path '/etc/cron.d/evil'", 5),
        ("touch-dotgit.patch", "path '.git/hooks/post-checkout' touches .git/", 5),
        ("escape-rename.patch", "path '../outside.py' escapes the tree", 8),
    ],
)
def test_unsafe_paths_are_refused_with_line(name: str, why: str, line: int) -> None:
    text = fail(name)
    assert text.startswith(f"patches/{name}:{line}: unsafe diff: {why}")


def diff_with(path_line: str) -> str:
    """A one-file patch whose 'diff --git' line is ``path_line``."""
    return (
        f"From {'0' * 40} Mon Sep 17 00:00:00 2001\nFrom: A <a@example.org>\nSubject: [PATCH] x\n\n"
        f"---\n{path_line}\nindex 1111111..2222222 100644\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
    )


@pytest.mark.parametrize(
    "raw", ["a/x/../../y b/x/../../y", "b//abs b//abs", "a/.GIT/config b/.GIT/config", "C:\\x C:\\x"]
)
def test_unsafe_diff_git_names_are_refused(raw: str) -> None:
    with pytest.raises(InvalidInput, match="unsafe diff"):
        PatchFile.parse(diff_with(f"diff --git {raw}"), name="p.patch")


def test_normal_paths_are_accepted() -> None:
    assert PatchFile.parse(diff_with("diff --git a/f b/f"), name="p.patch").paths == ("f",)


def test_split_files_and_hunks() -> None:
    p = parse("two-files.patch")
    sections = p.model.files
    assert len(sections) == 2
    header, hunks = p.model.file_header(sections[0]), [p.model.hunk_text(h) for h in sections[0].hunks]
    assert header.startswith("diff --git a/python/demo/core.py")
    assert len(hunks) == 1 and hunks[0].startswith("@@ -2,")


@pytest.mark.parametrize(
    ("author", "subject"),
    [
        ("A U Thor <author@example.org>", "[PATCH] core: say hi"),
        ('"Thor, A. U." <author@example.org>', "[PATCH 2/7] a subject\n that git folded"),
        ("=?UTF-8?q?Ren=C3=A9=20Bj=C3=B6rk?= <rene@example.org>", "=?UTF-8?q?caf=C3=A9=3A=20fix?="),
        ("author@example.org", "[PATCH v2] no name"),
        ("Name With Spaces\n <folded@example.org>", "[PATCH] subject"),
    ],
)
def test_headers_read_as_the_email_package_reads_them(author: str, subject: str) -> None:
    """The hand-written header reader agrees with the email package on what git writes."""
    import email.header
    import email.parser
    import email.policy
    import email.utils

    head = (
        f"From {'0' * 40} Mon Sep 17 00:00:00 2001\nFrom: {author}\nDate: Thu, 1 Jan 1970 00:00:00 +0000\n"
        f"Subject: {subject}\n\nThe body.\n\nMore of it.\n---\n"
    )
    diff = "diff --git a/f b/f\nindex 1111111..2222222 100644\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
    patch = PatchFile.parse(head + diff, name="p.patch")
    msg = email.parser.Parser(policy=email.policy.compat32).parsestr(head.split("\n", 1)[1])

    def decoded(value: str) -> str:
        return str(email.header.make_header(email.header.decode_header(value)))

    name, address = email.utils.parseaddr(decoded(msg["From"]))
    assert (patch.author_name, patch.author_email) == (name or address, address)
    assert patch.subject == re.sub(r"^\[PATCH[^\]]*\]\s*", "", " ".join(decoded(msg["Subject"]).split()))
    assert patch.body == "The body.\n\nMore of it."

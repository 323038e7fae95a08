"""What a patch says about upstream's commits (issue 31, section 2): the references read from its
message and its manifest entry, in the forms Debian's, Fedora's and stable branches' series use."""

from __future__ import annotations

from patchtool.rebase.references import Said, advisories, carries, references, reverts

SHA = "0123456789abcdef0123456789abcdef01234567"
SHA2 = "89abcdef0123456789abcdef0123456789abcdef"


def _found(message: str, **kw: object) -> list[tuple[str, Said, bool]]:
    return [(r.commit, r.said, r.named) for r in references(message, **kw)]  # type: ignore[arg-type]


def test_dep3_origin_with_or_without_its_word_names_the_commit() -> None:
    for origin in (
        f"Origin: upstream, https://github.com/demo/demo/commit/{SHA}",
        f"Origin: backport, https://gitlab.com/demo/demo/-/commit/{SHA[:12]}",
        f"Origin: https://github.com/demo/demo/commit/{SHA}",
        f"Origin: upstream, commit:{SHA}",
    ):
        got = references(f"Fix the header parser\n\n{origin}\nForwarded: not-needed\n")
        assert [(r.commit[:12], r.said, r.named) for r in got] == [(SHA[:12], Said.ORIGIN, True)], origin
        assert got[0].text == origin


def test_an_origin_of_a_vendor_or_a_page_that_names_no_commit_is_no_reference() -> None:
    assert _found(f"Fix\n\nOrigin: vendor, https://example.com/commit/{SHA}\n") == []
    assert _found("Fix\n\nOrigin: https://bugs.debian.org/123456\n") == []


def test_applied_upstream_cherry_picked_and_backport_lines() -> None:
    message = (
        "Fix it\n\n"
        f"Applied-Upstream: 2.3, https://github.com/demo/demo/commit/{SHA}\n"
        f"(cherry picked from commit {SHA2})\n"
    )
    assert _found(message) == [(SHA, Said.APPLIED_UPSTREAM, True), (SHA2, Said.CHERRY_PICKED, True)]
    assert _found(f"[3.12] Fix it\n\ncommit {SHA} upstream.\n") == [(SHA, Said.STABLE_UPSTREAM, True)]
    assert _found(f"Backport of {SHA[:10]} from main\n") == [(SHA[:10], Said.BACKPORT_OF, True)]
    assert _found("Backport of deadbeef from main\n") == []  # an English word spelt in hex is no id


def test_the_manifests_ref_and_imports_records_join_each_commit_once() -> None:
    got = references(
        f"Fix\n\n(cherry picked from commit {SHA[:12]})\n",
        upstream_ref=f"https://github.com/demo/demo/commit/{SHA}",
        picked=(SHA[:12],),
        exported_from=SHA2,
    )
    assert [(r.commit, r.said, r.named) for r in got] == [
        (SHA, Said.CHERRY_PICKED, True),  # the longer id of the same commit kept
        (SHA2, Said.FORMAT_PATCH_FROM, False),
    ]
    assert _found("Fix\n", upstream_ref="v1.2") == []  # a tag is not a commit id


def test_a_format_patch_from_line_is_a_candidate_and_a_named_saying_wins() -> None:
    assert _found("Fix\n", exported_from=SHA) == [(SHA, Said.FORMAT_PATCH_FROM, False)]
    assert _found(f"Fix\n\nOrigin: upstream, commit:{SHA}\n", exported_from=SHA) == [(SHA, Said.ORIGIN, True)]
    assert _found("Fix\n", exported_from="0" * 40) == []  # --zero-commit names nothing


def test_advisory_ids_in_a_subject_and_in_upstreams_messages() -> None:
    assert advisories("CVE-2024-12345: fix, and ghsa-9wx4-h78v-vm56 too; CVE-2024-12345") == (
        "CVE-2024-12345",
        "GHSA-9wx4-h78v-vm56",
    )
    assert advisories("Fix a crash") == ()
    assert carries("Reject long header names\n\nFixes cve-2024-12345.\n", "CVE-2024-12345")
    assert not carries("Reject long header names\n", "CVE-2024-12345")


def test_a_revert_names_the_commit_it_reverts() -> None:
    assert reverts(f'Revert "Fix"\n\nThis reverts commit {SHA}.\n') == (SHA,)
    assert reverts("Fix\n") == ()

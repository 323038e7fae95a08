"""Upstream's history (issue 31, section 2): ``rebase --history`` asks upstream's repository, named
by the pin's ``[git]``, whether a commit a patch refers to (or one with its patch-id) is between
the pin's tag and the target's, and names the commits under each hunk of every conflict and drift.

Each case builds upstream as a real git repository in ``tmp_path`` with tags ``v1.0`` and
``v1.1`` and several commits between them, in the style of Debian's security backports: the
series carries, against 1.0, a fix upstream made after 1.0.
"""

from __future__ import annotations

import json
from pathlib import Path

from debian_backports import FIXED, HEADERS, NAME_CHECK, PARTITION, VALUE_CHECK, Upstream, commit, make_upstream, steps
from helpers import format_patch, git

FIX_SUBJECT = "Reject header names longer than MAX (CVE-2024-1234)"
# upstream's fix also says so in NEWS, which a backport leaves out: git cherry's patch-id differs
FIX = {"demo/headers.py": FIXED, "NEWS": "1.1: header names are limited to MAX bytes\n"}


def test_a_backport_whose_commit_upstream_refactored_stops_naming_the_commit(tmp_path: Path) -> None:
    """Upstream made the fix after 1.0, then moved the check into a helper: the backport's hunk
    merges cleanly and would add the check a second time. History names the commit: it stops once,
    "already upstream (commit X, in version 1.1)", and is never applied again."""
    helper = (
        HEADERS.replace(PARTITION, PARTITION + "    _check(name)\n")
        + '\n\ndef _check(name):\n    if len(name) > MAX:\n        raise ValueError("header name too long")\n'
    )
    u = make_upstream(
        tmp_path,
        [(FIX_SUBJECT, FIX), ("Move the name check into a helper", {"demo/headers.py": helper})],
        [
            (
                "cve-name",
                "Reject long header names\n\nOrigin: upstream, commit:{" + FIX_SUBJECT + "}\n",
                {"demo/headers.py": FIXED},
            )
        ],
    )
    fix = u.commits[FIX_SUBJECT]
    without = steps(u.dry_run())["cve-name"]
    assert without["outcome"] != "already upstream", without  # content alone does not show it
    data = u.dry_run("--history")
    step = steps(data)["cve-name"]
    assert step["outcome"] == "conflict"
    assert (
        step["detail"] == f"already upstream (commit {fix[:12]}, in version 1.1); the target's content does not show it"
    )
    assert step["evidence"][0] == (
        f"its Origin line names upstream's commit {fix[:12]}, with the patch's patch-id "
        f'"{FIX_SUBJECT}", in 1.1 (upstream\'s history)'
    )
    res = u.run("rebase", "--to", "1.1", "--history")
    assert res.returncode == 3, res.stdout + res.stderr
    assert f"already upstream (commit {fix[:12]}, in version 1.1)" in res.stdout
    assert "upstream may have it" in res.stderr or "--skip --merged" in res.stdout + res.stderr


def test_a_history_proven_stop_shows_the_hunks_the_target_has(tmp_path: Path) -> None:
    """The named commit fixed two files; upstream then moved one file's check into a helper. The
    stop that names the commit also shows what the target's content does have: the other file's
    hunk, at its place."""
    limits = "MAX = 64\n\n\ndef limit():\n    return MAX\n"
    raised = limits.replace("MAX = 64\n", "MAX = 64\nMAX_VALUE = 4 * MAX\n")
    helper = (
        HEADERS.replace(PARTITION, PARTITION + "    _check(name)\n")
        + '\n\ndef _check(name):\n    if len(name) > MAX:\n        raise ValueError("header name too long")\n'
    )
    fixed = {"demo/headers.py": FIXED, "demo/limits.py": raised}
    u = make_upstream(
        tmp_path,
        [(FIX_SUBJECT, fixed), ("Move the name check into a helper", {"demo/headers.py": helper})],
        [("cve-name", "Reject long header names\n\nOrigin: upstream, commit:{" + FIX_SUBJECT + "}\n", fixed)],
        base={"demo/headers.py": HEADERS, "demo/limits.py": limits},
    )
    step = steps(u.dry_run("--history"))["cve-name"]
    assert step["outcome"] == "conflict"
    assert str(step["detail"]).endswith("the target's content does not show it")
    evidence = list(step["evidence"])  # type: ignore[call-overload]
    assert (
        "upstream has demo/limits.py @@ -1,4 +1,5 @@ (the target's lines 2-2): every line it adds, none it removes"
        in evidence
    )
    assert any(e.startswith("upstream has demo/headers.py @@ -5,6 +5,8 @@ in another form: ") for e in evidence)


def _extended(tmp_path: Path) -> Upstream:
    """Upstream made the fix, then added a value check right after it; the series carries the fix
    as a cherry-pick naming upstream's commit."""
    return make_upstream(
        tmp_path,
        [
            (FIX_SUBJECT, FIX),
            ("Check the value's length too", {"demo/headers.py": FIXED.replace(NAME_CHECK, NAME_CHECK + VALUE_CHECK)}),
        ],
        [
            (
                "cve-name",
                "Reject long header names\n\n(cherry picked from commit {" + FIX_SUBJECT + "})\n",
                {"demo/headers.py": FIXED},
            )
        ],
    )


def test_a_backport_upstream_extended_is_dropped_on_history_and_content(tmp_path: Path) -> None:
    """Upstream took the fix and added a value check right after it: no reverse application finds
    the patch, so without history it stops (the content alone); with its commit named in the
    range, history and the target's content agree: dropped without a stop, both in the report."""
    u = _extended(tmp_path)
    fix = u.commits[FIX_SUBJECT]
    assert steps(u.dry_run())["cve-name"]["outcome"] == "conflict"
    step = steps(u.dry_run("--history"))["cve-name"]
    assert step["outcome"] == "already upstream"
    assert step["detail"] == f"already upstream (commit {fix[:12]}, in version 1.1)"
    assert step["evidence"][1].startswith("the target has every line it adds and none it removes")
    res = u.run("rebase", "--to", "1.1", "--history")
    assert res.returncode == 0, res.stdout + res.stderr
    manifest = (u.root / "patchset.toml").read_text()
    assert f"commit {fix[:12]}" in manifest and 'status = "merged"' in manifest


def test_a_patch_id_alone_stops_once_and_drops_nothing(tmp_path: Path) -> None:
    """A git pin, no --history: upstream made a commit with the patch's own patch-id (``git
    cherry`` finds it), then changed the lines it added. One kind of evidence: the rebase stops
    once, showing it, and the patch stays in the series (issue 31, section 0). It was dropped
    without a stop on the patch-id alone."""
    changed = FIXED.replace('raise ValueError("header name too long")', "raise HeaderTooLong(name)")
    u = make_upstream(
        tmp_path,
        [(FIX_SUBJECT, {"demo/headers.py": FIXED}), ("Raise HeaderTooLong", {"demo/headers.py": changed})],
        [("cve-name", "Reject long header names\n", {"demo/headers.py": FIXED})],
    )
    why = "its patch-id matches a commit upstream made between 1.0 and 1.1, but the target's content does not show it"
    step = steps(u.dry_run())["cve-name"]
    assert step["outcome"] == "conflict", step
    assert step["evidence"][0] == why
    before = (u.root / "patchset.toml").read_text()
    res = u.run("rebase", "--to", "1.1")
    assert res.returncode == 3, res.stdout + res.stderr
    assert why in res.stdout + res.stderr
    assert (u.root / "patchset.toml").read_text() == before


def test_a_patch_id_with_the_targets_content_drops_without_a_stop(tmp_path: Path) -> None:
    """The same, but upstream only added a check beside the patch's: its patch-id (history) and the
    target's content (every line it adds, at its place) agree, so it is dropped without a stop,
    both in the evidence."""
    u = make_upstream(
        tmp_path,
        [
            (FIX_SUBJECT, {"demo/headers.py": FIXED}),
            ("Check the value's length too", {"demo/headers.py": FIXED.replace(NAME_CHECK, NAME_CHECK + VALUE_CHECK)}),
        ],
        [("cve-name", "Reject long header names\n", {"demo/headers.py": FIXED})],
    )
    step = steps(u.dry_run())["cve-name"]
    assert step["outcome"] == "already upstream", step
    assert step["evidence"][0] == "its patch-id matches a commit upstream made between 1.0 and 1.1"
    assert step["evidence"][1].startswith("the target has every line it adds and none it removes")
    res = u.run("rebase", "--to", "1.1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert 'status = "merged"' in (u.root / "patchset.toml").read_text()


def test_a_named_commit_that_carries_every_line_but_not_the_patch_id_is_proof(tmp_path: Path) -> None:
    """Upstream changed a line of the fix's context before making the fix: the backport onto 1.0
    has another patch-id, but the commit it names carries every line its hunk adds. With the
    target's content agreeing, it is dropped without a stop. The lines were compared with their
    newline on one side only, so no commit ever carried a patch by its lines."""
    plainly = HEADERS.replace("return name, value", "return (name, value)")
    u = make_upstream(
        tmp_path,
        [
            ("Return a tuple plainly", {"demo/headers.py": plainly}),
            (FIX_SUBJECT, {"demo/headers.py": plainly.replace(PARTITION, PARTITION + NAME_CHECK)}),
        ],
        [
            (
                "cve-name",
                "Reject long header names\n\nOrigin: upstream, commit:{" + FIX_SUBJECT + "}\n",
                {"demo/headers.py": FIXED},
            )
        ],
    )
    fix = u.commits[FIX_SUBJECT]
    step = steps(u.dry_run("--history"))["cve-name"]
    assert step["outcome"] == "already upstream", step
    assert step["evidence"][0] == (
        f"its Origin line names upstream's commit {fix[:12]}, which carries every line each hunk adds and removes "
        f'"{FIX_SUBJECT}", in 1.1 (upstream\'s history)'
    )


def _named_outside(tmp_path: Path, *, backport: str = FIXED) -> tuple[Upstream, str, str]:
    """Upstream made the fix on its main branch after 1.0 (released in 2.0, not between the pins)
    and cherry-picked it onto the 1.x branch, then added a value check beside it, before 1.1; the
    backport names the main branch's commit (werkzeug's CVE-2023-46136: b1916c0c, only in 3.0.1,
    picked as f2300208 into 2.3.8). Returns upstream, the named commit and its pick."""
    u = make_upstream(tmp_path, [], [])
    git(u.repo, "tag", "-d", "v1.1")
    plainly = (
        "Return a tuple plainly",
        {"demo/headers.py": HEADERS.replace("return name, value", "return (name, value)")},
    )
    git(u.repo, "checkout", "-q", "-b", "dev", "v1.0")
    commit(u.repo, *plainly)  # in the fix's context: the backport onto 1.0 has another patch-id
    fixed = {**FIX, "demo/headers.py": FIXED.replace("return name, value", "return (name, value)")}
    fix = commit(u.repo, FIX_SUBJECT, fixed)
    git(u.repo, "tag", "v2.0")
    git(u.repo, "checkout", "-q", "main")
    commit(u.repo, plainly[0] + " (1.x)", plainly[1])
    git(u.repo, "cherry-pick", fix)
    pick = git(u.repo, "rev-parse", "HEAD").strip()
    checked = fixed["demo/headers.py"].replace(NAME_CHECK, NAME_CHECK + VALUE_CHECK)
    commit(u.repo, "Check the value's length too", {"demo/headers.py": checked})
    git(u.repo, "tag", "v1.1")
    git(u.repo, "checkout", "-q", "-b", "debian", "v1.0")
    commit(u.repo, f"Reject long header names\n\nOrigin: upstream, commit:{fix[:8]}\n", {"demo/headers.py": backport})
    (u.root / "patches" / "0001-cve-name.patch").write_text(format_patch(u.repo))
    git(u.repo, "checkout", "-q", "main")
    git(u.repo, "branch", "-q", "-D", "debian")
    (u.root / "patchset.toml").write_text(
        (u.root / "patchset.toml").read_text()
        + '\n[[patch]]\nid = "cve-name"\nfile = "patches/0001-cve-name.patch"\nkind = "correctness"\n'
        'owner = "debian"\nwhy = "fix"\napplies_to = ">=1.0"\ndrop_when = "upstream"\nupstream = { status = "pending" }\n'
    )
    return u, fix, pick


def test_a_named_commit_outside_the_pins_is_found_by_its_pick_between_them(tmp_path: Path) -> None:
    """The patch names upstream's commit on another branch, not between the pins; the range has a
    cherry-pick of it (the same ``git patch-id``). Without history the content alone stops; with it,
    the pick is history's evidence, the target's content agrees, and the patch is dropped without
    a stop, its evidence naming both commits. The named commit's trees and blobs are fetched once,
    by id. Before, a named commit outside the range was no evidence at all."""
    u, fix, pick = _named_outside(tmp_path)
    assert steps(u.dry_run())["cve-name"]["outcome"] == "conflict"
    data = u.dry_run("--history")
    step = steps(data)["cve-name"]
    assert step["outcome"] == "already upstream", step
    assert step["detail"] == f"already upstream (commit {pick[:12]}, in version 1.1)"
    assert step["evidence"][0] == (
        f"its Origin line names upstream's commit {fix[:12]}, outside the pins; {pick[:12]} between them has its "
        f'patch-id, which carries every line each hunk adds and removes "{FIX_SUBJECT}", in 1.1 (upstream\'s history)'
    )
    assert step["evidence"][1].startswith("the target has every line it adds and none it removes")
    fetched = [h for h in data["history"] if h.startswith("fetched")]  # type: ignore[union-attr]
    assert f"fetched the trees of {fix[:12]} and its parent (--filter=blob:none)" in fetched
    assert f"fetched the 3 blob(s) {fix[:12]} changes" in fetched  # demo/headers.py's two, NEWS's new one
    again = u.dry_run("--history")  # warm: nothing fetched again
    assert not any(h.startswith("fetched") for h in again["history"])  # type: ignore[union-attr]
    assert steps(again)["cve-name"] == step
    res = u.run("rebase", "--to", "1.1", "--history")
    assert res.returncode == 0, res.stdout + res.stderr
    manifest = (u.root / "patchset.toml").read_text()
    assert f"commit {pick[:12]}" in manifest and 'status = "merged"' in manifest


def test_a_named_commit_whose_pick_does_not_carry_the_backport_stops_naming_both(tmp_path: Path) -> None:
    """The backport is worded otherwise than upstream's fix (werkzeug's CVE-2023-46136: 2.3 had
    moved the code the backport changes): the pick between the pins does not carry its lines, and
    the target's content does not show it. It stops once, its evidence naming both commits."""
    worded = FIXED.replace("header name too long", "header name is too long")
    u, fix, pick = _named_outside(tmp_path, backport=worded)
    step = steps(u.dry_run("--history"))["cve-name"]
    assert step["outcome"] == "conflict", step
    assert step["evidence"][-1] == (
        f'its Origin line names {fix[:12]}, outside the pins; {pick[:12]} "{FIX_SUBJECT}" between them has its '
        "patch-id, which does not carry every hunk of the patch"
    )


def test_a_named_commit_outside_the_pins_without_a_pick_is_no_evidence(tmp_path: Path) -> None:
    """The same named commit, but the range has no commit with its patch-id (1.1 made the fix in
    its own words): nothing from history; the content alone stops, as before."""
    u, fix, _ = _named_outside(tmp_path)
    git(u.repo, "tag", "-d", "v1.1")
    git(u.repo, "reset", "-q", "--hard", "HEAD~2")
    own_words = FIXED.replace("header name too long", "name too long").replace(
        "return name, value", "return (name, value)"
    )
    commit(u.repo, "Limit header names", {"demo/headers.py": own_words})
    git(u.repo, "tag", "v1.1")
    step = steps(u.dry_run("--history"))["cve-name"]
    assert step["outcome"] == "conflict", step
    assert not any(fix[:12] in e for e in step.get("evidence", [])), step


def test_a_commit_upstream_reverted_is_no_evidence_and_the_patch_applies(tmp_path: Path) -> None:
    """Upstream made the fix, then reverted it: the patch names a commit the target does not
    have. Nothing is dropped; the patch applies, and history's note says the commit was reverted."""
    u = make_upstream(tmp_path, [(FIX_SUBJECT, FIX)], [])
    fix = u.commits[FIX_SUBJECT]
    git(u.repo, "tag", "-d", "v1.1")
    git(u.repo, "revert", "--no-edit", fix)
    git(u.repo, "tag", "v1.1")
    git(u.repo, "checkout", "-q", "-b", "debian", "v1.0")
    commit(u.repo, f"Reject long header names\n\nOrigin: upstream, commit:{fix}\n", {"demo/headers.py": FIXED})
    (u.root / "patches" / "0001-cve-name.patch").write_text(format_patch(u.repo))
    git(u.repo, "checkout", "-q", "main")
    (u.root / "patchset.toml").write_text(
        (u.root / "patchset.toml").read_text()
        + '\n[[patch]]\nid = "cve-name"\nfile = "patches/0001-cve-name.patch"\nkind = "correctness"\n'
        'owner = "debian"\nwhy = "fix"\napplies_to = ">=1.0"\ndrop_when = "upstream"\nupstream = { status = "pending" }\n'
    )
    step = steps(u.dry_run("--history"))["cve-name"]
    assert step["outcome"] == "applied unchanged", step


def test_a_conflict_names_the_upstream_commits_under_its_hunk(tmp_path: Path) -> None:
    """A patch of the fork's own conflicts with an upstream refactoring: the stop names the commit
    that changed the lines under its hunk, in text, --json and the report."""
    renamed = HEADERS.replace(
        "    name = name.strip()\n    value = value.strip()\n", "    name, value = name.strip(), value.strip()\n"
    )
    ours = HEADERS.replace("    name = name.strip()\n", "    name = name.strip().lower()\n")
    u = make_upstream(
        tmp_path,
        [
            ("Update the docstring", {"demo/headers.py": HEADERS.replace("HTTP-ish", "HTTP")}),
            ("Strip both at once (#123)", {"demo/headers.py": renamed.replace("HTTP-ish", "HTTP")}),
        ],
        [("lower-names", "Lower-case header names\n", {"demo/headers.py": ours})],
    )
    sha = u.commits["Strip both at once (#123)"]
    data = u.dry_run("--history")
    step = steps(data)["lower-names"]
    assert step["outcome"] == "conflict"
    assert step["upstream_commits"] == [
        f'{sha[:7]} "Strip both at once (#123)" changed line 8 under hunk 1 of demo/headers.py'
    ]
    assert "upstream_commits" not in steps(u.dry_run())["lower-names"]
    res = u.run("rebase", "--to", "1.1", "--history", "--report", str(tmp_path / "r.md"))
    assert res.returncode == 3
    assert f'upstream: {sha[:7]} "Strip both at once (#123)" changed line 8 under hunk 1' in res.stdout
    assert f"upstream: {sha[:7]}" in (tmp_path / "r.md").read_text()


def test_drift_names_the_commits_that_changed_the_code_under_the_patch(tmp_path: Path) -> None:
    """The patch applies, but upstream changed the function under it: the drift names the commit."""
    ours = HEADERS.replace("    name = name.strip()\n", "    name = name.strip().lower()\n")
    upstream = HEADERS.replace("    return name, value\n", "    return (name, value)\n")
    u = make_upstream(
        tmp_path,
        [("Return a tuple plainly", {"demo/headers.py": upstream})],
        [("lower-names", "Lower-case header names\n", {"demo/headers.py": ours})],
    )
    sha = u.commits["Return a tuple plainly"]
    data = u.dry_run("--history")
    assert steps(data)["lower-names"]["outcome"] in ("applied unchanged", "merged by 3-way merge")
    drift = data["drift"]
    assert (
        drift[0]["commits"]
        == [  # type: ignore[index]
            f'{sha[:7]} "Return a tuple plainly" changed line 10 under hunk 1 of demo/headers.py'
        ]
    )
    assert "commits" not in u.dry_run()["drift"][0]  # type: ignore[index]


def test_without_history_the_report_says_what_it_could_not_check(tmp_path: Path) -> None:
    u = make_upstream(
        tmp_path,
        [(FIX_SUBJECT, FIX)],
        [
            (
                "cve-name",
                "Reject long header names\n\nOrigin: upstream, commit:{" + FIX_SUBJECT + "}\n",
                {"demo/headers.py": FIXED},
            )
        ],
    )
    data = u.dry_run()
    assert data["history"] == [
        "upstream's history was not asked (--history): 1 patch(es) name upstream commits it could check (cve-name)"
    ]
    assert not (u.cache / "history").exists()
    with_it = u.dry_run("--history")
    assert any(h.startswith("fetched the commits of 2 tag(s) of ") for h in with_it["history"])  # type: ignore[union-attr]
    again = u.dry_run("--history")  # warm: nothing fetched again
    assert not any(h.startswith("fetched") for h in again["history"])  # type: ignore[union-attr]


def test_what_a_partial_fetch_records_is_the_caches_own_configuration(tmp_path: Path) -> None:
    """`git fetch --filter` records its url's remote as a promisor in the history repository's
    config. Held to the keys patchtool writes, the cache took that for a planted key: it removed
    it (breaking the partial clone) and stopped the rebase with exit 1 (Debian's seven series
    with `--history`, every package). Those keys name no program: they are the cache's own."""
    from patchtool.git import owned

    u = make_upstream(
        tmp_path, [(FIX_SUBJECT, FIX)], [("cve-name", "Reject long header names\n", {"demo/headers.py": FIXED})]
    )
    u.dry_run("--history")
    (history,) = (u.cache / "history").glob("*.git")
    config = (history / "config").read_text()
    assert "promisor = true" in config and "partialclonefilter = tree:0" in config
    owned.own(history)
    owned.restore(history)  # nothing to put back
    assert (history / "config").read_text() == config


def test_scan_with_history_gives_the_dry_runs_verdict(tmp_path: Path) -> None:
    """``scan --history`` asks history between the pin and each version as ``rebase --history
    --dry-run`` does: a backport upstream took and extended is "already upstream" there (a conflict
    without history), and the scan says what it asked."""
    u = _extended(tmp_path)
    fix = u.commits[FIX_SUBJECT]

    def scanned(*more: str) -> dict[str, object]:
        res = u.run("scan", "--versions", "1.0,1.1", "--json", *more)
        assert res.returncode in (0, 5), res.stdout + res.stderr
        data: dict[str, object] = json.loads(res.stdout)["data"]
        return data

    without = scanned()
    assert without["matrix"] == {"cve-name": {"1.0": "applied unchanged", "1.1": "conflict"}}
    assert without["history"] == {}
    data = scanned("--history")
    assert data["matrix"] == {"cve-name": {"1.0": "applied unchanged", "1.1": "already upstream"}}
    assert data["details"]["cve-name"]["1.1"] == f"already upstream (commit {fix[:12]}, in version 1.1)"  # type: ignore[index]
    assert data["history"]["1.1"][0].startswith("upstream's history: ")  # type: ignore[index]
    assert "1.0" not in data["history"]  # type: ignore[operator]
    assert steps(u.dry_run("--history"))["cve-name"]["outcome"] == "already upstream"
    text = u.run("scan", "--versions", "1.1", "--history").stdout
    assert "history: 1.1: upstream's history:" in text

"""A second fork, of a package nobody here wrote: six from the real index (PyPI), sdist pins, from
`patchtool init` through one patch, `check`, `scan --versions A..C` and `rebase --to C` (issue 20,
section 1). six's sdists are ~35 KB each; they are kept in the test cache (``.cache/test-upstream``,
as the SGLang tier's) and so downloaded at most once. Skipped when the index cannot be reached."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from cli_run import in_process
from patchtool.project.pins import DEFAULT_INDEX

FIRST, MIDDLE, LAST = "1.15.0", "1.16.0", "1.17.0"
DOCSTRING = '    """Add documentation to a function."""\n'


@pytest.fixture(scope="module")
def reachable() -> None:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{DEFAULT_INDEX}/six/", timeout=30) as answer:
            answer.read(1)
    except OSError as exc:
        pytest.skip(
            f"the package index {DEFAULT_INDEX} is unreachable from here ({exc}); the second fork "
            "needs the real six releases"
        )


def run(where: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATCHTOOL_CACHE_DIR": str(cache),
        "GIT_AUTHOR_NAME": "Fork Maintainer",
        "GIT_AUTHOR_EMAIL": "fork@example.org",
        "GIT_COMMITTER_NAME": "Fork Maintainer",
        "GIT_COMMITTER_EMAIL": "fork@example.org",
    }
    return in_process([*args], cwd=where, env=env)


def ok(res: subprocess.CompletedProcess[str]) -> dict:  # type: ignore[type-arg]
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)["data"]  # type: ignore[no-any-return]


def write_the_patch(where: Path, cache: Path) -> None:
    """The maintainer's way, as the README's quick start: a checkout, a new patch, the change made in
    the worktree and refreshed into it (which exports it)."""
    assert run(where, cache, "checkout").returncode == 0
    new = run(
        where,
        cache,
        "new",
        "doc-marker",
        "--kind",
        "operations",
        "--owner",
        "fork",
        "--why",
        "mark the fork's docs",
        "--applies-to",
        f">={FIRST}",
        "--drop-when",
        "never",
        "--subject",
        "six: mark the fork's docs",
    )
    assert new.returncode == 0, new.stdout + new.stderr
    module = where / "work/series/six.py"
    text = module.read_text()
    assert text.count(DOCSTRING) == 1
    module.write_text(text.replace(DOCSTRING, '    """Add documentation to a function (fork)."""\n'))
    refreshed = run(where, cache, "refresh", "doc-marker")
    assert refreshed.returncode == 0, refreshed.stdout + refreshed.stderr
    assert (where / "patches/0001-doc-marker.patch").read_text().split("\n")[2] == (
        "Subject: [PATCH] six: mark the fork's docs"
    )


def test_a_fork_of_six_from_init_to_a_rebase_across_releases(reachable: None, real_cache: Path, tmp_path: Path) -> None:
    where = tmp_path / "six-fork"
    where.mkdir()
    made = ok(run(where, real_cache, "init", "--upstream", f"six=={FIRST}", "--sdist", "--json"))
    assert made["pin"] == f"six-{FIRST}" and made["git_init"] and made["check"]["ok"]
    assert made["artifact"]["filename"] == f"six-{FIRST}.tar.gz"
    assert made["artifact"]["prefix"] == {"from": "six-{version}/", "to": "", "at_version": f"six-{FIRST}/"}

    write_the_patch(where, real_cache)
    checked = ok(run(where, real_cache, "check", "--json"))
    assert [r["outcome"] for r in checked["applies"]] == ["applied"], checked

    scanned = ok(run(where, real_cache, "scan", "--versions", f"{FIRST}..{LAST}", "--json"))
    assert scanned["versions"] == [FIRST, MIDDLE, LAST]  # sdist releases, listed for an sdist pin
    assert scanned["matrix"] == {
        "doc-marker": {
            FIRST: "applied unchanged",
            MIDDLE: "applied with shifted context",
            LAST: "applied with shifted context",
        }
    }, scanned

    rebased = ok(run(where, real_cache, "rebase", "--to", LAST, "--json"))
    assert (rebased["status"], rebased["new_pin"]) == ("done", f"six-{LAST}"), rebased
    pin = tomllib.loads((where / f"upstream-pins/six-{LAST}.toml").read_text())
    assert pin["artifact"]["filename"] == f"six-{LAST}.tar.gz"
    assert pin["artifact"]["prefix"] == {"from": "six-{version}/", "to": ""}
    assert tomllib.loads((where / "patchset.toml").read_text())["pin"] == f"six-{LAST}"
    final = ok(run(where, real_cache, "check", "--json"))
    assert [r["outcome"] for r in final["applies"]] == ["applied"] and final["problems"] == []


def test_a_wheel_pinned_fork_of_six_moves_to_a_later_wheel(reachable: None, real_cache: Path, tmp_path: Path) -> None:
    where = tmp_path / "six-wheel-fork"
    where.mkdir()
    made = ok(run(where, real_cache, "init", "--upstream", f"six=={MIDDLE}", "--wheel", "--json"))
    assert made["artifact"]["filename"] == f"six-{MIDDLE}-py2.py3-none-any.whl"
    assert made["artifact"]["prefix"] == {"from": "", "to": "", "at_version": ""}
    write_the_patch(where, real_cache)
    assert ok(run(where, real_cache, "scan", "--versions", f"{MIDDLE}..{LAST}", "--json"))["versions"] == [MIDDLE, LAST]
    rebased = ok(run(where, real_cache, "rebase", "--to", LAST, "--json"))
    assert rebased["status"] == "done", rebased
    pin = tomllib.loads((where / f"upstream-pins/six-{LAST}.toml").read_text())
    assert pin["artifact"]["filename"] == f"six-{LAST}-py2.py3-none-any.whl"

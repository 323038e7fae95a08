"""A second fork, of a package nobody here wrote: six from the real index (PyPI), sdist pins, from
`patchtool init` through one patch, `check`, `scan --versions A..C`, `rebase --to C` (issue 20,
section 1), then onto its wheel, built, installed in a fresh venv and imported: the README's quick start
as written (issue 30, section 2). six's files are ~35 KB each; they are kept in the test cache (``.cache/test-upstream``,
as the SGLang tier's) and so downloaded at most once. Skipped when the index cannot be reached."""

from __future__ import annotations

import glob
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cli_run import as_maintainer, ok_data
from conftest import REPO
from patchtool.project.pins import DEFAULT_INDEX

FIRST, MIDDLE, LAST = "1.15.0", "1.16.0", "1.17.0"
DOCSTRING = '    """Add documentation to a function."""\n'
FORKED = '    """Add documentation to a function (fork)."""\n'


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
    return as_maintainer(where, cache, *args)


def ok(res: subprocess.CompletedProcess[str]) -> dict:  # type: ignore[type-arg]
    return ok_data(res)  # type: ignore[no-any-return]


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
    module.write_text(text.replace(DOCSTRING, FORKED))
    refreshed = run(where, cache, "refresh", "doc-marker")
    assert refreshed.returncode == 0, refreshed.stdout + refreshed.stderr
    assert (where / "patches/0001-doc-marker.patch").read_text().split("\n")[2] == (
        "Subject: [PATCH] six: mark the fork's docs"
    )


def quick_start() -> list[list[list[str]]]:
    """The README's quick start as the shell reads it: each line (continuations joined, comments
    gone) as its commands (split at ``&&``), each command as its words."""
    text = (REPO / "README.md").read_text()
    block = text.split("## Quick start: a fork of any Python package", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = block.replace("\\\n", " ").splitlines()
    out = []
    for line in lines:
        words = shlex.split(line, comments=True)
        commands: list[list[str]] = [[]]
        for word in words:
            if word == "&&":
                commands.append([])
            else:
                commands[-1].append(word)
        out.append(commands)
    return out


def test_the_readme_quick_start_ends_with_the_fork_imported_from_its_wheel(
    reachable: None, real_cache: Path, tmp_path: Path
) -> None:
    """Every command of the README's quick start, as written, in order (issue 30, section 2): patchtool's
    with --json added to read their results, the editor's step done by the test, the venv's by the
    real tools; the wheel built ends up installed in a fresh venv and imported."""
    lines = quick_start()
    flat = [c for line in lines for c in line]
    assert flat[0] == ["mkdir", "six-fork"] and flat[1] == ["cd", "six-fork"], flat
    where = tmp_path / "six-fork"
    where.mkdir()
    results: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    imported = None
    for command in flat[2:]:
        head, args = command[0], command[1:]
        expanded = [hit for a in args for hit in (sorted(glob.glob(a, root_dir=where)) if "*" in a else [a])]
        if head == "patchtool":
            results.setdefault(args[0], []).append(ok(run(where, real_cache, *expanded, "--json")))
            if args[0] == "refresh":
                assert (where / "patches/0001-doc-marker.patch").read_text().split("\n")[2] == (
                    "Subject: [PATCH] six: mark the fork"
                )
        elif head == "$EDITOR":
            assert args == ["work/series/six.py"], args
            module = where / args[0]
            text = module.read_text()
            assert text.count(DOCSTRING) == 1
            module.write_text(text.replace(DOCSTRING, FORKED))
        elif head == "python3":
            assert args[:2] == ["-m", "venv"], args
            subprocess.run([sys.executable, *args], cwd=where, check=True, timeout=1800)  # a hang guard only
        else:
            tool = Path(os.path.normpath(where / head))
            assert tool.parent == tmp_path / "six-venv/bin", head
            done = subprocess.run(
                [str(tool), *expanded],
                cwd=where,
                capture_output=True,
                text=True,
                env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONPATH": ""},
                timeout=1800,  # a hang guard only
            )
            assert done.returncode == 0, done.stdout + done.stderr
            if tool.name == "python":
                imported = done.stdout

    made = results["init"][0]
    assert made["pin"] == f"six-{FIRST}" and made["git_init"] and made["check"]["ok"]
    assert made["artifact"]["filename"] == f"six-{FIRST}.tar.gz"
    assert made["artifact"]["prefix"] == {"from": "six-{version}/", "to": "", "at_version": f"six-{FIRST}/"}
    assert [r["outcome"] for r in results["check"][0]["applies"]] == ["applied"]
    scanned = results["scan"][0]
    assert scanned["versions"] == [FIRST, MIDDLE, LAST]  # sdist releases, listed for an sdist pin
    assert scanned["matrix"] == {
        "doc-marker": {
            FIRST: "applied unchanged",
            MIDDLE: "applied with shifted context",
            LAST: "applied with shifted context",
        }
    }, scanned

    to_sdist, to_wheel = results["rebase"]
    assert (to_sdist["status"], to_sdist["new_pin"]) == ("done", f"six-{LAST}"), to_sdist
    pin = tomllib.loads((where / f"upstream-pins/six-{LAST}.toml").read_text())
    assert pin["artifact"]["filename"] == f"six-{LAST}.tar.gz"
    assert pin["artifact"]["prefix"] == {"from": "six-{version}/", "to": ""}
    assert (to_wheel["status"], to_wheel["new_pin"]) == ("done", f"six-{LAST}-wheel"), to_wheel
    wheel_pin = tomllib.loads((where / f"upstream-pins/six-{LAST}-wheel.toml").read_text())
    assert wheel_pin["artifact"]["filename"] == f"six-{LAST}-py2.py3-none-any.whl"
    assert wheel_pin["artifact"]["prefix"] == {"from": "", "to": ""}  # the sdist's six-1.17.0/six.py is six.py
    assert tomllib.loads((where / "patchset.toml").read_text())["pin"] == f"six-{LAST}-wheel"

    built = results["build"][0]
    assert built["way"] == "repack" and built["filename"].startswith(f"six-{LAST}+pt.")
    assert results["provenance"][0]["provenance"]["version"] == built["version"]
    assert imported == FORKED.strip().removeprefix('"""').removesuffix('"""') + "\n"
    site = next((tmp_path / "six-venv/lib").glob("python3*/site-packages"))
    assert ok(run(where, real_cache, "provenance", "six", "--path", str(site), "--json"))["problems"] == []


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

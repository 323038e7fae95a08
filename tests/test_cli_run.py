"""The tests' two ways to run the command line (tests/cli_run.py) say the same, and the one in the
test's process leaves the process as it found it: unconfined, its environment, directory and
streams its own."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from cli_run import in_process, spawned
from conftest import Demo


@pytest.mark.parametrize(
    "args",
    [
        ("status",),
        ("--json", "status"),
        ("check", "--json"),
        ("drop", "greet", "--json"),  # a usage error, as an envelope
        ("rebase", "--nope"),  # a usage error, as text on stderr
        ("status", "--root", "nowhere"),
    ],
)
def test_in_process_says_what_a_process_says(one_patch: Demo, args: tuple[str, ...]) -> None:
    spawned_first = one_patch.spawn(*args)
    here = one_patch.run(*args)
    assert (here.returncode, here.stdout, here.stderr) == (
        spawned_first.returncode,
        spawned_first.stdout,
        spawned_first.stderr,
    )


def test_in_process_leaves_the_process_as_it_was(one_patch: Demo, tmp_path: Path) -> None:
    cwd, environ, streams = os.getcwd(), dict(os.environ), (sys.stdin, sys.stdout, sys.stderr)
    res = one_patch.run("--version", env={"PATCHTOOL_LANDLOCK": "0"})
    assert res.returncode == 0 and res.stdout.splitlines()[1] == "confinement: off (PATCHTOOL_LANDLOCK=0)"
    assert one_patch.run("new", "--help").returncode == 0
    res = one_patch.run("apply", "--into", str(tmp_path / "tree"))  # a writing command
    assert res.returncode == 0, res.stdout + res.stderr
    assert (os.getcwd(), dict(os.environ), (sys.stdin, sys.stdout, sys.stderr)) == (cwd, environ, streams)
    # not confined: this process still writes where the command might not
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere.txt"
    elsewhere.write_text("written\n")
    assert elsewhere.read_text() == "written\n"
    elsewhere.unlink()


def test_a_call_does_not_see_the_last_one(one_patch: Demo, tmp_path: Path) -> None:
    """Global options and results are the call's own: --json and --root of one call are not the next one's."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    first = in_process(["--json", "--root", str(one_patch.root), "status"], cwd=other, env=one_patch.environment())
    assert first.returncode == 0 and first.stdout.startswith("{"), first.stdout + first.stderr
    res = in_process(["status"], cwd=other, env=one_patch.environment())
    assert res.returncode != 0 and "patchset.toml" in res.stderr and res.stdout == ""
    assert res.returncode == spawned(["status"], cwd=other, env=one_patch.environment()).returncode


def test_errors_and_bytes_read_as_from_a_process(one_patch: Demo) -> None:
    res = in_process(["status"], cwd=one_patch.root, env=one_patch.environment({"PATCHTOOL_LOCK_TIMEOUT": "x"}))
    assert res.returncode == 2 and "Traceback" not in res.stderr  # a usage error, not a crash
    res = in_process(["--version"], input=b"", cwd=one_patch.root, text=False)
    assert res.returncode == 0 and isinstance(res.stdout, bytes) and res.stdout.startswith(b"patchtool ")

"""The command line itself: usage errors exit 2, options take dash-led values."""

from __future__ import annotations

import subprocess
import sys

from conftest import Demo


def patchtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "patchtool", *args], capture_output=True, text=True, check=False)


def test_no_command_prints_usage_and_exits_2() -> None:
    for args in ((), ("retread",)):
        res = patchtool(*args)
        assert res.returncode == 2 and "usage: patchtool" in res.stderr and "COMMAND" in res.stderr


def test_unknown_option_and_missing_value_are_usage_errors() -> None:
    res = patchtool("rebase", "--nope")
    assert res.returncode == 2 and "unrecognized arguments: --nope" in res.stderr
    res = patchtool("rebase", "--to")
    assert res.returncode == 2 and "--to: expected one argument" in res.stderr


def test_version() -> None:
    res = patchtool("--version")
    assert res.returncode == 0 and res.stdout.startswith("patchtool ")


def test_an_option_value_may_start_with_a_dash(one_patch: Demo) -> None:
    """`--reason --because` is a reason, as click read it; the error is about the missing rebase."""
    res = one_patch.run("rebase", "--skip", "--reason", "--because-upstream-fixed-it")
    assert res.returncode == 2 and "no rebase in progress" in res.stderr
    assert "expected one argument" not in res.stderr

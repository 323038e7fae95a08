"""Regular expressions a repository's files hold run on RE2, in time linear in the text searched:
a pattern that makes Python's backtracking ``re`` hang, overflow or recurse is a finding or a
message with its exit code, and one RE2 will not run is refused where the file is read.

Each of these hung ``check`` / ``retread scan`` or was exit 70 before RE2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import Demo
from helpers import snapshot
from patchtool.project.patterns import MAX_LENGTH

CATASTROPHIC = "(.|.|.)*QQQ"  # 3^n paths for re on any line of n characters without QQQ


def assume(demo: Demo, regex: str, **extra: str) -> None:
    """The demo's patch with one assumption on python/demo/core.py matching ``regex``."""
    rest = "".join(f"{k} = {v}\n" for k, v in extra.items())
    demo.write_manifest(
        demo.entry("greet", "0001-greet.patch") + '\n[[patch.assumptions]]\nid = "a"\n'
        f"file = \"python/demo/core.py\"\nregex = '''{regex}'''\nwhy = \"w\"\n{rest}"
    )


def unchanged(demo: Demo, decoy: Path) -> dict[str, bytes]:
    decoy.mkdir(exist_ok=True)
    (decoy / "keep").write_text("mine\n")
    return snapshot(demo.root, decoy)


@pytest.mark.parametrize(
    ("regex", "extra", "found"),
    [
        (CATASTROPHIC, {}, "0 match(es)"),
        ("x{99999999999}", {}, "0 match(es)"),  # re: OverflowError, exit 70; RE2 reads the braces literally
        ("(" * 900 + "greet" + ")" * 900, {"count": "3"}, "3 match(es)"),  # re: RecursionError at some depth
    ],
)
def test_an_assumption_regex_runs_in_linear_time(
    one_patch: Demo, tmp_path: Path, regex: str, extra: dict[str, str], found: str
) -> None:
    assume(one_patch, regex, **extra)
    before = unchanged(one_patch, tmp_path / "decoy")
    res = one_patch.run("check", "--json")
    assert "Traceback" not in res.stdout + res.stderr
    data = json.loads(res.stdout)
    [result] = data["data"]["assumptions"]
    assert result["found"] == found
    assert res.returncode == (0 if found == "3 match(es)" else 1), res.stderr
    assert snapshot(one_patch.root, tmp_path / "decoy") == before


@pytest.mark.parametrize(
    ("regex", "why"),
    [
        ("(?=greet)", "invalid perl operator: (?="),
        (r"(g)\1", "invalid escape sequence: \\1"),
        (r"greet\Z", "invalid escape sequence: \\Z"),
        ("x{1001}", "invalid repetition size: {1001}"),
    ],
)
def test_what_re2_refuses_is_a_problem_naming_the_key(one_patch: Demo, tmp_path: Path, regex: str, why: str) -> None:
    assume(one_patch, regex)
    before = unchanged(one_patch, tmp_path / "decoy")
    res = one_patch.run("check")
    out = res.stdout + res.stderr
    assert res.returncode == 1 and "Traceback" not in out
    assert (
        f"error: patchset.toml:17: patch greet: patch[0].assumptions[0].regex: invalid regular expression {regex!r}: "
        f"RE2 refuses it: {why} (hint: patterns in patchtool's files run on RE2 (linear time): "
        "no backreferences"
    ) in out
    assert snapshot(one_patch.root, tmp_path / "decoy") == before


def test_a_pattern_past_the_length_bound_is_refused(one_patch: Demo) -> None:
    assume(one_patch, "a" * (MAX_LENGTH + 1))
    res = one_patch.run("check")
    assert res.returncode == 1
    assert (
        f"patch[0].assumptions[0].regex: regular expression of {MAX_LENGTH + 1} characters is longer "
        f"than the {MAX_LENGTH} patchtool accepts (hint: split it"
    ) in res.stdout


def test_a_program_past_re2s_memory_bound_is_refused(one_patch: Demo) -> None:
    assume(one_patch, r"\pL{1000}\pL{1000}")
    res = one_patch.run("check")
    assert res.returncode == 1
    assert "RE2 refuses it: pattern too large - compile failed" in res.stdout


REGISTRY = """schema = 1

[[rejected]]
id = "hang"
title = "t"
tried = "x"
verdict = "rejected"
reason = "y"
revisit = "z"

[[rejected.evidence]]
metric = "m"
change = "c"
source = "s"

[[rejected.knobs]]
type = "pattern"
name = "p"
regex = '{guard}'

[[rejected.knobs]]
type = "flag"
name = "--level"
values = '{values}'
"""


def with_registry(demo: Demo, *, guard: str = "QQQ", values: str = "9") -> None:
    (demo.root / "retread.toml").write_text(REGISTRY.format(guard=guard, values=values))
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"))
    manifest = demo.root / "patchset.toml"
    manifest.write_text(
        manifest.read_text().replace('pin = "demo-1.0"\n', 'pin = "demo-1.0"\nregistry = "retread.toml"\n')
    )


def test_a_registry_guard_runs_in_linear_time_in_scan_and_check(one_patch: Demo, tmp_path: Path) -> None:
    with_registry(one_patch, guard=CATASTROPHIC, values="(a|a)*b")
    deploy = tmp_path / "serve.sh"
    deploy.write_text(
        "python -m sglang.launch_server --level aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\necho " + "x" * 60 + "QQQ\n"
    )
    before = unchanged(one_patch, tmp_path / "decoy")
    res = one_patch.run("retread", "scan", str(deploy))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stdout == (
        f"retread: {deploy}:2: 'echo {'x' * 60}QQQ' re-introduces rejected idea 'hang' "
        f"(pattern p /{CATASTROPHIC}/): y\n1 finding(s)\n"
    )
    res = one_patch.run("check")
    assert res.returncode == 0, res.stderr
    assert snapshot(one_patch.root, tmp_path / "decoy") == before


def test_a_registry_pattern_re2_refuses_names_the_entry(one_patch: Demo, tmp_path: Path) -> None:
    with_registry(one_patch, values="(?!512$)\\d+")
    before = unchanged(one_patch, tmp_path / "decoy")
    for args in (("check",), ("retread", "list")):
        res = one_patch.run(*args)
        out = res.stdout + res.stderr
        assert res.returncode == 1 and "Traceback" not in out
        assert (
            "retread.toml:24: entry hang: rejected[0].knobs[1].values: invalid regular expression '(?!512$)\\\\d+': "
            "RE2 refuses it: invalid perl operator: (?!"
        ) in out, out
    assert snapshot(one_patch.root, tmp_path / "decoy") == before

"""The optional manifest keys ``requires`` (what a patch needs applied before it) and
``experiment`` (a patch with no figure yet): parsing, their problems, and ``drop`` of a patch
another one requires."""

from __future__ import annotations

import pytest

from conftest import Demo, edit
from helpers import snapshot
from patchtool.errors import InvalidInput
from patchtool.project.manifest import parse_text

ENTRY = """
[[patch]]
id = "{ident}"
file = "patches/{ident}.patch"
kind = "correctness"
owner = "team"
why = "because"
applies_to = ">=1.0"
drop_when = "upstream fixes it"
upstream = {{ status = "pending" }}
{extra}
"""


def manifest(*entries: tuple[str, str]) -> str:
    return 'schema = 1\npin = "demo-1.0"\n' + "".join(ENTRY.format(ident=i, extra=x) for i, x in entries)


def test_requires_and_experiment_are_optional_and_round_trip() -> None:
    plain = parse_text(manifest(("a", ""), ("b", "")))
    assert [(e.requires, e.experiment) for e in plain.patches] == [((), None), ((), None)]
    assert all("requires" not in e.to_dict() and "experiment" not in e.to_dict() for e in plain.patches)
    got = parse_text(manifest(("a", ""), ("b", 'requires = ["a"]\nexperiment = "no figure yet"')))
    b = got.get("b")
    assert b.requires == ("a",) and b.experiment == "no figure yet"
    assert b.to_dict()["requires"] == ["a"] and b.to_dict()["experiment"] == "no figure yet"


@pytest.mark.parametrize(
    "entries, key, message",
    [
        ((("a", 'requires = ["zz"]'),), "patch[0].requires[0]", "'zz' is no patch of the series"),
        ((("a", 'requires = ["a"]'),), "patch[0].requires[0]", "'a' requires itself"),
        ((("a", 'requires = ["b"]'), ("b", "")), "patch[0].requires[0]", "'b' comes after 'a' in the series"),
        ((("a", ""), ("b", 'requires = ["a", "a"]')), "patch[1].requires[1]", "'a' is listed twice"),
        ((("a", 'requires = "b"'),), "patch[0].requires", "array of strings"),
        ((("a", 'experiment = ""'),), "patch[0].experiment", "must not be empty"),
    ],
)
def test_bad_requires_are_named(entries: tuple[tuple[str, str], ...], key: str, message: str) -> None:
    with pytest.raises(InvalidInput) as excinfo:
        parse_text(manifest(*entries))
    problems = [(p.key, p.message) for p in excinfo.value.problems]
    assert any(k == key and message in m for k, m in problems), problems


def two_with_requires(demo: Demo) -> None:
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi")
    demo.commit_patch(
        "0002-util.patch", edit("python/demo/util.py", "return 1", "return 2"), "util: two", on="p-0001-greet.patch"
    )
    demo.write_manifest(
        demo.entry("greet", "0001-greet.patch"),
        demo.entry("util", "0002-util.patch") + 'requires = ["greet"]\n',
    )


def test_drop_of_a_required_patch_is_refused_naming_its_dependants(demo: Demo) -> None:
    two_with_requires(demo)
    before = snapshot(demo.root)
    res = demo.run("drop", "greet", "--reason", "upstream has it")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "patch 'greet' is required by util" in res.stderr
    assert snapshot(demo.root) == before
    # the dependant itself may go; then what it required may too
    assert demo.run("drop", "util", "--reason", "not needed").returncode == 0
    assert demo.run("drop", "greet", "--reason", "upstream has it").returncode == 0

"""The optional manifest keys ``requires`` (what a patch needs applied before it) and
``experiment`` (a patch with no figure yet): parsing, their problems, and ``drop`` of a patch
another one requires."""

from __future__ import annotations

import pytest

from conftest import Demo, edit
from helpers import snapshot
from patchtool.errors import InvalidInput
from patchtool.project.manifest import parse_text
from test_cli import envelope

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
    ("entries", "key", "message"),
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


# -- check --standalone: each patch alone at the pin, onto what it requires ----------------------


def cumulative(demo: Demo, *, shout_extra: str = "") -> None:
    """greet, util (unrelated), then shout, which rewrites the line greet wrote: as a cumulative
    series it applies; alone it needs greet, and its entry does not say so."""
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi")
    demo.commit_patch(
        "0002-util.patch", edit("python/demo/util.py", "return 1", "return 2"), "util: two", on="p-0001-greet.patch"
    )
    demo.commit_patch(
        "0003-shout.patch", edit("python/demo/core.py", '"hi"', '"HI"'), "core: shout", on="p-0002-util.patch"
    )
    demo.write_manifest(
        demo.entry("greet", "0001-greet.patch"),
        demo.entry("util", "0002-util.patch"),
        demo.entry("shout", "0003-shout.patch") + shout_extra,
    )


def test_check_standalone_names_the_patch_a_patch_silently_needs(demo: Demo) -> None:
    cumulative(demo)
    plain = demo.run("check", "--json")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert envelope(plain)["data"]["standalone"] == []  # opt-in: a cumulative series is fine as it is

    before = snapshot(demo.root)
    res = demo.run("check", "--standalone", "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    rows = {r["id"]: r for r in envelope(res)["data"]["standalone"]}
    assert [(i, r["ok"]) for i, r in rows.items()] == [("greet", True), ("util", True), ("shout", False)]
    assert rows["shout"]["needs"] == ["greet"] and rows["shout"]["onto"] == []  # util is not named
    assert rows["shout"]["failures"][0]["file"] == "python/demo/core.py"
    (problem,) = [p for p in envelope(res)["errors"] if p["code"] == "standalone"]
    assert problem["patch"] == "shout" and problem["key"] == "patch[2].requires"
    assert problem["message"].startswith("does not apply alone at demo-1.0 with nothing before it: python/demo/core.py")
    assert problem["message"].endswith("it needs greet, which its entry does not require")
    assert problem["hint"] == 'add requires = ["greet"] to its entry, or rebase it onto the pin alone'
    assert snapshot(demo.root) == before
    text = demo.run("check", "--standalone")
    assert "apply alone onto what they require: 2/3" in text.stdout
    assert "patch shout: patch[2].requires: does not apply alone" in text.stdout + text.stderr


def test_a_declared_requirement_satisfies_the_standalone_check(demo: Demo) -> None:
    cumulative(demo, shout_extra='requires = ["greet"]\n')
    res = demo.run("check", "--standalone", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    rows = envelope(res)["data"]["standalone"]
    assert [(r["id"], r["onto"], r["ok"]) for r in rows] == [
        ("greet", [], True),
        ("util", [], True),
        ("shout", ["greet"], True),
    ]


def test_an_entry_marked_standalone_is_checked_without_the_option(demo: Demo) -> None:
    cumulative(demo, shout_extra="standalone = true\n")
    res = demo.run("check", "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    assert [(r["id"], r["needs"]) for r in envelope(res)["data"]["standalone"]] == [("shout", ["greet"])]
    assert parse_text(manifest(("a", "standalone = true"))).patches[0].to_dict()["standalone"] is True
    with pytest.raises(InvalidInput) as excinfo:
        parse_text(manifest(("a", 'standalone = "yes"')))
    assert [p.key for p in excinfo.value.problems] == ["patch[0].standalone"]


def test_a_patch_that_applies_nowhere_is_not_said_to_need_one(demo: Demo) -> None:
    cumulative(demo)
    shout = demo.root / "patches" / "0003-shout.patch"
    shout.write_text(shout.read_text().replace('-    greeting = "hi"', '-    greeting = "hey"'))
    res = demo.run("check", "--standalone", "--json")
    assert res.returncode == 1
    (row,) = [r for r in envelope(res)["data"]["standalone"] if r["id"] == "shout"]
    assert (row["needs"], row["in_series"]) == ([], False)
    (problem,) = [p for p in envelope(res)["errors"] if p["code"] == "standalone"]
    assert problem["message"].endswith("it does not apply after the earlier patches either")

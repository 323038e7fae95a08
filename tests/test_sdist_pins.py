"""sdist pins end to end: ``prefix.from`` as a ``{version}`` template, a legacy literal prefix moved
with the release, a pin file of the target release used as it is, and sdist releases listed for
``scan --versions``, ``--newest`` and ``rebase --to latest`` (issue 20, section 1).

Synthetic sdists (``testing.make_sdist``) on the real local HTTP index of ``testing.py``."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import UPSTREAM_FILES, Demo, demo_pin, edit
from helpers import Index, git, leftover_state, make_sdist, sha256, snapshot, write_tree
from patchtool.errors import InvalidInput
from patchtool.names import PrefixTemplate
from patchtool.project.pins import Pin, pin_to_toml
from patchtool.versions import parse_version


def release_files(version: str) -> dict[str, str]:
    return {**UPSTREAM_FILES, "demo/__init__.py": f'__version__ = "{version}"\n'}


def sdist_pin(index: Index, sdist: Path, version: str, prefix_from: str) -> str:
    return demo_pin(index, sdist, version=version, prefix=(prefix_from, ""))


def add_sdist(demo: Demo, version: str, *, top: str | None = None) -> Path:
    sdist = make_sdist(demo.wheel.parent / f"demo-{version}.tar.gz", "demo", version, release_files(version), top=top)
    demo.index.add(sdist)
    return sdist


@pytest.fixture(params=["demo-1.0/", "demo-{version}/"], ids=["legacy-literal", "template"])
def sdist_demo(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Demo]:
    """demo 1.0 as an sdist pin (a literal prefix of the old kind, or the template), one patch."""
    sdist = make_sdist(tmp_path / "demo-1.0.tar.gz", "demo", "1.0", release_files("1.0"))
    index = Index(tmp_path)
    index.add(sdist)
    root = tmp_path / "project"
    (root / "patches").mkdir(parents=True)
    (root / "upstream-pins").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "upstream")
    write_tree(work, release_files("1.0"))
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "upstream 1.0")
    with index.serve():
        (root / "upstream-pins" / "demo-1.0.toml").write_text(sdist_pin(index, sdist, "1.0", request.param))
        demo = Demo(root=root, cache=tmp_path / "cache", index=index, wheel=sdist, work=work)
        demo.commit_patch("0001-greet.patch", edit("demo/core.py", '"hello"', '"hi"'), "core: say hi")
        demo.write_manifest(demo.entry("greet", "0001-greet.patch"))
        yield demo


# -- the template, as data --------------------------------------------------------------------


def pin_data(prefix_from: str) -> dict[str, object]:
    return {
        "schema": 1,
        "name": "demo",
        "version": "1.0",
        "artifact": {
            "distribution": "demo",
            "version": "1.0",
            "filename": "demo-1.0.tar.gz",
            "sha256": "a" * 64,
            "prefix": {"from": prefix_from, "to": ""},
        },
    }


def test_a_version_template_is_the_artifacts_version_wherever_the_prefix_is_used() -> None:
    pin = Pin.from_dict(pin_data("demo-{version}/src/"), name="demo-1.0", file="upstream-pins/demo-1.0.toml")
    assert pin.artifact is not None
    assert pin.artifact.prefix_from == "demo-1.0/src/"
    assert 'prefix = { from = "demo-{version}/src/", to = "" }' in pin_to_toml(pin)  # written as read


@pytest.mark.parametrize(
    ("prefix_from", "why"),
    [
        ("demo-{name}/", "'demo-{name}/': the only placeholder a prefix may hold is {version}"),
        ("demo-{version/", "'demo-{version/': the only placeholder a prefix may hold is {version}"),
        ("{version}", "'1.0' must end with '/' (at version 1.0)"),
        ("../{version}/", "path '../1.0' escapes the tree (at version 1.0)"),
    ],
)
def test_a_prefix_template_other_than_version_is_refused_naming_the_file_and_key(prefix_from: str, why: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        Pin.from_dict(pin_data(prefix_from), name="demo-1.0", file="upstream-pins/demo-1.0.toml")
    (problem,) = caught.value.problems
    assert (problem.file, problem.key) == ("upstream-pins/demo-1.0.toml", "artifact.prefix.from")
    assert problem.message == why


@pytest.mark.parametrize(
    ("literal", "template"),
    [
        ("setuptools-58.0.2/", "setuptools-{version}/"),
        ("attrs-58.0.2/src/", "attrs-{version}/src/"),
        ("sglang/", "sglang/"),  # a wheel's package directory names no version
        ("58.0.2/", "58.0.2/"),  # no stem
        ("a-58.0.2x/", "a-58.0.2x/"),
        ("", ""),
        ("attrs-{version}/src/", "attrs-{version}/src/"),
    ],
)
def test_a_legacy_sdist_prefix_is_generalised_for_other_releases(literal: str, template: str) -> None:
    assert PrefixTemplate(literal).generalised(parse_version("58.0.2")) == template


# -- moves between releases ---------------------------------------------------------------------


def test_scan_and_rebase_to_latest_see_sdist_releases_and_move_the_prefix(sdist_demo: Demo) -> None:
    add_sdist(sdist_demo, "1.1")
    add_sdist(sdist_demo, "1.2")
    assert sdist_demo.run("check").returncode == 0
    scan = sdist_demo.run("scan", "--versions", "1.0..1.2", "--json")
    assert scan.returncode == 0, scan.stdout + scan.stderr
    report = json.loads(scan.stdout)["data"]
    assert report["versions"] == ["1.0", "1.1", "1.2"]
    assert report["matrix"] == {
        "greet": {"1.0": "applied unchanged", "1.1": "applied unchanged", "1.2": "applied unchanged"}
    }
    newest = sdist_demo.run("scan", "--newest", "2", "--json")
    assert newest.returncode == 0 and json.loads(newest.stdout)["data"]["versions"] == ["1.1", "1.2"]
    res = sdist_demo.run("rebase", "--to", "latest")
    assert res.returncode == 0, res.stdout + res.stderr
    pin = tomllib.loads((sdist_demo.root / "upstream-pins/demo-1.2.toml").read_text())
    assert pin["artifact"]["filename"] == "demo-1.2.tar.gz"
    assert pin["artifact"]["prefix"] == {"from": "demo-{version}/", "to": ""}  # templates from now on
    assert 'pin = "demo-1.2"' in (sdist_demo.root / "patchset.toml").read_text()
    assert sdist_demo.run("check").returncode == 0
    assert not leftover_state(sdist_demo.root)


def test_pin_add_writes_a_template_for_an_sdist(sdist_demo: Demo) -> None:
    sdist = add_sdist(sdist_demo, "1.1")
    res = sdist_demo.run("pin", "add", "1.1")
    assert res.returncode == 0, res.stdout + res.stderr
    art = tomllib.loads((sdist_demo.root / "upstream-pins/demo-1.1.toml").read_text())["artifact"]
    assert (art["filename"], art["sha256"], art["prefix"]) == (
        sdist.name,
        sha256(sdist),
        {"from": "demo-{version}/", "to": ""},
    )
    check = sdist_demo.run("check", "--pin", "demo-1.1")
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_pin_file_of_the_target_release_is_used_as_it_is(sdist_demo: Demo) -> None:
    """1.1's sdist unpacks to Demo-1.1/, which nothing can guess: the pin written by hand says so."""
    sdist = add_sdist(sdist_demo, "1.1", top="Demo-1.1")
    corrected = sdist_pin(sdist_demo.index, sdist, "1.1", "Demo-{version}/")
    (sdist_demo.root / "upstream-pins/demo-1.1.toml").write_text(corrected)
    scan = sdist_demo.run("scan", "--versions", "1.1", "--json")
    assert scan.returncode == 0, scan.stdout + scan.stderr
    assert json.loads(scan.stdout)["data"]["matrix"] == {"greet": {"1.1": "applied unchanged"}}
    res = sdist_demo.run("rebase", "--to", "1.1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (sdist_demo.root / "upstream-pins/demo-1.1.toml").read_text() == corrected
    assert 'pin = "demo-1.1"' in (sdist_demo.root / "patchset.toml").read_text()


def test_a_target_pin_file_of_another_release_is_refused(sdist_demo: Demo) -> None:
    sdist = add_sdist(sdist_demo, "1.1")
    (sdist_demo.root / "upstream-pins/demo-1.1.toml").write_text(
        sdist_pin(sdist_demo.index, sdist_demo.wheel, "1.0", "demo-{version}/")
    )
    before = snapshot(sdist_demo.root)
    assert sdist.exists()
    res = sdist_demo.run("rebase", "--to", "1.1")
    assert (res.returncode, res.stderr) == (
        1,
        "error: upstream-pins/demo-1.1.toml: upstream-pins/demo-1.1.toml "
        "pins demo 1.0, not demo 1.1 (hint: a pin for demo 1.1 is named "
        "demo-1.1)\n",
    )
    assert snapshot(sdist_demo.root) == before


def test_scan_prints_the_matrix_when_a_release_cannot_be_had(sdist_demo: Demo) -> None:
    """1.2's sdist says it is 1.3 inside: that column is marked and why, the others are scanned."""
    add_sdist(sdist_demo, "1.1")
    bad = make_sdist(sdist_demo.wheel.parent / "demo-1.2.tar.gz", "demo", "1.3", release_files("1.2"), top="demo-1.2")
    sdist_demo.index.add(bad)
    scan = sdist_demo.run("scan", "--versions", "1.0..1.2", "--json")
    assert scan.returncode == 4, scan.stdout + scan.stderr
    report = json.loads(scan.stdout)["data"]
    assert report["matrix"] == {"greet": {"1.0": "applied unchanged", "1.1": "applied unchanged", "1.2": "not scanned"}}
    assert report["unavailable"] == {
        "1.2": "demo-1.2.tar.gz contains demo 1.3, not 1.2; refusing it (hint: the pin names the wrong file)"
    }
    text = sdist_demo.run("scan", "--versions", "1.0..1.2")  # the report, on stderr as for any exit but 0
    assert text.returncode == 4, text.stdout + text.stderr
    assert "greet   unchanged   unchanged   not scanned\n" in text.stderr
    assert "\nnot scanned: 1.2: demo-1.2.tar.gz contains demo 1.3, not 1.2; refusing it" in text.stderr

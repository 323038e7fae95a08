"""Every manifest write goes through one writer that always produces valid TOML; a dropped file
never overwrites another; a rebase moves the pin however the manifest spells it."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from conftest import Demo, edit
from helpers import git, snapshot
from test_rebase import releases, series  # noqa: F401  (the fixture, and the series it rebases)


def exported(demo: Demo, tmp_path: Path, name: str, path: str, old: str, new: str, subject: str) -> Path:
    git(demo.work, "checkout", "-q", "-B", name, "upstream")
    edit(path, old, new)(demo.work)
    git(demo.work, "commit", "-qam", subject)
    out = tmp_path / f"{name}.patch"
    out.write_text(git(demo.work, "format-patch", "-1", "--stdout"))
    return out


def test_imports_one_after_another_and_together_keep_the_manifest_valid(one_patch: Demo, tmp_path: Path) -> None:
    a = exported(one_patch, tmp_path, "a", "python/demo/util.py", "return 1", "return 2", "util: two")
    b = exported(one_patch, tmp_path, "b", "python/demo/core.py", 'word = "bye"', 'word = "ciao"', "core: ciao")
    c = exported(
        one_patch, tmp_path, "c", "python/demo/core.py", "len(queue) > cap", "len(queue) >= cap", "core: inclusive cap"
    )
    res = one_patch.run("import", str(a), "--url", "https://github.com/sgl-project/sglang/pull/1")
    assert res.returncode == 0, res.stderr
    res = one_patch.run("import", str(b), str(c))  # the second write, two tables at once
    assert res.returncode == 0, res.stderr
    text = (one_patch.root / "patchset.toml").read_text()
    data = tomllib.loads(text)
    assert [p["id"] for p in data["patch"]] == ["greet", "util-two", "core-ciao", "core-inclusive-cap"]
    assert data["patch"][1]["upstream"] == {
        "status": "submitted",
        "url": "https://github.com/sgl-project/sglang/pull/1",
    }
    assert "}[[patch]]" not in text and text.endswith("\n")
    res = one_patch.run("status", "--json")
    assert res.returncode == 0, res.stderr
    assert [p["id"] for p in json.loads(res.stdout)["data"]["patches"]] == [
        "greet",
        "util-two",
        "core-ciao",
        "core-inclusive-cap",
    ]


def test_a_dropped_file_never_overwrites_an_earlier_one(one_patch: Demo) -> None:
    root = one_patch.root
    res = one_patch.run("drop", "greet", "--reason", "first")
    assert res.returncode == 0, res.stderr
    first = (root / "patches/dropped/0001-greet.patch").read_text()
    # a new patch under the same file name (another id: a dropped id stays taken)
    one_patch.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hey"'), "core: say hey")
    manifest = root / "patchset.toml"
    manifest.write_text(manifest.read_text() + "\n" + one_patch.entry("greet-again", "0001-greet.patch"))
    res = one_patch.run("drop", "greet-again", "--reason", "second")
    assert res.returncode == 0, res.stderr
    assert (root / "patches/dropped/0001-greet.patch").read_text() == first
    second = (root / "patches/dropped/0001-greet-2.patch").read_text()
    assert '"hey"' in second and second != first
    data = tomllib.loads(manifest.read_text())
    assert {d["id"]: d["file"] for d in data["dropped"]} == {
        "greet": "patches/dropped/0001-greet.patch",
        "greet-again": "patches/dropped/0001-greet-2.patch",
    }
    assert one_patch.run("check").returncode in (0, 1)  # parses; `check` may still flag other things


def test_import_never_reuses_a_dropped_id(one_patch: Demo, tmp_path: Path) -> None:
    assert one_patch.run("drop", "greet", "--reason", "gone").returncode == 0
    again = exported(one_patch, tmp_path, "g", "python/demo/core.py", '"hello"', '"hey"', "greet")
    res = one_patch.run("import", str(again), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["data"]["added"][0]["id"] == "greet-2"


def test_rebase_moves_a_pin_written_as_a_literal_string(releases: Demo) -> None:  # noqa: F811
    series(releases, "0001-extra", "0002-greet")
    manifest = releases.root / "patchset.toml"
    manifest.write_text(manifest.read_text().replace('pin = "demo-1.0"', "pin = 'demo-1.0'  # the active pin"))
    res = releases.run("rebase", "--to", "1.1", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    text = manifest.read_text()
    assert tomllib.loads(text)["pin"] == "demo-1.1"
    assert "# the active pin" in text  # comments kept
    res = releases.run("check", "--json")
    assert json.loads(res.stdout)["data"]["pin"] == "demo-1.1"


def test_a_pin_with_quotes_and_backslashes_is_written_escaped(tmp_path: Path) -> None:
    import dataclasses

    from patchtool.project.pins import Pin, load_pin, pin_to_toml

    (tmp_path / "upstream-pins").mkdir()
    good = Pin.from_dict(
        tomllib.loads((Path(__file__).parents[2] / "upstream-pins/sglang-0.5.23.toml").read_text()),
        name="sglang-0.5.23",
        file="x",
    )
    assert good.git is not None
    # a url is a SourceUrl (no control characters); a tag is free text a git pin names
    odd = dataclasses.replace(good, git=dataclasses.replace(good.git, tag='v"b\\c\nd'))
    text = pin_to_toml(odd, comment='line one\nline "two"')
    (tmp_path / "upstream-pins" / "sglang-0.5.23.toml").write_text(text)
    again = load_pin(tmp_path, "sglang-0.5.23")
    assert again == odd
    before = snapshot(tmp_path)
    assert pin_to_toml(again, comment='line one\nline "two"') == text
    assert snapshot(tmp_path) == before

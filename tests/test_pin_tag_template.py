"""A pin names upstream's repository and the tag of each release (issue 31, section 2): ``[git]``
with ``tag = "v{version}"``, on an artifact pin too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version

from conftest import Demo
from patchtool.errors import InvalidInput
from patchtool.project.pins import Pin, pin_to_toml

ART = {
    "distribution": "demo",
    "version": "1.0",
    "filename": "demo-1.0.tar.gz",
    "sha256": "0" * 64,
    "prefix": {"from": "demo-{version}/", "to": ""},
}


def _pin(git: dict[str, str]) -> Pin:
    data = {"schema": 1, "name": "demo", "version": "1.0", "git": git, "artifact": ART}
    return Pin.from_dict(data, name="demo-1.0", file="upstream-pins/demo-1.0.toml")


def test_a_tag_template_names_the_pins_tag_and_every_releases() -> None:
    pin = _pin({"url": "https://example.com/demo.git", "tag": "release-{version}"})
    assert pin.git is not None and pin.git.tag == "release-1.0" and pin.git.template == "release-{version}"
    assert pin.git.tag_for(Version("1.1"), pin.version) == "release-1.1"
    assert pin.git.at(Version("1.1")).tag == "release-1.1"
    assert 'tag = "release-{version}"' in pin_to_toml(pin)  # written back as the template


def test_a_literal_tag_that_spells_its_version_gives_the_others() -> None:
    pin = _pin({"url": "https://example.com/demo.git", "tag": "v1.0"})
    assert pin.git is not None and pin.git.template is None
    assert pin.git.tag_for(Version("1.1"), pin.version) == "v1.1"
    assert 'tag = "v1.0"' in pin_to_toml(pin)
    odd = _pin({"url": "https://example.com/demo.git", "tag": "stable"})
    assert odd.git is not None and odd.git.tag_for(Version("1.1"), odd.version) is None
    assert (
        _pin({"url": "https://example.com/demo.git", "tag": "v1.0.1"}).git.tag_for(  # type: ignore[union-attr]
            Version("1.1"), Version("1.0")
        )
        is None
    )  # 1.0 is not the whole version the tag spells


def test_a_tag_with_another_placeholder_is_refused_naming_the_key() -> None:
    with pytest.raises(InvalidInput) as caught:
        _pin({"url": "https://example.com/demo.git", "tag": "v{major}"})
    assert "git.tag" in str(caught.value.problems) and "{version}" in str(caught.value.problems)


def test_pin_add_keeps_the_template_in_the_new_releases_pin(demo: Demo) -> None:
    from conftest import UPSTREAM_FILES
    from helpers import make_wheel

    pin = demo.root / "upstream-pins" / "demo-1.0.toml"
    pin.write_text(pin.read_text() + '\n[git]\nurl = "https://example.com/demo.git"\ntag = "release-{version}"\n')
    demo.index.add(make_wheel(demo.index.root / "demo-1.1-py3-none-any.whl", "demo", "1.1", UPSTREAM_FILES))
    demo.write_manifest()
    res = demo.run("pin", "add", "1.1")
    assert res.returncode == 0, res.stdout + res.stderr
    written = (demo.root / "upstream-pins" / "demo-1.1.toml").read_text()
    assert 'tag = "release-{version}"' in written
    from patchtool.project.pins import load_pin

    loaded = load_pin(demo.root, "demo-1.1").git
    assert loaded is not None and loaded.tag == "release-1.1"


def test_pin_add_spells_the_new_tag_as_the_literal_tag_spells_its_version(demo: Demo) -> None:
    """A literal tag without a "v" (werkzeug's "2.2.2") gives the new release's tag spelt alike:
    pin add wrote "v1.1", a tag upstream does not have, so `rebase --history` found none."""
    from conftest import UPSTREAM_FILES
    from helpers import make_wheel

    pin = demo.root / "upstream-pins" / "demo-1.0.toml"
    pin.write_text(pin.read_text() + '\n[git]\nurl = "https://example.com/demo.git"\ntag = "1.0"\n')
    demo.index.add(make_wheel(demo.index.root / "demo-1.1-py3-none-any.whl", "demo", "1.1", UPSTREAM_FILES))
    demo.write_manifest()
    res = demo.run("pin", "add", "1.1")
    assert res.returncode == 0, res.stdout + res.stderr
    written = (demo.root / "upstream-pins" / "demo-1.1.toml").read_text()
    assert 'tag = "1.1"' in written, written


def _tagged_upstream(demo: Demo, *tags: str) -> Path:
    """A repository of upstream in the demo's tmp dir with one commit carrying ``tags``."""
    from helpers import git, write_tree

    up = demo.root.parent / "upstream-repo"
    up.mkdir()
    git(up, "init", "-q", "-b", "main")
    write_tree(up, {"README": "demo\n"})
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "demo")
    for t in tags:
        git(up, "tag", t)
    return up


def _history_cached(demo: Demo, up: Path, tag: str) -> None:
    """Upstream's history in the demo's cache, as `rebase --history` leaves it."""
    from patchtool.upstream.cache import Cache
    from patchtool.upstream.history import History
    from patchtool.urls import SourceUrl

    url = SourceUrl.parse(str(up), git=True, user=True)
    assert History(Cache(demo.cache, allow_local=True), url, tag, tag, None).commits()


def test_pin_add_warns_where_upstreams_history_has_no_such_tag(demo: Demo) -> None:
    """Where upstream's history is in the cache, `pin add` checks the [git] tag the new pin names
    against it (after fetching the tags again: a release tagged since is found): a tag upstream does
    not have is a warning, in text and --json, and the pin is written. Before, nothing was checked
    and `rebase --history` later said it could not find the release's history."""
    import json

    from conftest import UPSTREAM_FILES
    from helpers import git, make_wheel

    up = _tagged_upstream(demo, "release-1.0")
    _history_cached(demo, up, "release-1.0")
    pin = demo.root / "upstream-pins" / "demo-1.0.toml"
    pin.write_text(pin.read_text() + f'\n[git]\nurl = "{up}"\ntag = "release-{{version}}"\n')
    for version in ("1.1", "1.2"):
        demo.index.add(
            make_wheel(demo.index.root / f"demo-{version}-py3-none-any.whl", "demo", version, UPSTREAM_FILES)
        )
    demo.write_manifest()
    res = demo.run("pin", "add", "1.1", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["data"]["warnings"] == [
        f'{up} has no tag release-1.1 (tag = "release-{{version}}"): `rebase --history` will not find this '
        "release's history"
    ]
    assert (demo.root / "upstream-pins" / "demo-1.1.toml").is_file()
    git(up, "tag", "release-1.2")  # tagged since the history was fetched
    res = demo.run("pin", "add", "1.2")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "warning" not in res.stdout + res.stderr


def test_check_says_where_the_tags_tree_and_the_artifact_differ(
    demo: Demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31: a pin's [git] tag is where history's verdicts read upstream's files, and the
    artifact is what the series applies to. Where the cache holds the tag's trees (a rebase with
    --history fetched them), `check` says which files under the prefix mapping differ, the
    series' own first; before that it fetches nothing and says nothing."""
    from conftest import UPSTREAM_FILES, edit
    from helpers import git, write_tree
    from patchtool.project.pins import load_pin
    from patchtool.upstream.cache import Cache
    from patchtool.upstream.history import History

    up = tmp_path / "upstream-repo"
    up.mkdir()
    git(up, "init", "-q", "-b", "main")
    files = {f"python/{path}": text for path, text in UPSTREAM_FILES.items()}
    files["python/demo/core.py"] += "# kept in the repository, left out of the release\n"
    files |= {"python/demo/extra.py": "x = 1\n", "README.md": "outside the mapping: not compared\n"}
    write_tree(up, files)
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "demo 1.0")
    git(up, "tag", "v1.0")
    pin_file = demo.root / "upstream-pins" / "demo-1.0.toml"
    pin_file.write_text(pin_file.read_text() + f'\n[git]\nurl = "{up}"\ntag = "v1.0"\n')
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi")
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"))

    def tag_warnings() -> list[dict[str, object]]:
        res = demo.run("check", "--json")
        assert res.returncode == 0, res.stdout + res.stderr
        return [w for w in json.loads(res.stdout)["data"]["warnings"] if w.get("code") == "tag-tree"]

    assert tag_warnings() == []
    assert not (demo.cache / "history").exists()  # nothing fetched
    History(Cache(demo.cache), load_pin(demo.root, "demo-1.0").git.url, "v1.0", "v1.0", None)._files(  # type: ignore[union-attr]
        ["python/demo/core.py"]
    )  # what `rebase --history` fetches for a patch of core.py
    [warning] = tag_warnings()
    assert warning["file"] == "upstream-pins/demo-1.0.toml"
    assert warning["message"] == (
        f"tag v1.0 of {up} and demo-1.0-py3-none-any.whl differ beyond the prefix mapping (demo/ -> python/demo/): "
        "1 file(s) differ (python/demo/core.py), 1 of them patched by the series; 1 file(s) only in the tag "
        "(python/demo/extra.py): history's verdicts on those files read the tag, not the artifact"
    )
    from patchtool.upstream import history

    monkeypatch.setattr(history, "_MOST_LISTED", 100)  # a tree listing more is not read whole (an attack)
    assert [w["message"] for w in tag_warnings()] == [
        "tag v1.0 not compared with demo-1.0-py3-none-any.whl: a tree lists more than 100 bytes of files"
    ]

"""A pin names upstream's repository and the tag of each release (issue 31, section 2): ``[git]``
with ``tag = "v{version}"``, on an artifact pin too."""

from __future__ import annotations

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

"""Nothing outside the repository and the cache is written, deleted or read, whatever the repository
holds: names from its files are checked types, and every write goes through ``fsroot`` beneath its
root without following a link. Each case keeps a decoy directory beside the repository and checks
it is byte-identical after the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import Demo
from patchtool.testing import snapshot


def decoy(demo: Demo) -> Path:
    """A directory outside the repository and the cache, with a file an attack could aim at."""
    path = demo.root.parent / "decoy"
    path.mkdir(exist_ok=True)
    (path / "x-1.0.tar.gz").write_bytes(b"precious\n")
    (path / "keep").mkdir(exist_ok=True)
    (path / "keep" / "file").write_text("keep me\n")
    return path


def run(demo: Demo, *args: str) -> tuple[int, dict[str, Any]]:
    res = demo.run(*args, "--json")
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, json.loads(res.stdout)


def sdist_pin(demo: Demo, distribution: str, filename: str) -> None:
    pin = demo.root / "upstream-pins" / "demo-1.0.toml"
    text = pin.read_text().replace('distribution = "demo"', f'distribution = "{distribution}"')
    text = text.replace(f'filename = "{demo.wheel.name}"', f'filename = "{filename}"')
    pin.write_text(text + f'url = "{demo.index.url[:-len("/simple")]}/files/{demo.wheel.name}"\n')


@pytest.mark.parametrize(("distribution", "filename", "key", "message"), [
    ("../../../decoy/x", "../../../decoy/x-1.0.tar.gz", "artifact.distribution",
     "'../../../decoy/x' is not a distribution name (letters, digits, '.', '_', '-', starting and ending with a "
     "letter or digit)"),
    ("x", "../../../decoy/x-1.0.tar.gz", "artifact.filename",
     "'../../../decoy/x-1.0.tar.gz' is a path, not a file name; a release file is named by one plain file name"),
    ("x", "..-1.0.tar.gz", "artifact.filename",
     "'..-1.0.tar.gz' is neither a wheel nor an sdist file name"),
])
def test_an_sdist_name_that_is_a_path_is_refused(one_patch: Demo, distribution: str, filename: str, key: str,
                                                 message: str) -> None:
    outside = decoy(one_patch)
    sdist_pin(one_patch, distribution, filename)
    before = snapshot(one_patch.root.parent)
    for command in ("status", "check", "apply"):
        code, out = run(one_patch, command)
        assert code == 1, (command, out)
        problems = out["data"]["problems"] if command == "check" else out["errors"]
        found = [p for p in problems if p.get("key") == key]
        assert found and found[0]["message"] == message, problems
        assert found[0]["file"] == "upstream-pins/demo-1.0.toml"
    assert snapshot(one_patch.root.parent) == before
    assert (outside / "x-1.0.tar.gz").read_bytes() == b"precious\n"

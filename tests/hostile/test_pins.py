"""Pin names, pin files and --pin are ids: none of them can name a file outside upstream-pins/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import Demo
from helpers import snapshot


@pytest.mark.parametrize("name", ["../../../escaped", "/tmp/escaped", "a/b", "Sglang", "..", ""])
def test_a_pin_whose_name_is_not_an_id_is_refused(one_patch: Demo, tmp_path: Path, name: str) -> None:
    pin = one_patch.root / "upstream-pins" / "demo-1.0.toml"
    pin.write_text(pin.read_text().replace('name = "demo"', f'name = "{name}"'))
    before = snapshot(tmp_path)
    res = one_patch.run("check", "--json")
    assert res.returncode == 1
    problems = json.loads(res.stdout)["data"]["problems"]
    assert any(p.get("key") == "name" and p.get("file") == "upstream-pins/demo-1.0.toml" for p in problems), problems
    res = one_patch.run("rebase", "--to", "1.1")
    assert res.returncode == 1 and "upstream-pins/demo-1.0.toml" in res.stderr
    assert "Traceback" not in res.stderr
    assert snapshot(tmp_path) == before  # nothing written anywhere: not beside the repository either


@pytest.mark.parametrize("arg", ["/etc/passwd", "../patchset", "../../x", "demo-1.0.toml/..", "DEMO"])
def test_pin_option_is_an_id(one_patch: Demo, tmp_path: Path, arg: str) -> None:
    before = snapshot(tmp_path)
    message = (
        f"{arg!r} is not a valid pin name (lower-case letters, digits, '.', '_', '-'; starting with a letter or digit)"
    )
    for command in ("status", "apply", "check"):
        res = one_patch.run(command, "--pin", arg, "--json")
        errors = json.loads(res.stdout)["errors"]
        assert res.returncode == (1 if command == "check" else 2), res.stdout  # check reports all problems
        assert errors[0]["message"] == message
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("size", [(4 << 30) + 1, 10**15])
def test_a_pinned_size_above_the_download_cap_is_refused(one_patch: Demo, tmp_path: Path, size: int) -> None:
    # found by an attack: `size = 10**15` lifted the 4 GiB cap, and a server declaring 6 GiB streamed 200 MB
    pin = one_patch.root / "upstream-pins" / "demo-1.0.toml"
    pin.write_text(pin.read_text() + f"size = {size}\n")
    before = snapshot(tmp_path)
    message = f"must be at most {4 << 30}, got {size}"
    res = one_patch.run("check", "--json")
    assert res.returncode == 1, res.stdout
    problems = json.loads(res.stdout)["data"]["problems"]
    assert {"file": "upstream-pins/demo-1.0.toml", "key": "artifact.size", "message": message} in [
        {k: p.get(k) for k in ("file", "key", "message")} for p in problems
    ], problems
    res = one_patch.run("apply", "--json")
    assert res.returncode == 1, res.stdout
    assert "Traceback" not in res.stderr
    [error] = json.loads(res.stdout)["errors"]
    assert (error["file"], error["key"], error["message"]) == ("upstream-pins/demo-1.0.toml", "artifact.size", message)
    assert one_patch.index.requests == []  # refused before anything is asked of the index
    assert snapshot(tmp_path) == before

"""`patchtool pin add/list/remove`: pins made by command from the local index or a git tag."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from conftest import UPSTREAM_FILES, Demo
from helpers import git, leftover_state, make_wheel, sha256


def add_release(demo: Demo, version: str) -> Path:
    files = {**UPSTREAM_FILES, "demo/__init__.py": f'__version__ = "{version}"\n'}
    wheel = make_wheel(demo.wheel.parent / f"demo-{version}-py3-none-any.whl", "demo", version, files)
    demo.index.add(wheel)
    return wheel


def data(res: object) -> dict:  # type: ignore[type-arg]
    out = json.loads(res.stdout)  # type: ignore[attr-defined]
    assert out["status"] == "ok", out
    return out["data"]  # type: ignore[no-any-return]


def test_pin_add_from_the_index_writes_a_verified_pin(one_patch: Demo) -> None:
    wheel = add_release(one_patch, "1.1")
    res = one_patch.run("pin", "add", "1.1", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert data(res)["name"] == "demo-1.1" and data(res)["written"] == ["upstream-pins/demo-1.1.toml"]
    pin = tomllib.loads((one_patch.root / "upstream-pins/demo-1.1.toml").read_text())
    art = pin["artifact"]
    assert (pin["version"], art["filename"], art["sha256"]) == ("1.1", wheel.name, sha256(wheel))
    assert art["prefix"] == {"from": "demo/", "to": "python/demo/"}
    assert not leftover_state(one_patch.root)
    check = one_patch.run("check", "--pin", "demo-1.1")  # it verifies and imports
    assert "applies at the pin: 1/1" in check.stdout, check.stdout + check.stderr
    again = one_patch.run("pin", "add", "1.1")
    assert again.returncode == 2 and "exists already" in again.stderr
    missing = one_patch.run("pin", "add", "9.9")
    assert missing.returncode == 4 and "has no demo-9.9-py3-none-any.whl" in missing.stderr


def test_pin_add_from_a_git_tag_resolves_its_commit(one_patch: Demo, tmp_path: Path) -> None:
    git(one_patch.work, "tag", "v1.2", "upstream")
    commit = git(one_patch.work, "rev-parse", "upstream").strip()
    res = one_patch.run("pin", "add", "--git", str(one_patch.work), "--tag", "v1.2", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert data(res)["commit"] == commit
    pin = tomllib.loads((one_patch.root / "upstream-pins/demo-1.2.toml").read_text())
    assert pin["use"] == "git" and pin["git"] == {"url": str(one_patch.work), "tag": "v1.2", "commit": commit}
    bad = one_patch.run("pin", "add", "--git", str(one_patch.work), "--tag", "v9")
    assert bad.returncode == 4 and "could not fetch tag v9" in bad.stderr


def test_pin_list_says_active_admitted_and_cached(one_patch: Demo) -> None:
    add_release(one_patch, "1.1")
    assert one_patch.run("pin", "add", "1.1").returncode == 0
    one_patch.write_manifest(one_patch.entry("greet", "0001-greet.patch", applies_to="==1.0"))
    pins = {p["name"]: p for p in data(one_patch.run("pin", "list", "--json"))["pins"]}
    assert pins["demo-1.0"] == {
        "name": "demo-1.0",
        "version": "1.0",
        "source": "artifact",
        "active": True,
        "rebase": None,
        "admitted_by": ["greet"],
        "cached": False,
    }
    assert pins["demo-1.1"]["active"] is False and pins["demo-1.1"]["admitted_by"] == []
    assert one_patch.run("apply").returncode == 0
    pins = {p["name"]: p for p in data(one_patch.run("pin", "list", "--json"))["pins"]}
    assert pins["demo-1.0"]["cached"] is True and pins["demo-1.1"]["cached"] is False
    text = one_patch.run("pin", "list").stdout
    assert "demo-1.0 (1.0, artifact; active, cached)" in text and "no patch admits it" in text


def test_pin_remove_refuses_the_active_pin_and_one_a_rebase_uses(one_patch: Demo) -> None:
    add_release(one_patch, "1.1")
    assert one_patch.run("pin", "add", "1.1").returncode == 0
    active = one_patch.run("pin", "remove", "demo-1.0")
    assert active.returncode == 2 and "is the active pin" in active.stderr
    state = one_patch.root / ".patchtool/rebase/state.json"
    state.parent.mkdir(parents=True)
    state.write_text(
        json.dumps(
            {
                "schema": 1,
                "old_pin": "demo-1.0",
                "new_pin": "demo-1.1",
                "new_pin_toml": "",
                "digest": "",
                "steps": [],
                "tip": "",
                "skipped": {},
                "worktree": None,
            }
        )
    )
    used = one_patch.run("pin", "remove", "demo-1.1")
    assert used.returncode == 2 and "rebase in progress moves the series to pin demo-1.1" in used.stderr
    state.unlink()
    res = one_patch.run("pin", "remove", "demo-1.1", "--json")
    assert res.returncode == 0 and data(res)["written"] == ["-upstream-pins/demo-1.1.toml"]
    assert not (one_patch.root / "upstream-pins/demo-1.1.toml").exists()
    unknown = one_patch.run("pin", "remove", "demo-1.1")
    assert unknown.returncode == 2 and "no pin named 'demo-1.1'" in unknown.stderr


def test_nox_offers_wheels_only_for_pins_the_series_is_for(tmp_path: Path) -> None:
    """`nox -l` on a copy of the noxfile: a pin no patch admits (what a rebase leaves behind) is not offered."""
    import shutil
    import subprocess

    from helpers import require_tool

    nox = require_tool("nox", enables="listing the noxfile's sessions")
    repo = Path(__file__).resolve().parent.parent
    shutil.copy(repo / "noxfile.py", tmp_path / "noxfile.py")
    (tmp_path / "upstream-pins").mkdir()
    for version in ("1.0", "1.1", "1.2"):
        (tmp_path / "upstream-pins" / f"demo-{version}.toml").write_text(f'version = "{version}"\n')
    (tmp_path / "patchset.toml").write_text(
        'schema = 1\npin = "demo-1.2"\n\n[[patch]]\nid = "a"\napplies_to = ">=1.1,<1.2"\n'
    )
    res = subprocess.run(
        [nox, "-l", "-f", str(tmp_path / "noxfile.py")], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr
    offered = [line.split("wheels(")[1].split(")")[0] for line in res.stdout.splitlines() if "wheels(" in line]
    assert offered == ["demo-1.1", "demo-1.2"], res.stdout

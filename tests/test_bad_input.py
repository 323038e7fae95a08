"""Every bad input the foundation names: a clear error naming the file, and nothing changed on disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import Demo
from helpers import snapshot

DATA = Path(__file__).parent / "data"


def unchanged_after(demo: Demo, *args: str) -> tuple[int, str, list[dict]]:  # type: ignore[type-arg]
    """Run the CLI; assert the project is byte-identical and nothing was imported into the cache.

    ``check`` goes on after a bad file to report every problem, so it may fill the cache.
    """
    before = snapshot(demo.root)
    res = demo.run(*args, "--json")
    assert snapshot(demo.root) == before
    tags = demo.cache / "upstream.git" / "refs" / "tags"
    if args[0] != "check" and tags.exists():
        assert not list(tags.iterdir())
    data = json.loads(res.stdout)
    return res.returncode, data["status"], data["errors"]


def messages(errors: list[dict]) -> list[str]:  # type: ignore[type-arg]
    return [" | ".join(str(e.get(k, "")) for k in ("file", "line", "patch", "key", "message", "hint")) for e in errors]


@pytest.mark.parametrize("command", ["check", "apply", "status"])
def test_malformed_toml(one_patch: Demo, command: str) -> None:
    path = one_patch.root / "patchset.toml"
    path.write_text(path.read_text().replace('kind = "correctness"', 'kind = "correctness'))
    code, status, errors = unchanged_after(one_patch, command)
    assert (code, status) == (1, "problems")
    assert errors[0]["file"] == "patchset.toml" and errors[0]["line"] == 7
    assert errors[0]["message"].startswith("not valid TOML: ")
    assert errors[0]["hint"] == "fix the syntax at that line"


def test_unknown_and_missing_keys(one_patch: Demo) -> None:
    path = one_patch.root / "patchset.toml"
    path.write_text(path.read_text().replace('owner = "team"\n', 'ownr = "team"\n'))
    code, _, errors = unchanged_after(one_patch, "check")
    assert code == 1
    assert "patchset.toml | 4 | greet | patch[0].owner | missing required key | " in messages(errors)
    assert (
        "patchset.toml | 8 | greet | patch[0].ownr | unknown key | check the spelling against docs/manifest.md"
        in messages(errors)
    )


def test_patch_file_that_is_not_a_diff(one_patch: Demo) -> None:
    shutil.copy(DATA / "not-a-diff.patch", one_patch.root / "patches" / "0001-greet.patch")
    for command in ("apply", "check"):
        code, _, errors = unchanged_after(one_patch, command)
        assert code == 1
        assert messages(errors)[0] == (
            "patches/0001-greet.patch |  | greet |  | not a patch: no 'diff --git' section found | "
            "export the commit with `git format-patch` (or use `patchtool import`)"
        )


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("escape-dotdot.patch", "unsafe diff: path '../../etc/passwd' escapes the tree"),
        ("escape-absolute.patch", "unsafe diff: absolute path '/etc/cron.d/evil'"),
        ("touch-dotgit.patch", "unsafe diff: path '.git/hooks/post-checkout' touches .git/"),
    ],
)
def test_diff_escaping_the_tree(one_patch: Demo, name: str, why: str) -> None:
    shutil.copy(DATA / name, one_patch.root / "patches" / "0001-greet.patch")
    for command in ("apply", "check"):
        code, _, errors = unchanged_after(one_patch, command)
        assert code == 1
        assert messages(errors)[0] == (
            f"patches/0001-greet.patch | 5 | greet |  | {why} | a patch may only touch files inside the upstream tree"
        )


def test_pin_with_wrong_sha256(one_patch: Demo) -> None:
    pin = one_patch.root / "upstream-pins" / "demo-1.0.toml"
    text = pin.read_text()
    good = text.split('sha256 = "')[1][:64]
    pin.write_text(
        text.replace(good, "0" * 64).replace(
            "[artifact]\n", f'[artifact]\nurl = "{one_patch.index.url[:-7]}/files/{one_patch.wheel.name}"\n'
        )
    )
    for command in ("apply", "check"):
        code, _, errors = unchanged_after(one_patch, command)
        assert errors[0]["message"] == (
            f"{one_patch.wheel.name}: sha256 is {good}, but pin demo-1.0 says {'0' * 64}; the file was not used"
        )
        assert errors[0]["file"] == "upstream-pins/demo-1.0.toml"
        assert "update the pin's sha256" in errors[0]["hint"]
        assert code == (1 if command == "check" else 4)
        assert not list((one_patch.cache / "downloads").rglob("*.whl*"))


def test_missing_patch_file(one_patch: Demo) -> None:
    (one_patch.root / "patches" / "0001-greet.patch").unlink()
    for command in ("apply", "check"):
        code, _, errors = unchanged_after(one_patch, command)
        assert code == 1
        assert messages(errors)[0] == (
            "patches/0001-greet.patch |  | greet |  | patch file does not exist | "
            "restore it or remove the entry from patchset.toml"
        )


def test_same_patch_listed_twice(one_patch: Demo) -> None:
    one_patch.write_manifest(
        one_patch.entry("greet", "0001-greet.patch"), one_patch.entry("greet-again", "0001-greet.patch")
    )
    code, _, errors = unchanged_after(one_patch, "apply")
    assert code == 1
    assert messages(errors) == [
        "patchset.toml | 16 | greet-again | patch[1].file | patches/0001-greet.patch is listed twice (also "
        "patch[0]) | a patch appears once in the series; remove the duplicate entry"
    ]


def test_download_that_breaks_half_way_is_retried(one_patch: Demo) -> None:
    one_patch.index.break_next = 1
    res = one_patch.run("apply")
    assert res.returncode == 0, res.stderr
    assert len([r for r in one_patch.index.requests if r.startswith("/files/")]) == 2


def test_download_that_keeps_breaking_gives_a_clear_error(one_patch: Demo) -> None:
    one_patch.index.break_next = 100
    code, status, errors = unchanged_after(one_patch, "apply")
    assert (code, status) == (4, "upstream-error")
    assert "failed after 4 attempts: connection closed after" in errors[0]["message"]
    assert errors[0]["hint"] == "check the network and run the command again; nothing was imported"
    assert not list((one_patch.cache / "downloads").rglob("*.whl*"))


def test_unknown_pin_is_a_usage_error(one_patch: Demo) -> None:
    code, status, errors = unchanged_after(one_patch, "apply", "--pin", "demo-9")
    assert (code, status) == (2, "usage-error")
    assert errors[0]["message"] == "no pin named 'demo-9': upstream-pins/demo-9.toml does not exist"
    assert errors[0]["hint"] == "known pins: demo-1.0"

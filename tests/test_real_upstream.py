"""The real tier: sglang 0.5.23 from PyPI (downloaded once, cached) with this repository's series."""

from __future__ import annotations

import json
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from patchtool.manifest import load
from patchtool.patchfile import PatchFile

pytestmark = pytest.mark.upstream
REPO = Path(__file__).resolve().parent.parent


def run(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(PATCHTOOL_CACHE_DIR=str(cache), GIT_CONFIG_GLOBAL=os.devnull)
    return subprocess.run([sys.executable, "-m", "patchtool", *args], cwd=REPO, capture_output=True,
                          text=True, env=env, check=False)


def test_check_is_clean_on_the_real_pin(real_cache: Path) -> None:
    res = run(real_cache, "check", "--json")
    data = json.loads(res.stdout)
    assert res.returncode == 0, data["errors"]
    assert data["status"] == "ok" and data["data"]["pin"] == "sglang-0.5.23"
    assert all(p["outcome"] == "applied" for p in data["data"]["applies"])
    assert data["data"]["assumptions"] and all(a["ok"] for a in data["data"]["assumptions"])


def test_status_on_the_real_pin(real_cache: Path) -> None:
    res = run(real_cache, "status", "--json")
    data = json.loads(res.stdout)["data"]
    assert data["version"] == "0.5.23" and data["source"] == "artifact"
    ids = [p["id"] for p in data["patches"]]
    assert ids == [p.id for p in load(REPO / "patchset.toml").patches]


def test_patched_tree_has_every_patch_and_compiles(patched_tree: Path) -> None:
    manifest = load(REPO / "patchset.toml")
    log = subprocess.run(["git", "log", "--format=%s", f"-{len(manifest.patches) + 1}"], cwd=patched_tree,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    subjects = [PatchFile.parse((REPO / p.file).read_text(), name=p.file).subject for p in manifest.patches]
    assert log[:-1] == list(reversed(subjects))
    assert log[-1] == "sglang 0.5.23"
    for entry in manifest.patches:
        patch = PatchFile.parse((REPO / entry.file).read_text(), name=entry.file)
        for f in patch.files:
            if f.path.endswith(".py") and f.status != "deleted":
                py_compile.compile(str(patched_tree / f.path), doraise=True)

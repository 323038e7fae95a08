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


def test_revisit_against_the_real_pin(real_cache: Path) -> None:
    """At 0.5.23 exactly one rejection is due for a second look.

    sglang 0.5.23's MXFP4 MoE method already dispatches sm_120 to a FlashInfer CUTLASS kernel
    (`cutlass_sm120`), so the reason recorded for rejecting the MXFP4 checkpoint (MoE falls
    back to CUDA-core kernels on sm_120, ~39% of decode time) may no longer hold: re-measure.
    Every other condition still reads as when the idea was rejected.
    """
    res = run(real_cache, "retread", "revisit", "--json")
    data = json.loads(res.stdout)["data"]
    assert res.returncode == 0
    assert data["due"] == ["mxfp4-base-checkpoint"]
    assert len(data["conditions"]) >= 6


def test_check_guards_the_real_series(real_cache: Path) -> None:
    data = json.loads(run(real_cache, "check", "--json").stdout)["data"]["registry"]
    assert data["entries"] >= 18 and data["findings"] == [] and data["overrides"] == []

"""Each patch of the curated series is a pull request SGLang could take on its own: it applies
alone on the pristine sglang 0.5.23 tree, onto only the patches its entry `requires` (issue 32,
section 1: 0004's field_order.py hunk once had 0001's line as its context).

`git apply --check` with several patch files applies them in turn to the same tree, as `git am`
of that patch set on the pin would, and changes nothing on disk."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from cli_run import spawned

pytestmark = pytest.mark.upstream

REPO = Path(__file__).resolve().parents[2]
MANIFEST = tomllib.loads((REPO / "patchset.toml").read_text(encoding="utf-8"))
ENTRIES = {entry["id"]: entry for entry in MANIFEST["patch"]}


@pytest.fixture(scope="module")
def pin_tree(real_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pinned release as `patchtool apply --series none` builds it: no patch applied."""
    into = tmp_path_factory.mktemp("pin") / "sglang"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(PATCHTOOL_CACHE_DIR=str(real_cache), GIT_CONFIG_GLOBAL=os.devnull)
    res = spawned(["apply", "--series", "none", "--into", str(into), "--force"], cwd=REPO, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    return into


def closure(ident: str) -> list[str]:
    """``ident``'s `requires`, transitively, in series order, then ``ident``."""
    needed: set[str] = set()
    todo = [ident]
    while todo:
        current = todo.pop()
        for dep in ENTRIES[current].get("requires", []):
            if dep not in needed:
                needed.add(dep)
                todo.append(dep)
    return [i for i in ENTRIES if i in needed] + [ident]


@pytest.mark.parametrize("ident", list(ENTRIES))
def test_patch_applies_alone_on_the_pin(pin_tree: Path, ident: str) -> None:
    files = [str(REPO / ENTRIES[i]["file"]) for i in closure(ident)]
    res = subprocess.run(
        ["git", "apply", "--check", *files],
        cwd=pin_tree,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    )
    assert res.returncode == 0, f"{ident} does not apply alone on {MANIFEST['pin']}:\n{res.stderr}"


def test_pd_admission_needs_no_other_patch() -> None:
    """0004 is a PD admission change: nothing in it needs the bf16 indexer keys of 0001."""
    assert ENTRIES["pd-max-queued-requests"].get("requires", []) == []


def test_check_applies_each_patch_alone_because_the_entries_say_so(real_cache: Path) -> None:
    """Every entry is marked `standalone = true`, so a plain `patchtool check` (what a pull request
    of this repository must pass) applies each patch alone at the pin onto what it requires."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(PATCHTOOL_CACHE_DIR=str(real_cache), GIT_CONFIG_GLOBAL=os.devnull)
    res = spawned(["check", "--json"], cwd=REPO, env=env)
    data = json.loads(res.stdout)["data"]
    assert res.returncode == 0, res.stdout + res.stderr
    assert [(r["id"], r["onto"], r["ok"]) for r in data["standalone"]] == [
        (ident, ENTRIES[ident].get("requires", []), True) for ident in ENTRIES
    ]
    assert all(entry.get("standalone") is True for entry in ENTRIES.values())


def test_export_pr_of_0004_is_what_git_am_takes_on_the_release(
    real_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`export --pr pd-max-queued-requests` gives patches in upstream's repository layout
    (python/sglang/, the pin's prefix mapping) that `git am` takes on the pristine 0.5.23 tree,
    committed as a git repository here (GitHub's v0.5.23 tag cannot be fetched offline)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(PATCHTOOL_CACHE_DIR=str(real_cache), GIT_CONFIG_GLOBAL=os.devnull)
    out = tmp_path_factory.mktemp("pr") / "pd-max-queued-requests"
    res = spawned(["export", "--pr", "pd-max-queued-requests", str(out), "--json"], cwd=REPO, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads(res.stdout)["data"]
    assert data["patches"] == ["pd-max-queued-requests"]
    assert data["base"] == "https://github.com/sgl-project/sglang at tag v0.5.23"
    name = ENTRIES["pd-max-queued-requests"]["file"].rpartition("/")[2]
    assert sorted(p.name for p in out.iterdir()) == sorted([name, "PULL_REQUEST.md"])
    paths = re.findall(r"^diff --git a/(\S+) b/", (out / name).read_text(), re.MULTILINE)
    assert paths and all(p.startswith("python/sglang/") for p in paths), paths

    tree = tmp_path_factory.mktemp("release") / "sglang"
    res = spawned(["apply", "--series", "none", "--into", str(tree)], cwd=REPO, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    # a repository of its own over the tree (its .git links it to the cache, which stays as it is)
    genv = {**env, "GIT_DIR": str(tree.parent / "release.git"), "GIT_WORK_TREE": str(tree)}
    genv.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")

    def run_git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, env=genv)

    for args in (("init", "-q"), ("add", "-A"), ("commit", "-qm", "sglang 0.5.23"), ("tag", "v0.5.23")):
        assert run_git(*args).returncode == 0
    am = run_git("am", str(out / name))
    assert am.returncode == 0, am.stdout + am.stderr
    assert run_git("log", "--format=%s", "-1").stdout.startswith("disagg: admit PD requests at the prefill server")


def test_export_pr_refuses_0003_the_experiment(real_cache: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(PATCHTOOL_CACHE_DIR=str(real_cache), GIT_CONFIG_GLOBAL=os.devnull)
    res = spawned(["export", "--pr", "dsv4-mhc-bf16-gemm", str(tmp_path / "pr")], cwd=REPO, env=env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "patch 'dsv4-mhc-bf16-gemm' is an experiment, not a pull request: No performance figure" in res.stderr
    assert not (tmp_path / "pr").exists()

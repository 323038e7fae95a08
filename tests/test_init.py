"""`patchtool init`: a patch repository from nothing, on synthetic releases served by the real local
HTTP index of ``testing.py`` (issue 20, section 1). The real-index fork is tests/test_second_fork.py."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_run import in_process
from conftest import UPSTREAM_FILES
from helpers import Index, make_sdist, make_wheel, sha256, snapshot


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Index]:
    """demo 1.0 as a src-layout sdist and a pure wheel."""
    served = Index(tmp_path)
    served.add(
        make_sdist(
            tmp_path / "demo-1.0.tar.gz",
            "demo",
            "1.0",
            {f"src/{k}": v for k, v in UPSTREAM_FILES.items()} | {"pyproject.toml": "[project]\n"},
        )
    )
    served.add(make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", "demo", "1.0", UPSTREAM_FILES))
    with served.serve():
        yield served


def run(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(where.parent / "cache")}
    return in_process([*args], cwd=where, env=env)


def fresh(tmp_path: Path, name: str = "fork") -> Path:
    where = tmp_path / name
    where.mkdir()
    return where


def test_init_writes_manifest_pin_gitignore_and_checks(index: Index, tmp_path: Path) -> None:
    where = fresh(tmp_path)
    res = run(where, "init", "--upstream", "demo==1.0", "--sdist", "--index", index.url)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "prefix (guessed from the artifact): demo-{version}/ -> ./  (at 1.0: demo-1.0/)" in res.stdout
    assert "check: clean" in res.stdout and "(git init)" in res.stdout
    assert (where / ".git").is_dir()
    assert tomllib.loads((where / "patchset.toml").read_text()) == {"schema": 1, "pin": "demo-1.0"}
    art = tomllib.loads((where / "upstream-pins/demo-1.0.toml").read_text())["artifact"]
    sdist = tmp_path / "demo-1.0.tar.gz"
    assert art == {
        "index": index.url,
        "distribution": "demo",
        "version": "1.0",
        "filename": sdist.name,
        "sha256": sha256(sdist),
        "prefix": {"from": "demo-{version}/", "to": ""},
    }
    assert (where / ".gitignore").read_text() == "build/\ndist/\nwork/\n.patchtool/\n"
    applied = run(where, "apply", "--series", "none", "--into", str(tmp_path / "tree"))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert (tmp_path / "tree/src/demo/core.py").read_text() == UPSTREAM_FILES["demo/core.py"]  # the whole sdist
    assert (tmp_path / "tree/pyproject.toml").is_file()


def test_init_json_shows_the_prefix_and_keeps_an_existing_git_and_gitignore(index: Index, tmp_path: Path) -> None:
    where = fresh(tmp_path)
    subprocess.run(["git", "init", "-q"], cwd=where, check=True)
    (where / ".gitignore").write_text("*.pyc\nbuild\n")
    res = run(where, "init", "--upstream", "demo==1.0", "--wheel", "--index", index.url, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads(res.stdout)["data"]
    assert (data["pin"], data["git_init"], data["check"]["ok"]) == ("demo-1.0", False, True)
    assert data["artifact"]["filename"] == "demo-1.0-py3-none-any.whl"
    assert data["artifact"]["prefix"] == {"from": "", "to": "", "at_version": ""}
    assert sorted(data["written"]) == [".gitignore", "patchset.toml", "upstream-pins/demo-1.0.toml"]
    assert (where / ".gitignore").read_text() == "*.pyc\nbuild\ndist/\nwork/\n.patchtool/\n"


def test_init_refuses_a_directory_with_a_manifest_and_writes_nothing(index: Index, tmp_path: Path) -> None:
    where = fresh(tmp_path)
    (where / "patchset.toml").write_text('schema = 1\npin = "x-1"\n')
    before = snapshot(where)
    res = run(where, "init", "--upstream", "demo==1.0", "--index", index.url)
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr.startswith(f"error: patchset.toml: exists already in {where}: it is a patch repository"), (
        res.stderr
    )
    assert snapshot(where) == before and not (where / ".git").exists()
    assert index.requests == []  # refused before the index was asked


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        (
            "demo-{name}/:",
            "error: --prefix 'demo-{name}/:': 'demo-{name}/': the only placeholder a prefix may hold is {version}",
        ),
        ("demo-{version}/lib/:", "error: demo-1.0.tar.gz has no files under 'demo-1.0/lib/'"),
        ("demo-1.0/src", "error: --prefix 'demo-1.0/src': no ':' between FROM and TO"),
    ],
)
def test_init_refuses_a_prefix_it_cannot_use_and_writes_nothing(
    index: Index, tmp_path: Path, prefix: str, message: str
) -> None:
    where = fresh(tmp_path)
    res = run(where, "init", "--upstream", "demo==1.0", "--index", index.url, "--prefix", prefix)
    assert res.returncode == 2 and res.stderr.startswith(message), res.stderr
    assert snapshot(where) == {} and not (where / ".git").exists()


def test_init_refuses_a_release_the_index_lacks(index: Index, tmp_path: Path) -> None:
    where = fresh(tmp_path)
    res = run(where, "init", "--upstream", "demo==9.9", "--index", index.url)
    assert (res.returncode, res.stderr) == (
        4,
        "error: demo 9.9 has no sdist on the index (hint: check the name and version, or try --wheel)\n",
    )
    assert snapshot(where) == {} and not (where / ".git").exists()
    bad = run(where, "init", "--upstream", "demo")
    assert (bad.returncode, bad.stderr) == (
        2,
        "error: --upstream 'demo': no ==VERSION (hint: give NAME==VERSION, e.g. --upstream attrs==23.1.0)\n",
    )


def test_init_pins_a_git_tag_by_its_commit(tmp_path: Path) -> None:
    upstream = fresh(tmp_path, "attrs")
    (upstream / "a.py").write_text("x = 1\n")
    for args in (["init", "-q"], ["add", "a.py"], ["commit", "-q", "-m", "first"], ["tag", "v2.1"]):
        subprocess.run(
            ["git", *args],
            cwd=upstream,
            check=True,
            env={
                **os.environ,
                "GIT_AUTHOR_NAME": "a",
                "GIT_AUTHOR_EMAIL": "a@example.org",
                "GIT_COMMITTER_NAME": "a",
                "GIT_COMMITTER_EMAIL": "a@example.org",
            },
        )
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=upstream, capture_output=True, text=True, check=True
    ).stdout.strip()
    where = fresh(tmp_path)
    data = json.loads(run(where, "init", "--git", str(upstream), "--tag", "v2.1", "--json").stdout)["data"]
    assert (data["pin"], data["source"], data["git"]["commit"], data["check"]["ok"]) == (
        "attrs-2.1",
        "git",
        commit,
        True,
    )
    assert tomllib.loads((where / "upstream-pins/attrs-2.1.toml").read_text())["git"] == {
        "url": str(upstream),
        "tag": "v2.1",
        "commit": commit,
    }


@pytest.mark.parametrize("kind", ["link", "file"])
def test_init_where_a_destination_cannot_be_written_writes_nothing(index: Index, tmp_path: Path, kind: str) -> None:
    """Found by an attack: with ``upstream-pins`` a link (or a file), init failed after it had run
    git init and staged the manifest. Every destination is read before anything is written."""
    where = fresh(tmp_path)
    elsewhere = fresh(tmp_path, "elsewhere")
    if kind == "link":
        (where / "upstream-pins").symlink_to(elsewhere)
    else:
        (where / "upstream-pins").write_text("not a directory\n")
    before, outside = snapshot(where), snapshot(elsewhere)
    res = run(where, "init", "--upstream", "demo==1.0", "--sdist", "--index", index.url)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stderr.startswith("error: upstream-pins/demo-1.0.toml: "), res.stderr
    assert "Traceback" not in res.stderr
    assert snapshot(where) == before and snapshot(elsewhere) == outside
    assert sorted(p.name for p in where.iterdir()) == ["upstream-pins"]  # no .git, no .patchtool

"""A pin of the other kind (issue 30, section 2): ``pin add`` and ``rebase --to`` take ``--wheel``,
``--sdist`` or ``--filename``, and the new pin's prefix mapping puts the other layout's files at the
repository paths the patches name (an sdist's ``demo-1.0/src/demo/`` is a wheel's ``demo/``). On
synthetic releases served by the real local HTTP index of ``helpers.Index``; the real-index quick
start is tests/test_second_fork.py."""

from __future__ import annotations

import json
import subprocess
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.tags import sys_tags

from cli_run import as_maintainer, ok_data
from conftest import UPSTREAM_FILES
from helpers import Index, make_sdist, make_wheel, snapshot

CORE = "demo/core.py"
LATER = {**UPSTREAM_FILES, "demo/__init__.py": '__version__ = "1.1"\n'}


def serve(tmp_path: Path, *, layout: str = "src/", wheels: dict[str, list[str]] | None = None) -> Index:
    """demo 1.0 and 1.1, each as an sdist (the package under ``layout`` in it, beside tests/) and
    as the wheels named by their tags (default: one pure wheel)."""
    served = Index(tmp_path / "index")
    served.root.mkdir()
    for version, files in (("1.0", UPSTREAM_FILES), ("1.1", LATER)):
        sdist = {f"{layout}{k}": v for k, v in files.items()} | {"tests/test_core.py": "def test(): pass\n"}
        served.add(make_sdist(served.root / f"demo-{version}.tar.gz", "demo", version, sdist))
        for tag in (wheels or {}).get(version, ["py3-none-any"]):
            served.add(make_wheel(served.root / f"demo-{version}-{tag}.whl", "demo", version, files))
    return served


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Index]:
    with serve(tmp_path).serve() as served:
        yield served


def run(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return as_maintainer(where, where.parent / "cache", *args)


def ok(res: subprocess.CompletedProcess[str]) -> dict:  # type: ignore[type-arg]
    return ok_data(res)  # type: ignore[no-any-return]


def fork(tmp_path: Path, index: Index, *kind: str) -> Path:
    where = tmp_path / "fork"
    where.mkdir()
    ok(run(where, "init", "--upstream", "demo==1.0", *kind, "--index", index.url, "--json"))
    return where


def patch_core(where: Path, path: str) -> None:
    """One patch on the package's core.py, at ``path`` in the repository, made as a maintainer does."""
    assert run(where, "checkout").returncode == 0
    new = run(where, "new", "shout", "--kind", "operations", "--owner", "me", "--why", "louder", "--applies-to",
              ">=1.0", "--drop-when", "never", "--subject", "demo: shout")  # fmt: skip
    assert new.returncode == 0, new.stdout + new.stderr
    module = where / "work/series" / path
    module.write_text(module.read_text().replace('"hello"', '"HELLO"'))
    refreshed = run(where, "refresh", "shout")
    assert refreshed.returncode == 0, refreshed.stdout + refreshed.stderr


def pin_file(where: Path, name: str) -> dict:  # type: ignore[type-arg]
    return tomllib.loads((where / f"upstream-pins/{name}.toml").read_text())  # type: ignore[no-any-return]


def test_an_sdist_fork_pins_the_wheel_and_builds_it(index: Index, tmp_path: Path) -> None:
    where = fork(tmp_path, index, "--sdist")
    patch_core(where, f"src/{CORE}")
    at_sdist = run(where, "build")
    assert at_sdist.returncode == 2 and "`patchtool rebase --to 1.0 --wheel`" in at_sdist.stderr, at_sdist.stderr
    added = ok(run(where, "pin", "add", "1.1", "--wheel", "--json"))
    assert (added["name"], added["filename"]) == ("demo-1.1-wheel", "demo-1.1-py3-none-any.whl")
    art = pin_file(where, "demo-1.1-wheel")["artifact"]
    assert art["prefix"] == {"from": "", "to": "src/"}  # the wheel's demo/ is the sdist's src/demo/
    checked = ok(run(where, "check", "--pin", "demo-1.1-wheel", "--json"))
    assert [r["outcome"] for r in checked["applies"]] == ["applied"], checked

    rebased = ok(run(where, "rebase", "--to", "1.1", "--wheel", "--json"))
    assert (rebased["status"], rebased["new_pin"]) == ("done", "demo-1.1-wheel"), rebased
    assert tomllib.loads((where / "patchset.toml").read_text())["pin"] == "demo-1.1-wheel"
    built = ok(run(where, "build", "--json"))
    assert built["filename"].startswith("demo-1.1+pt.") and built["way"] == "repack"
    with zipfile.ZipFile(built["wheel"]) as zf:
        assert 'greeting = "HELLO"' in zf.read(CORE).decode()


@pytest.mark.parametrize(
    ("layout", "sdist_prefix", "wheel_prefix"),
    [("src/", "demo-{version}/src/", {"from": "", "to": "src/"}), ("", "demo-{version}/", {"from": "", "to": ""})],
)
def test_the_prefix_mapping_between_the_layouts_both_ways(
    tmp_path: Path, layout: str, sdist_prefix: str, wheel_prefix: dict[str, str]
) -> None:
    with serve(tmp_path, layout=layout).serve() as index:
        where = fork(tmp_path, index, "--wheel")
        patch_core(where, CORE)
        added = ok(run(where, "pin", "add", "1.1", "--sdist", "--json"))
        assert (added["name"], added["filename"]) == ("demo-1.1-sdist", "demo-1.1.tar.gz")
        # the wheel's root is the sdist's layout directory: the repository keeps demo/core.py
        assert pin_file(where, "demo-1.1-sdist")["artifact"]["prefix"] == {"from": sdist_prefix, "to": ""}
        checked = ok(run(where, "check", "--pin", "demo-1.1-sdist", "--json"))
        assert [r["outcome"] for r in checked["applies"]] == ["applied"], checked

        back = tmp_path / "back"
        back.mkdir()
        ok(run(back, "init", "--upstream", "demo==1.0", "--sdist", "--index", index.url, "--json"))
        ok(run(back, "pin", "add", "1.1", "--wheel", "--json"))
        assert pin_file(back, "demo-1.1-wheel")["artifact"]["prefix"] == wheel_prefix


def test_a_wheel_and_an_sdist_of_one_release_are_two_pins(index: Index, tmp_path: Path) -> None:
    """The name has -wheel or -sdist where the kind is not the active pin's, or where the plain
    name is a pin of the other kind; rebase --to finds each by its kind."""
    where = fork(tmp_path, index, "--sdist")
    assert ok(run(where, "pin", "add", "1.1", "--json"))["name"] == "demo-1.1"
    assert ok(run(where, "pin", "add", "1.1", "--wheel", "--json"))["name"] == "demo-1.1-wheel"
    again = run(where, "pin", "add", "1.1", "--wheel")
    assert again.returncode == 2 and "pin demo-1.1-wheel exists already" in again.stderr, again.stderr
    wheel = ok(run(where, "rebase", "--to", "1.1", "--wheel", "--dry-run", "--json"))
    sdist = ok(run(where, "rebase", "--to", "1.1", "--dry-run", "--json"))
    assert (wheel["new_pin"], sdist["new_pin"]) == ("demo-1.1-wheel", "demo-1.1")

    other = tmp_path / "wheel-fork"
    other.mkdir()
    ok(run(other, "init", "--upstream", "demo==1.0", "--wheel", "--index", index.url, "--json"))
    assert ok(run(other, "pin", "add", "1.1", "--sdist", "--json"))["name"] == "demo-1.1-sdist"
    (other / "upstream-pins/demo-1.1-sdist.toml").rename(other / "upstream-pins/demo-1.1.toml")
    # demo-1.1 is the sdist now: the wheel of 1.1, the active pin's kind, is named apart from it
    assert ok(run(other, "pin", "add", "1.1", "--json"))["name"] == "demo-1.1-wheel"


def test_the_wheel_for_this_interpreter_or_the_file_named(tmp_path: Path) -> None:
    here = str(next(iter(sys_tags())))
    # named to sort before this interpreter's, so only the choice by tags picks this one
    elsewhere = "cp311-cp311-macosx_11_0_arm64" if "macosx" not in here else "cp311-cp311-linux_armv6l"
    with serve(tmp_path, wheels={"1.0": ["py3-none-any"], "1.1": [elsewhere, here]}).serve() as index:
        where = fork(tmp_path, index, "--sdist")
        assert ok(run(where, "pin", "add", "1.1", "--wheel", "--json"))["filename"] == f"demo-1.1-{here}.whl"
        named = f"demo-1.1-{elsewhere}.whl"
        ok(run(where, "pin", "remove", "demo-1.1-wheel", "--json"))
        assert ok(run(where, "pin", "add", "1.1", "--filename", named, "--json"))["filename"] == named
        before = snapshot(where)
        missing = run(where, "pin", "add", "1.1", "--filename", "demo-1.1-py3-none-any.whl")
        assert missing.returncode == 4, missing.stderr
        assert missing.stderr.startswith("error: demo 1.1 has no demo-1.1-py3-none-any.whl on the index"), (
            missing.stderr
        )
        both = run(where, "pin", "add", "1.1", "--sdist", "--filename", named)
        assert both.returncode == 2 and f"--filename {named} names a wheel, not an sdist" in both.stderr, both.stderr
        assert snapshot(where) == before


def test_another_file_of_the_kind_the_release_is_pinned_as_is_named_apart(tmp_path: Path) -> None:
    wheels = {"1.0": ["py3-none-any"], "1.1": ["py3-none-any", "cp311-cp311-win_amd64"]}
    with serve(tmp_path, wheels=wheels).serve() as index:
        where = fork(tmp_path, index, "--wheel")
        assert ok(run(where, "pin", "add", "1.1", "--json"))["name"] == "demo-1.1"
        named = ok(run(where, "pin", "add", "1.1", "--filename", "demo-1.1-cp311-cp311-win_amd64.whl", "--json"))
        assert named["name"] == "demo-1.1-wheel"
        assert pin_file(where, "demo-1.1")["artifact"]["filename"] == "demo-1.1-py3-none-any.whl"


def test_no_wheel_for_this_interpreter_among_several_is_refused_naming_filename(tmp_path: Path) -> None:
    wheels = {"1.0": ["py3-none-any"], "1.1": ["cp27-cp27m-win32", "cp27-cp27m-macosx_10_9_x86_64"]}
    with serve(tmp_path, wheels=wheels).serve() as index:
        where = fork(tmp_path, index, "--sdist")
        before = snapshot(where)
        res = run(where, "pin", "add", "1.1", "--wheel")
        assert res.returncode == 2, res.stderr
        assert "demo 1.1 has 2 platform wheels, none pure and none for this interpreter" in res.stderr
        assert "name one with --filename" in res.stderr and snapshot(where) == before


# -- build --from-sdist: upstream's backend on the patched sdist, confined, by explicit choice -------


def reach_index(tmp_path: Path, acts: list[tuple[str, str]]) -> Index:
    """demo 1.0 as an sdist whose own build backend (tests/test_build_sandbox.py's) first does
    ``acts`` (write, read or connect somewhere), as a stranger's backend could."""
    from test_build_sandbox import REACH_BACKEND, REACH_PROJECT

    served = Index(tmp_path / "index")
    served.root.mkdir()
    files = {"pyproject.toml": REACH_PROJECT, "reach_backend.py": REACH_BACKEND, "reach.json": json.dumps(acts)}
    served.add(make_sdist(served.root / "demo-1.0.tar.gz", "demo", "1.0", files | UPSTREAM_FILES))
    return served


def test_build_from_sdist_runs_the_backend_on_the_patched_tree_only_when_asked(tmp_path: Path) -> None:
    with reach_index(tmp_path, [("write", "{src}/build-note")]).serve() as index:
        where = fork(tmp_path, index, "--sdist")
        patch_core(where, CORE)
        before = snapshot(where)
        asked = run(where, "build")
        assert asked.returncode == 2 and "`build --from-sdist` runs upstream's build backend" in asked.stderr
        assert snapshot(where) == before  # nothing built, no backend ran
        built = ok(run(where, "build", "--from-sdist", "--no-isolation", "--json"))
        assert (built["way"], built["source"]) == ("build", "demo-1.0.tar.gz")
        assert built["filename"].startswith("demo-1.0+pt.")
        with zipfile.ZipFile(built["wheel"]) as zf:
            assert 'greeting = "HELLO"' in zf.read(CORE).decode()
        assert [(f["path"], f["wheel_path"]) for f in built["provenance"]["files"]] == [(CORE, CORE)]
        assert ok(run(where, "provenance", built["wheel"], "--json"))["problems"] == []
        isolated = ok(run(where, "build", "--from-sdist", "--json"))  # in a fresh environment: it requires nothing
        assert (isolated["version"], isolated["sha256"]) == (built["version"], built["sha256"])


def test_build_from_sdist_confines_upstreams_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from patchtool import confine

    if not confine.support().usable:
        pytest.skip(f"no usable Landlock here: {confine.support().describe()}")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    with reach_index(tmp_path, [("write", str(home / ".bashrc"))]).serve() as index:
        where = fork(tmp_path, index, "--sdist")
        res = run(where, "build", "--from-sdist", "--no-isolation")
        assert res.returncode == 1, res.stdout + res.stderr
        assert f"write {home / '.bashrc'}: [Errno 13] Permission denied" in res.stderr, res.stderr
        assert "confined (Landlock)" in res.stderr
        assert not (home / ".bashrc").exists() and not list(where.glob("dist/*.whl"))


def test_build_from_sdist_ships_no_wheel_the_backend_left_as_a_link(tmp_path: Path) -> None:
    """Found by an attack: the confined backend left a link, named as its wheel, to a wheel it could
    not read; patchtool followed it and shipped that wheel's content. Refused now (exit 1)."""
    private = tmp_path / "private"
    private.mkdir()
    secret = make_wheel(private / "demo-1.0-py3-none-any.whl", "demo", "1.0", {"demo/PRIVATE.txt": "secret\n"})
    with reach_index(tmp_path, [("wheel-link", str(secret))]).serve() as index:
        where = fork(tmp_path, index, "--sdist")
        before = snapshot(where, private)
        res = run(where, "build", "--from-sdist", "--no-isolation")
        assert res.returncode == 1, res.stdout + res.stderr
        assert (
            "error: the build backend named 'demo-1.0-py3-none-any.whl' as its wheel, which is a symbolic link; "
            "refusing it" in res.stderr
        ), res.stderr
        assert "Traceback" not in res.stderr
        assert snapshot(where, private) == before

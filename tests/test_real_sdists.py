"""sdists as PyPI has them (issue 30, section 1): a top directory whose name changes case between
releases (Jinja2 3.1.2 -> 3.1.4), a version spelled otherwise than the artifact spells it, a whole
sdist by default, and a link inside an sdist (idna 3.4). Each file is a real release from the real
index, kept in the test cache (``.cache/test-upstream``, as the SGLang tier's) and so downloaded at
most once. Skipped when the index cannot be reached."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from cli_run import as_maintainer, ok_data
from patchtool.project.pins import DEFAULT_INDEX
from patchtool.upstream.refnames import mapping_digest


@pytest.fixture(scope="module")
def reachable() -> None:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{DEFAULT_INDEX}/idna/", timeout=30) as answer:
            answer.read(1)
    except OSError as exc:
        pytest.skip(f"the package index {DEFAULT_INDEX} is unreachable from here ({exc}); these need real sdists")


def run(where: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return as_maintainer(where, cache, *args)


def ok(res: subprocess.CompletedProcess[str]) -> dict:  # type: ignore[type-arg]
    return ok_data(res)  # type: ignore[no-any-return]


def fork(tmp_path: Path, cache: Path, upstream: str) -> tuple[Path, dict]:  # type: ignore[type-arg]
    where = tmp_path / "fork"
    where.mkdir()
    return where, ok(run(where, cache, "init", "--upstream", upstream, "--sdist", "--json"))


def pin_prefix(where: Path, pin: str) -> dict[str, str]:
    return tomllib.loads((where / f"upstream-pins/{pin}.toml").read_text())["artifact"]["prefix"]  # type: ignore[no-any-return]


def test_scan_and_pin_add_find_the_top_directory_a_release_really_has(
    reachable: None, real_cache: Path, tmp_path: Path
) -> None:
    """Jinja2-3.1.2.tar.gz unpacks to Jinja2-3.1.2/, jinja2-3.1.4.tar.gz to jinja2-3.1.4/ (PEP 625)."""
    where, made = fork(tmp_path, real_cache, "jinja2==3.1.2")
    first = made["artifact"]["prefix"]["from"]
    assert first.startswith("Jinja2-{version}/"), made
    scanned = ok(run(where, real_cache, "scan", "--versions", "3.1.2,3.1.4", "--json"))
    assert scanned["versions"] == ["3.1.2", "3.1.4"]
    added = ok(run(where, real_cache, "pin", "add", "3.1.4", "--json"))
    assert (added["name"], added["filename"]) == ("jinja2-3.1.4", "jinja2-3.1.4.tar.gz")
    assert pin_prefix(where, "jinja2-3.1.4") == {"from": first.replace("Jinja2-", "jinja2-"), "to": ""}
    assert ok(run(where, real_cache, "check", "--pin", "jinja2-3.1.4", "--json"))["problems"] == []


def test_a_version_spelled_otherwise_is_pinned_as_its_artifact_spells_it(
    reachable: None, real_cache: Path, tmp_path: Path
) -> None:
    """idna-3.5.tar.gz unpacks to idna-3.5/: asked for 3.5.0 and 3.6.0 (equal by PEP 440), patchtool
    pins each release as its artifact spells it, so ``{version}`` gives the directory it has."""
    where, made = fork(tmp_path, real_cache, "idna==3.5.0")
    assert (made["pin"], made["version"], made["artifact"]["prefix"]) == (
        "idna-3.5",
        "3.5",
        {"from": "idna-{version}/", "to": "", "at_version": "idna-3.5/"},
    )
    added = ok(run(where, real_cache, "pin", "add", "3.6.0", "--json"))
    assert (added["name"], added["version"], added["filename"]) == ("idna-3.6", "3.6", "idna-3.6.tar.gz")
    assert pin_prefix(where, "idna-3.6") == {"from": "idna-{version}/", "to": ""}
    assert ok(run(where, real_cache, "check", "--pin", "idna-3.6", "--json"))["problems"] == []
    written = (where / "upstream-pins/idna-3.6.toml").read_text()
    rebased = ok(run(where, real_cache, "rebase", "--to", "3.6.0", "--json"))
    assert (rebased["status"], rebased["new_pin"]) == ("done", "idna-3.6"), rebased
    assert (where / "upstream-pins/idna-3.6.toml").read_text() == written
    assert sorted(p.name for p in (where / "upstream-pins").iterdir()) == ["idna-3.5.toml", "idna-3.6.toml"]


def plain_diff(tree: Path, path: str, named: str, old: str, new: str) -> str:
    """``diff -u`` of ``path`` in ``tree`` with ``old`` replaced by ``new``, naming it ``named``."""
    import difflib

    before = (tree / path).read_text().splitlines(keepends=True)
    after = "".join(before).replace(old, new, 1).splitlines(keepends=True)
    assert before != after
    return "".join(difflib.unified_diff(before, after, f"a/{named}", f"b/{named}"))


def test_init_takes_the_whole_sdist_and_a_path_mismatch_is_hinted_as_one(
    reachable: None, real_cache: Path, tmp_path: Path
) -> None:
    """A downstream series patches tests/ and docs/ too (most of Debian's do): Jinja2's sdist keeps
    its code in src/, and the repository holds the whole sdist, tests/ included."""
    where, made = fork(tmp_path, real_cache, "jinja2==3.1.2")
    assert made["artifact"]["prefix"] == {"from": "Jinja2-{version}/", "to": "", "at_version": "Jinja2-3.1.2/"}
    tree = tmp_path / "tree"
    assert run(where, real_cache, "apply", "--series", "none", "--into", str(tree)).returncode == 0
    tests_patch = tmp_path / "tests.patch"
    tests_patch.write_text(plain_diff(tree, "tests/test_api.py", "tests/test_api.py", "import", "import  "))
    imported = ok(run(where, real_cache, "import", str(tests_patch), "--json"))
    assert [a["id"] for a in imported["added"]] == ["tests"]

    elsewhere = tmp_path / "elsewhere.patch"  # made against a tree without src/
    elsewhere.write_text(plain_diff(tree, "src/jinja2/utils.py", "jinja2/utils.py", "import", "import  "))
    res = run(where, real_cache, "import", str(elsewhere))
    assert res.returncode == 3, res.stdout + res.stderr
    assert "jinja2/utils.py the patch: file missing" in res.stdout
    assert "(the tree has src/jinja2/utils.py)" in res.stdout and "-pN" in res.stdout and "--prefix" in res.stdout
    assert "--fuzz" not in res.stdout


def test_init_again_with_another_prefix_is_another_import_of_the_same_file(
    reachable: None, real_cache: Path, tmp_path: Path
) -> None:
    """The prefix mapping is part of the cache's tag: the import of one file under two prefixes
    is two imports, and neither project's check meets the other's."""
    first = tmp_path / "whole"
    first.mkdir()
    ok(run(first, real_cache, "init", "--upstream", "idna==3.5", "--sdist", "--json"))
    second = tmp_path / "package"
    second.mkdir()
    made = ok(
        run(second, real_cache, "init", "--upstream", "idna==3.5", "--prefix", "idna-{version}/idna/:idna/", "--json")
    )
    assert made["check"]["ok"] and made["artifact"]["prefix"]["to"] == "idna/"
    for where in (first, second, first):
        assert ok(run(where, real_cache, "check", "--json"))["problems"] == []
    tags = subprocess.run(
        ["git", f"--git-dir={real_cache / 'upstream.git'}", "tag", "--list", "idna-3.5-*"],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    ).stdout.split()
    sha12 = made["artifact"]["sha256"][:12]
    for mapping in ("idna-3.5/ -> .", "idna-3.5/idna/ -> idna/"):
        assert f"idna-3.5-{sha12}-{mapping_digest(mapping)}" in tags, tags


def test_a_link_inside_a_real_sdist_is_kept_as_a_link(reachable: None, real_cache: Path, tmp_path: Path) -> None:
    """idna-3.4.tar.gz holds idna-3.4/tools/intranges.py, a link to ../idna/intranges.py."""
    where, made = fork(tmp_path, real_cache, "idna==3.4")
    assert made["check"]["ok"], made
    tree = tmp_path / "tree"
    assert run(where, real_cache, "apply", "--series", "none", "--into", str(tree)).returncode == 0
    assert os.readlink(tree / "tools/intranges.py") == "../idna/intranges.py"
    assert (tree / "tools/intranges.py").read_bytes() == (tree / "idna/intranges.py").read_bytes()
    scanned = ok(run(where, real_cache, "scan", "--versions", "3.4,3.5", "--json"))
    assert scanned["versions"] == ["3.4", "3.5"]

"""Issue 19, item 5, and more of its class: hostile but plausible inputs to reading commands end
in a message with its documented exit code, never a traceback or exit 70, and change nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_run import in_process
from conftest import UPSTREAM_FILES, Demo
from helpers import make_wheel, snapshot


def run_into(
    demo: Demo, *args: str, stdout: str = os.devnull, stderr: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``patchtool ARGS`` in the demo with its stdout (and stderr, if given) opened on a file."""
    full_env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(demo.cache), **(env or {})}
    with open(stdout, "w") as out, open(stderr or os.devnull, "w") as err:
        return subprocess.run(
            [sys.executable, "-m", "patchtool", *args],
            cwd=demo.root,
            stdout=out,
            stderr=err if stderr else subprocess.PIPE,
            text=True,
            env=full_env,
            check=False,
        )


@pytest.mark.parametrize("args", [("--version",), ("--help",), ("--json", "check"), ("check",), ("status",)])
def test_output_to_a_full_disk_is_a_message_on_stderr(one_patch: Demo, args: tuple[str, ...]) -> None:
    before = snapshot(one_patch.root)
    res = run_into(one_patch, *args, stdout="/dev/full")
    assert res.returncode == 2
    assert res.stderr == (
        "error: cannot write to standard output: No space left on device "
        "(hint: check the disk or the file the output is redirected to)\n"
    )
    assert snapshot(one_patch.root) == before


def test_errors_to_a_full_disk_still_exit_with_their_code(one_patch: Demo) -> None:
    res = run_into(one_patch, "--version", stdout="/dev/full", stderr="/dev/full")
    assert res.returncode == 2
    res = run_into(one_patch, "nonsense-command", stderr="/dev/full")
    assert res.returncode == 2


@pytest.mark.parametrize("spec", [",,,", " , ", ","])
def test_scan_versions_that_name_no_version_is_a_usage_error(one_patch: Demo, spec: str) -> None:
    before = snapshot(one_patch.root)
    res = one_patch.run("scan", "--versions", spec)
    assert res.returncode == 2
    assert res.stderr == (
        f"error: --versions {spec!r} names no version (hint: e.g. --versions 0.5.20..0.5.23 or 0.5.20,0.5.22)\n"
    )
    assert snapshot(one_patch.root) == before


@pytest.mark.parametrize(
    ("header", "why"),
    [
        ("</script> <e@x>", "its name holds '<', '>'"),
        ('"Ann>B" <e@x>', "its name holds '>'"),  # quoted, as RFC 5322 allows
        ("=?utf-8?q?=3Cb=3E?= <e@x>", "its name holds '<', '>'"),  # an encoded word that decodes to <b>
    ],
)
def test_an_author_fast_import_refuses_is_a_problem_check_names(one_patch: Demo, header: str, why: str) -> None:
    """It passed `check` and failed `rebase --dry-run` inside git fast-import, exit 70."""
    path = one_patch.root / "patches/0001-greet.patch"
    text = path.read_text()
    old = next(line for line in text.split("\n") if line.startswith("From: "))
    path.write_text(text.replace(old, f"From: {header}", 1))
    before = snapshot(one_patch.root)
    for args in (("check",), ("rebase", "--to", "1.0", "--dry-run")):
        res = one_patch.run(*args)
        out = res.stdout + res.stderr
        assert res.returncode == 1, out
        assert "Traceback" not in out
        assert (
            f"patches/0001-greet.patch:2: patch greet: the 'From:' header {header!r} is not an author git can record: "
            f"{why} (hint: write it as 'Name <email>'"
        ) in out, out
    assert snapshot(one_patch.root) == before


@pytest.mark.parametrize("streams", ["utf-8:surrogateescape", "utf-8:strict"])  # a C.UTF-8 locale; en_US.UTF-8
def test_a_worktree_at_a_path_that_is_not_utf8_breaks_no_command(one_patch: Demo, tmp_path: Path, streams: str) -> None:
    """`git worktree list` names it in bytes; read strictly as UTF-8, every `apply` and `cache` of
    every project on the cache was exit 70. Its name is written as its bytes, as git writes it."""
    outside = os.fsdecode(bytes(tmp_path) + b"/checkout-\xff")
    env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(one_patch.cache), "PYTHONIOENCODING": streams}

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return in_process(args, cwd=one_patch.root, env=env, text=False)

    assert run("checkout", "--path", outside).returncode == 0
    before = snapshot(one_patch.root)
    res = run("cache")
    assert res.returncode == 0, res.stderr
    assert b"  checkout: " + os.fsencode(outside) + b"\n" in res.stdout
    assert snapshot(one_patch.root) == before
    res = run("--json", "cache")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["data"]["checkouts"] == [outside]
    res = run("apply")
    assert res.returncode == 0, res.stderr


def _user_env(demo: Demo, home: Path, **extra: str) -> dict[str, str]:
    """The environment of a user whose git configuration is ``home/.gitconfig`` (not the tests' isolation)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM")}
    return {**env, "HOME": str(home), "PATCHTOOL_CACHE_DIR": str(demo.cache), **extra}


def test_a_broken_gitconfig_of_the_user_breaks_no_command(one_patch: Demo, tmp_path: Path) -> None:
    """GitPython runs `git version` on import, with the user's configuration: an unterminated
    section there was exit 70 for every command, with a hint to install git."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[core\n")
    env = _user_env(one_patch, home)
    before = snapshot(one_patch.root)
    for args in (("status",), ("check",)):
        res = subprocess.run(
            [sys.executable, "-m", "patchtool", *args],
            cwd=one_patch.root,
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert res.returncode == 0, res.stderr
    assert snapshot(one_patch.root) == before
    assert (home / ".gitconfig").read_text() == "[core\n"


def test_git_that_does_not_run_is_said_in_its_own_words(one_patch: Demo, tmp_path: Path) -> None:
    """Not "install git" when git is there and fails: what git said."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").write_text("#!/bin/sh\necho 'fatal: cannot exec git-core: broken install' >&2\nexit 1\n")
    (bin_dir / "git").chmod(0o755)
    env = _user_env(one_patch, tmp_path, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    before = snapshot(one_patch.root)
    res = subprocess.run(
        [sys.executable, "-m", "patchtool", "status"],
        cwd=one_patch.root,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert res.returncode == 70
    assert res.stderr == (
        "error: git does not run: `git version` failed (1): fatal: cannot exec git-core: broken "
        "install (hint: run `git version` to see it fail; fix or reinstall git)\n"
    )
    assert snapshot(one_patch.root) == before


def test_no_git_on_path_says_to_install_it(one_patch: Demo, tmp_path: Path) -> None:
    env = _user_env(one_patch, tmp_path, PATH=str(tmp_path / "nothing"))
    res = subprocess.run(
        [sys.executable, "-m", "patchtool", "status"],
        cwd=one_patch.root,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert res.returncode == 70
    assert res.stderr == "error: git is not installed or not on PATH (hint: install git and put it on PATH)\n"


NO_SHA256 = (
    "error: the index gives no sha256 for demo-1.1-py3-none-any.whl; refusing an unverifiable file "
    "(hint: patchtool takes a release file only by its sha256: use an index that lists it, "
    "as PEP 691 `hashes` or a PEP 503 `#sha256=` link, or pin the git tag with `pin add --git URL --tag T`)\n"
)


@pytest.mark.parametrize(
    ("html", "hashes"),
    [(False, {}), (False, None), (False, ["sha256"]), (True, {})],
    ids=["none-listed", "null", "a-list", "pep503-link-without-hash"],
)
def test_an_index_that_lists_no_sha256_is_an_upstream_error(
    one_patch: Demo, tmp_path: Path, html: bool, hashes: object
) -> None:
    """A page whose `hashes` was null or not a table lost its files: `rebase --to latest` and `scan
    --newest` were exit 2 (usage) saying the index had no release, `pin add` said it had no file."""
    files = {**UPSTREAM_FILES, "demo/__init__.py": '__version__ = "1.1"\n'}
    one_patch.index.add(make_wheel(tmp_path / "demo-1.1-py3-none-any.whl", "demo", "1.1", files))
    one_patch.index.hashes, one_patch.index.html = hashes, html
    before = snapshot(one_patch.root)
    for args in (("pin", "add", "1.1"), ("rebase", "--to", "latest", "--dry-run")):
        res = one_patch.run(*args)
        assert (res.returncode, res.stderr) == (4, NO_SHA256), args
    # scan still prints its matrix, the release it could not have marked, and why (issue 30)
    res = one_patch.run("scan", "--newest", "1")
    assert res.returncode == 4
    why = NO_SHA256.removeprefix("error: ").split(" (hint:")[0]
    assert "greet   not scanned" in res.stderr and why in " ".join(res.stderr.split())
    assert snapshot(one_patch.root) == before


def test_an_index_without_a_release_the_command_needs_is_an_upstream_error(one_patch: Demo, tmp_path: Path) -> None:
    """What the index lists is the upstream's answer, not the command line's fault (was exit 2)."""
    other = make_wheel(tmp_path / "demo-1.1-cp311-cp311-linux_x86_64.whl", "demo", "1.1", UPSTREAM_FILES)
    one_patch.index.files = {other.name: other}
    before = snapshot(one_patch.root)
    for args in (("rebase", "--to", "latest", "--dry-run"), ("scan", "--newest", "2")):
        res = one_patch.run(*args)
        assert (res.returncode, res.stderr) == (
            4,
            "error: no release of demo with the pin's wheel tags on the index "
            "(hint: the index lists no final release with the pin's wheel "
            "tags; check the pin's 'index' and 'distribution')\n",
        ), args
    one_patch.index.files = {one_patch.wheel.name: one_patch.wheel}
    res = one_patch.run("scan", "--versions", "2.0..3.0")
    assert (res.returncode, res.stderr) == (
        4,
        "error: no release between 2.0 and 3.0 on the index (hint: the newest the index lists: 1.0)\n",
    )
    assert snapshot(one_patch.root) == before


@pytest.mark.parametrize("size", [True, 2**64, -5, "12"])
def test_a_size_the_index_lists_that_is_no_size_is_not_pinned(one_patch: Demo, tmp_path: Path, size: object) -> None:
    """`pin add` wrote `size = true` (or past TOML's integers) into the pin, which then failed to load."""
    files = {**UPSTREAM_FILES, "demo/__init__.py": '__version__ = "1.1"\n'}
    wheel = make_wheel(tmp_path / "demo-1.1-py3-none-any.whl", "demo", "1.1", files)
    one_patch.index.add(wheel)
    one_patch.index.listed = {"size": size}
    res = one_patch.run("pin", "add", "1.1")
    assert res.returncode == 0, res.stderr
    assert "size" not in (one_patch.root / "upstream-pins/demo-1.1.toml").read_text()
    res = one_patch.run("pin", "list")
    assert res.returncode == 0, res.stderr


HUGE = "1" + "0" * 5000  # a release number past int()'s 4300 digits: packaging raises ValueError, not InvalidVersion


def test_a_version_past_ints_digits_in_a_file_is_a_problem(one_patch: Demo) -> None:
    manifest = one_patch.root / "patchset.toml"
    manifest.write_text(manifest.read_text().replace('applies_to = ">=1.0"', f'applies_to = ">={HUGE}"'))
    before = snapshot(one_patch.root)
    for args in (("check",), ("pin", "list"), ("rebase", "--to", "1.0", "--dry-run")):
        res = one_patch.run(*args)
        assert res.returncode == 1, (args, res.stderr)
        assert f"applies_to: '>={HUGE}' is not a PEP 440 version specifier" in res.stdout + res.stderr
    assert snapshot(one_patch.root) == before


def test_a_version_past_ints_digits_in_a_pin_is_a_problem(one_patch: Demo) -> None:
    pin = one_patch.root / "upstream-pins/demo-1.0.toml"
    pin.write_text(pin.read_text().replace('version = "1.0"\n', f'version = "{HUGE}"\n', 1))
    before = snapshot(one_patch.root)
    res = one_patch.run("check")
    assert res.returncode == 1, res.stderr
    assert f"version: '{HUGE}' is not a PEP 440 version" in res.stdout
    assert snapshot(one_patch.root) == before


@pytest.mark.parametrize(
    "args",
    [
        ("pin", "add", HUGE),
        ("pin", "add", "not-a-version", "--git", "https://example.org/x.git", "--tag", "v1.1"),
        ("scan", "--versions", f"1.0,{HUGE}"),
        ("scan", "--versions", f"1.0..{HUGE}"),
        ("rebase", "--to", HUGE, "--dry-run"),
    ],
)
def test_a_version_past_ints_digits_on_the_command_line_is_a_usage_error(
    one_patch: Demo, args: tuple[str, ...]
) -> None:
    before = snapshot(one_patch.root)
    res = one_patch.run(*args)
    assert res.returncode == 2, res.stderr
    assert (
        "is not a version" in res.stderr
        or "is neither a version" in res.stderr
        or f"--versions: Invalid version: '{HUGE[:40]}'..." in res.stderr
    ), res.stderr
    assert snapshot(one_patch.root) == before


# -- values no parser should be asked to hold (found by an attack that had not read these tests) --------

HUGE = "1" + "0" * 5000  # past int()'s 4300 digits: tomllib raises a bare ValueError
DEEP = "[" * 5000 + "]" * 5000  # past the parser's recursion limit: RecursionError


@pytest.mark.parametrize("where", ["schema", "nested", "pin-size"])
def test_a_toml_value_past_the_parsers_limits_is_a_problem(one_patch: Demo, where: str) -> None:
    manifest, pin = one_patch.root / "patchset.toml", one_patch.root / "upstream-pins" / "demo-1.0.toml"
    if where == "schema":
        manifest.write_text(manifest.read_text().replace("schema = 1", f"schema = {HUGE}", 1))
        file = "patchset.toml"
    elif where == "nested":
        manifest.write_text(manifest.read_text().replace('pin = "demo-1.0"', f'pin = "demo-1.0"\nx = {DEEP}', 1))
        file = "patchset.toml"
    else:
        pin.write_text(pin.read_text().replace("[artifact]\n", f"[artifact]\nsize = {HUGE}\n", 1))
        file = "upstream-pins/demo-1.0.toml"
    before = snapshot(one_patch.root)
    for command in ("check", "status"):
        res = one_patch.run("--json", command)
        assert res.returncode == 1, res.stdout + res.stderr
        errors = json.loads(res.stdout)["errors"]
        assert errors[0]["file"] == file and errors[0]["message"].startswith("not valid TOML: "), errors
        assert "Traceback" not in res.stderr
    assert snapshot(one_patch.root) == before


@pytest.mark.parametrize("state", [".patchtool/journal.json", ".patchtool/rebase/state.json"])
def test_state_json_nested_past_the_parsers_limit_is_a_message(one_patch: Demo, state: str) -> None:
    path = one_patch.root / state
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[" * 100000 + "]" * 100000)
    before = snapshot(one_patch.root)
    res = one_patch.run("--json", "recover" if "journal" in state else "status")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "nested too deeply to read" in json.loads(res.stdout)["errors"][0]["message"]
    assert snapshot(one_patch.root) == before

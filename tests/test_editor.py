"""The user's $EDITOR (`edit`, `retread add --edit`) runs outside the confinement, and what is typed
in it is never lost (issue 28, section 2): vim inside it printed `E138: Can't write viminfo file`
and waited for Enter on every edit, and a validation error threw the buffer away.

An invalid text opens the editor again at a terminal (`edit again? [Y/n]`, the problems on top as
comments); without one, it stays in a file in the cache that the error names, for `--from-file`.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Demo
from helpers import HANG_GUARD_S, read_terminal, snapshot
from patchtool import confine
from test_retread_cli import with_registry
from test_show_edit import editor

SUPPORT = confine.support()
needs_landlock = pytest.mark.skipif(not SUPPORT.usable, reason=f"no usable Landlock here: {SUPPORT.describe()}")


def kept_files(demo: Demo) -> list[Path]:
    edits = demo.cache / "edits"
    return sorted(p for p in edits.iterdir() if p.suffix == ".toml") if edits.is_dir() else []


@needs_landlock
def test_the_editor_runs_outside_the_confinement(one_patch: Demo, tmp_path: Path) -> None:
    """An editor writes its own files where it always does (vim's ~/.viminfo): the confinement
    refused that write, since the editor was one of the command's children."""
    home = tmp_path / "home"
    home.mkdir()
    env = editor(
        tmp_path,
        "(Path.home() / '.viminfo').write_text('# viminfo\\n')\n"
        "path.write_text(text.replace('owner = \"team\"', 'owner = \"infra\"'))\n",
    )
    res = one_patch.spawn("edit", "greet", env={**env, "HOME": str(home)})
    assert (res.returncode, res.stdout, res.stderr) == (0, "greet: changed owner in patchset.toml\n", "")
    assert (home / ".viminfo").read_text() == "# viminfo\n"
    assert 'owner = "infra"' in (one_patch.root / "patchset.toml").read_text()
    assert kept_files(one_patch) == []


@needs_landlock
def test_an_invalid_edit_without_a_terminal_is_kept_in_a_file_the_error_names(one_patch: Demo, tmp_path: Path) -> None:
    before = snapshot(one_patch.root)
    env = editor(tmp_path, "path.write_text(text.replace('kind = \"correctness\"', 'kind = \"speed\"'))\n")
    res = one_patch.spawn("edit", "greet", env=env)
    (kept,) = kept_files(one_patch)
    assert res.returncode == 2 and res.stdout == "", res.stderr
    assert res.stderr.endswith(
        f"error: what you typed is kept in {kept} (hint: fix it there, then "
        f"`patchtool edit greet --from-file {kept}`)\n"
    )
    assert "unknown value 'speed'" in res.stderr
    assert 'kind = "speed"' in kept.read_text() and snapshot(one_patch.root) == before
    kept.write_text(kept.read_text().replace('kind = "speed"', 'kind = "performance"'))
    res = one_patch.spawn("edit", "greet", "--from-file", str(kept))
    assert (res.returncode, res.stdout, res.stderr) == (0, "greet: changed kind in patchset.toml\n", "")


def at_a_terminal(demo: Demo, args: list[str], env: dict[str, str], answer: bytes) -> tuple[int, str]:
    """``patchtool ARGS`` with a pseudo-terminal on stdin, stdout and stderr; ``answer`` typed once
    it asks ``edit again?``. Returns its exit status and what its terminal showed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "patchtool", *args],
        cwd=demo.root,
        env=demo.environment(env),
        stdin=slave,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    shown = read_terminal(master, prompt=b"edit again? [Y/n]", answer=answer)
    os.close(master)
    return proc.wait(timeout=HANG_GUARD_S), shown.decode("utf-8", "replace").replace("\r\n", "\n")


# the first save is not valid; the second, shown the problem on top, fixes it
TWICE = """\
runs = Path({runs!r})
seen = runs.read_text() if runs.exists() else ""
runs.write_text(seen + "--- run\\n" + text)
if not seen:
    path.write_text(text.replace('kind = "correctness"', 'kind = "speed"'))
else:
    path.write_text(text.replace('kind = "speed"', 'kind = "{second}"'))
"""


def test_an_invalid_edit_at_a_terminal_opens_the_editor_again(one_patch: Demo, tmp_path: Path) -> None:
    runs = tmp_path / "runs.txt"
    env = editor(tmp_path, TWICE.format(runs=str(runs), second="performance"))
    code, shown = at_a_terminal(one_patch, ["edit", "greet"], env, b"y\n")
    assert code == 0, shown
    assert "unknown value 'speed'" in shown and "edit again? [Y/n]" in shown
    assert shown.endswith("greet: changed kind in patchset.toml\n"), shown
    first, second = runs.read_text().split("--- run\n")[1:]
    assert first.startswith("# patchtool edit greet: this patch's entry")
    assert second.startswith("# patchtool: what you saved was not taken; fix it below, save and quit")
    assert "#   error: patchset.toml: patch greet: patch[0].kind: unknown value 'speed'" in second
    assert 'kind = "speed"' in second  # what was typed, not the entry as it was
    assert 'kind = "performance"' in (one_patch.root / "patchset.toml").read_text()
    assert "patchtool: what you saved" not in (one_patch.root / "patchset.toml").read_text()
    assert kept_files(one_patch) == []


def test_no_at_the_terminal_keeps_the_text(one_patch: Demo, tmp_path: Path) -> None:
    before = snapshot(one_patch.root)
    runs = tmp_path / "runs.txt"
    env = editor(tmp_path, TWICE.format(runs=str(runs), second="performance"))
    code, shown = at_a_terminal(one_patch, ["edit", "greet"], env, b"n\n")
    (kept,) = kept_files(one_patch)
    assert code == 2 and f"what you typed is kept in {kept}" in shown.replace("\n", ""), shown
    assert runs.read_text().count("--- run\n") == 1 and 'kind = "speed"' in kept.read_text()
    assert snapshot(one_patch.root) == before


def test_retread_add_edit_keeps_an_invalid_entry(one_patch: Demo, tmp_path: Path) -> None:
    with_registry(one_patch)
    before = snapshot(one_patch.root)
    fill = (
        "path.write_text(text.replace('id = \"\"', 'id = \"mscclpp\"').replace('verdict = \"rejected\"', "
        "'verdict = \"maybe\"'))\n"
    )
    res = one_patch.run("retread", "add", "--edit", env=editor(tmp_path, fill))
    (kept,) = kept_files(one_patch)
    assert res.returncode == 1 and f"error: what you typed is kept in {kept}" in res.stderr, res.stderr
    assert f"`patchtool retread add --from-file {kept}`" in res.stderr
    assert 'id = "mscclpp"' in kept.read_text() and snapshot(one_patch.root) == before
    # an editor left empty (nothing but comments) is giving up: nothing is kept
    res = one_patch.run("retread", "add", "--edit", env=editor(tmp_path, "path.write_text('# nothing\\n')\n"))
    assert (res.returncode, res.stderr) == (2, "error: the entry is empty; nothing was added\n")
    assert kept_files(one_patch) == [kept]

"""The Landlock backstop: a command's process, and every child it starts, writes only beneath the
repository (writing commands), the cache, its private temporary directory and the outputs its
command line names, whatever the code does.

The boundary checks are bypassed on purpose: a test-only command, declared and run through the
command line exactly as patchtool's own commands are (``ESCAPE`` below, in a process of its own, since
confinement cannot be undone), writes with a plain ``open()`` or a shell child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import Demo
from patchtool import confine

SUPPORT = confine.support()
needs_landlock = pytest.mark.skipif(not SUPPORT.usable, reason=f"no usable Landlock here: {SUPPORT.describe()}")

ESCAPE = textwrap.dedent('''\
    import errno
    import subprocess
    import sys
    import tempfile
    from pathlib import Path
    from typing import Annotated

    import typer

    from patchtool.cli import app, usage
    from patchtool.cli.confinement import write_report
    from patchtool.cli.context import Invocation, invocation, repository
    from patchtool.cli.exits import Shown, command

    def body(target: str, via: str) -> Shown:
        """Write TARGET, checked by nothing in patchtool: plain open(), or a child that inherits the process."""
        if via == "child":
            done = subprocess.run(["sh", "-c", 'echo escaped > "$1"', "sh", target], capture_output=True, text=True)
            return Shown(data={"rc": done.returncode, "stderr": done.stderr}, text=lambda style: done.stderr)
        Path(target).write_text("escaped")
        return Shown(data={"wrote": target}, text=lambda style: f"wrote {target}")

    @command(writes=True, outputs=("out",), dry_run="dry_run")
    def write(ctx: typer.Context, target: Annotated[str, typer.Argument()], via: Annotated[str, typer.Option()] = "open",
              out: Annotated[Path | None, typer.Option()] = None,
              dry_run: Annotated[bool, typer.Option("--dry-run")] = False) -> Shown:
        repository(ctx)
        return body(target.replace("{tmp}", tempfile.gettempdir()), via)

    @command(outputs=("out",))
    def read(ctx: typer.Context, target: Annotated[str, typer.Argument()], via: Annotated[str, typer.Option()] = "open",
             out: Annotated[Path | None, typer.Option()] = None) -> Shown:
        repository(ctx)
        return body(target.replace("{tmp}", tempfile.gettempdir()), via)

    @command(reports=("out",))
    def report(ctx: typer.Context, beside: Annotated[str, typer.Argument()], out: Annotated[Path, typer.Option()]) -> Shown:
        """Write the report file OUT as a command does, then BESIDE with a plain open()."""
        repository(ctx)
        write_report(invocation(ctx), out, "the report\\n", repository=None)
        try:
            Path(beside).write_text("escaped")
            wrote = "wrote"
        except OSError as exc:
            wrote = errno.errorcode[exc.errno]
        where = [str(tree) for tree in invocation(ctx).confined_to]
        return Shown(data={"beside": wrote, "confined_to": where}, text=lambda style: wrote)

    root = app.app()  # patchtool's own command line, with these commands beside its own
    for fn in (write, read, report):
        root.command(cls=usage.Command)(fn)
    own = Invocation(confine=True)  # as patchtool's own command line is (cli.app.main)
    sys.exit(typer.main.get_command(root).main(args=sys.argv[1:], prog_name="escape", standalone_mode=False, obj=own))
    ''')


def escape(demo: Demo, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    script = demo.root.parent / "escape.py"
    script.write_text(ESCAPE)
    return subprocess.run(
        [sys.executable, str(script), *args, "--root", str(demo.root)],
        cwd=demo.root,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATCHTOOL_CACHE_DIR": str(demo.cache), **(env or {})},
    )


def tree(top: Path) -> dict[str, bytes | str]:
    """What is on disk beneath ``top``: every file's bytes, every link's target, every directory."""
    found: dict[str, bytes | str] = {}
    for path in sorted(top.rglob("*")):
        name = str(path.relative_to(top))
        found[name] = os.readlink(path) if path.is_symlink() else path.read_bytes() if path.is_file() else "dir"
    return found


@pytest.fixture
def decoy(tmp_path: Path) -> Path:
    """A directory outside the repository and the cache, holding a file to overwrite."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep me\n")
    return outside


@needs_landlock
@pytest.mark.parametrize("name", ["keep.txt", "new.txt"])
def test_a_write_outside_that_bypasses_every_check_is_refused(one_patch: Demo, decoy: Path, name: str) -> None:
    before = tree(decoy), tree(one_patch.root)
    target = decoy / name
    res = escape(one_patch, "write", str(target))
    assert res.returncode == 2, res.stderr
    assert f"refused to write {target}: `patchtool write` may write only beneath " in res.stderr
    assert "confines every command with Landlock" in res.stderr and "PATCHTOOL_LANDLOCK=0" in res.stderr
    assert "Traceback" not in res.stderr
    assert (tree(decoy), tree(one_patch.root)) == before
    # it is the confinement that refused: without it the same write goes through
    res = escape(one_patch, "write", str(target), env={"PATCHTOOL_LANDLOCK": "0"})
    assert res.returncode == 0 and target.read_text() == "escaped", res.stderr


@needs_landlock
def test_a_child_inherits_the_confinement(one_patch: Demo, decoy: Path) -> None:
    before = tree(decoy)
    res = escape(one_patch, "write", str(decoy / "keep.txt"), "--via", "child")
    assert res.returncode == 0 and "Permission denied" in res.stdout, (res.stdout, res.stderr)
    assert tree(decoy) == before


@needs_landlock
def test_a_writing_command_writes_its_repository_cache_temporary_directory_and_outputs(
    one_patch: Demo, tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    for target in (
        one_patch.root / "new.txt",
        one_patch.cache / "new.txt",
        Path("{tmp}") / "new.txt",
        reports / "report.html",
    ):
        res = escape(one_patch, "write", str(target), "--out", str(reports / "report.html"))
        assert res.returncode == 0, (target, res.stderr)
    assert (one_patch.root / "new.txt").read_text() == (reports / "report.html").read_text() == "escaped"
    res = escape(one_patch, "write", str(reports / "report.html"))
    assert res.returncode == 2 and "refused to write" in res.stderr  # that output was not named this time


@needs_landlock
@pytest.mark.parametrize("command", [("read",), ("write", "--dry-run")])
def test_a_reading_command_may_not_write_the_repository(one_patch: Demo, command: tuple[str, ...]) -> None:
    before = tree(one_patch.root)
    res = escape(one_patch, *command, str(one_patch.root / "patchset.toml"))
    assert res.returncode == 2 and f"refused to write {one_patch.root / 'patchset.toml'}" in res.stderr, res.stderr
    assert tree(one_patch.root) == before
    assert escape(one_patch, *command, str(one_patch.cache / "new.txt")).returncode == 0


@needs_landlock
def test_the_temporary_directory_is_private_and_gone_after_the_command(one_patch: Demo, tmp_path: Path) -> None:
    shared = tmp_path / "tmp"
    shared.mkdir()
    res = escape(one_patch, "write", "{tmp}/scratch.txt", env={"TMPDIR": str(shared)})
    assert res.returncode == 0, res.stderr
    private = Path(res.stdout.split()[-1]).parent
    assert private.parent == one_patch.cache / "tmp" and not private.exists()
    assert list(shared.iterdir()) == []
    res = escape(one_patch, "write", str(shared / "scratch.txt"), env={"TMPDIR": str(shared)})
    assert res.returncode == 2 and "refused to write" in res.stderr  # the shared one is closed to it
    assert list(shared.iterdir()) == []


@needs_landlock
def test_real_commands_write_the_outputs_they_are_given_outside_the_repository(one_patch: Demo, decoy: Path) -> None:
    before = tree(decoy)
    res = one_patch.spawn("apply", "--into", str(decoy / "tree"))
    assert res.returncode == 0, res.stderr
    assert (decoy / "tree" / "python" / "demo" / "core.py").read_text().count('"hi"') == 1
    res = one_patch.spawn("rebase", "--to", "1.0", "--dry-run", "--report", str(decoy / "report.md"))
    assert res.returncode == 0 and (decoy / "report.md").is_file(), res.stderr
    assert {k: v for k, v in tree(decoy).items() if k in before} == before


def test_version_says_whether_commands_are_confined(one_patch: Demo) -> None:
    res = one_patch.spawn("--version")
    expected = SUPPORT.describe() if SUPPORT.usable else f"none, Landlock {SUPPORT.describe()}"
    assert res.returncode == 0 and res.stdout.splitlines()[1] == f"confinement: {expected}", res.stdout
    res = one_patch.spawn("--version", env={"PATCHTOOL_LANDLOCK": "0"})
    assert res.returncode == 0 and res.stdout.splitlines()[1] == "confinement: off (PATCHTOOL_LANDLOCK=0)"


def test_each_kernel_version_restricts_only_writing() -> None:
    """Reading and executing are never handled, so git and Python run as before on any ABI."""
    read_and_execute = 1 << 0 | 1 << 2 | 1 << 3
    for abi in range(1, 8):
        assert not confine.handled(abi) & read_and_execute
    assert confine.Access.REFER not in confine.handled(1) and confine.Access.REFER in confine.handled(2)
    assert confine.Access.TRUNCATE in confine.handled(3) and confine.Access.IOCTL_DEV not in confine.handled(4)
    assert confine.handled(7) == confine.handled(5)


@needs_landlock
def test_a_device_named_as_an_output_grants_nothing(one_patch: Demo) -> None:
    """`scan --html /dev/full` replaced the device node when run as root: its directory is never
    opened to the command, so the temporary beside it, and the rename over it, are refused."""
    before = os.stat("/dev/full")
    res = one_patch.spawn("scan", "--versions", "1.0", "--html", "/dev/full")
    assert res.returncode == 2 and "full" in res.stderr and "Traceback" not in res.stderr, res.stderr
    after = os.stat("/dev/full")
    assert (after.st_ino, after.st_rdev, after.st_mode) == (before.st_ino, before.st_rdev, before.st_mode)
    assert not [p for p in os.listdir("/dev") if p.startswith(".full.")]


# -- outputs: a report file grants nothing, a tree its own directory alone ---------------------------


@needs_landlock
def test_a_report_file_is_written_and_nothing_beside_it(one_patch: Demo, tmp_path: Path) -> None:
    """`--html ~/x.html` granted all of the home directory to the command and its children: now the
    report is written from outside the confinement, and a write beside it is refused."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("mine\n")
    before = tree(home)
    res = escape(one_patch, "report", str(home / "planted.sh"), "--out", str(home / "x.html"), "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)["data"]
    assert data["beside"] == "EACCES" and not any(
        Path(t) == home or home.is_relative_to(t) for t in data["confined_to"]
    )
    assert tree(home) == {**before, "x.html": b"the report\n"}
    res = escape(one_patch, "report", str(home / ".bashrc"), "--out", str(home / "x.html"), "--json")
    assert json.loads(res.stdout)["data"]["beside"] == "EACCES" and (home / ".bashrc").read_text() == "mine\n"
    # the real commands: scan --html and rebase --report write theirs so
    res = one_patch.spawn("scan", "--versions", "1.0", "--html", str(home / "scan.html"), env={"HOME": str(home)})
    assert res.returncode == 0 and "<html" in (home / "scan.html").read_text(), res.stderr
    res = one_patch.spawn("rebase", "--to", "1.0", "--dry-run", "--report", str(home / "r.md"), env={"HOME": str(home)})
    assert res.returncode == 0 and (home / "r.md").is_file(), res.stderr


@pytest.mark.parametrize("how", ["spawned", "in process"])
@pytest.mark.parametrize(
    "args",
    [("scan", "--versions", "1.0", "--html"), ("rebase", "--to", "1.0", "--dry-run", "--report"), ("apply", "--into")],
)
def test_an_output_in_a_missing_directory_is_refused_before_any_work(
    one_patch: Demo, tmp_path: Path, how: str, args: tuple[str, ...]
) -> None:
    """It granted the nearest directory that exists (`/nonexistent/x`: all of `/`), and the command
    made the missing ones; patchtool makes none now, so a rule holds the named directory alone."""
    missing = tmp_path / "reports" / "2026"
    named = missing / "out.html"
    run = one_patch.spawn if how == "spawned" else one_patch.run
    res = run(*args, str(named))
    assert (res.returncode, res.stdout) == (2, ""), res.stderr
    assert res.stderr == (
        f"error: {named}: there is no directory {missing}; patchtool makes no directory for an output "
        f"(hint: create it first (mkdir -p {missing}), or name a path in a directory that exists)\n"
    )
    assert not (tmp_path / "reports").exists() and not (one_patch.cache / "upstream.git").exists()  # no work done


@needs_landlock
def test_a_failed_command_leaves_no_report_file(one_patch: Demo, tmp_path: Path) -> None:
    res = one_patch.spawn("scan", "--versions", "9.9", "--html", str(tmp_path / "x.html"))
    assert res.returncode == 4 and "9.9" in res.stderr, res.stderr
    assert not (tmp_path / "x.html").exists()


@needs_landlock
def test_a_tree_output_grants_its_own_directory_only(one_patch: Demo, tmp_path: Path) -> None:
    """`--into ~/trees/t` grants ~/trees, where the tree is staged beside its place: not ~."""
    home = tmp_path / "home"
    (home / "trees").mkdir(parents=True)
    res = escape(one_patch, "write", str(home / "planted.sh"), "--out", str(home / "trees" / "t"))
    assert res.returncode == 2 and f"refused to write {home / 'planted.sh'}" in res.stderr, res.stderr
    res = escape(one_patch, "write", str(home / "trees" / "beside.txt"), "--out", str(home / "trees" / "t"))
    assert res.returncode == 0 and (home / "trees" / "beside.txt").read_text() == "escaped", res.stderr
    assert not (home / "planted.sh").exists()

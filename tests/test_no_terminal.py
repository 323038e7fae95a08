"""No process patchtool starts, but the user's $EDITOR, holds the user's terminal (issue 28, section
2): a process that holds it, root's on any terminal fd and anyone's on their controlling terminal,
can push keystrokes into it (``TIOCSTI``) for the shell to run once patchtool ends.

Each child (git, through GitPython; a build backend's hooks) starts with stdin from /dev/null,
its output in pipes and a session of its own, so it has no terminal fd and no controlling terminal
to open as /dev/tty; and the confinement grants /dev/tty no write and no device ioctl. patchtool
runs here as a terminal's session leader would under a shell: a pseudo-terminal on its standard
streams and as its controlling terminal.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import pty
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest

from conftest import Demo
from helpers import HANG_GUARD_S, git
from patchtool import confine

SUPPORT = confine.support()
TOOL = Path(confine.__file__).resolve().parents[1]

# The program run as its terminal's session leader: a session of its own with the pseudo-terminal
# on stdin as its controlling terminal (what a login shell gives the commands it runs), then ARGS.
LEADER = textwrap.dedent("""\
    import fcntl, os, sys, termios
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
    """)

# What a process records of the terminal it holds: its session, the terminals among its open fds,
# and whether it can open /dev/tty (its controlling terminal, if it has one). {log}: where.
RECORD = textwrap.dedent("""\
    import errno as _errno, json as _json, os as _os, sys as _sys

    def _record(who):
        fds = [int(fd) for fd in _os.listdir("/proc/self/fd")]
        try:
            _os.close(_os.open("/dev/tty", _os.O_RDONLY))
            tty = "opened"
        except OSError as exc:
            tty = _errno.errorcode.get(exc.errno, str(exc.errno))
        seen = {{"who": who, "sid": _os.getsid(0), "ttys": sorted(fd for fd in fds if _os.isatty(fd)), "dev_tty": tty}}
        with open({log!r}, "a") as fh:
            fh.write(_json.dumps(seen) + "\\n")
    """)


@dataclasses.dataclass(frozen=True)
class Led:
    code: int
    pid: int  # the session patchtool led
    shown: str  # what its terminal showed


def as_session_leader(args: list[str], *, cwd: Path, env: dict[str, str], user: tuple[str, ...] = ()) -> Led:
    """``python ARGS`` as the leader of a session whose controlling terminal is a new
    pseudo-terminal, its stdin, stdout and stderr; ``user``: the setpriv command line and the Python
    that run it as another user (default: this user and this Python)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*(user or (sys.executable,)), "-c", LEADER, *args],
        cwd=cwd,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError as exc:  # EIO: every holder of the other end closed it
            assert exc.errno == errno.EIO
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    code = proc.wait(timeout=HANG_GUARD_S)
    return Led(code=code, pid=proc.pid, shown=shown.decode("utf-8", "replace"))


def records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def git_that_records(where: Path, log: Path) -> Path:
    """A ``git`` that records what it holds into ``log``, then runs the real git: a directory to put
    first on PATH."""
    real = shutil.which("git")
    assert real is not None
    where.mkdir()
    wrapper = where / "git"
    wrapper.write_text(
        f"#!{sys.executable}\n"
        + RECORD.format(log=str(log))
        + f"_record(_sys.argv[1:])\n_os.execv({real!r}, [{real!r}, *_sys.argv[1:]])\n"
    )
    wrapper.chmod(0o755)
    return where


def test_no_git_child_holds_the_terminal(one_patch: Demo, tmp_path: Path) -> None:
    """A first `status` imports the pin: git fast-import, cat-file, rev-parse and more, each with
    stdin from /dev/null, pipes, and no controlling terminal (it used to share patchtool's, so
    /dev/tty opened)."""
    log = tmp_path / "cache" / "git-children.jsonl"  # the cache: a confined command's children may write there
    bin_dir = git_that_records(tmp_path / "bin", log)
    env = one_patch.environment({"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    led = as_session_leader(["-m", "patchtool", "status"], cwd=one_patch.root, env=env)
    assert led.code == 0, led.shown
    assert "greet" in led.shown  # patchtool itself printed to its terminal
    seen = records(log)
    commands = [r for r in seen if r["who"] != ["version"]]
    subcommands = {next(word for word in r["who"] if not word.startswith("-")) for r in commands}
    assert subcommands >= {"init", "fast-import", "cat-file"}, seen
    for record in commands:
        assert record["ttys"] == [] and record["dev_tty"] == "ENXIO" and record["sid"] != led.pid, record
    # the `git version` GitPython runs as it is imported (twice) takes no options from patchtool: it
    # holds no terminal fd either (stdin /dev/null, output in pipes), and reads no repository
    assert all(r["ttys"] == [] for r in seen if r["who"] == ["version"]), seen


BACKEND = textwrap.dedent('''\
    """A build backend that records what its hook process holds, then builds demo 1.0."""
    import os, zipfile

    {record}

    def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
        _record("backend")
        name = "demo-1.0-py3-none-any.whl"
        with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
            zf.write("demo/__init__.py")
            zf.write("hook.jsonl", "demo/hook.jsonl")  # what the hook saw, carried out in the wheel
            zf.writestr("demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\\nName: demo\\nVersion: 1.0\\n")
            zf.writestr(
                "demo-1.0.dist-info/WHEEL",
                "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
            )
            zf.writestr("demo-1.0.dist-info/RECORD", "")
        return name
    ''')


def test_no_build_hook_holds_the_terminal(demo: Demo, tmp_path: Path) -> None:
    """`build` of a git pin runs the backend's hooks through pypa/build: each in a process with
    stdin from /dev/null, its output captured, and a session of its own. The hook runs sandboxed, so
    it writes its record into the tree it builds and carries it out in the wheel."""
    upstream = tmp_path / "upstream"
    (upstream / "demo").mkdir(parents=True)
    (upstream / "demo" / "__init__.py").write_text('__version__ = "1.0"\n')
    (upstream / "backend.py").write_text(BACKEND.format(record=RECORD.format(log="hook.jsonl")))
    (upstream / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n\n'
        '[project]\nname = "demo"\nversion = "1.0"\n'
    )
    git(upstream, "init", "-q")
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", "1.0")
    git(upstream, "tag", "v1.0")
    commit = git(upstream, "rev-parse", "HEAD").strip()
    (demo.root / "upstream-pins" / "demo-1.0.toml").write_text(
        'schema = 1\nname = "demo"\nversion = "1.0"\nuse = "git"\n\n'
        f'[git]\nurl = "{upstream}"\ntag = "v1.0"\ncommit = "{commit}"\n'
    )
    demo.write_manifest()
    out = tmp_path / "dist"
    led = as_session_leader(
        ["-m", "patchtool", "build", "--no-isolation", "--out", str(out)], cwd=demo.root, env=demo.environment()
    )
    assert led.code == 0, led.shown
    (wheel,) = out.glob("demo-1.0+*.whl")
    with zipfile.ZipFile(wheel) as zf:
        (hook,) = [json.loads(line) for line in zf.read("demo/hook.jsonl").decode().splitlines()]
    # no controlling terminal (ENXIO); sandboxed, /dev/tty is not even granted (EACCES), so the
    # session of its own is what the sid shows
    tty = "EACCES" if SUPPORT.usable else "ENXIO"
    assert hook["ttys"] == [] and hook["dev_tty"] == tty and hook["sid"] != led.pid, hook


# -- the confinement grants the terminal nothing ---------------------------------------------------

# Run as its terminal's session leader: before the confinement /dev/tty opens (the test is sound),
# after it, what a confined process can do with the terminal.
CONFINED = textwrap.dedent("""\
    import errno, fcntl, json, os, sys, termios
    from patchtool import confine

    os.close(os.open("/dev/tty", os.O_RDWR))
    found = confine.confine([])
    seen = {"abi": found.abi}
    try:
        os.close(os.open("/dev/tty", os.O_WRONLY))
        seen["write"] = "opened"
    except OSError as exc:
        seen["write"] = errno.errorcode[exc.errno]
    fd = os.open("/dev/tty", os.O_RDONLY)  # reading is never restricted
    for name, request, arg in (("TIOCGWINSZ", termios.TIOCGWINSZ, bytes(8)), ("TIOCSTI", termios.TIOCSTI, b" ")):
        try:
            fcntl.ioctl(fd, request, arg)
            seen[name] = "done"
        except OSError as exc:
            seen[name] = errno.errorcode[exc.errno]
    print(json.dumps(seen))
    """)


def _nobody() -> tuple[str, ...]:
    """The setpriv command line and a Python that run a program as nobody, where this can: as root,
    with setpriv, and a Python 3.10 or later that nobody may run; else ()."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        return ()
    readable = [p for p in TOOL.parents if p != Path("/")]
    as_nobody = (setpriv, "--reuid=65534", "--regid=65534", "--clear-groups")
    system = shutil.which("python3", path=os.pathsep.join(("/usr/local/bin", "/usr/bin", "/bin")))
    for python in dict.fromkeys(filter(None, (sys.executable, system))):
        if not all(os.stat(p).st_mode & 0o005 == 0o005 for p in (*readable, *Path(python).resolve().parents)):
            continue
        runs = subprocess.run(
            [*as_nobody, python, "-c", "import sys; sys.exit(sys.version_info < (3, 10))"],
            capture_output=True,
            timeout=HANG_GUARD_S,
            check=False,
        )
        if runs.returncode == 0:
            return (*as_nobody, python)
    return ()


@pytest.mark.skipif(not SUPPORT.usable, reason=f"no usable Landlock here: {SUPPORT.describe()}")
@pytest.mark.parametrize("user", ["self", "nobody"])
def test_a_confined_process_cannot_write_to_or_drive_its_terminal(user: str) -> None:
    """The terminal is not among the files a confined process may write, and (ABI 5) no device ioctl
    is granted on it: no TIOCSTI, whoever runs it, root or not."""
    prefix = _nobody() if user == "nobody" else ()
    if user == "nobody" and not prefix:
        pytest.skip("running as nobody needs root, setpriv, and a Python 3.10+ and patchtool that others may read")
    env = {**os.environ, "PYTHONPATH": str(TOOL)}
    led = as_session_leader(["-c", CONFINED], cwd=Path("/"), env=env, user=prefix)
    assert led.code == 0, led.shown
    seen = json.loads(led.shown.splitlines()[-1])
    assert seen["write"] == "EACCES", seen
    if SUPPORT.abi < 5:
        pytest.skip(f"Landlock ABI {SUPPORT.abi} has no IOCTL_DEV (5): a terminal's ioctls are not restricted")
    assert (seen["TIOCGWINSZ"], seen["TIOCSTI"]) == ("EACCES", "EACCES"), seen


def test_the_terminal_is_not_a_file_every_process_may_write() -> None:
    assert (Path(os.devnull),) == confine.DEVICES

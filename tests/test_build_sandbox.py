"""A git pin's build backend is someone else's code: its hook processes run in a Landlock sandbox
that lets them write only beneath the tree they build, the wheel's directory and a temporary
directory of their own, read only those and the system's and Python's directories, and open no
TCP connection (issue 28).

The backend here is a real one, in the tree it builds (``backend-path``): before it writes its
wheel it does what ``reach.json`` asks (write, read or connect somewhere) and fails, naming each
act that was refused. Real setuptools builds check that the sandbox still lets a build do its work.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from cli_run import spawned
from helpers import HANG_GUARD_S, format_patch, git, make_wheel, snapshot, write_tree
from patchtool import confine
from patchtool.errors import BuildError, ExitCode
from patchtool.wheel import frontend

SUPPORT = confine.support()
pytestmark = pytest.mark.skipif(not SUPPORT.usable, reason=f"no usable Landlock here: {SUPPORT.describe()}")

REACH_BACKEND = textwrap.dedent('''\
    """A build backend that first does what reach.json asks, as a stranger's backend could."""
    import base64
    import hashlib
    import json
    import os
    import pathlib
    import socket
    import sys
    import tempfile
    import zipfile


    def _daemon(setsid):
        """Fork a process that outlives the hook (blocked on a FIFO for good), as a daemon does;
        its pid goes to daemons.txt and the FIFO daemon.fifo, both in the tree."""
        r, w = os.pipe()
        if os.fork() == 0:
            if setsid:
                os.setsid()
                if os.fork():
                    os._exit(0)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # as a daemon does: it holds none of the build's output
                os.dup2(null, fd)
            os.write(w, str(os.getpid()).encode())
            os.close(w)
            open("daemon.fifo", "rb").read()
            os._exit(0)
        os.close(w)
        pid = b""
        while chunk := os.read(r, 32):
            pid += chunk
        os.close(r)
        with open("daemons.txt", "a") as f:
            f.write(pid.decode() + "\\n")


    def _reach():
        where = {"prefix": sys.prefix, "tmp": tempfile.gettempdir(), "src": os.getcwd()}
        refused = []
        for act, target in json.loads(pathlib.Path("reach.json").read_text()):
            target = target.format(**where)
            try:
                if act == "write":
                    with open(target, "a") as f:
                        f.write("planted by the build backend\\n")
                elif act == "read":  # a bounded read: a device may never end
                    with open(target, "rb") as f:
                        f.read(1 << 16)
                elif act == "list":
                    os.listdir(target)
                elif act == "connect":
                    socket.create_connection(("127.0.0.1", int(target))).close()
                elif act == "alone":  # no terminal: stdin is /dev/null, a session of its own, led by patchtool's reaper
                    if os.readlink("/proc/self/fd/0") != os.devnull or os.getsid(0) != os.getppid():
                        raise OSError(f"stdin {os.readlink('/proc/self/fd/0')}, session {os.getsid(0)}")
                elif act == "daemon":  # a process left behind, in the build's session or (setsid) one of its own
                    _daemon(setsid=target == "setsid")
            except OSError as exc:
                refused.append(f"{act} {target}: {exc}")
        if refused:
            raise RuntimeError("refused: " + " | ".join(refused))


    def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
        _reach()
        name = "demo-1.0-py3-none-any.whl"
        files = {p.as_posix(): p.read_bytes() for p in sorted(pathlib.Path("demo").rglob("*.py"))}
        files["demo-1.0.dist-info/METADATA"] = b"Metadata-Version: 2.1\\nName: demo\\nVersion: 1.0\\n"
        files["demo-1.0.dist-info/WHEEL"] = b"Wheel-Version: 1.0\\nGenerator: reach\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
        rows = []
        for path, data in files.items():
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{path},sha256={digest},{len(data)}\\n")
        files["demo-1.0.dist-info/RECORD"] = ("".join(rows) + "demo-1.0.dist-info/RECORD,,\\n").encode()
        with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
            for path, data in files.items():
                zf.writestr(path, data)
        return _leave(wheel_directory, name)


    def _leave(wheel_directory, name):
        """What reach.json says to leave as the wheel instead: a link named as the wheel, a FIFO,
        or another name returned."""
        path = os.path.join(wheel_directory, name)
        for act, target in json.loads(pathlib.Path("reach.json").read_text()):
            if act == "wheel-link":
                os.unlink(path)
                os.symlink(target, path)
            elif act == "wheel-fifo":
                os.unlink(path)
                os.mkfifo(path)
            elif act == "wheel-name":
                name = target
            elif act in ("output-link", "output-fifo"):  # the hook's answer, written after this returns
                import __main__

                def write_json(obj, path, act=act, target=target, **kwargs):
                    if act == "output-link":
                        os.symlink(target, path)
                    else:
                        os.mkfifo(path)

                __main__.write_json = write_json
        return name
    ''')

REACH_PROJECT = textwrap.dedent("""\
    [build-system]
    requires = []
    build-backend = "reach_backend"
    backend-path = ["."]

    [project]
    name = "demo"
    version = "1.0"
    """)


def reach_project(where: Path, acts: Sequence[tuple[str, str]]) -> Path:
    write_tree(
        where,
        {
            "pyproject.toml": REACH_PROJECT,
            "reach_backend.py": REACH_BACKEND,
            "reach.json": json.dumps(acts),
            "demo/__init__.py": "X = 1\n",
        },
    )
    return where


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home directory with what a user keeps secret in one."""
    home = tmp_path / "home"
    write_tree(home, {".ssh/id_rsa": "-----BEGIN OPENSSH PRIVATE KEY-----\n", ".netrc": "machine x password y\n"})
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP port on 127.0.0.1 that takes connections; the test reads whether one came."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock


def no_connection_came(sock: socket.socket) -> bool:
    """A connection made before now waits in the backlog, so a non-blocking accept finds it."""
    sock.setblocking(False)
    try:
        sock.accept()[0].close()
    except BlockingIOError:
        return True
    return False


def needs_network_rules() -> None:
    if SUPPORT.abi < 4:
        pytest.skip(f"Landlock ABI {SUPPORT.abi} has no network rules (ABI 4 or later restricts TCP)")


def build(src: Path, out: Path, *, isolation: bool = False) -> Path:
    wheel, _ = frontend.build_wheel(src, out, env={}, isolation=isolation)
    return wheel


def refused(src: Path, out: Path, *, isolation: bool = False) -> BuildError:
    with pytest.raises(BuildError) as caught:
        build(src, out, isolation=isolation)
    assert caught.value.exit_code == ExitCode.PROBLEMS
    assert caught.value.hint and "confined (Landlock)" in caught.value.hint, caught.value.hint
    assert not list(out.glob("*.whl"))
    return caught.value


# -- writes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("isolation", [False, True], ids=["no-isolation", "isolation"])
def test_a_backend_writes_only_its_tree_its_wheel_and_its_temporary_directory(
    tmp_path: Path, home: Path, isolation: bool
) -> None:
    """What a build writes is granted: the tree it builds, its temporary directory (TMPDIR, its own)
    and the wheel's directory; it runs without a terminal (stdin /dev/null, a session of its own)."""
    src = reach_project(
        tmp_path / "src",
        [("write", "{src}/build-note"), ("write", "{tmp}/scratch"), ("read", "{prefix}/bin/python"), ("alone", "")],
    )
    wheel = build(src, tmp_path / "out", isolation=isolation)
    assert wheel.parent == tmp_path / "out" and zipfile.ZipFile(wheel).read("demo/__init__.py") == b"X = 1\n"
    assert (src / "build-note").read_text() == "planted by the build backend\n"


@pytest.mark.parametrize("isolation", [False, True], ids=["no-isolation", "isolation"])
def test_a_backend_that_writes_outside_its_build_fails_and_writes_nothing(
    tmp_path: Path, home: Path, isolation: bool
) -> None:
    """Its home, a cache's git configuration and hooks, the directory around its tree, and (with
    isolation) the environment its requirements were installed in: all refused."""
    cache = tmp_path / "cache" / "upstream.git"
    write_tree(cache, {"config": "[core]\n\tbare = true\n", "hooks/README": "hooks\n"})
    targets = [
        str(home / ".bashrc"),
        str(cache / "config"),
        str(cache / "hooks" / "post-checkout"),
        str(tmp_path / "beside-the-tree"),
    ]
    acts = [("write", t) for t in targets] + ([("write", "{prefix}/planted")] if isolation else [])
    src = reach_project(tmp_path / "src", acts)
    error = refused(src, tmp_path / "out", isolation=isolation)
    for target in targets:
        assert f"write {target}: [Errno 13] Permission denied" in error.message, error.message
    if isolation:
        assert "planted: [Errno 13] Permission denied" in error.message, error.message
    assert (cache / "config").read_text() == "[core]\n\tbare = true\n"
    assert sorted(p.name for p in (cache / "hooks").iterdir()) == ["README"]
    assert not (home / ".bashrc").exists() and not (tmp_path / "beside-the-tree").exists()


# -- the wheel it leaves: found by an attack, a link named as the wheel shipped what it could not read --


@pytest.fixture
def private_wheel(tmp_path: Path) -> Path:
    """A wheel of the same name outside everything the backend may read (a private one in a home)."""
    (tmp_path / "private").mkdir()
    return make_wheel(
        tmp_path / "private" / "demo-1.0-py3-none-any.whl", "demo", "1.0", {"demo/PRIVATE.txt": "secret\n"}
    )


@pytest.mark.parametrize("confined", [True, False], ids=["confined", "unconfined"])
def test_a_link_the_backend_leaves_as_its_wheel_is_refused(
    tmp_path: Path, home: Path, private_wheel: Path, confined: bool
) -> None:
    """The backend cannot read the private wheel, but it can leave a link to it in its wheel
    directory: patchtool, which may read it, followed the link and shipped it. The wheel is now
    opened without following a link, confined or not."""
    before = snapshot(tmp_path / "private")
    src = reach_project(tmp_path / "src", [("wheel-link", str(private_wheel))])
    with pytest.raises(BuildError) as caught:
        frontend.build_wheel(src, tmp_path / "out", env={}, isolation=False, confined=confined)
    assert str(caught.value) == (
        "the build backend named 'demo-1.0-py3-none-any.whl' as its wheel, which is a symbolic link; refusing it"
    )
    assert caught.value.hint == "patchtool takes only a regular file that the backend wrote into its wheel directory"
    assert caught.value.exit_code == ExitCode.PROBLEMS
    assert not list((tmp_path / "out").iterdir()) and snapshot(tmp_path / "private") == before


def test_a_fifo_the_backend_leaves_as_its_wheel_is_refused_without_waiting(tmp_path: Path, home: Path) -> None:
    src = reach_project(tmp_path / "src", [("wheel-fifo", "")])
    with pytest.raises(BuildError) as caught:
        build(src, tmp_path / "out")
    assert str(caught.value) == (
        "the build backend named 'demo-1.0-py3-none-any.whl' as its wheel, which is not a regular file; refusing it"
    )
    assert not list((tmp_path / "out").iterdir())


@pytest.mark.parametrize("returned", ["../demo-1.0-py3-none-any.whl", "PRIVATE", "", ".", "..", "sub/x.whl"])
def test_a_wheel_name_that_is_not_a_bare_file_name_is_refused(
    tmp_path: Path, home: Path, private_wheel: Path, returned: str
) -> None:
    """build joins the name the hook returns onto the wheel directory: ``..`` or an absolute name
    (here the private wheel's) would lead out of it."""
    name = str(private_wheel) if returned == "PRIVATE" else returned
    src = reach_project(tmp_path / "src", [("wheel-name", name)])
    with pytest.raises(BuildError) as caught:
        build(src, tmp_path / "out")
    assert str(caught.value) == (
        f"the build backend named {name!r} as its wheel, which is not a file name in its wheel directory; refusing it"
    )
    assert caught.value.exit_code == ExitCode.PROBLEMS
    assert not list((tmp_path / "out").iterdir())


@pytest.mark.parametrize("act", ["output-link", "output-fifo"])
def test_the_hooks_answer_replaced_by_a_link_or_a_fifo_is_refused_unread(tmp_path: Path, home: Path, act: str) -> None:
    """pyproject_hooks reads the hook's output.json, in the backend's TMPDIR, in patchtool's
    unconfined process: a link there read a file the backend could not (its JSON taken as the
    hook's answer), a FIFO held patchtool for good. Found by an attack."""
    answer = tmp_path / "private" / "answer.json"
    answer.parent.mkdir()
    answer.write_text('{"return_val": "demo-1.0-py3-none-any.whl"}')
    before = snapshot(tmp_path / "private")
    src = reach_project(tmp_path / "src", [(act, str(answer))])
    with pytest.raises(BuildError) as caught:
        build(src, tmp_path / "out")
    assert str(caught.value) == (
        "the build backend replaced its hook's output.json with something other than a regular file; "
        "refusing to read it"
    )
    assert caught.value.exit_code == ExitCode.PROBLEMS
    assert not list((tmp_path / "out").iterdir()) and snapshot(tmp_path / "private") == before


# -- reads and the network -------------------------------------------------------------------------


@pytest.mark.parametrize("secret", [".ssh/id_rsa", ".netrc"])
def test_a_backend_cannot_read_the_home_directory(tmp_path: Path, home: Path, secret: str) -> None:
    src = reach_project(tmp_path / "src", [("read", str(home / secret))])
    error = refused(src, tmp_path / "out")
    assert f"read {home / secret}: [Errno 13] Permission denied" in error.message, error.message


def test_a_backend_cannot_read_another_processs_environment_or_command_line(tmp_path: Path, home: Path) -> None:
    """/proc is open to it only for what describes the machine and for its own process: the
    environment of another process of the user's (a token in a shell's) stays closed."""
    with subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        env={**os.environ, "A_TOKEN": "secret"},
    ) as other:
        targets = [f"/proc/{other.pid}/environ", f"/proc/{other.pid}/cmdline"]
        src = reach_project(tmp_path / "src", [("read", t) for t in targets] + [("read", "/proc/self/status")])
        try:
            error = refused(src, tmp_path / "out")
        finally:
            assert other.stdin is not None
            other.stdin.close()
            other.wait(timeout=HANG_GUARD_S)
    for target in targets:
        assert f"read {target}: [Errno 13] Permission denied" in error.message, error.message
    assert "/proc/self/status" not in error.message


def test_a_process_the_backend_leaves_behind_ends_with_its_build(tmp_path: Path, home: Path) -> None:
    """A daemon the backend forks, in the build's session or in one of its own (setsid, double
    fork), outlived the build and ran on unconfined by time; now it is killed, and reaped, before
    the build returns. Each blocks on a FIFO for good: it is gone, not finished."""
    src = reach_project(tmp_path / "src", [("daemon", "fork"), ("daemon", "setsid")])
    os.mkfifo(src / "daemon.fifo")
    wheel = build(src, tmp_path / "out")
    assert wheel.parent == tmp_path / "out"
    pids = [int(line) for line in (src / "daemons.txt").read_text().split()]
    assert len(pids) == 2
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists(), f"process {pid} outlived the build"
    with pytest.raises(OSError) as nobody:  # no process is left waiting on the FIFO to read it
        os.close(os.open(src / "daemon.fifo", os.O_WRONLY | os.O_NONBLOCK))
    assert nobody.value.errno == errno.ENXIO


def test_a_backend_reads_only_the_devices_a_build_needs(tmp_path: Path, home: Path) -> None:
    """/dev was readable whole: another process's shared memory in /dev/shm, disks (as root), the
    kernel's log. Now only /dev/null, /dev/zero, /dev/urandom, /dev/random and /dev/full."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm here")
    shared = shm / f"patchtool-test-{os.getpid()}-{tmp_path.name}"
    shared.write_text("another process's shared memory\n")
    try:
        src = reach_project(
            tmp_path / "src",
            [
                *(("read", str(shared)), ("list", "/dev"), ("list", "/dev/shm")),
                *(("read", d) for d in ("/dev/zero", "/dev/urandom", "/dev/random", "/dev/null")),
                ("write", "/dev/null"),
            ],
        )
        error = refused(src, tmp_path / "out")
    finally:
        shared.unlink()
    for act, target in (("read", str(shared)), ("list", "/dev"), ("list", "/dev/shm")):
        assert f"{act} {target}: [Errno 13] Permission denied" in error.message, error.message
    for granted in ("/dev/zero", "/dev/urandom", "/dev/random", "/dev/null"):
        assert f" {granted}:" not in error.message, error.message


def test_a_backend_cannot_connect_over_tcp(tmp_path: Path, home: Path, listener: socket.socket) -> None:
    needs_network_rules()
    port = listener.getsockname()[1]
    src = reach_project(tmp_path / "src", [("connect", str(port))])
    error = refused(src, tmp_path / "out")
    assert f"connect {port}: [Errno 13] Permission denied" in error.message, error.message
    assert no_connection_came(listener)


def test_a_sandbox_connects_only_to_the_ports_it_is_given(tmp_path: Path) -> None:
    """pip's sandbox reaches the index: a TCP port it is given opens, any other is refused."""
    needs_network_rules()
    with socket.socket() as given, socket.socket() as other:
        for sock in (given, other):
            sock.bind(("127.0.0.1", 0))
            sock.listen(8)
        ports = [given.getsockname()[1], other.getsockname()[1]]
        box = confine.Sandbox(writes=(), reads=(*confine.SYSTEM, *confine.python_reads()), connects=(ports[0],))
        script = (
            "import socket, sys\n"
            "for port in sys.argv[1:]:\n"
            "    try:\n"
            "        socket.create_connection(('127.0.0.1', int(port))).close(); print(port, 'open')\n"
            "    except OSError as exc:\n"
            "        print(port, exc.errno)\n"
        )
        res = subprocess.run(
            confine.sandboxed([sys.executable, "-I", "-c", script, *map(str, ports)], box),
            capture_output=True,
            text=True,
            timeout=HANG_GUARD_S,
        )
        assert res.stdout.split("\n")[:2] == [f"{ports[0]} open", f"{ports[1]} {errno.EACCES}"], res
        assert not no_connection_came(given) and no_connection_came(other)


# -- through the command line: a git pin's `patchtool build` -----------------------------------------


def git_pin_project(
    tmp_path: Path, files: dict[str, str], project_dir: str = "", links: dict[str, str] | None = None
) -> Path:
    """A patch repository whose git pin builds ``demo 1.0`` from an upstream repository holding
    ``files`` (and the symbolic ``links``, path to target), with one patch to ``demo/__init__.py``
    (under ``project_dir``)."""
    upstream = tmp_path / "upstream"
    write_tree(upstream, files)
    for rel, target in (links or {}).items():
        os.symlink(target, upstream / rel)
    git(upstream, "init", "-q", "-b", "main")
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", "demo 1.0")
    git(upstream, "tag", "v1.0")
    commit = git(upstream, "rev-parse", "HEAD").strip()
    git(upstream, "checkout", "-q", "-b", "patch")
    (upstream / project_dir / "demo" / "__init__.py").write_text("X = 2  # patched\n")
    git(upstream, "commit", "-q", "-am", "demo: patched")
    root = tmp_path / "project"
    write_tree(
        root,
        {
            "patches/0001-patched.patch": format_patch(upstream),
            "upstream-pins/demo-git.toml": f'schema = 1\nname = "demo"\nversion = "1.0"\nuse = "git"\n\n'
            f'[git]\nurl = "{upstream}"\ntag = "v1.0"\ncommit = "{commit}"\n',
            "patchset.toml": textwrap.dedent("""\
                schema = 1
                pin = "demo-git"

                [[patch]]
                id = "patched"
                file = "patches/0001-patched.patch"
                kind = "operations"
                owner = "team"
                why = "a patched build"
                applies_to = ">=1.0"
                drop_when = "never"
                upstream = { status = "inappropriate", reason = "test" }
                """),
        },
    )
    git(upstream, "checkout", "-q", "main")
    return root


def patchtool_build(root: Path, cache: Path, out: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(cache), "HOME": str(home)}
    return spawned(["build", "--no-isolation", "--out", str(out)], cwd=root, env=env, timeout=HANG_GUARD_S)


def test_a_git_pins_backend_reaches_neither_repository_nor_cache_nor_home(
    tmp_path: Path, home: Path, listener: socket.socket
) -> None:
    """The real command line, itself confined to the repository, the cache and the output: the
    backend it starts is held to less, so the repository, the cache's git configuration and hooks
    (where a write would run code in every later git command) and the home directory stay as
    they were, and nothing reaches a listening port."""
    cache = tmp_path / "cache"
    root = tmp_path / "project"
    targets = [
        ("write", str(root / "planted")),
        ("write", str(cache / "upstream.git" / "config")),
        ("write", str(cache / "upstream.git" / "hooks" / "post-checkout")),
        ("write", str(home / ".bashrc")),
        ("read", str(home / ".ssh" / "id_rsa")),
        *([("connect", str(listener.getsockname()[1]))] if SUPPORT.abi >= 4 else []),
    ]
    root = git_pin_project(
        tmp_path,
        {
            "pyproject.toml": REACH_PROJECT,
            "reach_backend.py": REACH_BACKEND,
            "reach.json": json.dumps(targets),
            "demo/__init__.py": "X = 1\n",
        },
    )
    assert not cache.exists()
    (tmp_path / "outputs").mkdir()  # the command may write beneath it (the directory holding --out), no more
    res = patchtool_build(root, cache, tmp_path / "outputs" / "dist", home)
    assert res.returncode == ExitCode.PROBLEMS, res.stdout + res.stderr
    assert "Traceback (most recent call last)" not in res.stderr.split("the build backend failed", 1)[0]
    assert "the build backend failed in src/" in res.stderr and "confined (Landlock)" in res.stderr, res.stderr
    for act, target in targets:
        assert f"{act} {target}: [Errno 13] Permission denied" in res.stderr, res.stderr
    assert not (root / "planted").exists() and not (home / ".bashrc").exists()
    assert "planted" not in (cache / "upstream.git" / "config").read_text()
    assert not (cache / "upstream.git" / "hooks" / "post-checkout").exists()
    assert no_connection_came(listener)
    assert not list((tmp_path / "outputs").iterdir())


def test_a_git_pins_links_out_of_its_tree_are_kept_and_read_by_nothing_but_the_confined_backend(
    tmp_path: Path, home: Path
) -> None:
    """A git pin's upstream may hold links that leave its tree, absolute or by ``..``: checkout and
    apply put them on disk as git does, unchanged; patchtool reads the tree it builds only from
    git's objects, and the backend, which reads through them, is refused what lies outside."""
    secret = tmp_path / "secret" / "leak.py"
    write_tree(secret.parent, {"leak.py": "SECRET = 'not for the wheel'\n"})
    links = {"demo/absolute.py": str(secret), "demo/escaping.py": "../" * 40 + str(secret).lstrip("/")}
    files = {
        "pyproject.toml": REACH_PROJECT,
        "reach_backend.py": REACH_BACKEND,
        "reach.json": "[]",
        "demo/__init__.py": "X = 1\n",
    }
    root = git_pin_project(tmp_path, files, links=links)
    cache = tmp_path / "cache"
    env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(cache), "HOME": str(home)}
    for command, tree in (("apply", "build/demo-git"), ("checkout", "work/series")):
        res = spawned([command], cwd=root, env=env, timeout=HANG_GUARD_S)
        assert res.returncode == 0, res.stdout + res.stderr
        assert {rel: os.readlink(root / tree / rel) for rel in links} == links
    before = snapshot(tmp_path / "secret", home)
    (tmp_path / "outputs").mkdir()
    res = patchtool_build(root, cache, tmp_path / "outputs" / "dist", home)
    assert res.returncode == ExitCode.PROBLEMS, res.stdout + res.stderr
    assert "the build backend failed in src/" in res.stderr and "confined (Landlock)" in res.stderr, res.stderr
    assert "PermissionError: [Errno 13] Permission denied: 'demo/absolute.py'" in res.stderr, res.stderr
    assert "not for the wheel" not in res.stdout + res.stderr
    assert not list((tmp_path / "outputs").iterdir()) and snapshot(tmp_path / "secret", home) == before


# -- real backends still build ----------------------------------------------------------------------

SETUPTOOLS_SCM_PROJECT = textwrap.dedent("""\
    [build-system]
    requires = ["setuptools>=68", "setuptools-scm>=8"]
    build-backend = "setuptools.build_meta"

    [project]
    name = "demo"
    dynamic = ["version"]

    [tool.setuptools_scm]
    root = ".."
    """)


def test_a_real_setuptools_build_is_the_same_confined(tmp_path: Path, home: Path) -> None:
    """setuptools writes build/ and the egg-info into its tree and runs git for the files it
    tracks (setuptools-scm's file finder, for package data): the same wheel confined and not."""
    root = git_pin_project(
        tmp_path,
        {
            "python/pyproject.toml": SETUPTOOLS_SCM_PROJECT,
            "python/demo/__init__.py": "X = 1\n",
            "python/demo/data.txt": "packaged because git tracks it\n",
        },
        project_dir="python",
    )
    built = {}
    for name, landlock in (("confined", "1"), ("unconfined", "0")):
        env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(tmp_path / "cache"), "PATCHTOOL_LANDLOCK": landlock}
        res = spawned(
            ["build", "--no-isolation", "--out", str(tmp_path / name), "--json"],
            cwd=root,
            env=env,
            timeout=HANG_GUARD_S,
        )
        assert res.returncode == 0, res.stdout + res.stderr
        built[name] = json.loads(res.stdout)["data"]
    confined, unconfined = built["confined"], built["unconfined"]
    assert confined["sha256"] == unconfined["sha256"]
    with zipfile.ZipFile(confined["wheel"]) as zf:
        assert zf.read("demo/data.txt") == b"packaged because git tracks it\n"
        assert zf.read("demo/__init__.py") == b"X = 2  # patched\n"


# -- the install step: found by an attack, requirements pip would build outside the sandbox ---------

ASKS_BACKEND = textwrap.dedent('''\
    """A backend whose sandboxed hook writes a project into its own tree and asks for it by path:
    pip would build that project outside the sandbox."""
    import os, pathlib

    def get_requires_for_build_wheel(config_settings=None):
        where = pathlib.Path("pwnreq")
        where.mkdir(exist_ok=True)
        (where / "pyproject.toml").write_text('[project]\\\\nname = "pwnreq"\\\\nversion = "1"\\\\n')
        return [f"pwnreq @ file://{os.getcwd()}/pwnreq"]

    def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
        raise RuntimeError("never reached")
    ''')


def asking_project(where: Path, requires: str, backend: str = "reach_backend") -> Path:
    reach_project(where, [])
    (where / "pyproject.toml").write_text(
        REACH_PROJECT.replace("requires = []", f"requires = {requires}").replace("reach_backend", backend)
    )
    return where


def test_a_direct_reference_in_build_system_requires_is_refused(tmp_path: Path, home: Path) -> None:
    src = asking_project(tmp_path / "src", '["evil @ file:///tmp/evil"]')
    with pytest.raises(BuildError) as caught:
        build(src, tmp_path / "out", isolation=True)
    assert str(caught.value) == (
        "the build asks for 'evil @ file:///tmp/evil' in its [build-system] requires: a direct reference, which "
        "pip would build or fetch outside the backend's sandbox; patchtool installs build requirements only by name"
    )
    assert caught.value.exit_code == ExitCode.PROBLEMS
    assert not list((tmp_path / "out").glob("*.whl"))


def test_a_direct_reference_a_sandboxed_hook_returns_is_refused(tmp_path: Path, home: Path) -> None:
    src = asking_project(tmp_path / "src", "[]", backend="asks_backend")
    (src / "asks_backend.py").write_text(ASKS_BACKEND)
    with pytest.raises(BuildError) as caught:
        build(src, tmp_path / "out", isolation=True)
    assert str(caught.value).startswith(f"the build asks for 'pwnreq @ file://{src}/pwnreq' in its backend's")
    assert not list((tmp_path / "out").glob("*.whl"))


# -- the install step runs confined too: a requirement's .pth file runs in every later pip ---------

PTH_BACKEND = textwrap.dedent("""\
    from reach_backend import build_wheel  # noqa: F401

    def get_requires_for_build_wheel(config_settings=None):
        return ["plainreq"]  # a second install: pip starts again, in the environment the first made
    """)


def test_a_requirements_pth_file_runs_confined_in_the_next_install(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build requirement's wheel carries a ``.pth`` file, which the environment's Python runs at
    every start: the second pip install ran it with the command's own rights, and it wrote into
    the home directory. pip runs sandboxed now: the write is refused, and the build goes on."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    planted = home / "planted-by-pth"
    make_wheel(
        wheels / "pthplant-1.0-py3-none-any.whl",
        "pthplant",
        "1.0",
        {"pthplant.pth": f"import pathlib; pathlib.Path({str(planted)!r}).write_text('planted')\n"},
    )
    make_wheel(wheels / "plainreq-1.0-py3-none-any.whl", "plainreq", "1.0", {"plainreq.py": "X = 1\n"})
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    src = asking_project(tmp_path / "src", '["pthplant"]', backend="pth_backend")
    (src / "pth_backend.py").write_text(PTH_BACKEND)
    wheel = build(src, tmp_path / "out", isolation=True)
    assert zipfile.ZipFile(wheel).read("demo/__init__.py") == b"X = 1\n"
    assert not planted.exists()
    assert sorted(p.name for p in home.iterdir()) == [".netrc", ".ssh"]


def test_a_requirement_pip_cannot_install_is_a_build_error_in_pips_words(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by an attack: pypa/build's install raised CalledProcessError, which was exit 70."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    src = asking_project(tmp_path / "src", '["patchtool-test-no-such-requirement"]')
    with pytest.raises(BuildError) as caught:
        build(src, tmp_path / "out", isolation=True)
    message = str(caught.value)
    assert message.startswith(
        "installing the build requirements failed (pip exit 1): patchtool-test-no-such-requirement\n"
    ), message
    assert "No matching distribution found for patchtool-test-no-such-requirement" in message
    assert caught.value.hint and "pip runs confined (Landlock)" in caught.value.hint

"""The warm process a stopped rebase leaves for the command that goes on from it (cli/warm.py).

The caller side is driven in this process (``warm.run``), or in a child started with this process's
environment and import path, so that both name the same process; the server is a real one, started
by ``warm.start`` or by a real ``patchtool rebase`` that stops.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import Demo
from patchtool.cli import warm
from patchtool.cli.warm import caller as caller_side
from patchtool.cli.warm import identity, server, wire
from test_rebase import releases
from test_rebase_conflicts import CORE, stop

__all__ = ["releases"]  # the fixture, used by name

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the warm process is Linux-only")


def servers(root: Path) -> list[int]:
    """The warm processes started for the rebase in ``root``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(b"patchtool.cli.warm" in a for a in argv) and os.fsencode(root) in argv:
                found.append(int(entry.name))
    return found


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def wait_for(predicate, what: str, seconds: float = 20.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def ready() -> bool:
    """Whether a warm process for this process's environment and import path takes commands."""
    import _socket

    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        conn.settimeout(5)
        conn.connect(identity.address(identity.key(os.environb, sys.path)))
        return wire.receive(conn) == [b"ready"]
    except OSError:
        return False
    finally:
        conn.close()


@pytest.fixture
def warm_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """The warm process allowed (conftest turns it off for every other test); each one started for
    a root listed in the yielded list is ended afterwards."""
    monkeypatch.delenv(warm.SWITCH, raising=False)
    roots: list[Path] = []
    yield roots
    for root in roots:
        for pid in servers(root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def started(demo: Demo, roots: list[Path]) -> Path:
    """A rebase of ``demo`` stopped at its conflict, and a warm process for this process; the worktree."""
    worktree = stop(demo, env={warm.SWITCH: "0"})
    roots.append(demo.root)
    warm.start(demo.root)
    wait_for(ready, "the warm process")
    return worktree


def resolve(worktree: Path) -> None:
    text = (worktree / CORE).read_text()
    head, rest = text.split("<<<<<<< ", 1)
    _ours, rest = rest.split("=======\n", 1)
    theirs, tail = rest.split(">>>>>>> ", 1)
    (worktree / CORE).write_text(head + theirs + tail.split("\n", 1)[1])


def envelope(out: str) -> dict:
    return json.loads(out)


# -- which command lines, and the name ---------------------------------------------------------------

@pytest.mark.parametrize(("argv", "goes"), [
    (["rebase", "--continue"], True),
    (["--json", "rebase", "--skip", "--reason", "x"], True),
    (["--root", "rebase", "status", "--continue"], False),  # --root's value is not the command
    (["--root", "/r", "rebase", "--abort"], True),
    (["rebase", "--to", "1.1"], False),
    (["status"], False),
    (["new", "rebase", "--continue"], False),
    ([], False),
])
def test_only_the_commands_that_go_on_from_a_stop(argv: list[str], goes: bool) -> None:
    assert identity.goes_on(argv) is goes


def test_the_name_follows_everything_a_command_would_run_with() -> None:
    env = {b"HOME": b"/h", b"PATH": b"/bin", b"_": b"/usr/bin/env", b"PWD": b"/a", b"SHLVL": b"1"}
    base = identity.key(env, ["/p"])
    assert identity.key({**env, b"_": b"/x", b"PWD": b"/b", b"OLDPWD": b"/c", b"SHLVL": b"2"}, ["/p"]) == base
    assert identity.key({**env, b"PATH": b"/usr/bin"}, ["/p"]) != base
    assert identity.key({**env, b"PATCHTOOL_CACHE_DIR": b"/c"}, ["/p"]) != base
    assert identity.key(env, ["/p", "/q"]) != base
    assert identity.key(env, ["/q"]) != base


@given(st.lists(st.binary(max_size=300), max_size=20))
def test_a_frame_reads_back_as_its_fields(fields: list[bytes]) -> None:
    a, b = socket.socketpair()
    try:
        wire.send(a, fields)
        wire.send(a, [b"next"])
        assert wire.receive(b) == fields
        assert wire.receive(b) == [b"next"]  # one frame per read, the next one left in place
        a.close()
        assert wire.receive(b) is None
    finally:
        a.close()
        b.close()


def test_a_malformed_frame_is_refused() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"\0\0\0\x08\0\0\0\x09abcd")  # a field longer than its frame
        with pytest.raises(ValueError):
            wire.receive(b)
        a.sendall(b"\xff\xff\xff\xff")
        with pytest.raises(ValueError):
            wire.receive(b)


def test_another_user_is_not_talked_to(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = socket.socketpair()
    with a, b:
        assert identity.same_process(a)
        monkeypatch.setattr(os, "getuid", lambda: 4242)
        assert not identity.same_process(a)


# -- with a real warm process ---------------------------------------------------------------------------

def test_none_there_means_the_command_runs_here(warm_on: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHTOOL_WARM_TEST_NOBODY", str(time.time()))  # a name no process has
    assert warm.run(["rebase", "--continue"]) is None
    monkeypatch.setenv(warm.SWITCH, "0")
    assert warm.run(["rebase", "--continue"]) is None


def test_a_warm_continue_finishes_the_rebase(releases: Demo, warm_on: list[Path],
                                                   capfd: pytest.CaptureFixture[str]) -> None:
    worktree = started(releases, warm_on)
    resolve(worktree)
    capfd.readouterr()
    code = warm.run(["rebase", "--continue", "--json", "--root", str(releases.root), "--cache-dir", str(releases.cache)])
    out = capfd.readouterr()
    assert code == 0, out
    data = envelope(out.out)["data"]
    assert data["status"] == "done"
    bye = next(p for p in data["patches"] if p["id"] == "bye")
    assert bye["outcome"] == "merged by 3-way merge" and "resolved by hand" in bye["detail"]
    patch = (releases.root / "patches/0004-bye.patch").read_text()
    assert '-    word = "goodbye"\n+    word = "ciao"' in patch
    assert not (releases.root / ".patchtool/rebase").exists()
    # the rebase is over, so is its warm process
    wait_for(lambda: not servers(releases.root), "the warm process to end")


def test_an_error_is_the_callers_with_its_exit_code(releases: Demo, warm_on: list[Path],
                                                    capfd: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    started(releases, warm_on)
    capfd.readouterr()
    code = warm.run(["rebase", "--continue", "--root", str(releases.root), "--cache-dir", str(releases.cache)])  # markers left in place
    out = capfd.readouterr()
    assert code == 2
    assert f"conflict markers remain in {CORE}" in out.err and "Traceback" not in out.err
    code = warm.run(["rebase", "--skip", "--root", str(releases.root), "--cache-dir", str(releases.cache)])
    assert code == 2 and "--skip needs --reason" in capfd.readouterr().err
    # the working directory is the caller's: no --root, found from where the caller stands
    monkeypatch.chdir(releases.root)
    code = warm.run(["rebase", "--abort", "--cache-dir", str(releases.cache)])
    assert code == 0 and "rebase aborted" in capfd.readouterr().out
    assert not (releases.root / ".patchtool/rebase").exists()


def test_a_changed_environment_finds_no_process(releases: Demo, warm_on: list[Path],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    started(releases, warm_on)
    monkeypatch.setenv("PATCHTOOL_LOCK_TIMEOUT", "3")
    assert warm.run(["rebase", "--abort", "--root", str(releases.root), "--cache-dir", str(releases.cache)]) is None
    assert (releases.root / ".patchtool/rebase").exists()  # nothing ran there


COLD = 99  # what a caller below exits with when no warm process took its command


def caller(*argv: str, wrap: tuple[str, ...] = (), preexec=None) -> subprocess.Popen[bytes]:  # type: ignore[no-untyped-def]
    """A caller in its own process, with this process's environment and import path."""
    code = (f"import sys; sys.path[:] = {sys.path!r}; from patchtool.cli import warm; "
            f"code = warm.run({list(argv)!r}); sys.exit({COLD} if code is None else code)")
    return subprocess.Popen([*wrap, sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=os.environb, preexec_fn=preexec)


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """The repository's lock held by this process, as another patchtool command would hold it."""
    fd = os.open(root, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def forked(root: Path) -> int:
    (server,) = wait_for(lambda: servers(root), "the warm process")
    return int(wait_for(lambda: children(server), "the fork running the command")[0])


def test_a_killed_caller_takes_its_command_with_it(releases: Demo, warm_on: list[Path]) -> None:
    started(releases, warm_on)
    with locked(releases.root):
        proc = caller("rebase", "--abort", "--root", str(releases.root), "--cache-dir", str(releases.cache))
        fork = forked(releases.root)  # waiting for the lock
        assert Path(f"/proc/{fork}/stat").read_text().rsplit(")", 1)[1].split()[2] == str(fork)  # its own group
        from patchtool.project.lock import _command_of

        assert _command_of(str(fork)) == "patchtool rebase"  # what a command waiting for the lock names
        proc.kill()
        proc.wait()
        # at once, while the lock is still held: not by giving up on it
        wait_for(lambda: not Path(f"/proc/{fork}").exists() or
                 Path(f"/proc/{fork}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z", "the fork to die",
                 seconds=3)
    assert (releases.root / ".patchtool/rebase/state.json").exists()  # it never ran


def test_an_interrupt_reaches_the_command(releases: Demo, warm_on: list[Path]) -> None:
    started(releases, warm_on)
    with locked(releases.root):
        proc = caller("rebase", "--abort", "--root", str(releases.root), "--cache-dir", str(releases.cache))
        forked(releases.root)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (out, err)
    assert err == b"interrupted\n"  # the command's own words: it got the signal and ended as it would cold
    assert (releases.root / ".patchtool/rebase/state.json").exists()


def test_a_stopped_rebase_leaves_one_and_the_next_command_uses_it(releases: Demo, warm_on: list[Path]) -> None:
    """Through the command line, as a user runs it: the stop starts it, `--continue` is run by it."""
    worktree = stop(releases)
    warm_on.append(releases.root)
    (server,) = wait_for(lambda: servers(releases.root), "the warm process")

    def reaped() -> int:  # the CPU time of the children it ran and reaped, in clock ticks
        fields = Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[13]) + int(fields[14])

    res = releases.run("rebase", "--continue")  # refused: the markers are still there
    assert res.returncode == 2 and f"conflict markers remain in {CORE}" in res.stderr
    wait_for(lambda: reaped() > 0, "the warm process to have run the command", seconds=5)
    resolve(worktree)
    res = releases.run("rebase", "--continue", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert envelope(res.stdout)["data"]["status"] == "done"
    wait_for(lambda: not servers(releases.root), "the warm process to end")


def test_the_warm_imports_cover_a_rebase_to_its_end(releases: Demo) -> None:
    """What the process imports before it forks is all a `--continue` that finishes the rebase
    imports (of patchtool and the libraries it stands on): a fork pays for no import."""
    worktree = stop(releases)
    resolve(worktree)
    script = ("import json, sys; from patchtool.cli.warm import server; server.warm_up(); before = set(sys.modules); "
              "from patchtool.cli.app import main; code = main(sys.argv[1:]); "
              "print(json.dumps([code, sorted(set(sys.modules) - before)]))")
    res = subprocess.run([sys.executable, "-c", script, "rebase", "--continue", "--json", "--root", str(releases.root),
                          "--cache-dir", str(releases.cache)], capture_output=True, text=True, check=False)
    code, imported = json.loads(res.stdout.strip().splitlines()[-1])
    assert code == 0, res.stdout + res.stderr
    heavy = ("patchtool", "typer", "click", "rich", "git", "gitdb", "tomlkit", "unidiff", "packaging")
    assert [m for m in imported if m.split(".")[0] in heavy] == []


def lower_file_limit() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 200), hard))


@pytest.mark.parametrize("setup", ["ulimit", "nice", "mount namespace"])
def test_a_caller_in_another_world_runs_its_command_itself(releases: Demo, warm_on: list[Path], setup: str) -> None:
    """Same user, same environment, but another process world: limits, priority, a sandbox's
    namespaces. Its command is neither sent to the warm process nor run there."""
    started(releases, warm_on)
    argv = ("rebase", "--abort", "--root", str(releases.root), "--cache-dir", str(releases.cache))
    if setup == "mount namespace":
        import shutil

        if not shutil.which("unshare"):
            pytest.skip("unshare (util-linux) is not installed")
        if subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False).returncode:
            pytest.skip("unshare -m is not allowed here (needs privileges or user namespaces)")
        proc = caller(*argv, wrap=("unshare", "-m"))
    else:
        proc = caller(*argv, preexec=lower_file_limit if setup == "ulimit" else lambda: os.nice(5))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == COLD, (out, err)
    assert (releases.root / ".patchtool/rebase/state.json").exists()
    assert ready()  # still there for a caller in its world


def test_it_runs_only_the_commands_that_go_on_from_a_stop(releases: Demo, warm_on: list[Path]) -> None:
    """A same-world caller that asks for anything else gets nothing run: it runs its command itself."""
    import _socket

    started(releases, warm_on)
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    conn.connect(identity.address(identity.key(os.environb, sys.path)))
    assert wire.receive(conn) == [b"ready"]
    assert caller_side.hand_over(conn, ["status", "--root", str(releases.root)]) is None


def test_a_connection_handed_to_another_world_is_not_served(releases: Demo, warm_on: list[Path]) -> None:
    """Connected from this world, then the socket handed to a process in another (here one under
    `nice`), which sends the request: the kernel says who sent it, and it is not run."""
    import _socket

    started(releases, warm_on)
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    conn.connect(identity.address(identity.key(os.environb, sys.path)))
    assert wire.receive(conn) == [b"ready"]
    argv = ["rebase", "--abort", "--root", str(releases.root), "--cache-dir", str(releases.cache)]
    code = (f"import _socket, sys; sys.path[:] = {sys.path!r}; from patchtool.cli.warm import caller; "
            f"code = caller.hand_over(_socket.socket(fileno={conn.fileno()}), {argv!r}); "
            f"sys.exit({COLD} if code is None else code)")
    res = subprocess.run([sys.executable, "-c", code], pass_fds=[conn.fileno()], preexec_fn=lambda: os.nice(5),
                         capture_output=True, env=os.environb, check=False)
    conn.close()
    assert res.returncode == COLD, res
    assert (releases.root / ".patchtool/rebase/state.json").exists()


def ignore_hangups() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def test_a_signal_the_caller_ignores_is_ignored_by_the_command(releases: Demo, warm_on: list[Path]) -> None:
    """`nohup patchtool rebase --abort`: the hang-up that comes meanwhile ends neither."""
    started(releases, warm_on)
    with locked(releases.root):
        proc = caller("rebase", "--abort", "--root", str(releases.root), "--cache-dir", str(releases.cache),
                      preexec=ignore_hangups)
        fork = forked(releases.root)
        proc.send_signal(signal.SIGHUP)
        os.killpg(fork, signal.SIGHUP)  # as a closed terminal would send it to every process of the job
        time.sleep(0.3)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, (out, err)
    assert not (releases.root / ".patchtool/rebase").exists()


def test_a_caller_stopped_before_the_go_runs_nothing(tmp_path: Path) -> None:
    """A process that takes the request and never answers: Ctrl-C still ends the caller at once,
    with nothing run."""
    listener, peer = socket.socketpair()
    code = (f"import _socket, sys; sys.path[:] = {sys.path!r}; from patchtool.cli.warm import caller; "
            f"code = caller.hand_over(_socket.socket(fileno={peer.fileno()}), ['rebase', '--abort']); "
            f"sys.exit({COLD} if code is None else code)")
    proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[peer.fileno()], stderr=subprocess.PIPE,
                            env=os.environb)
    peer.close()
    listener.settimeout(30)
    assert listener.recv(4)  # the request is on its way: the caller now waits for a fork
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=10)
    listener.close()
    assert proc.returncode == 130 and err == b"interrupted\n"


def test_a_client_that_stalls_neither_blocks_others_nor_keeps_what_it_sent(releases: Demo,
                                                                            warm_on: list[Path]) -> None:
    """Said ready, got the descriptors and half a request, then nothing: within its two seconds the
    process drops it, closes the descriptors (the pipe's reader sees its end), and serves the next."""
    import _socket

    started(releases, warm_on)
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    conn.connect(identity.address(identity.key(os.environb, sys.path)))
    assert wire.receive(conn) == [b"ready"]
    read, write = os.pipe()
    conn.sendmsg([b"\0\0\1\0"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("3i", write, write, write))])
    os.close(write)
    import select

    readable, _, _ = select.select([read], [], [], server.REQUEST_SECONDS + 2)
    assert readable and os.read(read, 1) == b""  # every copy of the write end closed: the server's too
    conn.close()
    os.close(read)
    assert ready()

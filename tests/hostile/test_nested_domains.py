"""No child patchtool starts can reach into patchtool's own process (issue 28, found by an attack).

Landlock lets a process trace, read or write the memory of (``ptrace``, ``process_vm_writev``,
``/proc/PID/mem``) only a process in its own domain or one nested in it. A git child in the
command's own domain could write into patchtool's memory and steer the thread the confinement does
not hold (it writes the report file the command line names, runs ``$EDITOR``): so every child the
git layer starts enters a domain of its own (``confine.child_preexec``). Differential: a child
started in the command's domain, as before, does write into it; one started as git is, cannot.
Each case runs in a process of its own, since a confinement cannot be undone."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import HANG_GUARD_S
from patchtool import confine

SUPPORT = confine.support()
pytestmark = pytest.mark.skipif(not SUPPORT.usable, reason=f"no usable Landlock here: {SUPPORT.describe()}")

# what code running confined in a git child (a filter, a hook: anything the attack gets to run) tries
CHILD = textwrap.dedent("""\
    import ctypes, json, sys
    pid, tid, addr = map(int, sys.argv[1:4])
    libc = ctypes.CDLL(None, use_errno=True)
    class iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
    data = ctypes.create_string_buffer(b"overwritten")
    out = {}
    for name, target in (("main", pid), ("unconfined", tid)):  # the main thread, and the one confine does not hold
        local, remote = iovec(ctypes.addressof(data), 11), iovec(addr, 11)
        n = libc.process_vm_writev(target, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        out[name] = n if n >= 0 else -ctypes.get_errno()
    try:
        open(f"/proc/{pid}/mem", "r+b").close()
        out["mem"] = "opened"
    except OSError as exc:
        out["mem"] = exc.errno
    print(json.dumps(out))
""")

# patchtool's command as the runner confines it (``Unconfined`` first, then ``confine``), starting
# the child as the git layer starts every git (``IsolatedGit.execute``), then as a plain child
PARENT = textwrap.dedent("""\
    import ctypes, json, os, subprocess, sys, threading
    from pathlib import Path
    from patchtool import confine
    from patchtool.git import command
    inside, child, how = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    report = ctypes.create_string_buffer(str(inside / "report.html").encode().ljust(64, b"\\0"))
    unconfined = confine.Unconfined()
    confine.confine([inside])
    tid = unconfined.call(threading.get_native_id)
    argv = [sys.executable, "-c", child, str(os.getpid()), str(tid), str(ctypes.addressof(report))]
    if how == "git":
        said = command.new_git().execute(argv, with_extended_output=True, with_exceptions=False)[1]
    else:
        said = subprocess.run(argv, capture_output=True, text=True, start_new_session=True).stdout
    unconfined.close()
    print(json.dumps({"child": json.loads(said), "report": report.value.decode()}))
""")


def _run(tmp_path: Path, how: str) -> dict[str, object]:
    inside = tmp_path / "inside"
    inside.mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", PARENT, str(inside), CHILD, how],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_a_child_in_the_commands_own_domain_writes_into_patchtool(tmp_path: Path) -> None:
    """The case is real on this kernel: a child started in the command's domain (a plain
    ``subprocess``, as every git was) writes the path the unconfined thread would write."""
    got = _run(tmp_path, "plain")
    assert got["child"]["main"] == 11, got  # type: ignore[index]
    assert got["report"].startswith("overwritten"), got  # type: ignore[union-attr]


def test_a_git_child_can_neither_write_nor_read_patchtools_memory(tmp_path: Path) -> None:
    got = _run(tmp_path, "git")
    child = got["child"]
    assert child == {"main": -errno.EPERM, "unconfined": -errno.EPERM, "mem": errno.EACCES}, child
    assert got["report"] == str(tmp_path / "inside" / "report.html"), got


def test_git_runs_as_before_in_its_own_domain(tmp_path: Path) -> None:
    """A git in a domain of its own still writes where the command may, and nowhere else."""
    script = textwrap.dedent("""\
        import sys
        from pathlib import Path
        from patchtool import confine
        from patchtool.git.command import Runner
        inside = Path(sys.argv[1])
        confine.confine([inside])
        Runner().run("init", "--quiet", args=[str(inside / "r")])
        outside = Runner().run("init", "--quiet", args=[sys.argv[2]], check=False)
        print(outside.returncode)
    """)
    inside = tmp_path / "inside"
    inside.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", script, str(inside), str(tmp_path / "outside")],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (inside / "r" / ".git" / "HEAD").is_file(), done.stderr
    assert done.stdout.strip() != "0" and not (tmp_path / "outside").exists()

"""Who is who: the name a warm process listens on (a digest of what a command would run with),
which command lines it is for, and whether the other end of a connection lives in this
process's world. Read by the caller, so: C modules only."""

from __future__ import annotations

import _socket
import os
import struct
import sys

TYPE_CHECKING = False  # typing itself costs the caller 9 ms

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

SWITCH = "PATCHTOOL_WARM"
_VOLATILE = frozenset({b"_", b"PWD", b"OLDPWD", b"SHLVL"})
_GOES_ON = frozenset({"--continue", "--skip", "--abort"})
_WITH_VALUE = frozenset({"--root", "--cache-dir"})

serving = False  # True in a fork that runs a command: it never starts another process, nor asks one


def enabled(environ: Mapping[str, str]) -> bool:
    return sys.platform.startswith("linux") and environ.get(SWITCH, "") != "0"


def goes_on(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is ``rebase`` with ``--continue``, ``--skip`` or ``--abort`` (global options
    anywhere). Only a gate: the fork parses the command line as a cold command would."""
    words = iter(argv)
    for word in words:
        if word in _WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word == "rebase" and any(w in _GOES_ON for w in argv)
    return False


def key(environ: Mapping[bytes, bytes], path: Sequence[str]) -> str:
    """The digest that names the process: what a command started with ``environ`` and import
    path ``path`` would run."""
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]
    except ImportError:  # an interpreter without it: hashlib's (2.5 ms more)
        from hashlib import sha256

    h = sha256()

    def add(*parts: object) -> None:
        for part in parts:
            h.update(part if isinstance(part, bytes) else os.fsencode(str(part)))
            h.update(b"\0")

    add("warm 1", sys.executable, sys.version, sys.flags, sorted(sys._xoptions.items()), os.getuid())
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # patchtool/
    for folder, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            st = os.stat(os.path.join(folder, name))
            add(os.path.relpath(os.path.join(folder, name), package), st.st_size, st.st_mtime_ns)
    for entry in path:
        try:
            add(entry, os.stat(entry or ".").st_mtime_ns)
        except OSError:
            add(entry, "-")
    for variable in sorted(environ):
        if variable not in _VOLATILE:
            add(variable, environ[variable])
    return str(h.hexdigest()[:48])


def address(digest: str) -> str:
    return f"\0patchtool-warm-{digest}"


def same_process(conn: _socket.socket) -> bool:
    """Whether the other end is this user, in this process's world: the same namespaces (mount,
    pid, network, user, cgroup, ...) and root, credentials, groups and capabilities, no_new_privs
    and seccomp, resource limits, priority, cgroup and CPU affinity. A same-user process in a
    sandbox or a container (which may share the network namespace, and so the socket name), or one
    started under ``nice``, ``ulimit``, ``sg`` or ``taskset``, is neither served nor sent to: its
    command runs cold, in its own world, as it always could."""
    creds = conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return same_world(pid, uid)


def same_world(pid: int, uid: int) -> bool:
    if uid != os.getuid() or pid <= 0:  # 0: a process outside this pid namespace
        return False
    theirs = facts(str(pid))
    return theirs is not None and theirs == facts("self")


_STATUS_FACTS = (b"Uid:", b"Gid:", b"Groups:", b"Cap", b"NoNewPrivs:", b"Seccomp", b"Cpus_allowed_list:",
                 b"Mems_allowed_list:")


def facts(pid: str) -> bytes | None:
    """What a command's run depends on beyond its environment and files, as /proc shows it for
    ``pid``; None when it cannot be read."""
    base = f"/proc/{pid}"
    try:
        parts = [os.fsencode(os.readlink(f"{base}/ns/{ns}")) for ns in sorted(os.listdir(f"{base}/ns"))]
        parts.append(os.fsencode(os.readlink(f"{base}/root")))
        with open(f"{base}/status", "rb") as fh:
            parts += [line for line in fh.read().splitlines() if line.startswith(_STATUS_FACTS)]
        for name in ("limits", "cgroup"):
            with open(f"{base}/{name}", "rb") as fh:
                parts.append(fh.read())
        with open(f"{base}/stat", "rb") as fh:
            parts += fh.read().rsplit(b")", 1)[1].split()[15:17]  # priority and nice
    except OSError:
        return None
    return b"\0".join(parts)

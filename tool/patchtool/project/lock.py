"""The one lock of a patch repository: writers exclusive, readers shared; and how every lock
patchtool takes (this one, the cache's) waits.

Every command holds it from the moment it finds the repository until it exits: a writing command
alone, so two imports never take the same number and two applies never report each other's tree;
a reading command beside other readers, so it never sees half of a write. The lock is an
``flock`` on the repository directory itself, which never moves and which no command has to
create, so taking it writes nothing; a second command's message names the holder from what the
kernel knows. The kernel releases it when the process dies, kill -9 included.

Every lock waits at most ``$PATCHTOOL_LOCK_TIMEOUT`` seconds (default 10; a finite number, 0 or
more, else a usage error), then gives up with ``Busy`` (exit 75) naming who holds it: a command
never waits forever on another, a slow download in another clone included.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path

from patchtool.errors import Busy, UsageError

DEFAULT_WAIT = 10.0  # seconds a command waits for another to finish before giving up
TIMEOUT_ENV = "PATCHTOOL_LOCK_TIMEOUT"


def wait_limit() -> float:
    """The seconds a lock is waited for; UsageError for a value that is not a finite number >= 0
    (``nan`` would wait forever, ``inf`` too)."""
    if (raw := os.environ.get(TIMEOUT_ENV)) is None:
        return DEFAULT_WAIT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise UsageError(
            f"${TIMEOUT_ENV} is {raw!r}: not a number of seconds",
            hint=f"give a number, 0 or more (e.g. {TIMEOUT_ENV}=30), or unset it for {DEFAULT_WAIT:g}",
        )
    return value


def _holder(path: Path) -> str:
    """Who holds the lock on ``path``, as the kernel says (Linux's /proc/locks): nothing is
    written to name the holder."""
    try:
        st = os.stat(path)
        with open("/proc/locks", encoding="ascii") as fh:
            rows = fh.read().splitlines()
    except OSError:
        return "pid unknown"
    for row in rows:
        fields = row.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[1] == "->":
            continue
        dev_inode = fields[5].split(":")
        if len(dev_inode) == 3 and int(dev_inode[2]) == st.st_ino:
            return f"pid {fields[4]}, `{_command_of(fields[4])}`"
    return "pid unknown"


def _command_of(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [w.decode("utf-8", "replace") for w in fh.read().split(b"\0") if w]
    except OSError:
        return "patchtool"
    names = [os.path.basename(w) for w in argv]
    after = names[names.index("patchtool") + 1 :] if "patchtool" in names else []
    return " ".join(["patchtool", *[w for w in after if not w.startswith("-")][:1]])


def wait_for(fd: int, path: Path, *, exclusive: bool, what: str) -> None:
    """``flock`` ``fd`` (the open ``path``), waiting at most ``wait_limit()``; Busy naming
    ``what`` and its holder when it stays taken."""
    deadline = time.monotonic() + wait_limit()
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    while True:
        try:
            fcntl.flock(fd, mode)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise Busy(
                    f"another patchtool command ({_holder(path)}) holds the lock on {what}",
                    hint="wait for it to finish and run this again",
                ) from None
            time.sleep(0.05)


@contextlib.contextmanager
def held(root: Path, *, exclusive: bool) -> Iterator[None]:
    """Hold the repository's lock (alone when ``exclusive``); Busy when it stays taken past the
    wait (``$PATCHTOOL_LOCK_TIMEOUT`` seconds, default 10)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        wait_for(fd, root, exclusive=exclusive, what=str(root))
        yield
    finally:
        os.close(fd)  # releases the lock

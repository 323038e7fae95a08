"""How long and how much one git fetch from a remote may take: the user's to set, never a
repository's.

A fetch has an overall deadline (``PATCHTOOL_FETCH_DEADLINE`` seconds, else 30 minutes, on a clock
a test can move), past which its whole process group is killed, and a size (``PATCHTOOL_FETCH_MAX_SIZE``,
else 4 GiB): every file a process of the fetch writes is held to it by ``RLIMIT_FSIZE``, and the
received objects are always kept as one pack (``transfer.unpackLimit=1``), so the pack the remote
sends is what the size bounds. git's own ``http.lowSpeedLimit`` gives up a stalled transfer sooner.
A fetch writes one ref file per refspec with a destination, and names each ref it writes
(``PATCHTOOL_FETCH_MAX_REFS``, else 10,000): no pattern lets a remote choose how many.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import resource
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from patchtool import fsroot
from patchtool.errors import UpstreamError, UsageError

DEADLINE_ENV = "PATCHTOOL_FETCH_DEADLINE"
SIZE_ENV = "PATCHTOOL_FETCH_MAX_SIZE"
REFS_ENV = "PATCHTOOL_FETCH_MAX_REFS"
MEMORY_ENV = "PATCHTOOL_FETCH_MAX_MEMORY"
DEFAULT_DEADLINE = 1800.0  # 30 minutes, as one download (upstream/index.py)
MAX_DEADLINE = 7 * 86400
DEFAULT_SIZE = 4 << 30  # as a download without a pinned size
MAX_SIZE = 1 << 40
DEFAULT_MEMORY = 2 << 30  # git's own heap in a fetch: what index-pack needs for a large pack, well within it
DEFAULT_REFS = 10_000  # far above a release history's tags; each is a file in the cache
MAX_REFS = 1_000_000
# what one remote's list of refs may be: some 500,000 tags, where a release history has hundreds and
# the busiest repositories tens of thousands
MAX_LISTING_BYTES = 64 << 20
MAX_MESSAGE_BYTES = 1 << 20  # what git may print of one fetch: its errors, and the remote's own lines
_STARVED = re.compile(
    r"out of memory|cannot allocate memory|malloc failed|cannot create [a-z ]*thread|unable to fork", re.IGNORECASE
)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


class FetchTooSlow(UpstreamError):
    """A fetch that ran past its overall deadline."""


class FetchTooLarge(UpstreamError):
    """A fetch whose pack outgrew its size, or that would write more refs than it may."""


def seconds(env: str, given: str, *, default: float, most: float, what: str) -> float:
    """``given``, the user's ``$env``, as seconds from 1 to ``most`` that ``what`` may take; a
    UsageError naming the variable otherwise (a download's deadline reads it the same way)."""
    try:
        value = float(given)
    except ValueError:
        value = -1.0
    if not 1 <= value <= most:  # nan fails this too
        raise UsageError(
            f"{env}={given!r} is not a number of seconds from 1 to {most}",
            hint=f"set it to the most seconds {what} may take (default {default:.0f}), or unset it",
        )
    return value


def _deadline(given: str) -> float:
    return seconds(DEADLINE_ENV, given, default=DEFAULT_DEADLINE, most=MAX_DEADLINE, what="one git fetch")


def _size(given: str, env: str = SIZE_ENV, default: int = DEFAULT_SIZE, what: str = "receive") -> int:
    found = re.fullmatch(r"([0-9]{1,16})([kmg]?)", given.lower())
    value = int(found[1]) * _UNITS[found[2]] if found else 0
    if not 1 <= value <= MAX_SIZE:
        raise UsageError(
            f"{env}={given!r} is not a number of bytes from 1 to 1 TiB (a k, m or g suffix counts KiB, MiB, GiB)",
            hint=f"set it to the most one git fetch may {what} (default {default >> 30}g), or unset it",
        )
    return value


def _refs(given: str) -> int:
    value = int(given) if re.fullmatch(r"[0-9]{1,7}", given) else 0
    if not 1 <= value <= MAX_REFS:
        raise UsageError(
            f"{REFS_ENV}={given!r} is not a number of refs from 1 to {MAX_REFS}",
            hint=f"set it to the most refs one git fetch may write (default {DEFAULT_REFS}), or unset it",
        )
    return value


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FetchLimits:
    """The overall ``deadline`` (seconds on ``clock``), the most bytes (``max_bytes``) and the most
    refs written (``max_refs``) of one fetch."""

    deadline: float = DEFAULT_DEADLINE
    max_bytes: int = DEFAULT_SIZE
    max_refs: int = DEFAULT_REFS
    max_memory: int = DEFAULT_MEMORY
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def from_environment(cls) -> FetchLimits:
        """The limits the user set (``PATCHTOOL_FETCH_DEADLINE``, ``PATCHTOOL_FETCH_MAX_SIZE``,
        ``PATCHTOOL_FETCH_MAX_REFS``, ``PATCHTOOL_FETCH_MAX_MEMORY``), else the defaults."""
        keys = (DEADLINE_ENV, SIZE_ENV, REFS_ENV, MEMORY_ENV)
        deadline, size, refs, memory = (os.environ.get(k, "").strip() for k in keys)
        return cls(
            deadline=_deadline(deadline) if deadline else DEFAULT_DEADLINE,
            max_bytes=_size(size) if size else DEFAULT_SIZE,
            max_refs=_refs(refs) if refs else DEFAULT_REFS,
            max_memory=_size(memory, MEMORY_ENV, DEFAULT_MEMORY, "use in memory") if memory else DEFAULT_MEMORY,
        )

    def _effective(self) -> int:
        """``max_bytes``, or a lower hard limit the user set."""
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        return self.max_bytes if hard == resource.RLIM_INFINITY else min(self.max_bytes, hard)

    def preexec(self) -> Callable[[], None]:
        """What the child runs before git: every file it and its children write is held to
        ``max_bytes``, and the memory each allocates (``RLIMIT_DATA``: its heap and private
        mappings, not the pack files git maps to read) to ``max_memory``: git holds a remote's whole
        list of refs before it prints one, so no reading of its output bounds that."""
        most = self._effective()
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        memory = self.max_memory if hard == resource.RLIM_INFINITY else min(self.max_memory, hard)
        return functools.partial(_limit, most, memory)

    def starved(self, stderr: str) -> bool:
        """Whether a git that failed ran out of the memory ``preexec`` gave it."""
        return bool(_STARVED.search(stderr))

    def out_of_memory(self, what: str) -> FetchTooLarge:
        return FetchTooLarge(
            f"{what} needed more than the {self.max_memory} bytes of memory patchtool lets one git fetch use; "
            "refusing it",
            hint=f"if the repository is that large, allow more with {MEMORY_ENV} (e.g. {MEMORY_ENV}=8g)",
        )

    def wait(
        self, popen: subprocess.Popen[bytes], *, what: str, input: bytes | None = None, listing: bool = False
    ) -> tuple[int, bytes, bytes]:
        """The exit status and output of the fetch ``popen`` (given ``input``), read as it comes:
        once the deadline passed, its whole process group killed (it leads a session of its own) and
        ``FetchTooSlow``; once its messages pass MAX_MESSAGE_BYTES (a remote's "remote:" lines are
        the remote's to choose), or its output MAX_LISTING_BYTES where it ``listing`` what a remote
        has (``ls-remote``), killed alike and ``FetchTooLarge``: nothing a remote sends is held whole."""
        assert popen.stdout is not None and popen.stderr is not None
        if input is not None:
            threading.Thread(target=_feed, args=(popen, input), daemon=True).start()
        end = self.clock() + self.deadline
        out, err = bytearray(), bytearray()
        with selectors.DefaultSelector() as chosen:
            chosen.register(
                popen.stdout, selectors.EVENT_READ, (out, MAX_LISTING_BYTES if listing else MAX_MESSAGE_BYTES)
            )
            chosen.register(popen.stderr, selectors.EVENT_READ, (err, MAX_MESSAGE_BYTES))
            while chosen.get_map():
                if (remaining := end - self.clock()) <= 0:
                    raise self._too_slow(popen, what)
                for key, _ in chosen.select(remaining):
                    held, most = key.data
                    if not (chunk := os.read(key.fd, 1 << 16)):
                        chosen.unregister(key.fileobj)
                    elif len(held) + len(chunk) > most:
                        kill_group(popen)
                        said = "listed" if held is out and listing else "printed"
                        of = "a remote's refs" if held is out and listing else "what git prints"
                        raise FetchTooLarge(
                            f"{what} {said} more than the {most} bytes patchtool reads of {of}; refusing it",
                            hint="name a repository whose tags a release history can list, or a mirror of it"
                            if listing
                            else "check the repository's url: a remote chooses what git prints for it",
                        )
                    else:
                        held.extend(chunk)
        return popen.wait(), bytes(out), bytes(err)

    def _too_slow(self, popen: subprocess.Popen[bytes], what: str) -> FetchTooSlow:
        kill_group(popen)
        return FetchTooSlow(
            f"{what} took longer than the {self.deadline:g} s patchtool gives one git fetch; refusing it",
            hint=f"check the network and run the command again, or give it longer with {DEADLINE_ENV}",
        )

    def outgrown(self, git_dir: Path, before: Sequence[str], status: int, stderr: str) -> bool:
        """Whether a fetch into ``git_dir`` that failed was stopped by the size: a process of it
        wrote a file up to ``RLIMIT_FSIZE`` and died of ``SIGXFSZ`` at the next byte (a new pack
        file as large as the limit; git names it only where it waits for the child's status)."""
        xfsz = int(signal.SIGXFSZ)
        if status == -xfsz or f"died of signal {xfsz}" in stderr:
            return True
        pack = git_dir / "objects" / "pack"
        most = self._effective()
        for name in _new(pack, before):
            with contextlib.suppress(OSError):
                if (pack / name).lstat().st_size >= most:
                    return True
        return False

    def too_large(self, what: str) -> FetchTooLarge:
        return FetchTooLarge(
            f"{what} received more than the {self.max_bytes} bytes patchtool lets one git fetch take; refusing it",
            hint=f"if the repository is that large, allow more with {SIZE_ENV} (e.g. {SIZE_ENV}=16g)",
        )

    def check_refs(self, count: int, what: str) -> None:
        """Refuse, before it starts, a fetch ``what`` that would write ``count`` refs, more than ``max_refs``."""
        if count > self.max_refs:
            raise FetchTooLarge(
                f"{what} would write {count} refs, more than the {self.max_refs} patchtool lets one git fetch "
                "write; refusing it",
                hint=f"if the repository has that many, allow more with {REFS_ENV} (e.g. {REFS_ENV}={count})",
            )


def kill_group(popen: subprocess.Popen[bytes]) -> None:
    """Kill ``popen``'s process group (it leads a session of its own: git and every helper it
    started) and reap it; its pipes are closed unread, since nothing it said is wanted."""
    with contextlib.suppress(ProcessLookupError):  # already gone
        os.killpg(popen.pid, signal.SIGKILL)
    popen.wait()
    for pipe in (popen.stdout, popen.stderr):
        if pipe is not None:
            pipe.close()


def pack_files(git_dir: Path) -> list[str]:
    """The names in ``git_dir``'s pack directory, to tell a fetch's new files from the old."""
    try:
        return os.listdir(git_dir / "objects" / "pack")
    except OSError:
        return []


def _new(pack: Path, before: Sequence[str]) -> list[str]:
    try:
        return sorted(set(os.listdir(pack)) - set(before))
    except OSError:
        return []


def leftovers(git_dir: Path, before: Sequence[str]) -> None:
    """Remove what a failed fetch left in ``git_dir``'s pack directory (a process killed by a
    signal removes nothing): every file not in ``before``, its temporary files, and a pack it
    finished before it was stopped (killed writing the ``.promisor`` list, say) with its index,
    ``.keep`` and ``.promisor``. The fetch updated no ref, so nothing names those objects; the
    cache's lock keeps any other fetch out meanwhile."""
    root = fsroot.Root(git_dir)
    for name in _new(git_dir / "objects" / "pack", before):
        with contextlib.suppress(OSError):
            root.unlink(f"objects/pack/{name}")


def _feed(popen: subprocess.Popen[bytes], data: bytes) -> None:
    """Write ``data`` to the process's input and close it; a process that ended first takes none."""
    assert popen.stdin is not None
    with contextlib.suppress(OSError):
        popen.stdin.write(data)
        popen.stdin.close()


def _limit(size: int, memory: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))

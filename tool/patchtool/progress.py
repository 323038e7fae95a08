"""Progress of the long steps (downloads, imports, replays, builds), told to whoever listens.

The core says what it is doing and how far it got; it never draws anything. By default nobody
listens and every call is a no-op. The command line installs a reporter that draws bars on a
terminal (``patchtool.cli.progressbar``)::

    with progress.task(f"download {name}", total=size, unit="bytes") as t:
        t.advance(len(chunk))

    for lp in progress.track(loaded, "replay onto 0.5.23", unit="patches", note=lambda lp: lp.id):
        ...

The reporter is one process-wide hook, not a context variable, so that work spread over threads
(a scan replays several versions side by side) reports to it too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Protocol, TypeVar

T = TypeVar("T")


class Reporter(Protocol):
    """Whoever listens; ``start`` returns a handle for the task's later calls. Called from any thread."""

    def start(self, description: str, *, total: float | None, unit: str, completed: float) -> object: ...

    def advance(self, handle: object, amount: float, note: str | None) -> None: ...

    def stop(self, handle: object) -> None: ...


class Task:
    """One step in progress: ``advance`` by an amount done, ``note`` what it is at now."""

    __slots__ = ("_handle", "_reporter")

    def __init__(self, reporter: Reporter | None, handle: object = None) -> None:
        self._reporter = reporter
        self._handle = handle

    def advance(self, amount: float = 1, *, note: str | None = None) -> None:
        if self._reporter is not None:
            self._reporter.advance(self._handle, amount, note)

    def note(self, text: str) -> None:
        if self._reporter is not None:
            self._reporter.advance(self._handle, 0, text)


_SILENT = Task(None)
_reporter: Reporter | None = None


def install(reporter: Reporter | None) -> Reporter | None:
    """Make ``reporter`` the listener (None: nobody); returns the one it replaces."""
    global _reporter
    previous, _reporter = _reporter, reporter
    return previous


@contextlib.contextmanager
def reporting(reporter: Reporter | None) -> Iterator[None]:
    """``reporter`` listens for the length of the block."""
    previous = install(reporter)
    try:
        yield
    finally:
        install(previous)


@contextlib.contextmanager
def task(description: str, *, total: float | None = None, unit: str = "steps", completed: float = 0) -> Iterator[Task]:
    """A step of ``total`` units (None: of unknown length), ``completed`` of them done already."""
    if (reporter := _reporter) is None:
        yield _SILENT
        return
    handle = reporter.start(description, total=total, unit=unit, completed=completed)
    try:
        yield Task(reporter, handle)
    finally:
        reporter.stop(handle)


def track(
    items: Iterable[T],
    description: str,
    *,
    total: float | None = None,
    unit: str = "steps",
    completed: float = 0,
    note: Callable[[T], str] | None = None,
) -> Iterator[T]:
    """``items`` one by one, each counted when the loop comes back for the next; ``note`` names
    the item being worked on. ``total`` defaults to ``len(items)`` where it has one."""
    if _reporter is None:
        yield from items
        return
    if total is None and isinstance(items, Sized):
        total = len(items) + completed
    with task(description, total=total, unit=unit, completed=completed) as t:
        for item in items:
            if note is not None:
                t.note(note(item))
            yield item
            t.advance(1)

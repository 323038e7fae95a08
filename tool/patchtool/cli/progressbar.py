"""Progress bars on stderr (rich), for the steps the core reports through ``patchtool.progress``.

Installed by the command line only when stderr is a terminal and the command is not ``--json``.
``NO_COLOR`` turns colour off, as rich does everywhere, but not the bars: they go to stderr, never
into what a pipe reads, and vanish when done. rich is imported when the first step starts, so a
command that reports nothing never loads it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress, Task, TaskID


class RichReporter:
    """One rich ``Progress`` on ``stream``, live while at least one step runs."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._running = 0

    def start(self, description: str, *, total: float | None, unit: str, completed: float) -> object:
        with self._lock:
            if self._progress is None:
                self._progress = _progress(self._stream)
            task = self._progress.add_task(description, total=total, completed=int(completed), unit=unit, note="")
            self._running += 1
            if self._running == 1:
                self._progress.start()
            return task

    def advance(self, handle: object, amount: float, note: str | None) -> None:
        if (progress := self._progress) is None:
            return
        fields: dict[str, Any] = {} if note is None else {"note": note}
        progress.update(_task_id(handle), advance=amount, **fields)

    def stop(self, handle: object) -> None:
        with self._lock:
            if (progress := self._progress) is None:
                return
            progress.remove_task(_task_id(handle))
            self._running -= 1
            if self._running == 0:
                progress.stop()
                self._progress = None


def _task_id(handle: object) -> TaskID:
    from rich.progress import TaskID

    assert isinstance(handle, int)
    return TaskID(handle)


def _progress(stream: TextIO) -> Progress:
    from rich.console import Console
    from rich.filesize import decimal
    from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, TextColumn, TimeRemainingColumn
    from rich.table import Column
    from rich.text import Text

    class Amount(ProgressColumn):
        """``12.3/40.1 MB at 5.2 MB/s`` for bytes, ``3/5 patches`` for counted steps."""

        def render(self, task: Task) -> Text:
            unit = task.fields.get("unit", "")
            if unit == "bytes":
                done = decimal(int(task.completed))
                whole = decimal(int(task.total)) if task.total is not None else "?"
                speed = task.finished_speed or task.speed
                rate = f" at {decimal(int(speed))}/s" if speed else ""
                return Text(f"{done}/{whole}{rate}", style="progress.download")
            if task.total is None:
                return Text("")
            return Text(f"{int(task.completed)}/{int(task.total)} {unit}", style="progress.download")

    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", table_column=Column(no_wrap=True, overflow="ellipsis", max_width=44)),
        BarColumn(bar_width=20),
        Amount(table_column=Column(no_wrap=True)),
        TimeRemainingColumn(table_column=Column(no_wrap=True, min_width=7)),
        TextColumn("{task.fields[note]}", style="dim", table_column=Column(no_wrap=True, overflow="ellipsis")),
        console=Console(file=stream, highlight=False),
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    )

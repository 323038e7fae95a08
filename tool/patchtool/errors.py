"""The one exception family and the exit codes it maps to."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from typing import Any, Protocol


class ExitCode(enum.IntEnum):
    OK = 0
    PROBLEMS = 1  # validation found problems (manifest, patch files, checks)
    USAGE = 2  # the command line is wrong (as click, typer and argparse do)
    CONFLICT = 3  # a patch does not apply
    UPSTREAM = 4  # the upstream could not be fetched or verified
    PREDICTED = 5  # a report predicts that a patch will not apply (`rebase --dry-run`, `scan`)
    INTERNAL = 70  # sysexits' EX_SOFTWARE: a bug or git failing unexpectedly
    BUSY = 75  # sysexits' EX_TEMPFAIL: another patchtool command holds the repository; try again


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """One thing wrong with the inputs, located as precisely as we can."""

    message: str
    file: str | None = None
    key: str | None = None
    line: int | None = None
    patch: str | None = None
    hint: str | None = None
    code: str = "invalid"
    entry: str | None = None  # the do-not-retread registry entry it is about

    def where(self) -> str:
        file = self.file and (f"{self.file}:{self.line}" if self.line else self.file)
        parts = (file, self.patch and f"patch {self.patch}", self.entry and f"entry {self.entry}", self.key)
        return ": ".join(part for part in parts if part)

    def render(self) -> str:
        where = self.where()
        text = f"{where}: {self.message}" if where else self.message
        if self.hint:
            text += f" (hint: {self.hint})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def located(self, **changes: Any) -> Problem:
        """Fill in location fields that are still empty."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if getattr(self, k) is None})


class Payload(Protocol):
    """A command's result as a typed record: ``to_dict`` is the ``--json`` envelope's data."""

    def to_dict(self) -> dict[str, Any]: ...


class PatchtoolError(Exception):
    """Base of every error the CLI turns into a message and an exit code."""

    exit_code: ExitCode = ExitCode.PROBLEMS

    def __init__(
        self, message: str, *, hint: str | None = None, file: str | None = None, problems: Iterable[Problem] = ()
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.file = file
        self.problems = tuple(problems)

    def as_problems(self) -> tuple[Problem, ...]:
        if self.problems:
            return self.problems
        return (Problem(message=self.message, file=self.file, hint=self.hint, code=self.code),)

    @property
    def code(self) -> str:
        return type(self).__name__

    def __str__(self) -> str:
        return self.message


class InvalidInput(PatchtoolError):
    """A file we read (manifest, pin, patch) is malformed; ``problems`` lists every finding."""

    exit_code = ExitCode.PROBLEMS


class UsageError(PatchtoolError):
    exit_code = ExitCode.USAGE


class ApplyConflict(PatchtoolError):
    """A patch of the series does not apply. ``result``: the outcome so far (a rebase's report, a
    series applied), which the CLI renders by its type; ``data``: what ``--json`` shows of it
    (None: nothing)."""

    exit_code = ExitCode.CONFLICT

    def __init__(self, message: str, *, result: object, data: Payload | None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.result = result
        self.data = data


class UpstreamError(PatchtoolError):
    """The pinned upstream could not be fetched, imported or verified."""

    exit_code = ExitCode.UPSTREAM


class GitError(PatchtoolError):
    """git itself failed in a way we did not expect."""

    exit_code = ExitCode.INTERNAL


class InternalError(PatchtoolError):
    """Something patchtool itself got wrong, or an unexpected exception: never the user's input."""

    exit_code = ExitCode.INTERNAL


class AccessError(PatchtoolError):
    """A file or directory patchtool must use cannot be read or written (permissions, a read-only
    disk, a directory where a file belongs)."""

    exit_code = ExitCode.USAGE


class OutputLost(AccessError):
    """The command's output could not be written to its standard stream (a full disk, /dev/full):
    said on stderr, as far as it can be, since the output itself is what failed."""

    @classmethod
    def writing(cls, stream: str, exc: OSError) -> OutputLost:
        return cls(
            f"cannot write to standard {stream}: {exc.strerror or exc}",
            hint="check the disk or the file the output is redirected to",
        )


class Busy(PatchtoolError):
    """Another patchtool command holds the repository's lock."""

    exit_code = ExitCode.BUSY


class BuildError(PatchtoolError):
    """The patched wheel could not be built: the series does not fit the wheel, or the build failed."""

    exit_code = ExitCode.PROBLEMS

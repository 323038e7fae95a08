"""The state of a rebase that stopped: what ``--continue``, ``--skip`` and ``--abort`` resume from.

It lives in ``.patchtool/rebase/state.json``, written whole (``fsroot.Root.write``) at every stop.
``RebaseState.from_dict`` is pure and checks it like every file in the repository: a state
that names another worktree or a pin that is no pin name is refused. The worktree is always
``WORKTREE`` under the repository's root as it is now, so a repository moved during a stopped
rebase still resumes. A state written by an older patchtool may carry a ``phase``; nothing reads
it, and it is ignored.

A stop's outcome (a resolution or a skip) is written here, as a commit the replay ref holds,
before its worktree is removed: a ``--continue`` killed after that goes on from it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from patchtool import fsroot
from patchtool.errors import UsageError
from patchtool.project import statedir, stopped
from patchtool.project.stopped import STATE_FILE, in_progress
from patchtool.rebase.replay import PatchOutcome, Step
from patchtool.rebase.textapply import MovedHunk
from patchtool.upstream.cachespace import project_key


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RebaseState:
    old_pin: str
    new_pin: str
    new_pin_toml: str  # the new pin's file, written with the series at the end
    digest: str  # of patchset.toml and patches/ when the rebase started (``transaction.digest``)
    steps: tuple[Step, ...]  # the patches through so far, the one it stopped on last
    tip: str  # the last commit on the new base
    skipped: Mapping[str, str] = dataclasses.field(default_factory=dict)  # patch id -> why
    worktree: str | None = None  # root/WORKTREE while a patch is stopped there; None once it is recorded
    widen: bool = False  # `--widen`: write the widened applies_to when the rebase finishes

    @property
    def stopped_at(self) -> str | None:
        return self.steps[-1].id if self.steps and self.worktree else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": stopped.SCHEMA,
            "old_pin": self.old_pin,
            "new_pin": self.new_pin,
            "new_pin_toml": self.new_pin_toml,
            "digest": self.digest,
            "steps": [_step_to_dict(s) for s in self.steps],
            "tip": self.tip,
            "skipped": dict(self.skipped),
            "worktree": self.worktree,
            **({"widen": True} if self.widen else {}),
        }  # a state without --widen reads as before

    @classmethod
    def from_dict(cls, data: Any, *, root: Path) -> RebaseState:
        """The state in ``data``; ValueError saying why it is not one patchtool wrote for the
        repository at ``root``."""
        data = stopped.check(data, root=root)
        steps = []
        for i, step in enumerate(data["steps"]):
            try:
                steps.append(_step_from_dict(step))
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"steps[{i}] is not a step ({exc})") from None
        return cls(
            old_pin=data["old_pin"],
            new_pin=data["new_pin"],
            new_pin_toml=data["new_pin_toml"],
            digest=data["digest"],
            steps=tuple(steps),
            tip=data["tip"],
            skipped=dict(data.get("skipped", {})),
            worktree=data["worktree"],
            widen=data.get("widen", False),
        )


def _step_to_dict(s: Step) -> dict[str, Any]:
    return {**s.to_dict(), "files": list(s.files)}


def _step_from_dict(d: dict[str, Any]) -> Step:
    def strings(key: str) -> tuple[str, ...]:
        value = d.get(key, ())
        if not isinstance(value, list | tuple) or not all(isinstance(x, str) for x in value):
            raise ValueError(f"{key} is not a list of strings")
        return tuple(value)

    if not all(isinstance(d.get(k), str) for k in ("id", "file")):
        raise ValueError("no id or file")
    return Step(
        id=d["id"],
        file=d["file"],
        outcome=PatchOutcome(d["outcome"]),
        commit=d.get("commit"),
        detail=str(d.get("detail", "")),
        conflicted=strings("conflicted"),
        misplaced=strings("misplaced"),
        renamed=strings("renamed"),
        shifted=tuple(MovedHunk.from_dict(m) for m in d.get("shifted", ())),
        files=strings("files"),
        upstream_has=strings("upstream_has"),
    )


def save(root: Path, state: RebaseState, *, cache: Path) -> None:
    """Write the state, and its digest into the cache's git directory ``cache`` (the user's own,
    which no clone or checkout writes): the next stop that finds these very bytes knows they are
    its own and asks git nothing. The digest goes first: a process killed between the two leaves
    a state that is checked as any other, never a stranger's taken for ours."""
    text = json.dumps(state.to_dict(), indent=2, sort_keys=True)
    fsroot.Root(cache).write(_voucher(root), hashlib.sha256(text.encode()).hexdigest())
    statedir.ensure(root)
    fsroot.Root(root).write(STATE_FILE, text)


def _voucher(root: Path) -> str:
    return f"patchtool/rebase-state/{project_key(root)}.sha256"


def _vouched(cache: Path, root: Path, raw: bytes) -> bool:
    try:
        return (cache / _voucher(root)).read_text(encoding="ascii") == hashlib.sha256(raw).hexdigest()
    except (OSError, UnicodeDecodeError):
        return False


def load(root: Path, *, cache: Path | None = None) -> RebaseState | None:
    """The state of a rebase in progress, None when there is none. One that is not the state last
    written with the cache ``cache`` (a stranger's, or any without ``cache``) is refused when git
    tracks it (``statedir.refuse_tracked``): that check runs once per rebase, not at each stop."""
    data = stopped.read(root, ours=None if cache is None else functools.partial(_vouched, cache, root))
    if data is None:
        return None
    try:
        return RebaseState.from_dict(data, root=root)
    except ValueError as exc:
        raise stopped.not_ours(exc) from None


def refuse_in_progress(root: Path, command: str) -> None:
    """UsageError when a rebase is in progress: a command that changes the series would pull it
    from under the rebase (its --continue would then refuse, its --abort could not restore it)."""
    found = in_progress(root)
    if found is not None:
        where = f", stopped at {found.stopped_at}" if found.stopped_at else ""
        raise UsageError(
            f"a rebase to {found.new_pin} is in progress{where}; `{command}` would change the series under it",
            hint="finish it first: `patchtool rebase --continue`, `--skip --reason ...` or `--abort`",
        )

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

import contextlib
import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from patchtool import fsroot, paths
from patchtool.errors import InvalidInput
from patchtool.project import statedir, stopped
from patchtool.project.stopped import STATE_FILE
from patchtool.rebase.replay import STEP_LISTS, PatchOutcome, Step
from patchtool.rebase.textapply import MovedHunk


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
    history: bool = False  # `--history`: upstream's history is asked at every patch

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
            "steps": [{**s.to_dict(), "files": list(s.files)} for s in self.steps],
            "tip": self.tip,
            "skipped": dict(self.skipped),
            "worktree": self.worktree,
            **({"widen": True} if self.widen else {}),
            **({"history": True} if self.history else {}),
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
            history=data.get("history", False) is True,
        )


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
        files=strings("files"),
        shifted=tuple(MovedHunk.from_dict(m) for m in d.get("shifted", ())),
        **{key: strings(key) for key in STEP_LISTS},
    )


VOUCHERS = "patchtool/rebase-state"  # in the cache's git directory: a file per state written, named by its sha256


def save(root: Path, state: RebaseState, *, cache: Path) -> None:
    """Write the state, and a voucher for its bytes into the cache's git directory ``cache`` (the
    user's own, which no clone or checkout writes): only a state with a voucher is resumed. A
    voucher is named by the state's sha256 and holds the sha256 of the state it replaced, so the
    two newest stay (a process killed between the two writes leaves the state it had, which still
    resumes) and the one before them goes. Nothing names the repository's path: a repository
    moved during a stop resumes."""
    text = json.dumps(state.to_dict(), indent=2, sort_keys=True)
    new = hashlib.sha256(text.encode()).hexdigest()
    current = digest(root)
    older = _replaced(cache, current) if current else None
    fsroot.Root(cache).write(f"{VOUCHERS}/{new}", current or "")
    statedir.ensure(root)
    fsroot.Root(root).write(STATE_FILE, text)
    if older and older not in (new, current):
        _unvouch(cache, older)


def forget(sha: str | None, *, cache: Path) -> None:
    """Take back the vouchers of the state whose sha256 was ``sha`` (and of the one before it), once
    it is gone: a rebase that finished or was aborted leaves nothing a later --continue would resume."""
    if sha is not None:
        for name in (_replaced(cache, sha), sha):
            if name:
                _unvouch(cache, name)


def _unvouch(cache: Path, name: str) -> None:
    with contextlib.suppress(OSError):
        fsroot.Root(cache).unlink(f"{VOUCHERS}/{name}")


def digest(root: Path) -> str | None:
    """The sha256 of the state file as it is now (what ``forget`` takes), None when there is none to read."""
    try:
        return hashlib.sha256(paths.read_inside(root, STATE_FILE)).hexdigest()
    except (OSError, InvalidInput):
        return None


def _replaced(cache: Path, sha: str) -> str | None:
    """What the voucher of ``sha`` says it replaced; None without one."""
    try:
        text = (cache / VOUCHERS / sha).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if re.fullmatch(r"[0-9a-f]{64}", text) else None


def _vouched(cache: Path, raw: bytes) -> bool:
    return (cache / VOUCHERS / hashlib.sha256(raw).hexdigest()).is_file()


def load(root: Path, *, cache: Path | None = None) -> RebaseState | None:
    """The state of a rebase in progress, None when there is none. With ``cache`` (a command that
    resumes the rebase), only a state patchtool wrote with that cache is taken: one edited by hand,
    brought in by a checkout or written with another cache is refused (its steps, tip and files
    would steer what is written). Without it (a check that a rebase is in progress), a state git
    tracks is refused (``statedir.refuse_tracked``)."""
    if (data := stopped.read(root, ours=None if cache is None else functools.partial(_vouched, cache))) is None:
        return None
    try:
        return RebaseState.from_dict(data, root=root)
    except ValueError as exc:
        raise stopped.not_ours(exc) from None

"""A stopped rebase as the layers below ``rebase`` see it: where its state lives, the state file
read through the trust check of ``.patchtool/``, and ``InProgress``, what ``status`` and ``pin
remove`` need of it. ``rebase.state`` makes the whole typed record, steps and all, of the same
read."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from patchtool import paths
from patchtool.errors import InvalidInput, UsageError
from patchtool.inputs import loads_json
from patchtool.project import statedir

STATE_DIR = statedir.REBASE_DIR
STATE_FILE = f"{STATE_DIR}/state.json"
WORKTREE = f"{STATE_DIR}/worktree"  # where a stopped patch waits to be resolved, always
SCHEMA = 1


def check(data: Any, *, root: Path) -> dict[str, Any]:
    """``data`` with its worktree at ``root`` as it is now (the repository may have moved since
    the stop); ValueError saying why it is not a state patchtool wrote. The steps are checked
    only as a list of tables: ``rebase.state`` reads them."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"not a state of schema {SCHEMA}")
    for key in ("old_pin", "new_pin"):
        if not isinstance(data.get(key), str) or paths.id_problem(data[key]):
            raise ValueError(f"{key} {data.get(key)!r} is not a pin name")
    if not isinstance(data.get("steps"), list) or not all(isinstance(x, dict) for x in data["steps"]):
        raise ValueError("steps is not a list of steps")
    worktree = data.get("worktree")
    if worktree is not None and not (isinstance(worktree, str) and worktree.endswith(f"/{WORKTREE}")):
        raise ValueError(f"worktree {worktree!r} is not {WORKTREE}")
    for key in ("new_pin_toml", "digest", "tip"):
        if not isinstance(data.get(key), str):
            raise ValueError(f"{key} is not a string")
    if not isinstance(data.get("widen", False), bool):
        raise ValueError("widen is not true or false")
    skipped = data.get("skipped", {})
    if not isinstance(skipped, dict) or not all(isinstance(v, str) for v in skipped.values()):
        raise ValueError("skipped is not a table of reasons")
    return {**data, "worktree": None if worktree is None else str(root / WORKTREE)}


def read(root: Path, *, ours: Callable[[bytes], bool] | None = None) -> dict[str, Any] | None:
    """The state file, checked (``check``); None when there is none. A state git tracks is refused
    (``statedir.refuse_tracked``) unless ``ours`` vouches for its bytes; with ``ours``, bytes it
    does not vouch for are refused whatever git says (a command that resumes the rebase)."""
    path = root / STATE_FILE
    if not path.exists() and not path.is_symlink():
        return None
    try:
        raw = paths.read_inside(root, STATE_FILE)
    except (OSError, InvalidInput) as exc:
        raise not_ours(exc) from None
    if not (vouched := ours is not None and ours(raw)):
        statedir.refuse_tracked(root)
    try:
        data = check(loads_json(raw.decode("utf-8")), root=root)
    except (UnicodeDecodeError, ValueError, InvalidInput) as exc:
        raise not_ours(exc) from None
    if ours is not None and not vouched:  # well formed, but not what patchtool wrote: it would steer the rebase
        raise not_ours(ValueError("it changed since patchtool wrote it, or another cache wrote it"))
    return data


def not_ours(exc: Exception) -> InvalidInput:
    return InvalidInput(
        f"the rebase state is not one patchtool wrote ({exc})",
        file=STATE_FILE,
        hint=f"`patchtool rebase --abort`, or delete {STATE_DIR}/ and start again",
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class InProgress:
    """A rebase that stopped and waits for --continue, --skip or --abort."""

    old_pin: str
    new_pin: str
    done: int  # patches through before the one it stopped on
    stopped_at: str | None
    worktree: str | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def in_progress(root: Path) -> InProgress | None:
    if (data := read(root)) is None:
        return None
    steps, worktree = data["steps"], data["worktree"]
    stopped = steps[-1].get("id") if steps and worktree else None
    if steps and worktree and not isinstance(stopped, str):
        raise not_ours(ValueError("the patch it stopped at has no id"))
    return InProgress(
        old_pin=data["old_pin"],
        new_pin=data["new_pin"],
        done=len(steps) - (1 if stopped else 0),
        stopped_at=stopped,
        worktree=worktree,
    )


def refuse_in_progress(root: Path, command: str) -> None:
    """UsageError when a rebase is in progress: a command that changes the series would pull it
    from under the rebase (its --continue would then refuse, its --abort could not restore it)."""
    if (found := in_progress(root)) is not None:
        where = f", stopped at {found.stopped_at}" if found.stopped_at else ""
        raise UsageError(
            f"a rebase to {found.new_pin} is in progress{where}; `{command}` would change the series under it",
            hint="finish it first: `patchtool rebase --continue`, `--skip --reason ...` or `--abort`",
        )

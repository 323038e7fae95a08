"""The rebase state as a typed, frozen record: pure from_dict/to_dict, checked like every file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from patchtool.rebase.replay import PatchOutcome, Step
from patchtool.rebase.state import RebaseState
from patchtool.rebase.textapply import MovedHunk

ROOT = Path("/repo")


def written(**changes: Any) -> dict[str, Any]:
    """A state as patchtool 0.x wrote it at a stop, "phase" and all."""
    data = {
        "schema": 1,
        "phase": "conflict",
        "old_pin": "demo-1.0",
        "new_pin": "demo-1.1",
        "new_pin_toml": "[pin]\n",
        "digest": "d" * 64,
        "tip": "c" * 40,
        "skipped": {},
        "worktree": "/repo/.patchtool/rebase/worktree",
        "steps": [
            {
                "id": "greet",
                "file": "patches/0002-greet.patch",
                "outcome": "applied with shifted context",
                "commit": "a" * 40,
                "detail": "python/demo/core.py: hunk 1 at 6 (+4)",
                "files": ["python/demo/core.py"],
                "shifted": [{"file": "python/demo/core.py", "hunk": 1, "old_line": 2, "new_line": 6, "offset": 4}],
            },
            {
                "id": "bye",
                "file": "patches/0004-bye.patch",
                "outcome": "conflict",
                "detail": "content conflict",
                "conflicted": ["python/demo/core.py"],
                "files": ["python/demo/core.py"],
            },
        ],
    }
    return {**data, **changes}


def test_a_written_state_reads_into_typed_steps_and_phase_is_ignored() -> None:
    state = RebaseState.from_dict(written(), root=ROOT)
    greet, bye = state.steps
    assert greet == Step(
        id="greet",
        file="patches/0002-greet.patch",
        outcome=PatchOutcome.SHIFTED,
        commit="a" * 40,
        detail="python/demo/core.py: hunk 1 at 6 (+4)",
        files=("python/demo/core.py",),
        shifted=(MovedHunk(file="python/demo/core.py", hunk=1, old_line=2, new_line=6),),
    )
    assert bye.outcome is PatchOutcome.CONFLICT and bye.conflicted == ("python/demo/core.py",)
    assert state.stopped_at == "bye" and state.worktree == "/repo/.patchtool/rebase/worktree"
    out = state.to_dict()
    assert "phase" not in out
    assert out == {k: v for k, v in written().items() if k != "phase"}
    assert RebaseState.from_dict(out, root=ROOT) == state


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"schema": 2}, "not a state of schema 1"),
        ({"new_pin": "../x"}, "new_pin '../x' is not a pin name"),
        ({"steps": {"id": "x"}}, "steps is not a list of steps"),
        ({"worktree": "/elsewhere"}, "worktree '/elsewhere' is not .patchtool/rebase/worktree"),
        ({"tip": None}, "tip is not a string"),
        ({"skipped": {"bye": 1}}, "skipped is not a table of reasons"),
        (
            {"steps": [{"id": "x", "file": "patches/x.patch", "outcome": "exploded"}]},
            "steps[0] is not a step ('exploded' is not a valid PatchOutcome)",
        ),
        (
            {"steps": [{"id": "x", "file": "patches/x.patch", "outcome": "conflict", "conflicted": "abc"}]},
            "steps[0] is not a step (conflicted is not a list of strings)",
        ),
    ],
)
def test_a_state_patchtool_did_not_write_is_refused(changes: dict[str, Any], why: str) -> None:
    with pytest.raises(ValueError) as exc:
        RebaseState.from_dict(written(**changes), root=ROOT)
    assert str(exc.value) == why

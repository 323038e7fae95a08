"""The rebase one command at a time: ``rebase --to``, then at each stop ``--continue`` or ``--skip``.

A conflict is resolved (untimed) as an engineer who keeps both intents would: upstream's new
lines, with the comment the patch added at the end of the line carried onto them; then
``rebase --continue``. A patch whose file upstream deleted is dropped with ``rebase --skip``.
Each command is timed alone, so the cost of going from one stop to the next is a figure of its
own (the target: a median of at most 0.25 s), apart from the last command, which finishes the
rebase (drift, range-diff, export, the write).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from make_series import BenchError
from run import measure

CONFLICT, GONE = "conflict", "target gone"
STOPS = (CONFLICT, GONE)
_TRAILING_COMMENT = re.compile(r"\s+#[^'\"]*$")


def resolve_text(text: str) -> str:
    """``text`` with every conflict block replaced by its first side (upstream's), each line of it
    carrying the trailing comment the other side (the patch's) put on the matching line."""
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].startswith("<<<<<<< "):
            out.append(lines[i])
            i += 1
            continue
        ours: list[str] = []
        theirs: list[str] = []
        side = ours
        i += 1
        while i < len(lines) and not lines[i].startswith(">>>>>>> "):
            if lines[i].startswith("||||||| "):
                side = []  # the common ancestor's lines (diff3 style): not kept
            elif lines[i] == "=======":
                side = theirs
            else:
                side.append(lines[i])
            i += 1
        i += 1
        if not ours:
            out += theirs
            continue
        for n, line in enumerate(theirs):
            comment = _TRAILING_COMMENT.search(line)
            k = min(n, len(ours) - 1)
            if comment and comment.group(0).strip() not in ours[k]:
                ours[k] += comment.group(0)
        out += ours
    return "\n".join(out)


def resolve(worktree: Path) -> list[str]:
    """Resolve the conflict markers in the files ``worktree`` changed; the files it changed."""
    names = subprocess.run(
        ["git", "diff", "--name-only", "HEAD"], cwd=worktree, capture_output=True, text=True, check=False
    ).stdout.split()
    changed = []
    for name in names:
        path = worktree / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        if "\n<<<<<<< " in f"\n{text}":
            path.write_text(resolve_text(text), encoding="utf-8", errors="surrogateescape")
            changed.append(name)
    return changed


def _stop(stdout: str) -> tuple[str, str, str | None]:
    """(patch id, outcome, worktree) of the stop a ``rebase --json`` that exited 3 reports."""
    try:
        data = json.loads(stdout)["data"]
        stop = [p for p in data["patches"] if p["outcome"] in STOPS][-1]
    except (ValueError, KeyError, IndexError, TypeError):
        raise BenchError(f"a rebase that stopped did not report its stop as JSON:\n{stdout[:2000]}") from None
    return stop["id"], stop["outcome"], data.get("worktree")


def stepwise(patchtool: list[str], source: Path, copy: Path, env: dict[str, str]) -> dict[str, Any]:
    """A fresh copy of ``source`` rebased to 0.5.23 one command at a time: the first command's
    seconds, and each later command's (action, the patch it settled, seconds, whether it finished)."""
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(source, copy)
    root = ["--root", str(copy), "--json"]
    m = measure([*patchtool, "rebase", "--to", "0.5.23", *root], env, ok=(0, 3))
    out: dict[str, Any] = {"start_s": m.seconds, "steps": []}
    while m.returncode == 3:
        if len(out["steps"]) > 256:
            raise BenchError(f"the rebase of {copy} did not finish after 256 stops")
        ident, outcome, worktree = _stop(m.stdout)
        action = "continue" if outcome == CONFLICT and worktree and resolve(Path(worktree)) else "skip"
        cmd = (
            [*patchtool, "rebase", "--continue", *root]
            if action == "continue"
            else [*patchtool, "rebase", "--skip", "--reason", "bench: left out", *root]
        )
        m = measure(cmd, env, ok=(0, 3))
        out["steps"].append({"action": action, "patch": ident, "seconds": m.seconds, "finished": m.returncode == 0})
    return out

"""Answers about immutable git objects, remembered in the cache's git directory.

Two trees, or a chain of commits, never change; what was computed about them (the renames
between two pins, the commits and file changes of a series' chain) is kept as JSON under
``<git dir>/patchtool/<kind>/<key>.json`` so the next command asks git nothing. Each file is
written atomically; a missing or unreadable one is simply computed again.

An answer that names objects (a chain's commits, the blobs of its changes) holds only while
those objects exist: the caller keeps them with a ref and checks that ref (``replay.old_chain``).

This is the one rule for every git answer kept between commands (the chain, its changes, the
renames between two pins, the history's fetched blobs and commits). What it buys, measured on the
30-patch bench cache (bench/rebase_bench.py's, 2 busy cores): each rebase, ``--continue`` or dry
run asks git for the chain's changes (``git log --raw -M``, 46 ms) and the renames of a gone file
(128 ms) where the memo answers in 0.1 ms, some 0.17 s of a step whose median target is 0.6 s.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from patchtool import fsroot
from patchtool.errors import PatchtoolError
from patchtool.inputs import loads_json


def _path(git_dir: Path, kind: str, key: str) -> Path:
    return git_dir / "patchtool" / kind / f"{key}.json"


def recall(git_dir: Path, kind: str, key: str) -> Any:
    """What was remembered under ``kind``/``key``, or None."""
    try:
        return loads_json(_path(git_dir, kind, key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def remember(git_dir: Path, kind: str, key: str, value: Any) -> None:
    """Keep ``value`` for the next command; a cache that cannot be written to (read-only, full) only
    means it is computed again, so a reading command such as ``status`` never fails on it."""
    with contextlib.suppress(OSError, PatchtoolError):  # PatchtoolError: a link or a special file where the memo goes
        fsroot.Root(git_dir).write(
            _path(git_dir, kind, key).relative_to(git_dir).as_posix(), json.dumps(value, sort_keys=True)
        )

"""Answers about immutable git objects, remembered in the cache's git directory.

Two trees, or a chain of commits, never change; what was computed about them (the renames
between two pins, the commits and file changes of a series' chain) is kept as JSON under
``<git dir>/patchtool/<kind>/<key>.json`` so the next command asks git nothing. Each file is
written atomically; a missing or unreadable one is simply computed again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from patchtool import atomic


def _path(git_dir: Path, kind: str, key: str) -> Path:
    return git_dir / "patchtool" / kind / f"{key}.json"


def recall(git_dir: Path, kind: str, key: str) -> Any:
    """What was remembered under ``kind``/``key``, or None."""
    try:
        return json.loads(_path(git_dir, kind, key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def remember(git_dir: Path, kind: str, key: str, value: Any) -> None:
    path = _path(git_dir, kind, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write(path, json.dumps(value, sort_keys=True))

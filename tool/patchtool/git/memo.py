"""Answers about immutable git objects, remembered in the cache's git directory.

Two trees, or a chain of commits, never change; what was computed about them (the renames
between two pins, the commits and file changes of a series' chain) is kept as JSON under
``<git dir>/patchtool/<kind>/<key>.json`` so the next command asks git nothing. Each file is
written atomically; a missing or unreadable one is simply computed again.

An answer that names objects (a chain's commits, the blobs of its changes) holds only while
those objects exist: refs can be deleted and git can prune what they kept, so ``recall`` with
``names`` asks the git layer's one object reader (``ObjectReader``, git's ``cat-file``) for each
one and treats an answer naming a missing one as no answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from patchtool import fsroot
from patchtool.errors import PatchtoolError
from patchtool.git.objects import ObjectReader
from patchtool.git.repo import Repo
from patchtool.inputs import loads_json

NULL_SHA = "0" * 40
_SHA = re.compile(r"[0-9a-f]{40}")


def _path(git_dir: Path, kind: str, key: str) -> Path:
    return git_dir / "patchtool" / kind / f"{key}.json"


def recall(git_dir: Path, kind: str, key: str, *, names: Callable[[Any], Iterable[str]] | None = None) -> Any:
    """What was remembered under ``kind``/``key``, or None. With ``names`` (the objects the answer
    names), None also when the answer cannot be read so or one of them is gone from the repository."""
    try:
        value = loads_json(_path(git_dir, kind, key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if value is not None and names is not None:
        try:
            shas = [s for s in names(value) if s != NULL_SHA]
        except (AttributeError, KeyError, TypeError, ValueError):
            return None  # not the shape that was written: computed again
        if not _present(git_dir, shas):
            return None
    return value


def _present(git_dir: Path, shas: list[str]) -> bool:
    """Whether every object named (full hex SHA-1s, nothing else) is in the repository at ``git_dir``."""
    if not all(isinstance(s, str) and _SHA.fullmatch(s) for s in shas):
        return False
    reader = ObjectReader(Repo(git_dir))
    try:
        return all(reader.read(s) is not None for s in shas)
    finally:
        reader.close()


def remember(git_dir: Path, kind: str, key: str, value: Any) -> None:
    """Keep ``value`` for the next command; a cache that cannot be written to (read-only, full) only
    means it is computed again, so a reading command such as ``status`` never fails on it."""
    try:
        fsroot.Root(git_dir).write(
            _path(git_dir, kind, key).relative_to(git_dir).as_posix(), json.dumps(value, sort_keys=True)
        )
    except (OSError, PatchtoolError):  # PatchtoolError: a link or a special file where the memo goes
        pass

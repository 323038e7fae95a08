"""Several files of the patch repository written as one transaction.

Every new file is first written under ``.patchtool/staged/``. Then the journal,
``.patchtool/journal.json``, naming each move and each removal, is written atomically: that is
the commit point. Only then are the files moved into place and the removals done. A process
killed before the journal exists changed nothing in the repository; one killed after it leaves a
journal that the next patchtool command to load the repository finishes (``recover``), since
every step of it can be done again. rebase, export, import and drop all write through here.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

JOURNAL = ".patchtool/journal.json"
STAGED = ".patchtool/staged"


def commit(root: Path, files: Mapping[str, str], *, remove: Sequence[str] = (),
           remove_trees: Sequence[str] = ()) -> list[str]:
    """Write ``files`` (repository path -> text; a byte-identical file is left alone), remove the
    files in ``remove`` and the directories in ``remove_trees``, all or nothing. The paths
    written, then ``-path`` for each file removed."""
    recover(root)
    staged = root / STAGED
    shutil.rmtree(staged, ignore_errors=True)
    moves: list[tuple[str, str]] = []
    for rel, text in files.items():
        dest = root / rel
        if dest.is_file() and dest.read_text(encoding="utf-8") == text:
            continue
        path = staged / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        moves.append((f"{STAGED}/{rel}", rel))
    gone = [rel for rel in dict.fromkeys(remove) if rel not in files and (root / rel).exists()]
    record: dict[str, Any] = {"schema": 1, "moves": moves, "remove": gone, "remove_trees": list(remove_trees)}
    staged.mkdir(parents=True, exist_ok=True)
    tmp = staged / ".journal.json"  # with the staged files: gone with them if never committed
    tmp.write_text(json.dumps(record, indent=2), encoding="utf-8")
    os.replace(tmp, root / JOURNAL)  # the commit point
    _finish(root, record)
    return [dest for _, dest in moves] + [f"-{rel}" for rel in gone]


def recover(root: Path) -> list[str]:
    """Finish a transaction an earlier process committed but did not complete (the paths it
    writes); drop the staged files of one that never reached its commit point."""
    path = root / JOURNAL
    if not path.is_file():
        if (root / STAGED).exists():
            shutil.rmtree(root / STAGED, ignore_errors=True)
        return []
    record = json.loads(path.read_text(encoding="utf-8"))
    _finish(root, record)
    return [dest for _, dest in record["moves"]]


def _finish(root: Path, record: dict[str, Any]) -> None:
    for src, dest in record["moves"]:
        if (root / src).exists():  # moved already by a process that was killed after it
            (root / dest).parent.mkdir(parents=True, exist_ok=True)
            os.replace(root / src, root / dest)
    for rel in record["remove"]:
        (root / rel).unlink(missing_ok=True)
    for rel in record["remove_trees"]:
        shutil.rmtree(root / rel, ignore_errors=True)
    shutil.rmtree(root / STAGED, ignore_errors=True)
    (root / JOURNAL).unlink(missing_ok=True)
    parent = root / ".patchtool"
    if parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()

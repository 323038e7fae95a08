"""Writing the series: its patch files, the manifest, moves and removals as one journal
transaction, so a stop part way leaves the old series or the new one, never a mix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from patchtool import paths
from patchtool.project import journal
from patchtool.project.manifest import MANIFEST_NAME


def write_series(
    root: Path,
    files: Mapping[str, str],
    manifest: str,
    *,
    remove: Sequence[str],
    moves: Mapping[str, str],
    remove_trees: Sequence[str] = (),
) -> list[str]:
    """The series' files, the manifest, the moves (old path -> new path) and the removals, as
    one transaction (``journal``); ``remove_trees``: directories of ``.patchtool/`` to remove with it."""
    files = dict(files)
    for src, moved in moves.items():
        text = paths.read_text_if_present(root, src)
        if text is not None:
            files.setdefault(moved, text)
    return journal.commit(root, {**files, MANIFEST_NAME: manifest}, remove=[*remove, *moves], remove_trees=remove_trees)

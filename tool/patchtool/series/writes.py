"""Writing the series: its patch files, the manifest, moves and removals as one journal
transaction, so a stop part way leaves the old series or the new one, never a mix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from patchtool import paths
from patchtool.errors import InvalidInput, UsageError
from patchtool.project import journal
from patchtool.project.manifest import MANIFEST_NAME
from patchtool.project.repository import read_patch


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


def check_patches(root: Path, patches: Sequence[tuple[str, str, str]], *, hint: str) -> None:
    """Refused, before anything moves, unless each patch text ``(id, file, text)`` is one the series
    loader reads back (``repository.read_patch``: UsageError naming the file, what is wrong and
    ``hint``, what to do) and each destination can be written (read as the journal's pre-read does)."""
    for ident, rel, text in patches:
        try:
            read_patch(rel, ident, text.encode("utf-8"))
        except InvalidInput as exc:
            problem = exc.problems[0]
            raise UsageError(
                f"patch {ident} would be written as a file the series cannot read ({rel}): {problem.message}; "
                "nothing was changed",
                hint=hint,
            ) from None
    journal.changed_files(root, {rel: text for _, rel, text in patches})
